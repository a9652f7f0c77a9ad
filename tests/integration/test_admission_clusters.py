"""Admission over two clusters: the queue in the job table, each gang's objects in exactly one cluster.

Two simulated clusters, each with its own API, nodes and scheduler, behind one queue (the
in-memory job store, which keeps the same queue index as DynamoDB). No fleet: the nodes are
there or not, so this is admission alone (the scale check's planning is test_scale.py's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

import pytest

from squall.core.errors import PermanentError, RetryableError
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.planner import Policy
from squall.services.admission import MAX_CREATES, Admitter
from squall.services.intake import Intake, IntakeConfig
from tests.job_records import StepReport

P3 = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


@dataclass
class TwoClusters:
    clock: VirtualClock
    west: SimulatedCluster
    east: SimulatedCluster
    store: InMemoryJobStore
    intake: Intake
    metrics: RecordingMetrics

    @property
    def clusters(self) -> dict[str, SimulatedCluster]:
        return {"west": self.west, "east": self.east}

    def nodes(self, cluster: SimulatedCluster, region: str, count: int, *, first: int = 0) -> None:
        for i in range(first, first + count):
            cluster.add_node(
                name=f"ip-10-0-0-{i}.{region}.compute.internal",  # the same names in both clusters
                allocatable=P3,
                labels={"topology.kubernetes.io/region": region},
                taints=GPU_TAINT,
            )

    def submit(self, job_id: str, *, gpus: int = 4, workers: int = 1) -> None:
        body = {
            "name": "t",
            "id": job_id,
            "team": "research",
            "image": "registry.example.com/squall/t:1",
            "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
            "replicas": {"worker": workers},
        }
        self.intake.handle(body=json.dumps(body), message_id=f"m-{job_id}")

    def admit(self) -> StepReport:
        report = StepReport()
        Admitter(
            clusters=self.clusters, metrics=self.metrics, teams={}, policy=Policy(), store=self.store
        ).run(now=self.clock.now(), outcome=report)
        return report

    def where(self, job_id: str) -> set[str]:
        """The clusters holding any object of the job."""
        return {name for name, cluster in self.clusters.items() if cluster.list_jobs(job_id=job_id)}


@pytest.fixture
def two() -> TwoClusters:
    clock = VirtualClock()
    store = InMemoryJobStore()
    metrics = RecordingMetrics(clock)
    west = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=30))
    east = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=30))
    intake = Intake(
        store=store,
        clusters={"west": west, "east": east},
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(teams={"research": "team-research"}, registries=["registry.example.com/squall"]),
    )
    return TwoClusters(clock, west, east, store, intake, metrics)


def test_a_burst_larger_than_one_cluster_spills_into_the_other(two: TwoClusters) -> None:
    two.nodes(two.west, "us-west-2", 2)
    two.nodes(two.east, "us-east-1", 2)
    for i in range(4):
        two.submit(f"j-{i}", workers=1)  # 4 GPUs each: one node each
    two.admit()
    placed = {f"j-{i}": two.where(f"j-{i}") for i in range(4)}
    assert all(len(where) == 1 for where in placed.values()), placed
    assert sorted(next(iter(w)) for w in placed.values()) == ["east", "east", "west", "west"]
    for i in range(4):
        job = two.store.get(f"j-{i}")
        assert job is not None and job.objects_created
        assert (job.cluster, job.region) in {("west", "us-west-2"), ("east", "us-east-1")}
        assert {job.cluster} == two.where(job.id), "the record says where its objects are"


def test_a_gang_is_never_split_across_clusters_that_share_a_region(two: TwoClusters) -> None:
    two.nodes(two.west, "us-west-2", 1)
    two.nodes(two.east, "us-west-2", 1)  # another cluster in the same region
    two.submit("gang", gpus=4, workers=2)  # needs two nodes: one in each cluster would fit, split
    report = two.admit()
    assert two.where("gang") == set(), "not admitted: no one cluster can hold the whole gang"
    assert "admitted" not in report.done
    two.nodes(two.east, "us-west-2", 2, first=1)
    two.admit()
    assert two.where("gang") == {"east"}
    assert len(two.east.list_jobs(job_id="gang")) == 2


def test_an_unreachable_cluster_is_left_out_and_its_jobs_are_not_touched(two: TwoClusters) -> None:
    two.nodes(two.west, "us-west-2", 2)
    two.nodes(two.east, "us-east-1", 2)
    two.submit("first")
    two.admit()
    first = two.store.get("first")
    assert first is not None and first.cluster in {"west", "east"}
    down, up = first.cluster, ({"west", "east"} - {first.cluster}).pop()
    two.clusters[down].outage(until=two.clock.now() + timedelta(minutes=30))
    two.submit("second")
    two.submit("third")
    report = two.admit()
    assert all(two.clusters[up].list_jobs(job_id=j) for j in ("second", "third")), (
        "to the cluster that answers"
    )
    assert {two.store.get(j).cluster for j in ("second", "third")} == {up}  # type: ignore[union-attr]
    assert two.store.get("first").cluster == down, "its job is left where it is"  # type: ignore[union-attr]
    assert not report.errors


def test_a_placed_job_is_finished_in_its_cluster_after_a_failed_create(two: TwoClusters) -> None:
    two.nodes(two.west, "us-west-2", 1)
    two.submit("j")
    two.west.fail_calls("create", RetryableError("create Job: 503"))
    two.admit()
    job = two.store.get("j")
    assert job is not None and job.cluster == "west" and not job.objects_created
    assert [e.job_id for e in two.store.queue(placed=True)] == ["j"]
    two.nodes(two.east, "us-east-1", 4, first=1)  # more room elsewhere changes nothing: it is placed
    two.admit()
    assert two.where("j") == {"west"}
    assert two.store.get("j").objects_created  # type: ignore[union-attr]


def test_one_check_creates_a_bounded_number_of_objects_and_the_rest_keep_their_place(
    two: TwoClusters,
) -> None:
    jobs = MAX_CREATES // 2 + 5
    for cluster, region in ((two.west, "us-west-2"), (two.east, "us-east-1")):
        for i in range(jobs):
            cluster.add_node(
                name=f"n-{i}",
                allocatable=P3,
                labels={"topology.kubernetes.io/region": region},
                taints=GPU_TAINT,
            )
    for i in range(jobs):
        two.submit(f"j-{i:04d}", gpus=1, workers=2)  # two Jobs and two Services each
    report = two.admit()
    created = sum(len(c.list_jobs()) for c in (two.west, two.east))
    assert created * 2 <= MAX_CREATES
    assert any("wait for the next check" in s for s in report.skipped)
    checks = 1
    while any("wait for the next check" in s for s in report.skipped):
        report = two.admit()
        checks += 1
    assert checks == 3, "each check creates its share; the rest wait their turn"
    assert all(len(two.where(f"j-{i:04d}")) == 1 for i in range(jobs))


def test_expired_credentials_for_one_cluster_leave_it_out_like_an_outage(two: TwoClusters) -> None:
    two.nodes(two.west, "us-west-2", 2)
    two.nodes(two.east, "us-east-1", 2)
    two.west.fail_calls("list_nodes", PermanentError("list nodes: 401 Unauthorized (token expired)"))
    two.submit("j")
    report = two.admit()
    assert two.where("j") == {"east"} and two.store.get("j").cluster == "east"  # type: ignore[union-attr]
    assert not report.errors


def test_a_placed_job_is_finished_first_and_its_gpus_count_against_the_quota(two: TwoClusters) -> None:
    from squall.planner.admission import TeamShare

    two.nodes(two.west, "us-west-2", 2)
    two.submit("placed")
    two.west.fail_calls("create", RetryableError("create Job: 503"))
    two.admit()
    assert [e.job_id for e in two.store.queue(placed=True)] == ["placed"]
    two.submit("next")
    report = StepReport()
    decided = Admitter(
        clusters=two.clusters,
        metrics=two.metrics,
        teams={"research": TeamShare(quota=4)},
        policy=Policy(),
        store=two.store,
    ).run(now=two.clock.now(), outcome=report)
    assert [(a.job_id, a.resumed) for a in decided.admitted] == [("placed", True)]
    assert decided.in_use == {"research": 4}, "a placed job's GPUs are in use"
    assert [w.job_id for w in decided.waiting] == ["next"] and decided.waiting[0].held_back
    assert two.where("placed") == {"west"} and two.where("next") == set()


def test_the_gpus_of_jobs_in_an_unreachable_cluster_still_count_against_the_quota(two: TwoClusters) -> None:
    from squall.core.jobs import JobStatus, transition
    from squall.planner.admission import TeamShare

    two.nodes(two.west, "us-west-2", 2)
    two.nodes(two.east, "us-east-1", 2)
    two.submit("first")
    two.admit()
    first = two.store.get("first")
    assert first is not None and first.objects_created
    running, event = transition(first, to=JobStatus.RUNNING, reason="Started", at=two.clock.now())
    two.store.save(running, event)
    two.clusters[first.cluster or ""].outage(until=two.clock.now() + timedelta(minutes=30))
    two.submit("second")
    decided = Admitter(
        clusters=two.clusters,
        metrics=two.metrics,
        teams={"research": TeamShare(quota=4)},
        policy=Policy(),
        store=two.store,
    ).run(now=two.clock.now(), outcome=StepReport())
    assert decided.in_use == {"research": 4}, "the running job's GPUs, though its cluster is not seen"
    assert [(w.job_id, w.held_back) for w in decided.waiting] == [("second", True)]
