"""The Preempter: a waiting job of much higher priority takes a running job's room; the victim goes
back in the queue at the head of its priority, its run time kept, to resume from its checkpoint.

The in-memory job store (with the queue index DynamoDB keeps), a simulated cluster with one
GPU node, the intake, admission and reconcile as the scale check and the schedules run them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.core.errors import RetryableError
from squall.core.job_outputs import StoredObject
from squall.core.jobs import Job, JobStatus
from squall.core.telemetry import Metric, RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.planner import Node, NodeGroup, Pod, Policy
from squall.planner.admission import AdmissionPlan
from squall.planner.kube import busy_stand_in, node_cache, pod_cache
from squall.planner.preemption import Preemption, PreemptionPolicy
from squall.services.admission import Admitter
from squall.services.intake import Intake, IntakeConfig
from squall.services.preemption import Preempter, ReportedCheckpoints, preempted_reason
from squall.services.reconcile import Reconciler
from tests.job_records import StepReport, job_record

pytestmark = pytest.mark.timeout(30)

GPU_NODE = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
ON = PreemptionPolicy(enabled=True, min_priority_gap=30, grace=timedelta(seconds=120))


@dataclass
class World:
    clock: VirtualClock = field(default_factory=VirtualClock)
    store: InMemoryJobStore = field(default_factory=InMemoryJobStore)
    cluster: SimulatedCluster = field(init=False)
    metrics: RecordingMetrics = field(init=False)
    intake: Intake = field(init=False)
    reconciler: Reconciler = field(init=False)
    admitter: Admitter = field(init=False)

    def __post_init__(self) -> None:
        self.cluster = SimulatedCluster(clock=self.clock, default_run_for=timedelta(hours=10))
        self.metrics = RecordingMetrics(self.clock)
        clusters = {"local": self.cluster}
        self.intake = Intake(
            store=self.store,
            clusters=clusters,
            clock=self.clock,
            metrics=self.metrics,
            config=IntakeConfig(
                teams={"research": "team-research"}, registries=["registry.example.com/squall"]
            ),
        )
        self.reconciler = Reconciler(
            store=self.store, clusters=clusters, clock=self.clock, metrics=self.metrics, intake=self.intake
        )
        # One admitter for the whole test, as a warm scale function keeps its memory.
        self.admitter = Admitter(
            clusters=clusters, metrics=self.metrics, teams={}, policy=Policy(), store=self.store
        )

    def gpu_nodes(self, count: int = 1) -> None:
        for i in range(count):
            self.cluster.add_node(
                name=f"gpu-{i}",
                allocatable=GPU_NODE,
                labels={"topology.kubernetes.io/region": "us-west-2"},
                taints=GPU_TAINT,
            )

    def submit(self, job_id: str, *, priority: int, gpus: int = 4) -> None:
        body = {
            "name": "t",
            "id": job_id,
            "team": "research",
            "priority": priority,
            "image": "registry.example.com/squall/t:1",
            "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
        }
        self.intake.handle(body=json.dumps(body), message_id=f"m-{job_id}")

    def observed(self) -> tuple[list[Node], list[Pod]]:
        nodes = node_cache(cluster=None).parse_all(
            self.cluster.list_nodes(), unreadable=lambda item, why: None
        )
        pods = pod_cache(cluster=None).parse_all(
            self.cluster.list_pods(), unreadable=functools.partial(busy_stand_in, cluster=None)
        )
        return nodes, pods

    def check(
        self, preempter: Preempter | None = None, *, groups: list[NodeGroup] | None = None
    ) -> tuple[AdmissionPlan, StepReport, Preemption | None]:
        """One scale check's admission, then preemption, as the lead wires them."""
        report = StepReport()
        nodes, pods = self.observed()
        plan = self.admitter.decide(
            jobs=self.admitter.read_queue(), nodes=nodes, pods=pods, groups=groups or [], now=self.clock.now()
        )
        self.admitter.act(plan, now=self.clock.now(), outcome=report)
        found = None
        if preempter is not None:
            found = preempter.run(
                plan,
                cache=self.admitter.parsed.prepared,
                nodes=nodes,
                pods=pods,
                groups=groups or [],
                now=self.clock.now(),
                outcome=report,
            )
        self.admitter.note_queue(plan, now=self.clock.now(), outcome=report)
        return plan, report, found

    def minutes(self, count: int, preempter: Preempter | None = None) -> None:
        for _ in range(count):
            self.check(preempter)
            self.clock.advance(timedelta(minutes=1))
            self.cluster.advance()
            self.reconciler.run()

    def preempter(self, policy: PreemptionPolicy = ON, **kwargs: Any) -> Preempter:
        return Preempter(
            clusters={"local": self.cluster}, store=self.store, metrics=self.metrics, policy=policy, **kwargs
        )


