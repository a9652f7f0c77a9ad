"""`Client.logs` against the local endpoint: a job's lines as an iterator, checked before it is read,
the same lines `squall logs` prints."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from squall import Client, CommandError
from squall.core.jobs import JobStatus
from tests.outputs_helpers import (
    START,
    LocalAws,
    SteppingClock,
    local_aws,
    move,
    put_lines,
    record_job,
    stream_name,
)

pytestmark = pytest.mark.timeout(120)

JOB = "gan-9c8d7e6f"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LocalAws]:
    with local_aws(monkeypatch, tmp_path) as local:
        job = record_job(local.store, JOB)
        job = move(local.store, job, JobStatus.RUNNING, "Started", at=START)
        move(local.store, job, JobStatus.SUCCEEDED, "Completed", at=START + timedelta(minutes=30))
        put_lines(local.logs, stream_name(f"{JOB}-chief-0-xk2q9"), [(START, "chief starts")])
        put_lines(
            local.logs,
            stream_name(f"{JOB}-worker-0-b4n7z"),
            [(START + timedelta(seconds=1), "worker\x1b]0;x\x07")],
        )
        yield local


def test_logs_are_an_iterator_of_the_lines_squall_logs_prints(
    aws: LocalAws, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.outputs_helpers import squall

    client = Client(clock=SteppingClock(now_at=datetime.now(UTC)))
    lines = list(client.logs(JOB))
    assert lines == ["[chief-0] chief starts", "[worker-0] worker\\x1b]0;x\\x07"]
    assert squall("logs", JOB) == 0
    assert capsys.readouterr().out.splitlines() == lines
    assert list(client.logs(JOB, replica="worker-0")) == lines[1:]


def test_following_a_running_job_yields_its_lines_until_it_ends_on_the_clock_given(aws: LocalAws) -> None:
    # given: a job that runs, and prints one more line and ends while it is followed
    now = datetime.now(UTC).replace(microsecond=0)
    job = move(aws.store, record_job(aws.store, "live-00000003"), JobStatus.RUNNING, "Started", at=now)
    stream = stream_name("live-00000003-chief-0-q1w2e")
    put_lines(aws.logs, stream, [(now, "first")])
    clock = SteppingClock(now_at=now)

    def ends() -> None:
        put_lines(aws.logs, stream, [(clock.now_at, "last")])
        move(aws.store, job, JobStatus.SUCCEEDED, "Completed", at=clock.now_at)

    clock.steps.append(ends)
    # when
    lines = list(Client(clock=clock).logs("live-00000003", follow=True))
    # then: every line, and the wait for late ones on the virtual clock (real time: none)
    assert lines == ["[chief-0] first", "[chief-0] last"]
    assert sum(clock.slept) >= 15  # the agent's grace after the job's end


def test_bad_input_is_refused_when_asked_not_when_read(aws: LocalAws) -> None:
    client = Client(clock=SteppingClock(now_at=datetime.now(UTC)))
    with pytest.raises(CommandError, match="no job nope"):
        client.logs("nope")
    with pytest.raises(CommandError, match="its replicas: chief-0, worker-0, worker-1"):
        client.logs(JOB, replica="worker-9")
    with pytest.raises(CommandError, match="--since: expected a duration"):
        client.logs(JOB, since="yesterday")


def test_a_job_without_streams_yet_says_so_through_on_status(aws: LocalAws) -> None:
    record_job(aws.store, "fresh-00000002", cluster="squall", region="us-west-2")
    said: list[str] = []
    assert list(Client().logs("fresh-00000002", on_status=said.append)) == []
    assert len(said) == 1 and said[0].startswith("no log streams of job fresh-00000002")
