"""Reconcile over two clusters: each job observed in the cluster its record names, one that
cannot be reached survived.

Two simulated clusters, each with its own API, nodes and scheduler, behind one queue (the
in-memory job store, which keeps the same queue index as DynamoDB); admission places the
jobs, as the scale check does, and reconcile runs every minute.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from squall.core.errors import RetryableError
from squall.core.jobs import Job, JobStatus, Reason, transition
from squall.core.manifests import render
from squall.core.queue import queue_key
from squall.core.spec import load_spec
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.planner import Policy
from squall.ports import Cluster, JobStore
from squall.services.admission import Admitter
from squall.services.intake import Intake, IntakeConfig, update_job
from squall.services.reconcile import Reconciler, ReconcileReport
from tests.job_records import StepReport

P3 = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
REGIONS = {"west": "us-west-2", "east": "us-east-1"}
IMAGE = "registry.example.com/squall/t:1"


@dataclass
class ClusterWorld:
    clock: VirtualClock
    clusters: dict[str, SimulatedCluster]
    store: InMemoryJobStore
    metrics: RecordingMetrics
    intake: Intake
    reconciler: Reconciler

    def node(self, cluster: str, name: str = "gpu-0") -> str:
        region = REGIONS[cluster]
        self.clusters[cluster].add_node(
            name=name,  # the same names in both clusters
            allocatable=P3,
            labels={"topology.kubernetes.io/region": region},
            taints=GPU_TAINT,
        )
        return name

    def submit(self, job_id: str, **overrides: Any) -> None:
        body = {
            "name": "t",
            "id": job_id,
            "team": "research",
            "image": IMAGE,
            "resources": {"cpu": "4", "memory": "16Gi", "gpu": 4},
        } | overrides
        self.intake.handle(body=json.dumps(body), message_id=f"m-{job_id}")

    def admit(self) -> StepReport:
        report = StepReport()
        Admitter(
            clusters=self.clusters, metrics=self.metrics, teams={}, policy=Policy(), store=self.store
        ).run(now=self.clock.now(), outcome=report)
        return report

    def minute(self) -> ReconcileReport:
        """A minute of both clusters, then a reconcile run."""
        self.clock.advance(timedelta(minutes=1))
        for cluster in self.clusters.values():
            cluster.advance()
        return self.reconciler.run()

    def run(self, minutes: int) -> list[ReconcileReport]:
        reports = []
        for _ in range(minutes):
            self.admit()
            reports.append(self.minute())
        return reports

    def job(self, job_id: str) -> Job:
        job = self.store.get(job_id)
        assert job is not None
        return job

    def where(self, job_id: str) -> set[str]:
        """The clusters holding any Job of the job."""
        return {name for name, cluster in self.clusters.items() if cluster.list_jobs(job_id=job_id)}

    def reasons(self, job_id: str) -> list[str]:
        return [e.reason for e in self.store.events(job_id)]

    def calls(self, cluster: str, method: str) -> list[dict[str, object]]:
        return [c.args for c in self.clusters[cluster].calls if c.method == method]


def world_of(*names: str) -> ClusterWorld:
    """The world over the named clusters of REGIONS (a one-cluster deployment: one name)."""
    clock = VirtualClock()
    store = InMemoryJobStore()
    metrics = RecordingMetrics(clock)
    clusters = {
        name: SimulatedCluster(
            clock=clock, default_run_for=timedelta(minutes=30), name=name, region=REGIONS[name]
        )
        for name in names
    }
    intake = Intake(
        store=store,
        clusters=clusters,
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(teams={"research": "team-research"}, registries=["registry.example.com/squall"]),
    )
    reconciler = Reconciler(store=store, clusters=clusters, clock=clock, metrics=metrics, intake=intake)
    return ClusterWorld(clock, clusters, store, metrics, intake, reconciler)


@pytest.fixture
def two() -> ClusterWorld:
    return world_of("west", "east")


@pytest.fixture
def one() -> ClusterWorld:
    return world_of("west")


def place(
    store: JobStore, cluster: Cluster, job: Job, *, cluster_name: str, region: str, at: datetime
) -> Job:
    """What admission does for one job, by hand: its objects made in `cluster`, then recorded there."""
    for manifest in render(
        load_spec(job.spec),
        job_id=job.id,
        namespace=job.namespace,
        submitted_at=job.submitted_at,
        region=region,
    ):
        cluster.create(manifest)
    placed = update_job(
        store,
        job,
        lambda current: transition(
            current,
            to=JobStatus.QUEUED,
            reason=f"Admitted:{region}",
            at=at,
            cluster=cluster_name,
            region=region,
            objects_created=True,
        ),
    )
    assert placed is not None
    return placed


def test_each_job_is_reconciled_from_its_own_cluster(two: ClusterWorld) -> None:
    # given one node in each cluster and two jobs that fill one node each
    two.node("west")
    two.node("east")
    two.submit("j-0")
    two.submit("j-1")
    two.admit()
    placed = {job_id: two.job(job_id).cluster for job_id in ("j-0", "j-1")}
    assert sorted(placed.values()) == ["east", "west"]  # type: ignore[type-var]
    east_job = next(job_id for job_id, name in placed.items() if name == "east")
    west_job = next(job_id for job_id, name in placed.items() if name == "west")
    two.clusters["east"].set_behaviour(east_job, run_for=timedelta(minutes=2), exit_code=1)
    two.clusters["west"].set_behaviour(west_job, run_for=timedelta(minutes=2))
    # when both run, and reconcile runs every minute
    two.minute()
    assert {two.job(j).status for j in placed} == {JobStatus.RUNNING}
    two.run(minutes=3)
    # then each ended as its own cluster said, and its objects went from that cluster alone
    assert two.job(west_job).status is JobStatus.SUCCEEDED
    east = two.job(east_job)
    assert east.status is JobStatus.FAILED and east.reason == Reason.APPLICATION_ERROR
    assert two.where(west_job) == set() and two.where(east_job) == set()
    assert [c["job_id"] for c in two.calls("west", "delete_job_objects")] == [west_job]
    assert [c["job_id"] for c in two.calls("east", "delete_job_objects")] == [east_job]


def test_an_unreachable_cluster_leaves_its_jobs_running_and_catches_up_when_it_answers(
    two: ClusterWorld,
) -> None:
    # given a running job in each cluster
    two.node("west")
    two.node("east")
    two.submit("j-0")
    two.submit("j-1")
    two.admit()
    by_cluster = {two.job(j).cluster: j for j in ("j-0", "j-1")}
    west_job, east_job = by_cluster["west"], by_cluster["east"]
    two.clusters["west"].set_behaviour(west_job, run_for=timedelta(minutes=3))
    two.clusters["east"].set_behaviour(east_job, run_for=timedelta(minutes=6))
    two.run(minutes=2)
    assert {two.job(j).status for j in (west_job, east_job)} == {JobStatus.RUNNING}
    # when east's API cannot be reached for five minutes (its nodes and pods go on)
    two.clusters["east"].outage(until=two.clock.now() + timedelta(minutes=5, seconds=30))
    reports = two.run(minutes=5)
    # then west's job ends and is cleaned up; east's runs on as far as Squall knows: not lost
    assert two.job(west_job).status is JobStatus.SUCCEEDED
    assert two.clusters["west"].list_jobs(job_id=west_job) == []
    east = two.job(east_job)
    assert east.status is JobStatus.RUNNING and east.cluster == "east" and east.retries_used == 0
    assert all(r.unreachable_clusters == ["east"] for r in reports)
    unreachable = [p for p in two.metrics.points if p.name == "ClusterUnreachable"]
    assert [(p.value, p.dimensions) for p in unreachable] == [(1, {"Cluster": "east"})] * 5
    assert Reason.OBJECTS_MISSING not in two.reasons(east_job)
    # when east answers again (its job ended meanwhile)
    report = two.minute()
    # then its job's end is recorded once, its objects deleted there, and nothing else happened
    assert report.unreachable_clusters == []
    east = two.job(east_job)
    assert east.status is JobStatus.SUCCEEDED and east.finished_at is not None
    assert two.reasons(east_job).count(Reason.STARTED) == 1
    assert two.reasons(east_job).count(Reason.COMPLETED) == 1
    assert not any(r.startswith(Reason.NODE_LOST) for r in two.reasons(east_job))
    assert two.where(east_job) == set()
    assert len(two.calls("east", "create")) == 1, "its objects were made once, in one cluster"


def test_a_job_placed_in_an_unreachable_cluster_whose_objects_went_missing_waits_for_it(
    two: ClusterWorld,
) -> None:
    # given a running job in east whose objects go while east cannot be reached
    two.node("east")
    two.submit("j", retries=1)
    two.run(minutes=2)
    assert two.job("j").status is JobStatus.RUNNING
    two.clusters["east"].outage(until=two.clock.now() + timedelta(minutes=3, seconds=30))
    two.clusters["east"].remove_node("gpu-0", reason="spot reclaim")
    # when reconcile runs past the create grace while east cannot be reached
    two.run(minutes=3)
    # then nothing is decided for it: it is not lost for an unreachable API alone
    job = two.job("j")
    assert job.status is JobStatus.RUNNING and job.cluster == "east" and job.retries_used == 0
    # and once east answers, what it says is recorded
    two.run(minutes=1)
    assert two.job("j").retries_used == 1


def test_objects_missing_after_creation_put_the_job_back_in_the_queue(two: ClusterWorld) -> None:
    # given a gang of two placed in east, its objects made, and one of its replica Jobs deleted
    two.node("east", "gpu-0")
    two.node("east", "gpu-1")
    two.submit("gang", replicas={"worker": 2})
    two.admit()
    placed = two.job("gang")
    assert placed.cluster == "east" and placed.objects_created and placed.status is JobStatus.QUEUED
    shape = placed.queue_shape
    two.clusters["east"].delete_job_objects(namespace="team-research", job_id="gang")
    for manifest in render(
        load_spec(placed.spec),
        job_id="gang",
        namespace="team-research",
        submitted_at=placed.submitted_at,
        region="us-east-1",
    )[:1]:
        two.clusters["east"].create(manifest)  # one of its two Jobs is left
    # when reconcile runs past the create grace
    two.minute()
    two.minute()
    # then what was left is deleted and the job is back in the queue, to be placed anew
    job = two.job("gang")
    assert job.status is JobStatus.QUEUED and job.reason == Reason.OBJECTS_MISSING
    assert (job.cluster, job.region, job.objects_created) == (None, None, False)
    assert job.queue_shape == shape and not job.requeued and job.retries_used == 0
    assert queue_key(job) is not None and queue_key(job)[0] == "QUEUE"  # type: ignore[index]
    assert two.where("gang") == set()
    # and admission places it where there is room now
    two.clusters["east"].remove_node("gpu-0")
    two.node("west", "gpu-0")
    two.node("west", "gpu-1")
    two.admit()
    assert two.job("gang").cluster == "west" and two.where("gang") == {"west"}


def test_a_running_job_whose_objects_went_missing_is_requeued_with_a_retry(two: ClusterWorld) -> None:
    two.node("east")
    two.submit("j", retries=2)
    two.run(minutes=2)
    assert two.job("j").status is JobStatus.RUNNING
    two.clusters["east"].delete_job_objects(namespace="team-research", job_id="j")
    two.clusters["east"].remove_node("gpu-0")
    report = two.minute()
    job = two.job("j")
    assert report.recreated == ["j"]
    assert job.status is JobStatus.QUEUED and job.reason == "NodeLost:retry 1/2"
    assert (job.cluster, job.region, job.objects_created, job.requeued) == (None, None, False, True)
    assert job.retries_used == 1
    two.node("west")
    two.run(minutes=1)
    assert two.job("j").cluster == "west" and two.where("j") == {"west"}


def test_a_queued_job_not_yet_placed_is_left_to_admission(two: ClusterWorld) -> None:
    # given a job in the queue and no room anywhere
    two.submit("waits")
    # when reconcile runs long past the create grace
    for _ in range(5):
        two.minute()
    # then it made nothing and decided nothing: the queue is admission's
    assert two.reasons("waits") == [Reason.SUBMITTED]
    assert two.where("waits") == set()
    for name in two.clusters:
        assert two.calls(name, "create") == [] and two.calls(name, "delete_job_objects") == []


def test_a_placed_job_whose_objects_are_not_made_yet_is_the_scale_checks_to_finish(two: ClusterWorld) -> None:
    # given a job placed in west whose objects could not be made (a create failed)
    two.node("west")
    two.submit("j")
    two.clusters["west"].fail_calls("create", RetryableError("create Job: 503"))
    two.admit()
    job = two.job("j")
    assert job.cluster == "west" and not job.objects_created
    # when reconcile runs past the create grace
    for _ in range(3):
        two.minute()
    # then it is left as it is (not missing objects), and the next check makes them
    assert two.job("j").version == job.version
    assert two.calls("west", "delete_job_objects") == []
    two.admit()
    assert two.where("j") == {"west"} and two.job("j").objects_created
    two.minute()
    assert two.job("j").status is JobStatus.RUNNING


def test_a_finished_jobs_objects_left_by_a_failed_delete_are_deleted_by_a_later_run(
    two: ClusterWorld,
) -> None:
    two.node("west")
    two.submit("j")
    two.clusters["west"].set_behaviour("j", run_for=timedelta(minutes=1))
    two.admit()
    two.minute()
    assert two.job("j").status is JobStatus.RUNNING
    two.clusters["west"].fail_calls("delete_job_objects", RetryableError("delete Job: 503"))
    report = two.minute()
    assert two.job("j").status is JobStatus.SUCCEEDED
    assert any("j: clean-up in west" in e for e in report.errors) and report.cleaned == []
    assert two.where("j") == {"west"}
    report = two.minute()
    assert report.cleaned == ["j"] and two.where("j") == set()


def test_a_trial_whose_slot_opens_goes_in_the_queue(two: ClusterWorld) -> None:
    two.node("west")
    two.submit("sw", sweep={"parameters": {"lr": [1, 2]}, "maxTrials": 2, "parallelism": 1})
    two.clusters["west"].set_behaviour("sw-t000", run_for=timedelta(minutes=1))
    assert two.job("sw-t001").reason == Reason.WAITING_FOR_TRIAL_SLOT
    two.admit()
    two.minute()
    assert two.job("sw-t001").reason == Reason.WAITING_FOR_TRIAL_SLOT, "one at a time"
    two.minute()
    assert two.job("sw-t000").status is JobStatus.SUCCEEDED
    two.minute()  # the sweep sees its trial's end on the next run
    second = two.job("sw-t001")
    assert second.status is JobStatus.QUEUED and second.reason == Reason.SUBMITTED
    assert queue_key(second) is not None and queue_key(second)[0] == "QUEUE"  # type: ignore[index]
    assert two.where("sw-t001") == set(), "its objects are admission's to make"
    two.admit()
    assert two.where("sw-t001") == {"west"}


def from_before_the_queue(world: ClusterWorld, job_id: str, **changes: Any) -> Job:
    """The job's record as written before the queue was kept in the job table: no cluster, no shape."""
    at = world.clock.now()
    old = update_job(
        world.store,
        world.job(job_id),
        lambda current: transition(
            current,
            to=current.status,
            reason="Edited",
            at=at,
            cluster=None,
            region=None,
            queue_shape="",
            objects_created=False,
            **changes,
        ),
    )
    assert old is not None and queue_key(old) is None, "in no queue"
    return old


