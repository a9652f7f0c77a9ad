"""The queue in the job table (core/queue.py): which records it holds, and what admission reads of them."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from squall.adapters.aws.job_store import from_item, job_from_item, job_to_item
from squall.conventions import CLUSTER_LABEL
from squall.core.jobs import JobStatus, Reason, reason_code
from squall.core.manifests import render
from squall.core.queue import (
    MAX_QUEUE_SHAPE_BYTES,
    PLACED_PARTITION,
    QUEUE_PARTITION,
    QueueShapeError,
    decode_shape,
    queue_entry,
    queue_key,
    queue_shape,
    replica_jobs,
)
from squall.core.spec import JobSpec, parse_spec
from squall.planner.kube import parse_replica_jobs
from tests.job_records import job_record

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SHAPE = '[{"n":1,"pod":{"containers":[{"resources":{"requests":{"cpu":"1"}}}]}}]'
SORT_KEY = f"{T0.isoformat()}#j-1"


def parse(**overrides: Any) -> JobSpec:
    base: dict[str, Any] = {
        "name": "mnist",
        "team": "research",
        "image": "registry.example.com/squall/tf:1",
        "resources": {"cpu": "8", "memory": "60Gi", "gpu": 1},
    }
    return parse_spec(base | overrides, teams=["research"], registries=["registry.example.com/squall"])


DISTRIBUTED = {
    "replicas": {
        "chief": 1,
        "worker": {"count": 3},
        "ps": {"count": 2, "resources": {"cpu": "4", "memory": "16Gi", "gpu": 0}},
    },
    "placement": {"regions": ["us-east-1", "us-west-2"], "spot": "never"},
}


def queued(*, reason: str = Reason.SUBMITTED, **fields: Any) -> Any:
    return job_record("j-1", status=JobStatus.QUEUED, reason=reason, at=T0, **fields)


# -- queue_key: which records are in the queue ----------------------------------------


@pytest.mark.parametrize(
    ("status", "fields", "key"),
    [
        (JobStatus.QUEUED, {"queue_shape": SHAPE}, (QUEUE_PARTITION, SORT_KEY)),
        (JobStatus.QUEUED, {"queue_shape": SHAPE, "requeued": True}, (QUEUE_PARTITION, SORT_KEY)),
        # waiting for capacity or in a queue position: notes keep it queued
        (
            JobStatus.QUEUED,
            {"queue_shape": SHAPE, "reason": reason_code(Reason.QUEUED, "3")},
            (QUEUE_PARTITION, SORT_KEY),
        ),
        # no shape recorded (a record from before the queue lived in the table): not admissible from it
        (JobStatus.QUEUED, {}, None),
        # a sweep's parent never runs itself; a trial waiting for its slot is not queued yet
        (JobStatus.QUEUED, {"queue_shape": SHAPE, "trial_ids": ("j-1-t000",)}, None),
        (JobStatus.QUEUED, {"queue_shape": SHAPE, "reason": Reason.WAITING_FOR_TRIAL_SLOT}, None),
        # placed: objects not created yet, then created
        (
            JobStatus.QUEUED,
            {"queue_shape": SHAPE, "cluster": "c1", "region": "us-east-1"},
            (PLACED_PARTITION, SORT_KEY),
        ),
        (
            JobStatus.QUEUED,
            {"queue_shape": "", "cluster": "c1", "region": "us-east-1"},
            (PLACED_PARTITION, SORT_KEY),
        ),
        (
            JobStatus.QUEUED,
            {"queue_shape": SHAPE, "cluster": "c1", "region": "us-east-1", "objects_created": True},
            None,
        ),
        (JobStatus.RUNNING, {"queue_shape": SHAPE}, None),
        (JobStatus.RUNNING, {"queue_shape": SHAPE, "cluster": "c1", "region": "us-east-1"}, None),
        (JobStatus.SUCCEEDED, {"queue_shape": SHAPE}, None),
        (JobStatus.FAILED, {"queue_shape": SHAPE, "cluster": "c1", "region": "us-east-1"}, None),
        (JobStatus.CANCELLED, {"queue_shape": SHAPE}, None),
        (JobStatus.REJECTED, {"queue_shape": SHAPE}, None),
    ],
)
def test_queue_key_for_every_state(
    status: JobStatus, fields: dict[str, Any], key: tuple[str, str] | None
) -> None:
    job = queued(**fields)
    job = dataclasses.replace(job, status=status)
    assert queue_key(job) == key
    # the item carries the key as the index's attributes, or not at all
    values = from_item(job_to_item(job))
    assert (values.get("gsi2pk"), values.get("gsi2sk")) == (key or (None, None))


def test_the_queue_orders_by_submission_time_then_id() -> None:
    early = queue_key(queued(queue_shape=SHAPE, submitted_at=T0.replace(second=1)))
    late = queue_key(
        dataclasses.replace(queued(queue_shape=SHAPE), id="a", submitted_at=T0.replace(second=2))
    )
    assert early is not None and late is not None and early[1] < late[1]


# -- records: the new fields, and old records without them --------------------------


def test_an_item_written_before_the_queue_fields_still_loads_with_their_defaults() -> None:
    # given an item as the adapter wrote it before (no cluster, region, priority, requeued, ...)
    item = job_to_item(queued())
    for name in (
        "cluster",
        "region",
        "priority",
        "requeued",
        "queueShape",
        "objectsCreated",
        "gsi2pk",
        "gsi2sk",
    ):
        item.pop(name, None)
    # when it is read, then the job has the defaults
    job = job_from_item(item)
    assert (job.cluster, job.region, job.priority, job.requeued, job.queue_shape, job.objects_created) == (
        None,
        None,
        0,
        False,
        "",
        False,
    )
    assert job == queued()


def test_the_queue_fields_round_trip_through_the_item() -> None:
    job = queued(
        cluster="c2", region="us-east-1", priority=70, requeued=True, queue_shape=SHAPE, objects_created=True
    )
    assert job_from_item(job_to_item(job)) == job


# -- queue_shape: what admission needs of a gang --------------------------------------


def test_a_distributed_jobs_shape_keeps_one_template_per_replica_kind_with_its_count() -> None:
    spec = parse(**DISTRIBUTED)
    shape = decode_shape(queue_shape(spec, job_id="j-1", namespace="team-research"), job_id="j-1")
    # chief and workers ask alike (the spec's resources), the parameter servers for no GPU
    assert [(s.count, s.gpus) for s in shape] == [(4, 1), (2, 0)]
    gpu_pod, ps_pod = (s.pod for s in shape)
    assert gpu_pod["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    assert "tolerations" not in ps_pod
    expressions = gpu_pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert {
        "key": "topology.kubernetes.io/region",
        "operator": "In",
        "values": ["us-east-1", "us-west-2"],
    } in (expressions)
    # nothing that names the job itself (its pod affinity, its env): shapes alike are alike
    assert "podAffinity" not in gpu_pod["affinity"] and "j-1" not in json.dumps(gpu_pod)


def test_the_shape_is_compact_deterministic_and_independent_of_the_job_id() -> None:
    spec = parse(**DISTRIBUTED)
    text = queue_shape(spec, job_id="j-1", namespace="team-research")
    assert text == queue_shape(spec, job_id="j-1", namespace="team-research")
    assert text == queue_shape(spec, job_id="other-9", namespace="team-research")
    assert " " not in text and text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    single = queue_shape(parse(), job_id="j-1", namespace="team-research")
    assert len(single) < 300, single


def test_the_largest_shape_a_valid_spec_renders_stays_under_the_bound() -> None:
    # the longest names and quantities the spec takes: 64 node groups, 16 regions, 64-character quantities
    groups = [f"g{i:02d}-" + "x" * 59 for i in range(64)]
    regions = [f"xx-{letter * 25}-1" for letter in "abcdefghijklmnop"]
    resources = {"cpu": "0" * 62 + "1m", "memory": "0" * 61 + "1Gi", "gpu": 16}
    quantity = "0" * 62 + "2m"
    spec = parse(
        resources=resources,
        replicas={
            "chief": {"count": 1, "resources": resources | {"cpu": quantity}},
            "worker": {"count": 64, "resources": resources},
            "ps": {"count": 16, "resources": resources | {"gpu": 0}},
            "evaluator": {"count": 1, "resources": resources | {"gpu": 1}},
        },
        placement={"regions": regions, "node_groups": groups, "spot": "required"},
    )
    text = queue_shape(spec, job_id="j-1", namespace="team-research")
    assert len(decode_shape(text, job_id="j-1")) == 4
    assert 15_000 < len(text) <= MAX_QUEUE_SHAPE_BYTES


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "not JSON"),
        ("{}", "expected a list"),
        ("[]", "expected a list"),
        ('[{"n":0,"pod":{}}]', "[0].n: expected a count"),
        ('[{"n":true,"pod":{}}]', "[0].n: expected a count"),
        ('[{"n":1,"pod":{}},{"n":2,"pod":[]}]', "[1].pod: expected an object"),
        ('["x"]', "[0].n"),
    ],
)
def test_a_shape_that_cannot_be_read_names_the_job_and_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(QueueShapeError) as caught:
        decode_shape(text, job_id="j-7")
    assert str(caught.value).startswith("job j-7: stored queue shape: ") and words in str(caught.value)


# -- replica_jobs: the entry as the planner's replica Jobs ----------------------------


def test_a_queued_entry_reads_as_the_suspended_jobs_the_cluster_held_before() -> None:
    # given a distributed job's entry, and the suspended Jobs Squall rendered for it before
    spec = parse(**DISTRIBUTED, priority=70)
    job = queued(
        queue_shape=queue_shape(spec, job_id="j-1", namespace="team-research"), priority=70, requeued=True
    )
    rendered = parse_replica_jobs(
        [
            o
            for o in render(spec, job_id="j-1", namespace="team-research", submitted_at=T0, requeued=True)
            if o["kind"] == "Job"
        ]
    )
    # when the entry is read as replica Jobs
    replicas = replica_jobs(queue_entry(job), qualify_cluster=False)
    # then they ask for what the rendered Jobs' pods ask for, as one suspended gang of six
    assert [r.name for r in replicas] == [f"j-1-r{i}" for i in range(6)]

    def scheduling(r: Any) -> tuple[Any, ...]:
        pod = r.pod
        return (
            pod.requests,
            tuple(sorted(pod.node_selector.items())),
            pod.required_affinity,
            pod.tolerations,
        )

    assert Counter(scheduling(r) for r in replicas) == Counter(scheduling(r) for r in rendered)
    for replica in replicas:
        assert (replica.job_id, replica.team, replica.namespace, replica.priority) == (
            "j-1",
            "research",
            "team-research",
            70,
        )
        assert (replica.submitted_at, replica.requeued, replica.replicas) == (T0, True, 6)
        assert replica.suspended and not replica.started and not replica.finished
        assert replica.admitted_region is None
        assert replica.pod.job_id == "j-1" and replica.pod.is_pending and replica.pod.name == replica.name


def test_a_placed_entry_reads_as_admitted_to_its_region() -> None:
    spec = parse()
    job = queued(
        queue_shape=queue_shape(spec, job_id="j-1", namespace="team-research"),
        cluster="c2",
        region="us-east-1",
    )
    entry = queue_entry(job)
    assert entry.placed and entry.gpus == 1 and entry.replicas == 1
    [replica] = replica_jobs(entry, qualify_cluster=False)
    assert replica.suspended and replica.admitted_region == "us-east-1"


def test_with_many_clusters_a_placed_entry_is_admitted_to_its_site_and_fits_only_its_cluster() -> None:
    text = queue_shape(parse(), job_id="j-1", namespace="team-research")
    placed = queue_entry(queued(queue_shape=text, cluster="c2", region="us-east-1"))
    [replica] = replica_jobs(placed, qualify_cluster=True)
    assert replica.admitted_region == "c2/us-east-1"
    assert replica.pod.node_selector == {CLUSTER_LABEL: "c2"}
    # a queued one may go to any cluster: nothing pins it
    [waiting] = replica_jobs(queue_entry(queued(queue_shape=text)), qualify_cluster=True)
    assert (
        waiting.suspended
        and waiting.admitted_region is None
        and CLUSTER_LABEL not in waiting.pod.node_selector
    )


def test_a_bad_stored_shape_fails_its_own_entry_when_read_not_before() -> None:
    entry = queue_entry(
        queued(queue_shape='[{"n":1,"pod":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}}]')
    )
    with pytest.raises(QueueShapeError, match=r"^job j-1: stored queue shape: "):
        replica_jobs(entry, qualify_cluster=False)
