"""`squall watch` against the local endpoint: one plain line per change, live until final, exit codes by the end."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from squall.cli.follow.watch import RichView, watch_job
from squall.cli.researcher import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_REJECTED
from squall.core.errors import NotFoundError
from squall.core.jobs import Job, JobStatus, note
from tests.outputs_helpers import START, LocalAws, SteppingClock, local_aws, move, record_job, squall


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LocalAws]:
    with local_aws(monkeypatch, tmp_path) as local:
        yield local


def later(minutes: float) -> object:
    return START + timedelta(minutes=minutes)


@pytest.mark.timeout(120)
def test_watch_follows_the_job_live_until_it_is_final(aws: LocalAws) -> None:
    # given a queued job that is admitted, started and completed while it is watched
    store = aws.store
    state: dict[str, Job] = {"job": record_job(store, "gan-00000001")}

    def step(to: JobStatus | None, reason: str, message: str = "") -> object:
        def run() -> None:
            at = START + timedelta(minutes=len(clock.slept))
            if to is None:
                updated, event = note(state["job"], reason=reason, at=at, message=message)
                store.save(updated, event)
                state["job"] = updated
            else:
                state["job"] = move(store, state["job"], to, reason, at=at, message=message)

        return run

    clock = SteppingClock(
        steps=[
            step(None, "Queued", "position 1 of 1"),
            lambda: None,  # nothing changed: nothing printed
            step(JobStatus.RUNNING, "Started"),
            step(JobStatus.SUCCEEDED, "Completed"),
        ]
    )
    out = io.StringIO()

    # when
    status = watch_job("gan-00000001", store=store, clock=clock, out=out, live=False, poll=5)

    # then: a header, one line per event, the final state; the loop ended on its own
    assert status is JobStatus.SUCCEEDED
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(
        "gan-00000001 QUEUED (Submitted): team research, namespace team-research, 3 replicas"
    )
    assert "(chief-0, worker-0, worker-1)" in lines[0]
    assert [line.split()[3:5] for line in lines[1:-1]] == [
        ["QUEUED", "Submitted"],
        ["QUEUED", "Queued:"],
        ["RUNNING", "Started"],
        ["SUCCEEDED", "Completed"],
    ]
    assert "position 1 of 1" in lines[2]
    assert lines[-1] == "gan-00000001 SUCCEEDED (Completed)"
    assert len(clock.slept) == 4


def test_watch_waits_a_while_for_a_record_then_says_there_is_none(aws: LocalAws) -> None:
    # a job just sent: the submit function records it a little later
    state: dict[str, Job] = {}

    def create() -> None:
        state["job"] = record_job(aws.store, "late-00000001")

    def finish() -> None:
        move(aws.store, state["job"], JobStatus.SUCCEEDED, "Completed", at=later(1))

    clock = SteppingClock(steps=[lambda: None, create, finish])
    status = watch_job(
        "late-00000001",
        store=aws.store,
        clock=clock,
        out=io.StringIO(),
        live=False,
        wait_for_record=30,
        poll=5,
    )
    assert status is JobStatus.SUCCEEDED
    with pytest.raises(NotFoundError, match="no job never-00000001"):
        watch_job(
            "never-00000001",
            store=aws.store,
            clock=SteppingClock(),
            out=io.StringIO(),
            live=False,
            wait_for_record=10,
            poll=5,
        )


def test_a_long_history_shows_its_latest_events(aws: LocalAws) -> None:
    job = record_job(aws.store, "busy-00000001")
    for i in range(20):
        updated, event = note(
            job, reason="Queued", at=START + timedelta(seconds=i + 1), message=f"position {i}"
        )
        aws.store.save(updated, event)
        job = updated
    move(aws.store, job, JobStatus.FAILED, "ApplicationError", at=START + timedelta(minutes=1))
    out = io.StringIO()
    status = watch_job(
        "busy-00000001", store=aws.store, clock=SteppingClock(), out=out, live=False, events_shown=3
    )
    assert status is JobStatus.FAILED
    lines = out.getvalue().splitlines()
    assert lines[1] == "  (19 earlier events: squall describe busy-00000001)"
    assert [line.split()[4] for line in lines[2:5]] == ["Queued:", "Queued:", "ApplicationError"]


def test_the_rich_view_draws_the_state_and_the_latest_events(aws: LocalAws) -> None:
    job = record_job(aws.store, "tty-00000001")
    move(aws.store, job, JobStatus.CANCELLED, "CancelRequested", at=later(1))
    out = io.StringIO()
    status = watch_job("tty-00000001", store=aws.store, clock=SteppingClock(), out=out, view=RichView(out))
    assert status is JobStatus.CANCELLED
    text = out.getvalue()
    assert "tty-00000001" in text and "CANCELLED" in text and "CancelRequested" in text


@pytest.mark.timeout(120)
def test_watch_exits_by_how_the_job_ended(aws: LocalAws, capsys: pytest.CaptureFixture[str]) -> None:
    ends = {
        "ok-00000001": (JobStatus.SUCCEEDED, "Completed", EXIT_OK),
        "bad-00000001": (JobStatus.FAILED, "ApplicationError", EXIT_FAILED),
        "stop-00000001": (JobStatus.CANCELLED, "CancelRequested", EXIT_CANCELLED),
    }
    for job_id, (status, reason, _) in ends.items():
        move(aws.store, record_job(aws.store, job_id), status, reason, at=later(2))
    record_job(aws.store, "no-00000001", status=JobStatus.REJECTED, reason="InvalidSpec")
    ends["no-00000001"] = (JobStatus.REJECTED, "InvalidSpec", EXIT_REJECTED)
    for job_id, (status, reason, code) in ends.items():
        assert squall("watch", job_id) == code
        assert capsys.readouterr().out.splitlines()[-1] == f"{job_id} {status.value} ({reason})"
    assert len({code for _, _, code in ends.values()}) == 4
    assert squall("watch", "missing-00000001") == EXIT_FAILED
    assert "no job missing-00000001" in capsys.readouterr().err