def test_a_record_from_before_jobs_named_their_cluster_is_observed_in_the_only_one(one: ClusterWorld) -> None:
    # given one cluster, and a job running there whose record names none
    one.node("west")
    one.submit("old")
    one.clusters["west"].set_behaviour("old", run_for=timedelta(minutes=2))
    one.admit()
    one.minute()
    from_before_the_queue(one, "old")
    # when it runs to its end
    for _ in range(3):
        one.minute()
    # then it was observed in the only cluster, and its objects deleted there
    assert one.job("old").status is JobStatus.SUCCEEDED
    assert one.where("old") == set()


def test_a_job_queued_before_the_queue_was_kept_in_the_job_table_joins_it(one: ClusterWorld) -> None:
    # given a queued record without a shape whose suspended Jobs wait in the only cluster
    one.submit("old")
    job = from_before_the_queue(one, "old")
    for manifest in render(load_spec(job.spec), job_id="old", namespace="team-research"):
        one.clusters["west"].create(manifest)  # suspended: how jobs waited then
    # when reconcile runs
    one.minute()
    # then its Jobs are gone and its record is in the queue, as if submitted now
    queued = one.job("old")
    assert queued.status is JobStatus.QUEUED and queued.reason == Reason.SUBMITTED
    assert (
        one.store.events("old")[-1].message
        == "its suspended Jobs in cluster west deleted: it waits in the queue"
    )
    assert queue_key(queued) is not None and queue_key(queued)[0] == "QUEUE"  # type: ignore[index]
    assert queued.queue_shape != ""
    assert one.where("old") == set()
    # and admission lets it run where there is room
    one.node("west")
    one.admit()
    one.minute()
    assert one.job("old").status is JobStatus.RUNNING and one.where("old") == {"west"}


