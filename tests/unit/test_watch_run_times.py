"""`squall watch`'s panel: how long a job waited and ran, from its record's real times."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from squall.cli.follow.watch import run_times
from squall.core.jobs import JobStatus, new_job, transition

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def test_a_finished_job_waited_from_submission_to_start_and_ran_from_start_to_end() -> None:
    job, _ = new_job(job_id="j", name="j", team="research", namespace="team-research", at=T0)
    job = dataclasses.replace(
        job,
        status=JobStatus.SUCCEEDED,
        started_at=T0 + timedelta(minutes=1, seconds=44),
        finished_at=T0 + timedelta(minutes=31, seconds=44),
    )
    assert run_times(job, now=T0 + timedelta(hours=2)) == "waited 0:01:44, ran 0:30:00"


def test_a_running_job_and_a_waiting_one_count_to_now() -> None:
    job, _ = new_job(job_id="j", name="j", team="research", namespace="team-research", at=T0)
    assert run_times(job, now=T0 + timedelta(seconds=90)) == "waiting 0:01:30"
    running, _ = transition(
        job,
        to=JobStatus.RUNNING,
        reason="Started",
        at=T0 + timedelta(minutes=2),
        happened_at=T0 + timedelta(minutes=1),
    )
    assert running.started_at == T0 + timedelta(minutes=1)
    assert run_times(running, now=T0 + timedelta(minutes=5)) == "waited 0:01:00, running 0:04:00"


def test_a_job_that_ended_without_starting_never_ran() -> None:
    job, _ = new_job(job_id="j", name="j", team="research", namespace="team-research", at=T0)
    cancelled, _ = transition(
        job, to=JobStatus.CANCELLED, reason="CancelRequested", at=T0 + timedelta(minutes=3)
    )
    assert run_times(cancelled, now=T0 + timedelta(hours=1)) == "waited 0:03:00, never ran"
