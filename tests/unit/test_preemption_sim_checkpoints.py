"""The simulated cluster plays the trainer's checkpoints: a job stopped early resumes from its latest one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squall.core.jobs import Job, JobStatus
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCheckpoints, SimulatedCluster
from tests.job_records import job_record
from tests.unit.local.sim import CPU_NODE, NS, job_manifest, only_pod

pytestmark = pytest.mark.timeout(20)


def record(job_id: str, clock: VirtualClock) -> Job:
    return job_record(job_id, status=JobStatus.RUNNING, reason="Started", at=clock.now())


def cluster_with_node(
    clock: VirtualClock, checkpoints: SimulatedCheckpoints | None = None
) -> SimulatedCluster:
    cluster = SimulatedCluster(clock=clock, checkpoints=checkpoints)
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    return cluster


def start(cluster: SimulatedCluster, job_id: str) -> None:
    cluster.create(job_manifest(job_id, deadline=None))
    cluster.advance()
    assert only_pod(cluster, job_id)["status"]["phase"] == "Running"


def test_a_job_deleted_mid_run_runs_only_what_was_left_after_its_latest_checkpoint() -> None:
    clock = VirtualClock()
    cluster = cluster_with_node(clock)
    cluster.set_behaviour("long", run_for=timedelta(hours=10), checkpoint_every=timedelta(hours=1))
    begun = clock.now()
    start(cluster, "long")
    # given it ran 3 h 40 min (checkpoints at 1, 2 and 3 h), then its objects were deleted
    clock.advance(timedelta(hours=3, minutes=40))
    cluster.advance()
    assert cluster.checkpoints.latest(record("long", clock)) == begun + timedelta(hours=3)
    cluster.delete_job_objects(namespace=NS, job_id="long")
    cluster.advance()
    assert cluster.checkpoints.saved("long") == timedelta(hours=3)
    # when it runs again
    clock.advance(timedelta(hours=1))
    restarted = clock.now()
    start(cluster, "long")
    # then it ends 7 h later: the 40 minutes after its checkpoint are done again, nothing before
    clock.advance(timedelta(hours=7) - timedelta(seconds=1))
    cluster.advance()
    assert only_pod(cluster, "long")["status"]["phase"] == "Running"
    clock.advance(timedelta(seconds=1))
    cluster.advance()
    assert only_pod(cluster, "long")["status"]["phase"] == "Succeeded"
    assert clock.now() - restarted == timedelta(hours=7)


def test_a_job_that_never_checkpoints_starts_over() -> None:
    clock = VirtualClock()
    cluster = cluster_with_node(clock)
    cluster.set_behaviour("plain", run_for=timedelta(hours=2))
    start(cluster, "plain")
    clock.advance(timedelta(hours=1, minutes=30))
    cluster.advance()
    assert cluster.checkpoints.latest(record("plain", clock)) is None
    cluster.delete_job_objects(namespace=NS, job_id="plain")
    start(cluster, "plain")
    clock.advance(timedelta(hours=2) - timedelta(seconds=1))
    cluster.advance()
    assert only_pod(cluster, "plain")["status"]["phase"] == "Running", "it runs its whole time again"


def test_before_its_first_checkpoint_a_run_reports_the_one_its_last_run_saved() -> None:
    clock = VirtualClock()
    cluster = cluster_with_node(clock)
    cluster.set_behaviour("job", run_for=timedelta(hours=5), checkpoint_every=timedelta(hours=1))
    first = clock.now()
    start(cluster, "job")
    clock.advance(timedelta(hours=1, minutes=10))
    cluster.advance()
    cluster.delete_job_objects(namespace=NS, job_id="job")
    start(cluster, "job")
    clock.advance(timedelta(minutes=30))
    assert cluster.checkpoints.latest(record("job", clock)) == first + timedelta(hours=1)
    clock.advance(timedelta(minutes=30))
    assert cluster.checkpoints.latest(record("job", clock)) == clock.now(), "this run's first, on the hour"


def test_clusters_that_share_the_checkpoints_resume_each_others_jobs() -> None:
    clock = VirtualClock()
    shared = SimulatedCheckpoints(clock)
    west, east = cluster_with_node(clock, shared), cluster_with_node(clock, shared)
    for cluster in (west, east):
        cluster.set_behaviour("moved", run_for=timedelta(hours=4), checkpoint_every=timedelta(hours=1))
    start(west, "moved")
    clock.advance(timedelta(hours=2, minutes=5))
    west.advance()
    west.delete_job_objects(namespace=NS, job_id="moved")
    start(east, "moved")
    clock.advance(timedelta(hours=2))
    east.advance()
    assert only_pod(east, "moved")["status"]["phase"] == "Succeeded"


def test_checkpoint_every_must_be_positive() -> None:
    cluster = cluster_with_node(VirtualClock())
    with pytest.raises(ValueError, match="checkpoint_every"):
        cluster.set_behaviour("bad", checkpoint_every=timedelta(0))
