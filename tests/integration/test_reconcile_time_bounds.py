"""A job's recorded start and end stay between its submission and now, whatever the cluster says.

Reconcile takes a job's start and end from Kubernetes (its containers' startedAt, its
Job's completionTime or conditions): a node's clock may be far off, and an object may
say anything. What goes on the record, the Started event and the queue-wait and
run-time metrics is kept between the job's submission and now, an end never before
its start; a time with another offset is read in UTC before it is bounded.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.conventions import JOB_ID_LABEL
from squall.core.jobs import JobStatus, Reason
from tests.integration.conftest import World
from tests.integration.test_reconcile import reasons, submit
from tests.integration.test_reconcile_start_time import container_started, step

FAR_FUTURE = "2999-01-01T00:00:00Z"
FAR_PAST = "1999-01-01T00:00:00Z"

Listing = Callable[..., list[dict[str, Any]]]


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def claim(
    world: World,
    monkeypatch: pytest.MonkeyPatch,
    job_id: str,
    *,
    started: str | None = None,
    completed: str | None = None,
) -> None:
    """From now on the cluster's lists say `job_id`'s containers started at `started` and its
    Jobs completed at `completed` (as a node with a wrong clock, or a hostile object, would)."""

    def rewrite(obj: dict[str, Any]) -> dict[str, Any]:
        if (obj.get("metadata", {}).get("labels") or {}).get(JOB_ID_LABEL) != job_id:
            return obj
        obj = copy.deepcopy(obj)  # the simulated cluster's views are shared: never change them
        status = obj.get("status") or {}
        if started is not None:
            for entry in status.get("containerStatuses") or []:
                for state in (entry.get("state"), entry.get("lastState")):
                    for kind in ("running", "terminated"):
                        if isinstance(state, dict) and isinstance(state.get(kind), dict):
                            state[kind]["startedAt"] = started
            if "startTime" in status and obj.get("kind") == "Job":
                status["startTime"] = started
        if completed is not None:
            if "completionTime" in status:
                status["completionTime"] = completed
            for condition in status.get("conditions") or []:
                if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
                    condition["lastTransitionTime"] = completed
        return obj

    def skewed(listing: Listing) -> Listing:
        def listed(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            return [rewrite(obj) for obj in listing(*args, **kwargs)]

        return listed

    for name in ("list_pods", "list_jobs"):
        monkeypatch.setattr(world.cluster, name, skewed(getattr(world.cluster, name)))


def assert_bounded(world: World, job_id: str) -> None:
    """The record, its events and the metrics lie between the submission and now, in order."""
    now = world.clock.now()
    job = world.store.get(job_id)
    assert job is not None
    submitted = job.submitted_at
    assert job.started_at is not None
    assert submitted <= job.started_at <= now, (submitted, job.started_at, now)
    if job.finished_at is not None:
        assert job.started_at <= job.finished_at <= now, (job.started_at, job.finished_at, now)
    for event in world.store.events(job_id):
        assert submitted <= event.at <= now, event
    (started_event,) = [e for e in world.store.events(job_id) if e.reason == Reason.STARTED]
    assert started_event.at == job.started_at
    span = (now - submitted).total_seconds()
    for name in ("QueueWaitSeconds", "RunSeconds"):
        values = [p.value for p in world.metrics.points if p.name == name]
        assert all(0 <= value <= span for value in values), (name, values)


def test_a_start_far_in_the_future_is_recorded_as_now(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # given a running job whose containers say they started in the year 2999
    world.add_gpu_nodes(1)
    submit(world, "future-1")
    world.cluster.set_behaviour("future-1", run_for=timedelta(minutes=30))
    t0 = world.clock.now()
    claim(world, monkeypatch, "future-1", started=FAR_FUTURE)
    world.admit()
    step(world, 20)
    step(world, 40)
    # when reconcile finds it running at t0+60s
    world.reconciler.run()
    # then it started no later than now: the record, the Started event, the queue wait
    job = world.store.get("future-1")
    assert job is not None and job.status is JobStatus.RUNNING
    assert job.started_at == t0 + timedelta(seconds=60)
    assert world.store.events("future-1")[-1].at == job.started_at
    assert world.metrics.total("QueueWaitSeconds") == 60
    assert_bounded(world, "future-1")
    # and its real end (t0+30m20s) is measured from that start
    world.run(minutes=31)
    job = world.store.get("future-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.finished_at == t0 + timedelta(minutes=30, seconds=20)
    assert world.metrics.total("RunSeconds") == 30 * 60 + 20 - 60
    assert_bounded(world, "future-1")


def test_a_short_run_claiming_a_future_start_never_runs_for_negative_time(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a 30 s run that began and ended between two reconcile runs, whose start says 2999
    world.add_gpu_nodes(1)
    submit(world, "future-2")
    world.cluster.set_behaviour("future-2", run_for=timedelta(seconds=30))
    t0 = world.clock.now()
    claim(world, monkeypatch, "future-2", started=FAR_FUTURE)
    world.admit()
    step(world, 10)
    step(world, 50)
    # when reconcile finds it complete at t0+60s
    world.reconciler.run()
    # then it started now, and its end (t0+40s, before that start) is its start: it ran 0 s
    job = world.store.get("future-2")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert reasons(world, "future-2")[-2:] == [Reason.STARTED, Reason.COMPLETED]
    assert job.started_at == job.finished_at == t0 + timedelta(seconds=60)
    assert world.metrics.total("QueueWaitSeconds") == 60
    assert world.metrics.total("RunSeconds") == 0
    assert_bounded(world, "future-2")


def test_a_start_before_the_submission_is_recorded_as_the_submission(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a job that waited 40 s, whose containers say they started in 1999
    world.add_gpu_nodes(1)
    submit(world, "past-1")
    world.cluster.set_behaviour("past-1", run_for=timedelta(minutes=30))
    submitted = world.clock.now()
    claim(world, monkeypatch, "past-1", started=FAR_PAST)
    world.clock.advance(timedelta(seconds=40))
    world.admit()
    step(world, 10)
    step(world, 50)
    # when reconcile finds it running
    world.reconciler.run()
    # then it started when it was submitted, not before: it waited 0 s, never less
    job = world.store.get("past-1")
    assert job is not None and job.status is JobStatus.RUNNING
    assert job.submitted_at == submitted
    assert job.started_at == submitted
    assert world.store.events("past-1")[-1].at == submitted
    assert world.metrics.total("QueueWaitSeconds") == 0
    assert_bounded(world, "past-1")
    # and its run is measured from then to its real end, t0+40s+10s+30m
    world.run(minutes=31)
    job = world.store.get("past-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.finished_at == submitted + timedelta(minutes=30, seconds=50)
    assert world.metrics.total("RunSeconds") == 30 * 60 + 50
    assert_bounded(world, "past-1")


@pytest.mark.parametrize("end", [5, None], ids=["after-submission", "in-1999"])
def test_an_end_before_the_start_is_the_start(
    world: World, monkeypatch: pytest.MonkeyPatch, end: int | None
) -> None:
    # given a run that really started at t0+10s, whose Job says it completed before that
    world.add_gpu_nodes(1)
    submit(world, "early-end")
    world.cluster.set_behaviour("early-end", run_for=timedelta(seconds=30))
    t0 = world.clock.now()
    completed = FAR_PAST if end is None else _stamp(t0 + timedelta(seconds=end))
    claim(world, monkeypatch, "early-end", completed=completed)
    world.admit()
    step(world, 10)
    step(world, 50)
    started = container_started(world, "early-end")
    assert started == t0 + timedelta(seconds=10)
    # when reconcile finds it complete
    world.reconciler.run()
    # then it ended when it started: a run of 0 s, never a negative one
    job = world.store.get("early-end")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.started_at == job.finished_at == started
    assert world.store.events("early-end")[-1].at == started
    assert world.metrics.total("QueueWaitSeconds") == 10
    assert world.metrics.total("RunSeconds") == 0
    assert_bounded(world, "early-end")


def test_an_end_before_a_start_recorded_earlier_is_that_start(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a job recorded running since t0+20s, whose Job then says it completed in 1999
    world.add_gpu_nodes(1)
    submit(world, "early-end-2")
    world.cluster.set_behaviour("early-end-2", run_for=timedelta(minutes=3))
    t0 = world.clock.now()
    world.admit()
    step(world, 20)
    step(world, 40)
    world.reconciler.run()
    job = world.store.get("early-end-2")
    assert job is not None and job.status is JobStatus.RUNNING
    assert job.started_at == t0 + timedelta(seconds=20)
    claim(world, monkeypatch, "early-end-2", completed=FAR_PAST)
    # when a later run finds it complete
    world.run(minutes=4)
    # then its end is its recorded start, not 1999
    job = world.store.get("early-end-2")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.finished_at == job.started_at == t0 + timedelta(seconds=20)
    assert world.metrics.total("RunSeconds") == 0
    assert_bounded(world, "early-end-2")


def test_an_end_far_in_the_future_is_recorded_as_now(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.add_gpu_nodes(1)
    submit(world, "future-end")
    world.cluster.set_behaviour("future-end", run_for=timedelta(seconds=30))
    t0 = world.clock.now()
    claim(world, monkeypatch, "future-end", completed=FAR_FUTURE)
    world.admit()
    step(world, 10)
    step(world, 50)
    world.reconciler.run()
    job = world.store.get("future-end")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.started_at == t0 + timedelta(seconds=10)
    assert job.finished_at == t0 + timedelta(seconds=60)
    assert world.metrics.total("RunSeconds") == 50
    assert_bounded(world, "future-end")


@pytest.mark.parametrize(
    ("written", "recorded"),
    [
        # the same instant as t0+10s, at +05:30: read as it is
        ("2026-01-05T14:30:10+05:30", 10),
        # 09:00:10 at -05:00 is 14:00:10 UTC: hours after now (t0+60s), so now
        ("2026-01-05T09:00:10-05:00", 60),
        # 09:00:10 at +05:00 is 04:00:10 UTC: before the submission (t0), so the submission
        ("2026-01-05T09:00:10+05:00", 0),
    ],
    ids=["in-bounds", "later-in-utc", "earlier-in-utc"],
)
def test_a_start_with_another_offset_is_read_in_utc_then_bounded(
    world: World, monkeypatch: pytest.MonkeyPatch, written: str, recorded: int
) -> None:
    world.add_gpu_nodes(1)
    submit(world, "offset-1")
    world.cluster.set_behaviour("offset-1", run_for=timedelta(minutes=30))
    t0 = world.clock.now()
    assert t0 == datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # the times above are written against it
    claim(world, monkeypatch, "offset-1", started=written)
    world.admit()
    step(world, 10)
    step(world, 50)
    world.reconciler.run()
    job = world.store.get("offset-1")
    assert job is not None and job.status is JobStatus.RUNNING and job.started_at is not None
    assert job.started_at == t0 + timedelta(seconds=recorded)
    assert job.started_at.utcoffset() == timedelta(0)
    assert world.metrics.total("QueueWaitSeconds") == recorded
    assert_bounded(world, "offset-1")
