"""The summary's numbers and invariants, from plain records and a simulated cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squall.core.jobs import Job, JobStatus, new_job, transition
from squall.core.manifests import render
from squall.core.spec import parse_spec
from squall.local.clock import VirtualClock
from squall.local.summary import (
    InvocationKilled,
    ObjectChange,
    ObservedCluster,
    Recorder,
    duplicate_kubernetes_jobs,
    lost_jobs,
    percentile,
    queue_waits,
)

from .local.sim import unsuspended

CLOCK = VirtualClock()
T0 = CLOCK.now()
SPEC = parse_spec(
    {"name": "j", "team": "research", "image": "registry.example.com/squall/t:1", "resources": {"gpu": 1}},
    teams=["research"],
    registries=["registry.example.com/squall"],
)


def job(
    job_id: str,
    *,
    status: JobStatus = JobStatus.QUEUED,
    started: float | None = None,
    finished: float | None = None,
) -> Job:
    record, _ = new_job(job_id=job_id, name="j", team="research", namespace="team-research", at=T0, reason="Submitted",
                        spec={}, message_id="m", gpus=1, replicas=1, max_retries=2)  # fmt: skip
    if started is not None:
        record, _ = transition(
            record, to=JobStatus.RUNNING, reason="Started", at=T0 + timedelta(seconds=started)
        )
    if finished is not None:
        record, _ = transition(record, to=status, reason="Completed", at=T0 + timedelta(seconds=finished))
    return record


def created(seconds: float, name: str, job_id: str | None) -> ObjectChange:
    return ObjectChange(
        at=T0 + timedelta(seconds=seconds), kind="created", namespace="ns", job_id=job_id, name=name
    )


def deleted(seconds: float, job_id: str) -> ObjectChange:
    return ObjectChange(at=T0 + timedelta(seconds=seconds), kind="deleted", namespace="ns", job_id=job_id)


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [
        ([], 0.5, 0.0),
        ([7.0], 0.9, 7.0),
        ([4.0, 1.0, 3.0, 2.0], 0.5, 2.0),
        ([float(v) for v in range(1, 11)], 0.9, 9.0),
    ],
)
def test_nearest_rank_percentiles(values: list[float], fraction: float, expected: float) -> None:
    assert percentile(values, fraction) == expected


def test_queue_waits_come_from_the_records_that_started() -> None:
    records = [job("a", started=30), job("b"), job("c", started=90, finished=100, status=JobStatus.SUCCEEDED)]
    assert queue_waits(records) == [30.0, 90.0]


def test_lost_jobs_are_missing_or_unfinished() -> None:
    records = {
        "done": job("done", started=1, finished=2, status=JobStatus.SUCCEEDED),
        "stuck": job("stuck", started=1),
    }
    assert lost_jobs(["done", "stuck", "never-recorded"], records) == ["never-recorded", "stuck"]


def test_a_replica_made_again_after_a_delete_is_a_new_run_not_a_duplicate() -> None:
    records = {"a": job("a", started=1, finished=500, status=JobStatus.SUCCEEDED)}
    changes = [created(0, "a-worker-0", "a"), deleted(100, "a"), created(101, "a-worker-0", "a")]
    assert duplicate_kubernetes_jobs(changes, records) == 0


def test_a_replica_made_again_without_a_delete_is_a_duplicate() -> None:
    # the first object vanished without Squall deleting it (e.g. its TTL), and Squall ran the replica again
    records = {"a": job("a", started=1, finished=500, status=JobStatus.SUCCEEDED)}
    changes = [
        created(0, "a-worker-0", "a"),
        created(200, "a-worker-0", "a"),
        created(200, "a-worker-1", "a"),
    ]
    assert duplicate_kubernetes_jobs(changes, records) == 1


def test_objects_for_no_record_or_a_finished_job_are_duplicates() -> None:
    records = {"a": job("a", started=1, finished=50, status=JobStatus.SUCCEEDED)}
    changes = [
        created(0, "a-chief-0", "a"),
        deleted(50, "a"),
        created(60, "a-chief-0", "a"),
        created(1, "x-chief-0", "x"),
    ]
    assert duplicate_kubernetes_jobs(changes, records) == 2


def test_the_observed_cluster_logs_creates_and_deletes_and_kills_on_the_armed_call() -> None:
    clock = VirtualClock()
    cluster = ObservedCluster(clock=clock)
    manifests = [unsuspended(m) for m in render(SPEC, job_id="j-1", namespace="team-research")]
    cluster.kill_at("create", after=1)
    assert cluster.create(manifests[0]) is True
    with pytest.raises(InvocationKilled, match="killed at create"):
        cluster.create(manifests[0] | {"metadata": manifests[0]["metadata"] | {"name": "j-1-other"}})
    assert cluster.create(manifests[0]) is False, "the name exists: no new object, nothing logged"
    cluster.delete_job_objects(namespace="team-research", job_id="j-1")
    assert [(c.kind, c.name, c.job_id) for c in cluster.changes] == [
        ("created", "j-1-worker-0", "j-1"),
        ("deleted", "", "j-1"),
    ]
    with pytest.raises(ValueError, match="can be killed at create"):
        cluster.kill_at("list_pods")


def test_gpu_hours_integrate_what_the_cluster_holds_over_virtual_time() -> None:
    clock = VirtualClock()
    cluster = ObservedCluster(clock=clock, default_run_for=timedelta(minutes=30))
    recorder = Recorder(clock=clock, cluster=cluster, fleet=None, groups=[])
    cluster.add_node(
        name="n1", allocatable={"cpu": "8", "memory": "60Gi", "nvidia.com/gpu": "4", "pods": "58"}
    )
    for manifest in map(unsuspended, render(SPEC, job_id="j-1", namespace="team-research")):
        cluster.create(manifest)
    cluster.advance()
    recorder.observe()
    # one GPU held, three idle, for an hour (the pod finishes after 30 minutes)
    clock.advance(timedelta(minutes=30))
    recorder.observe()
    cluster.advance()
    recorder.observe()
    clock.advance(timedelta(minutes=30))
    recorder.observe()
    assert recorder.gpu_busy_seconds == 30 * 60
    assert recorder.gpu_idle_seconds == 3 * 30 * 60 + 4 * 30 * 60