def test_a_job_whose_cluster_is_no_longer_configured_fails_saying_so(two: ClusterWorld) -> None:
    two.node("west")
    two.submit("j")
    two.admit()
    job = two.job("j")
    at = two.clock.now()
    moved = update_job(
        two.store,
        job,
        lambda current: transition(current, to=JobStatus.RUNNING, reason="Started", at=at, cluster="gone"),
    )
    assert moved is not None
    two.minute()
    failed = two.job("j")
    assert (failed.status, failed.reason) == (JobStatus.FAILED, "ClusterNotConfigured:gone")
    assert "no longer configured" in two.store.events("j")[-1].message
    report = two.minute()
    assert report.errors == [] and two.job("j").version == failed.version, "once, then left"


def test_a_jobs_leftover_in_another_cluster_is_deleted_and_never_read(two: ClusterWorld) -> None:
    # given a job placed in west, and a Job of it left in east (a delete east never got)
    two.node("west")
    two.node("east")
    two.submit("j")
    two.admit()
    job = two.job("j")
    other = ({"west", "east"} - {job.cluster}).pop()
    two.clusters[other].set_behaviour("j", run_for=timedelta(0), exit_code=1)  # fails there at once
    for manifest in render(load_spec(job.spec), job_id="j", namespace="team-research", region=REGIONS[other]):
        two.clusters[other].create(manifest)
    # when reconcile runs (a fresh process looks for such leftovers)
    two.minute()
    # then the leftover is gone, and the job is as its own cluster says
    assert two.clusters[other].list_jobs(job_id="j") == [], "deleted"
    assert two.where("j") == {job.cluster}
    assert two.job("j").status is JobStatus.RUNNING, "the leftover's failure is not the job's"
