"""Queue-index records that do not read (a missing attribute, a priority out of range, a time that
is none, a shape that is not JSON) fail their own job, never a whole check (a review of issue 26)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from squall.adapters.aws.job_store import DynamoJobStore, job_to_item, to_item
from squall.core.jobs import new_job
from squall.core.queue import replica_jobs
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.planner import Policy
from squall.services.admission import Admitter
from squall.services.intake import Intake, IntakeConfig
from tests.job_records import StepReport

P3 = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}
SHAPE = '[{"n":1,"pod":{"containers":[{"resources":{"requests":{"cpu":"4","nvidia.com/gpu":"1"}}}]}}]'


def submit_good(store: Any, clusters: Any, clock: Any, metrics: Any) -> None:
    """A good one-GPU job, "good", through intake: it must be admitted whatever else the queue holds."""
    intake = Intake(
        store=store,
        clusters=clusters,
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(teams={"research": "team-research"}, registries=["registry.example.com/squall"]),
    )
    body = {
        "name": "t",
        "id": "good",
        "team": "research",
        "image": "registry.example.com/squall/t:1",
        "resources": {"cpu": "1", "memory": "1Gi", "gpu": 1},
    }
    intake.handle(body=json.dumps(body), message_id="m-good")


@pytest.mark.parametrize(
    "override",
    [
        {"submittedAt": "not a time"},
        {"submittedAt": "2026-01-05T09:00:00"},
        {"priority": Decimal("1.5")},
        {"team": None},
    ],
    ids=["submittedAt-garbage", "submittedAt-naive", "priority-1.5", "team-missing"],
)
def test_a_good_job_is_admitted_beside_one_odd_record(jobs_table: Any, override: dict[str, Any]) -> None:
    clock = VirtualClock()
    store = DynamoJobStore(jobs_table, "jobs")
    west = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=30))
    west.add_node(name="n1", allocatable=P3, labels={"topology.kubernetes.io/region": "us-west-2"}, taints=[])
    metrics = RecordingMetrics(clock)
    submit_good(store, {"west": west}, clock, metrics)
    # another record in the queue index, as an older/newer writer or a hand edit left it
    job, _ = new_job(
        job_id="odd",
        name="j",
        team="research",
        namespace="team-research",
        at=datetime(2026, 1, 1, tzinfo=UTC),
        queue_shape=SHAPE,
    )
    item = dict(job_to_item(job))
    for k, v in override.items():
        if v is None:
            item.pop(k, None)
    item.update(to_item({k: v for k, v in override.items() if v is not None}))
    store._client.put_item(TableName="jobs", Item=item)
    report = StepReport()
    try:
        Admitter(clusters={"west": west}, metrics=metrics, teams={}, policy=Policy(), store=store).run(
            now=clock.now(), outcome=report
        )
    except Exception as exc:
        pytest.fail(f"the whole admission failed on one record: {type(exc).__name__}: {exc}")
    assert west.list_jobs(job_id="good"), "the good job was not admitted"


T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SHAPE = '[{"n":2,"pod":{"containers":[{"resources":{"requests":{"cpu":"8","nvidia.com/gpu":"1"}}}]}}]'


def _good(store: DynamoJobStore, job_id: str) -> None:
    job, event = new_job(
        job_id=job_id, name="j", team="research", namespace="team-research", at=T0, queue_shape=SHAPE
    )
    store.create(job, event)


def _raw(client: Any, job_id: str, **override: Any) -> None:
    """A queue-index item as another writer (an old/new version, a hand edit, a bug) left it."""
    job, _ = new_job(
        job_id=job_id, name="j", team="research", namespace="team-research", at=T0, queue_shape=SHAPE
    )
    item = job_to_item(job) if callable(job_to_item) else None
    item = dict(item)
    item.update(to_item(override) if override else {})
    client.put_item(TableName="jobs", Item=item)


@pytest.mark.parametrize(
    "override",
    [
        {"submittedAt": "not a time"},
        {"submittedAt": "2026-01-05T09:00:00"},  # no offset: naive
        {"priority": __import__("decimal").Decimal("1.5")},
        {"priority": 10**30},
        {"priority": -7},
        {"queueShape": "x" * 350_000},
        {"queueShape": "{not json"},
    ],
    ids=[
        "submittedAt-garbage",
        "submittedAt-naive",
        "priority-1.5",
        "priority-huge",
        "priority-negative",
        "shape-huge",
        "shape-notjson",
    ],
)
def test_one_odd_record_does_not_cost_the_whole_queue(jobs_table: Any, override: dict[str, Any]) -> None:
    store = DynamoJobStore(jobs_table, "jobs")
    _good(store, "j-good")
    _raw(store._client, "j-odd", **override)
    entries = store.queue()  # must not raise: one record must not stop admission for every job
    assert "j-good" in [e.job_id for e in entries]
    odd = next((e for e in entries if e.job_id == "j-odd"), None)
    if odd is not None:
        # the accepted entry must be usable by admission or fail alone (QueueShapeError/ValueError)
        try:
            replica_jobs(odd, qualify_cluster=False)
        except ValueError:
            return
        assert 0 <= odd.priority <= 100, f"priority {odd.priority} admitted unchecked"
        assert odd.submitted_at.tzinfo is not None, (
            "naive submittedAt admitted: compares with aware times -> TypeError"
        )


P3 = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}


@pytest.mark.parametrize("shape", ["{not json", '[{"n": 500, "pod": {}}]'])
def test_bad_placed_entry_in_unreachable_cluster_does_not_stop_admission(shape: str) -> None:
    clock = VirtualClock()
    store = InMemoryJobStore()
    metrics = RecordingMetrics(clock)
    west = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=30))
    east = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=30))
    east.add_node(name="n1", allocatable=P3, labels={"topology.kubernetes.io/region": "us-east-1"}, taints=[])
    clusters = {"west": west, "east": east}
    job, event = new_job(
        job_id="odd",
        name="j",
        team="research",
        namespace="team-research",
        at=clock.now(),
        queue_shape=shape,
        cluster="west",
        region="us-west-2",
    )
    store.create(job, event)
    assert [e.job_id for e in store.queue(placed=True)] == ["odd"]
    submit_good(store, clusters, clock, metrics)
    west.outage(until=clock.now() + timedelta(minutes=30))
    report = StepReport()
    try:
        Admitter(clusters=clusters, metrics=metrics, teams={}, policy=Policy(), store=store).run(
            now=clock.now(), outcome=report
        )
    except Exception as exc:
        pytest.fail(f"admission failed for every job while west is down: {type(exc).__name__}: {exc}")
    assert east.list_jobs(job_id="good")
