"""Text the squall command did not write (container output, reasons, messages, names) reaches no terminal raw.

Each command reads a record or a log that carries escape sequences: set the window
title, clear the screen, write the clipboard (OSC 52), hide a link, and rich markup.
What it prints shows them escaped (cli/text.py printable); rich reads no markup in them.
The deployment's stores are the in-memory ones the local runtime uses.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.cli import deployment, main
from squall.cli.follow.logs import LogFollower, print_logs
from squall.cli.follow.watch import watch_job
from squall.core.job_outputs import LogEvent, LogPage, LogStreamInfo
from squall.core.jobs import Job, JobStatus, new_job, note, transition
from squall.core.logstreams import ContainerStream
from squall.local.memory import InMemoryJobStore, InMemoryScaleState
from squall.local.model_service_store import InMemoryModelServiceStore

START = datetime(2026, 12, 2, 8, 13, 21, 345368, tzinfo=UTC)
# A window title, a cleared screen, the clipboard written (OSC 52), a hidden link, an
# 8-bit CSI, a right-to-left override, and rich markup.
HOSTILE = (
    "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZWNobyBoaQ==\x07"
    "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
    "\x9b31m\u202e[bold]loud[/bold] [link=https://evil.example]here[/link]"
)
RAW = ("\x1b", "\x9b", "\u202e", "\x07")


def assert_escaped(text: str) -> None:
    for char in RAW:
        assert char not in text, f"{char!r} reached the output raw"
    assert "\\x1b]0;pwned\\x07" in text  # shown, not obeyed
    assert "[bold]loud[/bold]" in text and "[link=https://evil.example]" in text  # markup not read


@dataclass
class Stores:
    jobs: InMemoryJobStore = field(default_factory=InMemoryJobStore)
    scale: InMemoryScaleState = field(default_factory=InMemoryScaleState)
    services: InMemoryModelServiceStore = field(default_factory=InMemoryModelServiceStore)


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stores]:
    found = Stores()
    monkeypatch.setattr(deployment, "job_store", lambda: found.jobs)
    monkeypatch.setattr(deployment, "scale_state", lambda: found.scale)
    monkeypatch.setattr(deployment, "service_store", lambda: found.services)
    yield found


def hostile_job(store: InMemoryJobStore, job_id: str = "gan-1", *, at: datetime = START) -> Job:
    """A queued job whose team, name, reason and message carry the hostile text."""
    job, event = new_job(
        job_id=job_id, name=HOSTILE, team=HOSTILE, namespace="team-research", at=at, replicas=2
    )
    store.create(job, event)
    job, event = note(job, reason=HOSTILE, at=at + timedelta(seconds=1), message=HOSTILE)
    store.save(job, event)
    return job


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_status_escapes_the_reason(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    hostile_job(stores.jobs)
    assert_escaped(run(capsys, "status", "gan-1"))


def test_list_escapes_reasons_and_teams(stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    hostile_job(stores.jobs)
    out = run(capsys, "list")
    assert_escaped(out)
    assert out.count("\\x1b]0;pwned") == 2  # team and reason, each escaped


def test_describe_escapes_the_history_and_the_place_in_the_queue(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_job(stores.jobs)
    stores.scale.record_decision(
        at=START + timedelta(minutes=1),
        trigger="schedule",
        dry_run=False,
        plan={
            "admission": {
                "waiting": [
                    {"job": "gan-1", "position": 1, "teamPosition": 1, "reason": HOSTILE, "message": HOSTILE}
                ],
                "waitingTotal": 1,
            }
        },
        acted={},
    )
    out = run(capsys, "describe", "gan-1")
    assert_escaped(out)
    assert "queue (position 1, scale check at 2026-12-02 08:14:21 UTC)" in out


def test_queue_escapes_what_the_scale_check_recorded(
    stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    stores.scale.record_decision(
        at=START,
        trigger=HOSTILE,
        dry_run=False,
        plan={
            "admission": {
                "waiting": [
                    {
                        "job": HOSTILE,
                        "team": HOSTILE,
                        "position": 1,
                        "teamPosition": 1,
                        "priority": 0,
                        "gpus": 1,
                        "reason": HOSTILE,
                        "message": HOSTILE,
                    }
                ],
                "waitingTotal": 1,
                "admitted": [{"job": HOSTILE, "team": HOSTILE, "gpus": 1, "region": HOSTILE}],
                "inUse": {HOSTILE: 1},
            }
        },
        acted={},
    )
    out = run(capsys, "queue")
    assert_escaped(out)
    assert out.startswith("queue at 2026-12-02 08:13:21 UTC (scale check, ")


@dataclass
class SteppingClock:
    """Virtual time: each sleep moves it and runs the next scripted step."""

    now_at: datetime = START
    steps: list[Any] = field(default_factory=list)
    slept: int = 0

    def now(self) -> datetime:
        return self.now_at

    def sleep(self, seconds: float) -> None:
        self.slept += 1
        assert self.slept < 100, "the loop did not end"
        self.now_at += timedelta(seconds=seconds)
        if self.steps:
            self.steps.pop(0)()


def finish(store: InMemoryJobStore, job_id: str, *, at: datetime) -> None:
    job = store.get(job_id)
    assert job is not None
    job, event = transition(job, to=JobStatus.RUNNING, reason="Started", at=at)
    store.save(job, event)
    job, event = transition(job, to=JobStatus.FAILED, reason=HOSTILE, at=at, message=HOSTILE)
    store.save(job, event)


@pytest.mark.parametrize("live", [False, True], ids=["plain", "rich"])
def test_watch_escapes_reasons_and_messages_and_reads_no_markup(live: bool) -> None:
    # given a job whose reasons and messages carry escape sequences and markup, failing while watched
    store = InMemoryJobStore()
    hostile_job(store)
    clock = SteppingClock(steps=[lambda: finish(store, "gan-1", at=START + timedelta(minutes=2))])
    out = io.StringIO()

    # when
    status = watch_job("gan-1", store=store, clock=clock, out=out, live=live, poll=1)

    # then
    assert status is JobStatus.FAILED
    assert_escaped(out.getvalue())
    if not live:
        assert out.getvalue().splitlines()[-1].startswith("gan-1 FAILED (\\x1b]0;pwned")


@dataclass
class Streams:
    """A log group in memory: one page per stream, read once."""

    group: str = "/aws/containerinsights/squall/application"
    truncated: bool = False
    lines: dict[str, list[LogEvent]] = field(default_factory=dict)
    read_to: dict[str, str] = field(default_factory=dict)

    def streams(self) -> Iterable[LogStreamInfo]:
        return [LogStreamInfo(name) for name in self.lines]

    def read(self, stream: str, *, start: datetime | None, token: str | None) -> LogPage:
        events = self.lines[stream]
        done = int(token or 0)
        return LogPage(events=tuple(events[done:]), next_token=str(len(events)))


def chief_stream(job_id: str = "gan-1") -> str:
    return ContainerStream(
        host="ip-10-0-1-7",
        pod=f"{job_id}-chief-0-xk2q9",
        namespace="team-research",
        container="trainer",
        container_id="ab12",
    ).name


def hostile_logs(job_id: str = "gan-1") -> Streams:
    at_ms = int(START.timestamp() * 1000)
    return Streams(
        lines={
            chief_stream(job_id): [
                LogEvent(timestamp_ms=at_ms, message=f"epoch 1 {HOSTILE}\n"),
                LogEvent(
                    timestamp_ms=at_ms + 1, message='{"log":"' + "\\u001b]52;c;aGk=\\u0007 json\\n" + '"}'
                ),
            ]
        }
    )


@pytest.mark.parametrize("timestamps", [False, True])
def test_logs_escapes_the_containers_output(timestamps: bool) -> None:
    follower = LogFollower(
        source=hostile_logs(), job_id="gan-1", namespace="team-research", replicas=("chief-0",)
    )
    out = io.StringIO()

    assert print_logs(follower, out=out, timestamps=timestamps) == 2

    text = out.getvalue()
    assert_escaped(text)
    assert "[chief-0] \\x1b]52;c;aGk=\\x07 json" in text  # the log agent's envelope, unwrapped, then escaped
    assert ("2026-12-02 08:13:21.345 UTC [chief-0] epoch 1" in text) is timestamps


def test_logs_follow_escapes_lines_that_arrive_later_and_says_why_a_job_waits() -> None:
    # given a queued job (its reason hostile) that starts and fails while followed
    store = InMemoryJobStore()
    hostile_job(store)
    source = Streams()
    follower = LogFollower(source=source, job_id="gan-1", namespace="team-research", replicas=("chief-0",))
    said: list[str] = []

    def start() -> None:
        source.lines.update(hostile_logs().lines)
        finish(store, "gan-1", at=START + timedelta(minutes=1))

    clock = SteppingClock(steps=[start])
    out = io.StringIO()

    # when
    printed = print_logs(follower, out=out, follow=True, store=store, clock=clock, on_status=said.append)

    # then
    assert printed == 2
    assert_escaped(out.getvalue())
    assert said[0].startswith("job gan-1 is QUEUED (\\x1b]0;pwned")
    assert said[0].endswith("its lines follow once it runs")
    for char in RAW:
        assert char not in "".join(said)


@pytest.mark.parametrize("follow", [False, True], ids=["logs", "logs --follow"])
def test_the_logs_command_escapes_lines_and_its_own_notes(
    follow: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given the command's job store, log group and clock in memory, a queued job whose reason is hostile
    # (placed in the cluster already, when its logs are read at once: one not placed has none yet)
    import squall.adapters.aws.logs as cloudwatch
    import squall.cli.follow.clock as clocks

    store = InMemoryJobStore()
    job = hostile_job(store)
    if not follow:
        job, event = note(job, reason=HOSTILE, at=START + timedelta(seconds=2), message=HOSTILE)
        store.save(dataclasses.replace(job, cluster="squall", region="us-west-2"), event)
    source = Streams() if follow else hostile_logs()

    def start() -> None:
        source.lines.update(hostile_logs().lines)
        finish(store, "gan-1", at=START + timedelta(minutes=1))

    monkeypatch.setattr(deployment, "job_store", lambda: store)
    monkeypatch.setattr(deployment, "aws_client", lambda service, region=None: None)
    monkeypatch.setattr(cloudwatch, "CloudWatchLogReader", lambda client, group: source)
    monkeypatch.setattr(clocks, "RealClock", lambda: SteppingClock(steps=[start]))

    # when
    assert main(["logs", "gan-1", *(["--follow"] if follow else [])]) == 0

    # then: the lines on stdout, why it waited on stderr, escaped both
    captured = capsys.readouterr()
    assert_escaped(captured.out)
    assert captured.out.count("[chief-0]") == 2
    for char in RAW:
        assert char not in captured.err
    if follow:
        assert captured.err.startswith("squall: job gan-1 is QUEUED (\\x1b]0;pwned")