@pytest.fixture
def world() -> World:
    w = World()
    w.gpu_nodes(1)
    return w


def running_low(world: World, *, hours: int = 2) -> None:
    world.submit("low", priority=10)
    world.minutes(2)
    low = world.store.get("low")
    assert low is not None and low.status is JobStatus.RUNNING
    world.clock.advance(timedelta(hours=hours))
    world.cluster.advance()


def test_a_high_priority_job_takes_the_room_of_a_low_one(world: World) -> None:
    # given a low-priority job holding the only GPUs for two hours
    running_low(world)
    low = world.store.get("low")
    assert low is not None and low.started_at is not None
    started = low.started_at
    # when an urgent job arrives and cannot be admitted
    world.submit("urgent", priority=90)
    preempter = world.preempter()
    plan, report, found = world.check(preempter)
    # then the low one is preempted for it
    assert [w.job_id for w in plan.waiting] == ["urgent"]
    assert found is not None and found.job_id == "urgent" and [v.job_id for v in found.victims] == ["low"]
    assert world.cluster.list_jobs(job_id="low") == [], "its objects are gone (its pods got SIGTERM)"
    low = world.store.get("low")
    assert low is not None
    assert (
        low.status is JobStatus.QUEUED and low.reason == preempted_reason("urgent") == "Preempted:by urgent"
    )
    assert low.requeued and low.cluster is None and low.region is None and not low.objects_created
    assert low.started_at is None and low.queue_shape and low.retries_used == 0
    assert low.ran_seconds == pytest.approx((world.clock.now() - started).total_seconds())
    assert "back in the queue at the head of its priority" in world.store.events("low")[-1].message
    assert report.done["preempted"] == [
        {
            "job": "low",
            "by": "urgent",
            "cluster": "local",
            "lostSeconds": int(low.ran_seconds),
            "ranSeconds": int(low.ran_seconds),
        }
    ]
    assert world.metrics.total(Metric.JOBS_PREEMPTED) == 1
    # and at the next checks the urgent job runs, the low one waits at the head of its priority
    world.minutes(2, preempter)
    urgent, low = world.store.get("urgent"), world.store.get("low")
    assert urgent is not None and urgent.status is JobStatus.RUNNING
    assert low is not None and low.status is JobStatus.QUEUED and low.reason.startswith("Queued")
    assert world.metrics.total(Metric.JOBS_PREEMPTED) == 1, "one preemption, not one per check"


def test_the_victims_checkpoint_is_read_and_recorded(world: World) -> None:
    running_low(world, hours=3)
    saved = world.clock.now() - timedelta(minutes=20)

    def reported(job: Job) -> datetime | None:
        return saved if job.id == "low" else None

    world.submit("urgent", priority=90)
    _, report, found = world.check(world.preempter(checkpoints=reported))
    assert found is not None and found.work_lost == timedelta(minutes=20)
    low = world.store.get("low")
    assert low is not None and low.checkpoint_at == saved
    assert report.done["preempted"][0]["lostSeconds"] == 20 * 60
    assert "20 min since its latest checkpoint lost" in world.store.events("low")[-1].message


def test_nothing_is_preempted_with_the_policy_off_or_a_gap_too_small(world: World) -> None:
    running_low(world)
    world.submit("close", priority=39)  # 29 above
    _, _, found = world.check(world.preempter())
    assert found is None
    world.submit("urgent", priority=90)
    _, _, found = world.check(world.preempter(PreemptionPolicy()))
    assert found is None
    low = world.store.get("low")
    assert low is not None and low.status is JobStatus.RUNNING
    assert world.cluster.list_jobs(job_id="low")


