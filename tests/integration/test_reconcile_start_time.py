"""A job's real start and end: what Kubernetes recorded, not when a reconcile run noticed.

Reconcile runs once a minute; a job's record, its Started event, the queue-wait and
run-time metrics use the time its containers started (and its Job completed), and a
run shorter than a minute still has its Started event.
"""

from __future__ import annotations

import io
from datetime import datetime, timedelta

from squall.cli.follow.watch import RichView, watch_job
from squall.core.jobs import JobStatus, Reason
from squall.core.kubestatus import parse_time
from tests.integration.conftest import World
from tests.integration.test_reconcile import reasons, submit


def step(world: World, seconds: int) -> None:
    """Let the cluster run `seconds` without a reconcile run."""
    world.clock.advance(timedelta(seconds=seconds))
    world.cluster.advance()


def container_started(world: World, job_id: str) -> datetime:
    (pod,) = world.cluster.list_pods(job_id=job_id)
    (container,) = pod["status"]["containerStatuses"]
    state = container["state"]
    started = parse_time((state.get("running") or state.get("terminated"))["startedAt"])
    assert started is not None
    return started


def test_a_run_shorter_than_a_reconcile_period_has_its_started_event_at_the_real_start(world: World) -> None:
    # given a job admitted at t0 whose 30 s run starts at t0+10s and ends at t0+40s
    world.add_gpu_nodes(1)
    submit(world, "short-1")
    world.cluster.set_behaviour("short-1", run_for=timedelta(seconds=30))
    t0 = world.clock.now()
    world.admit()
    step(world, 10)
    step(world, 50)
    started = container_started(world, "short-1")
    assert started == t0 + timedelta(seconds=10)
    # when the next reconcile run (t0+60s) finds it complete
    world.reconciler.run()
    # then its history holds the start as it happened, then the end as it happened
    job = world.store.get("short-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert reasons(world, "short-1") == [
        Reason.SUBMITTED,
        "Placed:us-west-2",
        "Admitted:us-west-2",
        Reason.STARTED,
        Reason.COMPLETED,
    ]
    started_event, completed_event = world.store.events("short-1")[-2:]
    assert (started_event.status, started_event.at) == (JobStatus.RUNNING, started)
    assert completed_event.at == t0 + timedelta(seconds=40)
    assert (job.started_at, job.finished_at) == (started, t0 + timedelta(seconds=40))
    assert job.updated_at == t0 + timedelta(seconds=60), "the record says when it was written"
    assert world.metrics.total("QueueWaitSeconds") == 10
    assert world.metrics.total("RunSeconds") == 30
    assert world.metrics.total("JobsStarted") == 1 and world.metrics.total("JobsSucceeded") == 1


def test_started_at_is_when_the_containers_started_not_when_reconcile_noticed(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "long-1")
    world.cluster.set_behaviour("long-1", run_for=timedelta(minutes=30))
    t0 = world.clock.now()
    world.admit()
    step(world, 20)
    step(world, 40)
    world.reconciler.run()  # t0+60s: it has run for 40 s
    job = world.store.get("long-1")
    assert job is not None and job.status is JobStatus.RUNNING
    assert job.started_at == container_started(world, "long-1") == t0 + timedelta(seconds=20)
    assert world.store.events("long-1")[-1].at == job.started_at
    assert world.metrics.total("QueueWaitSeconds") == 20
    # a 30-minute run measures 30 minutes
    world.run(minutes=31)
    job = world.store.get("long-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.finished_at is not None and job.finished_at - t0 == timedelta(minutes=30, seconds=20)
    assert world.metrics.total("RunSeconds") == 30 * 60


def test_a_short_run_that_fails_is_started_then_failed(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "crash-1")
    world.cluster.set_behaviour("crash-1", run_for=timedelta(seconds=5), exit_code=1)
    t0 = world.clock.now()
    world.admit()
    step(world, 15)
    step(world, 45)
    world.reconciler.run()
    job = world.store.get("crash-1")
    assert job is not None and job.status is JobStatus.FAILED and job.reason == Reason.APPLICATION_ERROR
    assert reasons(world, "crash-1")[-2:] == [Reason.STARTED, Reason.APPLICATION_ERROR]
    assert job.started_at == t0 + timedelta(seconds=15)
    assert job.finished_at == t0 + timedelta(seconds=20)


def test_a_sweep_whose_trials_ran_between_two_runs_starts_when_its_first_trial_did(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "sw2", sweep={"parameters": {"lr": [1, 2]}, "maxTrials": 2, "parallelism": 2})
    for trial in ("sw2-t000", "sw2-t001"):
        world.cluster.set_behaviour(trial, run_for=timedelta(seconds=20))
    t0 = world.clock.now()
    world.admit()
    step(world, 10)
    step(world, 50)
    world.reconciler.run()
    world.clock.advance(timedelta(minutes=1))
    world.reconciler.run()
    parent = world.store.get("sw2")
    assert parent is not None and parent.status is JobStatus.SUCCEEDED
    assert reasons(world, "sw2")[-2:] == [Reason.STARTED, Reason.TRIALS_FINISHED]
    assert parent.started_at == t0 + timedelta(seconds=10)
    assert parent.finished_at == t0 + timedelta(seconds=30)
    for trial_id in parent.trial_ids:
        assert Reason.STARTED in reasons(world, trial_id)


class _Stepping:
    """A FollowClock on the world's virtual time (watch reads a final job once: no sleep is taken)."""

    def __init__(self, world: World) -> None:
        self._clock = world.clock

    def now(self) -> datetime:
        return self._clock.now()

    def sleep(self, seconds: float) -> None:
        self._clock.advance(timedelta(seconds=seconds))


def test_watchs_final_panel_shows_the_wait_and_the_run_of_a_job_never_seen_running(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "short-2")
    world.cluster.set_behaviour("short-2", run_for=timedelta(seconds=64))
    world.clock.advance(timedelta(seconds=40))  # it waits 40 s for admission
    world.admit()
    step(world, 0)  # its container starts at once
    step(world, 70)
    world.reconciler.run()
    world.clock.advance(timedelta(minutes=3))  # watched a while after it finished
    out = io.StringIO()
    status = watch_job("short-2", store=world.store, clock=_Stepping(world), out=out, view=RichView(out))
    assert status is JobStatus.SUCCEEDED
    text = out.getvalue()
    assert "waited 0:00:40, ran 0:01:04" in text
    assert "Started" in text
