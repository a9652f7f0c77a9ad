"""`squall watch`: a job's record, live, until it is final.

The record and its events come from the job store (DynamoDB through
adapters/aws/job_store.py). Every change to a job is one event with the next version
(core/jobs.py), so the loop reads the events only when the version moved, and a view
shows what changed: on a terminal a rich Live panel (state, replicas, the latest
events and their reasons, when a queued job will start, what it cost), elsewhere one
plain line per event, and one each time the job's latest start (`startsBy`) moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from squall.cli.follow.clock import patient
from squall.cli.follow.logs import replica_names
from squall.cli.human import estimate, job_cost, job_needs, moment, placement
from squall.cli.text import printable
from squall.core.errors import NotFoundError
from squall.core.jobs import Job, JobEvent, JobStatus, is_terminal
from squall.planner.text import counted

if TYPE_CHECKING:  # for annotations only: ports.py imports pydantic, which `squall plan` does without
    from squall.ports import FollowClock, JobHistory

DEFAULT_POLL = 2.0
DEFAULT_EVENTS_SHOWN = 8


class View(Protocol):
    def show(self, job: Job, events: Sequence[JobEvent], *, now: datetime) -> None: ...

    def close(self) -> None: ...


def event_line(event: JobEvent) -> str:
    """`2026-12-02 08:13:21 UTC QUEUED     Queued: 1st in research, ...`, the reason and message escaped."""
    message = f": {printable(event.message, newlines=False)}" if event.message else ""
    return f"{moment(event.at)} {event.status.value:<10} {printable(event.reason, newlines=False)}{message}"


def reason_of(job: Job) -> str:
    """The record's reason, escaped: a pod's termination reason can carry a container's text."""
    return printable(job.reason, newlines=False)


def start_estimate(job: Job) -> str:
    """When a queued job will start, as admission last estimated it; "" for any other job."""
    return estimate(job.starts_by, job.likely_start) if job.status is JobStatus.QUEUED else ""


def _summary(job: Job) -> str:
    replicas = replica_names(job)
    names = f" ({', '.join(replicas[:8])}{', ...' if len(replicas) > 8 else ''})" if replicas else ""
    count = job.replicas or len(replicas)
    parts = [f"team {printable(job.team, newlines=False)}"]
    if job.namespace:
        parts.append(f"namespace {printable(job.namespace, newlines=False)}")
    if where := placement(job):
        parts.append(where)
    parts.append(f"{counted(count, 'replica')}{names}")
    parts.append(job_needs(job))
    if job.max_retries:
        parts.append(f"retries {job.retries_used}/{job.max_retries}")
    if job.is_sweep:
        parts.append(counted(len(job.trial_ids), "trial"))
    return ", ".join(parts)


class PlainView:
    """One line per change: a header, then each new event, then the final state."""

    def __init__(self, out: TextIO, *, events_shown: int = DEFAULT_EVENTS_SHOWN) -> None:
        self._out = out
        self._events_shown = events_shown
        self._seen = 0  # the highest event version printed
        self._started = False
        self._where = ""  # the placement the lines have said
        self._said: datetime | None = None  # the start estimate the lines have said (its startsBy)

    def show(self, job: Job, events: Sequence[JobEvent], *, now: datetime) -> None:
        lines: list[str] = []
        where = placement(job)
        if not self._started:
            self._started = True
            self._where = where
            lines.append(f"{job.id} {job.status.value} ({reason_of(job)}): {_summary(job)}")
            if len(events) > self._events_shown:
                hidden = len(events) - self._events_shown
                lines.append(f"  ({counted(hidden, 'earlier event')}: squall describe {job.id})")
                self._seen = events[hidden - 1].version
        lines.extend(f"  {event_line(e)}" for e in events if e.version > self._seen)
        if events:
            self._seen = max(self._seen, max(e.version for e in events))
        if where and where != self._where:  # admitted (or requeued and admitted again) while watched
            self._where = where
            lines.append(f"  placed in {where}")
        # Each check refreshes the estimate; a line when the latest start moves, not every minute.
        if (start := start_estimate(job)) and (job.starts_by or job.likely_start) != self._said:
            self._said = job.starts_by or job.likely_start
            lines.append(f"  {start}")
        if is_terminal(job.status):
            cost = job_cost(job)
            lines.append(f"{job.id} {job.status.value} ({reason_of(job)})" + (f", {cost}" if cost else ""))
        if lines:
            self._out.write("\n".join(lines) + "\n")
            self._out.flush()

    def close(self) -> None:
        pass