def test_nothing_is_read_from_the_store_while_no_job_could_preempt(world: World) -> None:
    running_low(world)
    world.submit("peer", priority=20)  # waits, but nothing runs 30 below it

    calls: list[JobStatus] = []
    listed = world.store.list_by_status

    def counting(status: JobStatus, *, limit: int = 1000) -> list[Any]:
        calls.append(status)
        return listed(status, limit=limit)

    world.store.list_by_status = counting  # type: ignore[method-assign]
    _, _, found = world.check(world.preempter())
    assert found is None and calls == []


def test_a_delete_that_fails_leaves_the_victim_running(world: World) -> None:
    running_low(world)
    world.submit("urgent", priority=90)
    world.cluster.fail_calls("delete_job_objects", RetryableError("503"))
    _, report, found = world.check(world.preempter())
    assert found is not None
    low = world.store.get("low")
    assert low is not None and low.status is JobStatus.RUNNING and low.cluster == "local"
    assert any("preempt low" in error for error in report.errors)


# ---- the trainers' checkpoint reports ---------------------------------------------------------


@dataclass
class Objects:
    """An in-memory S3 (ObjectSource) holding bucket "squall"."""

    objects: dict[str, bytes] = field(default_factory=dict)
    listed: list[str] = field(default_factory=list)

    def list(self, bucket: str, prefix: str, *, limit: int) -> list[StoredObject]:
        self.listed.append(f"{bucket}/{prefix}")
        found = [
            StoredObject(key=k, size=len(v), etag="")
            for k, v in sorted(self.objects.items())
            if k.startswith(prefix)
        ]
        return found[:limit] if bucket == "squall" else []

    def download(self, bucket: str, key: str, target: Path, *, offset: int = 0, end: int) -> int:
        target.write_bytes(self.objects[key][offset:end])
        return end - offset


def job_with(uri: str | None) -> Job:
    spec: dict[str, Any] = {"name": "t", "team": "research", "image": "registry.example.com/squall/t:1"}
    if uri is not None:
        spec["checkpointUri"] = uri
    return job_record(
        "job-1", status=JobStatus.RUNNING, reason="Started", at=datetime(2026, 5, 1, tzinfo=UTC), spec=spec
    )


def test_a_trainers_report_says_when_it_last_saved() -> None:
    objects = Objects()
    objects.objects["ckpt/job-1/checkpoints/squall-checkpoint.json"] = json.dumps(
        {"step": 1200, "savedAt": "2026-05-01T12:34:56Z", "checkpoint": "ckpt-1200", "reason": "periodic"}
    ).encode()
    reader = ReportedCheckpoints(objects)
    assert reader.latest(job_with("s3://squall/ckpt")) == datetime(2026, 5, 1, 12, 34, 56, tzinfo=UTC)
    assert objects.listed == ["squall/ckpt/job-1/checkpoints/squall-checkpoint.json"]


@pytest.mark.parametrize(
    ("uri", "body"),
    [
        (None, b""),  # no checkpointUri
        ("/mnt/ckpt", b""),  # not an s3:// URI: the spec refuses it
        ("s3://squall/elsewhere", b'{"savedAt": "2026-05-01T12:34:56Z"}'),  # nothing reported there
        ("s3://squall/ckpt", b"not json"),
        ("s3://squall/ckpt", b'["savedAt"]'),
        ("s3://squall/ckpt", b'{"savedAt": "yesterday"}'),
        ("s3://squall/ckpt", b'{"savedAt": "2026-05-01T12:34:56"}'),  # no time zone
        ("s3://squall/ckpt", b'{"step": 3}'),
        (
            "s3://squall/ckpt",
            b'{"savedAt": "2026-05-01T12:34:56Z", "pad": "' + b"x" * 5000 + b'"}',
        ),  # too large
    ],
)
def test_no_report_or_one_that_does_not_read_is_no_checkpoint(uri: str | None, body: bytes) -> None:
    objects = Objects({"ckpt/job-1/checkpoints/squall-checkpoint.json": body})
    assert ReportedCheckpoints(objects).latest(job_with(uri)) is None


