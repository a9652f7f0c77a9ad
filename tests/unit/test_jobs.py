"""The job state machine, without any fake: plain values in, plain values out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squall.core.errors import InvalidTransitionError
from squall.core.jobs import ALLOWED, TERMINAL, JobStatus, Reason, new_job, note, reason_code, transition

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def queued():
    return new_job(job_id="j-1", name="j", team="research", namespace="team-research", at=T0, max_retries=2)


def test_new_job_starts_queued_at_version_one_with_its_first_event() -> None:
    job, event = queued()
    assert job.status is JobStatus.QUEUED and job.version == 1
    assert event.version == 1 and event.previous is None and event.reason == Reason.SUBMITTED


def test_a_job_cannot_be_born_finished_except_rejected() -> None:
    with pytest.raises(InvalidTransitionError):
        new_job(job_id="x", name="x", team="t", namespace="n", at=T0, status=JobStatus.SUCCEEDED)
    rejected, _ = new_job(job_id="x", name="x", team="t", namespace="n", at=T0, status=JobStatus.REJECTED)
    assert rejected.finished_at == T0


def test_running_sets_start_once_and_finishing_sets_end() -> None:
    job, _ = queued()
    running, event = transition(job, to=JobStatus.RUNNING, reason=Reason.STARTED, at=T0 + timedelta(minutes=2))
    assert running.started_at == T0 + timedelta(minutes=2) and running.version == 2
    assert event.previous is JobStatus.QUEUED and event.version == 2
    requeued, _ = transition(running, to=JobStatus.QUEUED, reason=reason_code(Reason.NODE_LOST, "retry 1/2"), at=T0 + timedelta(minutes=5))
    again, _ = transition(requeued, to=JobStatus.RUNNING, reason=Reason.STARTED, at=T0 + timedelta(minutes=9))
    assert again.started_at == T0 + timedelta(minutes=2), "queue wait is measured to the first start"
    done, _ = transition(again, to=JobStatus.SUCCEEDED, reason=Reason.COMPLETED, at=T0 + timedelta(minutes=20))
    assert done.finished_at == T0 + timedelta(minutes=20) and done.version == 5


@pytest.mark.parametrize("final", sorted(TERMINAL))
def test_nothing_leaves_a_final_state(final: JobStatus) -> None:
    job, _ = queued()
    if final is JobStatus.REJECTED:
        job, _ = new_job(job_id="r", name="r", team="t", namespace="", at=T0, status=JobStatus.REJECTED)
    else:
        job, _ = transition(job, to=final, reason="x", at=T0)
    for target in JobStatus:
        with pytest.raises(InvalidTransitionError, match=f"{final} -> {target}"):
            transition(job, to=target, reason="x", at=T0)
    with pytest.raises(InvalidTransitionError):
        note(job, reason="late", at=T0)


def test_nothing_becomes_rejected_after_acceptance() -> None:
    assert all(JobStatus.REJECTED not in targets for targets in ALLOWED.values())


def test_a_note_keeps_the_state_and_numbers_the_event() -> None:
    job, _ = queued()
    noted, event = note(job, reason=reason_code(Reason.GANG_RELEASED, "us-west-2"), at=T0)
    assert noted.status is JobStatus.QUEUED and noted.reason == "GangReleased:us-west-2"
    assert event.version == 2 and event.previous is JobStatus.QUEUED