def run_times(job: Job, *, now: datetime) -> str:
    """How long it waited (submitted to started) and ran (started to finished), as far as it got.

    A job that finished without starting waited until it finished, and never ran.
    """
    end = job.finished_at or now
    if job.started_at is None:
        waited = _clock((end - job.submitted_at).total_seconds())
        return f"waited {waited}, never ran" if job.finished_at else f"waiting {waited}"
    waited = _clock((job.started_at - job.submitted_at).total_seconds())
    ran = _clock((end - job.started_at).total_seconds())
    return f"waited {waited}, {'ran' if job.finished_at else 'running'} {ran}"


def _clock(seconds: float) -> str:
    whole = max(int(seconds), 0)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class RichView:
    """A rich Live panel, redrawn on each change."""

    def __init__(self, out: TextIO, *, events_shown: int = DEFAULT_EVENTS_SHOWN) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console(file=out)
        self._events_shown = events_shown
        self._live = Live(console=self._console, auto_refresh=False, transient=False)
        self._live.start()

    def show(self, job: Job, events: Sequence[JobEvent], *, now: datetime) -> None:
        self._live.update(self._render(job, events, now=now), refresh=True)

    def _render(self, job: Job, events: Sequence[JobEvent], *, now: datetime) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        colour = {
            JobStatus.SUCCEEDED: "green",
            JobStatus.FAILED: "red",
            JobStatus.CANCELLED: "yellow",
            JobStatus.REJECTED: "red",
            JobStatus.RUNNING: "cyan",
        }.get(job.status, "white")
        head = Text()
        head.append(job.id, style="bold")
        head.append("  ")
        head.append(job.status.value, style=f"bold {colour}")
        head.append(f"  {reason_of(job)}")
        facts = [_summary(job), run_times(job, now=now), start_estimate(job), job_cost(job)]
        detail = Text("; ".join(fact for fact in facts if fact), style="dim")
        table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
        for column in ("at", "state", "reason", "message"):
            table.add_column(column, overflow="fold")
        # Text cells: rich reads markup (`[link=...]`, `[bold]`) in plain strings, never in Text.
        for event in list(events)[-self._events_shown :]:
            table.add_row(
                Text(moment(event.at)),
                Text(event.status.value),
                Text(printable(event.reason, newlines=False)),
                Text(printable(event.message, newlines=False)),
            )
        return Group(head, detail, table)

    def close(self) -> None:
        self._live.stop()


def make_view(out: TextIO, *, live: bool | None = None, events_shown: int = DEFAULT_EVENTS_SHOWN) -> View:
    """rich on a terminal (or when `live` says so), plain lines otherwise."""
    if live is None:
        isatty = getattr(out, "isatty", None)
        live = bool(isatty()) if isatty is not None else False
    if live:
        return RichView(out, events_shown=events_shown)
    return PlainView(out, events_shown=events_shown)


def watch_job(
    job_id: str,
    *,
    store: JobHistory,
    clock: FollowClock,
    out: TextIO,
    live: bool | None = None,
    poll: float = DEFAULT_POLL,
    wait_for_record: float = 0.0,
    events_shown: int = DEFAULT_EVENTS_SHOWN,
    view: View | None = None,
) -> JobStatus:
    """Follow `job_id` until it is final; returns its final status.

    `wait_for_record`: seconds to wait for the record to appear (a job just sent to the
    queue is recorded when the submit function has taken it); NotFoundError after that.
    """
    started = clock.now()
    job = store.get(job_id)
    while job is None:
        if (clock.now() - started).total_seconds() >= wait_for_record:
            raise NotFoundError(f"no job {job_id}")
        clock.sleep(poll)
        job = store.get(job_id)
    shown = view if view is not None else make_view(out, live=live, events_shown=events_shown)
    version = -1
    events: list[JobEvent] = []
    try:
        while True:
            if job.version != version:
                events = patient(lambda: store.events(job_id), clock=clock, wait=poll)
                version = job.version
            shown.show(job, events, now=clock.now())
            if is_terminal(job.status):
                return job.status
            clock.sleep(poll)
            job = patient(lambda: store.get(job_id), clock=clock, wait=poll) or job
    finally:
        shown.close()