def test_with_two_clusters_the_victim_is_stopped_in_its_own() -> None:
    clock = VirtualClock()
    store = InMemoryJobStore()
    metrics = RecordingMetrics(clock)
    west = SimulatedCluster(clock=clock, default_run_for=timedelta(hours=10))
    east = SimulatedCluster(clock=clock, default_run_for=timedelta(hours=10))
    clusters = {"west": west, "east": east}
    intake = Intake(
        store=store,
        clusters=clusters,
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(teams={"research": "team-research"}, registries=["registry.example.com/squall"]),
    )
    reconciler = Reconciler(store=store, clusters=clusters, clock=clock, metrics=metrics, intake=intake)
    admitter = Admitter(clusters=clusters, metrics=metrics, teams={}, policy=Policy(), store=store)
    preempter = Preempter(clusters=clusters, store=store, metrics=metrics, policy=ON)

    def node(cluster: SimulatedCluster, region: str) -> None:
        labels = {"topology.kubernetes.io/region": region}
        cluster.add_node(name="gpu-0", allocatable=GPU_NODE, labels=labels, taints=GPU_TAINT)

    def submit(job_id: str, priority: int) -> None:
        body = {
            "name": "t",
            "id": job_id,
            "team": "research",
            "priority": priority,
            "image": "registry.example.com/squall/t:1",
            "resources": {"cpu": "4", "memory": "16Gi", "gpu": 4},
        }
        intake.handle(body=json.dumps(body), message_id=f"m-{job_id}")

    def check() -> tuple[StepReport, Preemption | None]:
        report = StepReport()
        nodes: list[Node] = []
        pods: list[Pod] = []
        for name, cluster in clusters.items():
            nodes += node_cache(cluster=name).parse_all(
                cluster.list_nodes(), unreadable=lambda item, why: None
            )
            pods += pod_cache(cluster=name).parse_all(
                cluster.list_pods(), unreadable=functools.partial(busy_stand_in, cluster=name)
            )
        plan = admitter.decide(jobs=admitter.read_queue(), nodes=nodes, pods=pods, groups=[], now=clock.now())
        admitter.act(plan, now=clock.now(), outcome=report)
        found = preempter.run(
            plan,
            cache=admitter.parsed.prepared,
            nodes=nodes,
            pods=pods,
            groups=[],
            now=clock.now(),
            outcome=report,
        )
        return report, found

    def minute() -> None:
        check()
        clock.advance(timedelta(minutes=1))
        west.advance()
        east.advance()
        reconciler.run()

    # given "old" running in west for three hours, then "new" in east for one
    node(west, "us-west-2")
    submit("old", 10)
    minute()
    minute()
    clock.advance(timedelta(hours=2))
    node(east, "us-east-1")
    submit("new", 10)
    minute()
    minute()
    clock.advance(timedelta(hours=1))
    assert {j: store.get(j).cluster for j in ("old", "new")} == {"old": "west", "new": "east"}  # type: ignore[union-attr]
    # when an urgent job cannot be admitted
    submit("urgent", 90)
    report, found = check()
    # then the one that loses less goes, in its own cluster only
    assert (
        found is not None and found.site == "east/us-east-1" and [v.job_id for v in found.victims] == ["new"]
    )
    assert east.list_jobs(job_id="new") == [] and west.list_jobs(job_id="old")
    new = store.get("new")
    assert new is not None and new.status is JobStatus.QUEUED and new.cluster is None
    assert report.done["preempted"][0]["cluster"] == "east"


def test_a_preempted_run_keeps_what_it_cost(world: World) -> None:
    # given the low job ran two hours at $12 an hour (its rate on its record, as reconcile writes it)
    running_low(world)
    low = world.store.get("low")
    assert low is not None
    world.store.save(*note_with(low, cost=0.0, cost_rate=12.0))
    # when it is preempted
    world.submit("urgent", priority=90)
    world.check(world.preempter())
    # then its record keeps those two hours' cost, and its rate is cleared until it runs again
    low = world.store.get("low")
    assert low is not None and low.status is JobStatus.QUEUED
    assert low.cost == pytest.approx(12.0 * low.ran_seconds / 3600)
    assert low.cost_rate is None


def note_with(job: Job, **changes: Any) -> tuple[Job, Any]:
    from squall.core.jobs import note

    updated, event = note(job, reason="Started", at=job.updated_at)
    return dataclasses.replace(updated, **changes), event
