"""What a simulation shows while it runs: a live terminal view, or plain lines.

On a terminal, a rich Live view redraws the waiting queue, jobs by state, nodes per
region and pending GPUs, with the latest events under them. Anywhere else (a pipe,
a log file, CI, tests) the same information comes as plain lines, written only
when something changed, so a log stays readable and diffable.

Both show a region falling back (`Fallbacks`): the launches a group could not make
(the fleet's failed scaling activities, e.g. insufficient capacity) and the scale
check that bought the capacity in another region instead (its `RegionFallback`
codes, with the groups it scaled up there and gave back in the region that failed).

Both read the simulation without touching the Kubernetes API (no port calls), so
a fault armed on the cluster is spent by Squall's functions, not by the view.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TextIO

from squall.core.jobs import JobStatus, is_terminal
from squall.core.telemetry import Metric
from squall.local.runtime import LocalRuntime
from squall.local.summary import Recorder, instances

STATE_ORDER = [s.value for s in JobStatus]


def stamp(elapsed: timedelta) -> str:
    seconds = int(elapsed.total_seconds())
    return f"t+{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass(frozen=True)
class RegionRow:
    nodes: int = 0
    booting: int = 0
    gpus: int = 0
    failed: int = 0  # launches that failed there so far (the fallback's cause)


@dataclass(frozen=True)
class QueueRow:
    job_id: str
    gpus: int
    waited: timedelta
    reason: str


@dataclass(frozen=True)
class Frame:
    """One look at the simulation, as both views show it."""

    elapsed: timedelta
    jobs: dict[str, int]
    queue: list[QueueRow]
    queued: int
    regions: dict[str, RegionRow]
    pending_gpus: int
    gpus_in_use: int
    gpus_allocatable: int
    cost: float

    @classmethod
    def capture(
        cls,
        local: LocalRuntime,
        recorder: Recorder,
        *,
        queue_rows: int = 8,
        failed: Mapping[str, int] | None = None,
    ) -> Frame:
        """`failed`: region -> launches that failed there so far (a FallbackWatch counts them)."""
        now = local.clock.now()
        jobs = local.jobs()
        queued = sorted(
            (j for j in jobs if j.status is JobStatus.QUEUED and not j.is_sweep), key=lambda j: j.submitted_at
        )
        regions: dict[str, dict[str, int]] = {
            g.region: {"nodes": 0, "booting": 0, "gpus": 0, "failed": 0} for g in recorder.groups
        }
        for region, count in (failed or {}).items():
            regions.setdefault(region, {"nodes": 0, "booting": 0, "gpus": 0, "failed": 0})["failed"] = count
        gpus_per_node = {(g.region, g.asg_name or g.name): g.allocatable.gpu for g in recorder.groups}
        if local.fleet is not None:
            for instance in instances(local.fleet):
                row = regions.setdefault(instance.region, {"nodes": 0, "booting": 0, "gpus": 0, "failed": 0})
                if instance.node is not None:
                    row["nodes"] += 1
                    row["gpus"] += gpus_per_node.get((instance.region, instance.group), 0)
                elif instance.launched:
                    row["booting"] += 1
        allocatable, in_use = recorder.cluster_gpus()
        return cls(
            elapsed=local.clock.elapsed,
            jobs=dict(Counter(j.status.value for j in jobs)),
            queue=[QueueRow(j.id, j.gpus, now - j.submitted_at, j.reason) for j in queued[:queue_rows]],
            queued=len(queued),
            regions={region: RegionRow(**row) for region, row in sorted(regions.items())},
            pending_gpus=latest(local, Metric.PENDING_GPUS),
            gpus_in_use=in_use,
            gpus_allocatable=allocatable,
            cost=recorder.cost,
        )

    def nodes_line(self) -> str:
        busy = [(r, row) for r, row in self.regions.items() if row.nodes]
        return ", ".join(f"{r} {row.nodes} nodes/{row.gpus} GPUs" for r, row in busy) or "no nodes"

    def jobs_line(self) -> str:
        return " ".join(f"{state} {self.jobs[state]}" for state in STATE_ORDER if self.jobs.get(state))


@dataclass
class FallbackWatch:
    """What a region's fallback looks like as it happens, read from what the simulation keeps.

    The fleet's failed launches (its scaling activities, in time order) and the scale
    checks' answers (with their `RegionFallback:<from>-><to>` codes and what they did)
    are read from where the last call stopped, so a long replay costs what is new.
    """

    failed: dict[str, int] = field(default_factory=dict)  # region -> failed launches so far
    _activities: int = 0
    _checks: int = 0

    def new_lines(self, local: LocalRuntime, recorder: Recorder) -> list[tuple[str, str]]:
        """(`launch failed` or `fallback`, what happened) for each change since the last call."""
        names = {(g.region, g.asg_name or g.name): g.name for g in recorder.groups}
        regions = {g.name: g.region for g in recorder.groups}
        lines: list[tuple[str, str]] = []
        if local.fleet is not None:
            activities = local.fleet.failures
            failed: Counter[tuple[str, str, str]] = Counter()
            for activity in activities[self._activities :]:
                if activity.status_code != "Failed":
                    continue
                why = activity.description.rpartition("Status Reason: ")[2] or activity.status_message
                failed[
                    names.get((activity.region, activity.group), activity.group), activity.region, why
                ] += 1
            self._activities = len(activities)
            for (group, region, why), count in failed.items():
                self.failed[region] = self.failed.get(region, 0) + count
                launches = "launch" if count == 1 else "launches"
                lines.append(("launch failed", f"{group} ({region}): {count} {launches} failed, {why}"))
        results = local.scale_results
        for result in results[self._checks :]:
            for code in dict.fromkeys(result.get("fallbacks") or ()):
                origin, _, target = str(code).partition(":")[2].partition("->")
                done = result.get("done") or {}
                moved = [
                    f"{change['group']} scaled up to {change['to']}"
                    for change in done.get("scaledUp") or ()
                    if regions.get(change.get("group")) == target
                ] + [
                    f"{change['group']} given back to {change['to']}"
                    for change in done.get("givenBack") or ()
                    if regions.get(change.get("group")) == origin
                ]
                bought = f": {', '.join(moved)}" if moved else ""
                lines.append(
                    ("fallback", f"{origin} -> {target}, capacity bought in {target} instead{bought}")
                )
        self._checks = len(results)
        return lines


def latest(local: LocalRuntime, name: str) -> int:
    """The last value the functions emitted for a metric (what the dashboard would show now)."""
    for point in reversed(local.metrics.points):
        if point.name == name:
            return int(point.value)
    return 0


# ---- plain lines ------------------------------------------------------------------------------


@dataclass
class PlainLiveView:
    """Lines on a stream: job state changes (small runs), node counts, events, a periodic status."""

    out: TextIO
    follow_jobs: bool = True
    status_every: timedelta | None = None
    _seen: dict[str, str] = field(default_factory=dict)
    _nodes_line: str = ""
    _next_status: timedelta = timedelta(0)
    _fallbacks: FallbackWatch = field(default_factory=FallbackWatch)

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def update(self, local: LocalRuntime, recorder: Recorder) -> None:
        now = stamp(local.clock.elapsed)
        if self.follow_jobs:
            for job in sorted(local.jobs(), key=lambda j: (j.submitted_at, j.id)):
                label = f"{job.status.value} ({job.reason})"
                if self._seen.get(job.id) != label:
                    self._seen[job.id] = label
                    self.say(f"  {now}  {job.id:<24} {label}")
        for kind, text in self._fallbacks.new_lines(local, recorder):
            self.say(f"  {now}  {f'[{kind}]':<24} {text}")
        frame: Frame | None = None
        if self.follow_jobs or (self.status_every is not None and local.clock.elapsed >= self._next_status):
            frame = Frame.capture(local, recorder, failed=self._fallbacks.failed)
        if frame is None:
            return
        line = frame.nodes_line()
        if line != self._nodes_line:
            self._nodes_line = line
            self.say(f"  {now}  {'[cluster]':<24} {line}")
        if self.status_every is not None and local.clock.elapsed >= self._next_status:
            self._next_status = local.clock.elapsed + self.status_every
            self.say(
                f"  {now}  {'[status]':<24} jobs {frame.jobs_line() or 'none'} | pending GPUs {frame.pending_gpus}"
                f" | GPUs in use {frame.gpus_in_use}/{frame.gpus_allocatable} | ${frame.cost:,.0f}"
            )

    def note(self, at: timedelta, text: str) -> None:
        self.say(f"  {stamp(at)}  {'[event]':<24} {text}")

    def close(self, local: LocalRuntime, recorder: Recorder) -> None:
        frame = Frame.capture(local, recorder, failed=self._fallbacks.failed)
        self.say(
            f"  {stamp(frame.elapsed)}  {'[end]':<24} jobs {frame.jobs_line() or 'none'}; {frame.nodes_line()}"
        )


# ---- the live terminal view ----------------------------------------------------------------------


class RichLiveView:
    """A rich Live view, redrawn at most `fps` times a wall-clock second."""

    def __init__(self, *, console: Any, title: str, follow_jobs: bool = True, fps: float = 8.0) -> None:
        from rich.live import Live

        self.console = console
        self.title = title
        self.follow_jobs = follow_jobs
        # Faults stay on screen longer than job transitions, which come by the dozen.
        self.notes: deque[str] = deque(maxlen=6)
        self.events: deque[str] = deque(maxlen=10)
        self._seen: dict[str, str] = {}
        self._fallbacks = FallbackWatch()
        self._interval = 1.0 / fps
        self._drawn = 0.0
        self._live = Live(console=console, auto_refresh=False, transient=False)
        self._live.start()

    def update(self, local: LocalRuntime, recorder: Recorder) -> None:
        if self.follow_jobs:
            for job in local.jobs():
                label = f"{job.status.value} ({job.reason})"
                if self._seen.get(job.id) != label:
                    self._seen[job.id] = label
                    if (
                        is_terminal(job.status)
                        or job.status is JobStatus.RUNNING
                        or job.reason != "Submitted"
                    ):
                        self.events.append(f"{stamp(local.clock.elapsed)}  {job.id}  {label}")
        for kind, text in self._fallbacks.new_lines(local, recorder):
            from rich.markup import escape

            self.notes.append(f"{stamp(local.clock.elapsed)}  [bold yellow]{kind}[/] {escape(text)}")
        clock = time.monotonic()
        if clock - self._drawn < self._interval:
            return
        self._drawn = clock
        self._draw(Frame.capture(local, recorder, failed=self._fallbacks.failed))

    def note(self, at: timedelta, text: str) -> None:
        self.notes.append(f"{stamp(at)}  [bold red]{text}[/]")

    def close(self, local: LocalRuntime, recorder: Recorder) -> None:
        self._draw(Frame.capture(local, recorder, failed=self._fallbacks.failed))
        self._live.stop()

    def _draw(self, frame: Frame) -> None:
        lines = [*self.notes, *self.events]
        self._live.update(render_frame(frame, title=self.title, events=lines), refresh=True)


def render_frame(frame: Frame, *, title: str, events: list[str]) -> Any:
    """The live view's layout for one frame (a rich renderable)."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table

    jobs = Table(title="Jobs by state", expand=True)
    jobs.add_column("state", no_wrap=True)
    jobs.add_column("jobs", justify="right")
    for state in STATE_ORDER:
        if frame.jobs.get(state):
            jobs.add_row(state, str(frame.jobs[state]))

    nodes = Table(title="Nodes per region", expand=True)
    nodes.add_column("region", no_wrap=True, min_width=12)
    for column in ("nodes", "booting", "GPUs", "failed launches"):
        nodes.add_column(column, justify="right", no_wrap=True)
    for region, row in frame.regions.items():
        nodes.add_row(region, str(row.nodes), str(row.booting), str(row.gpus), str(row.failed))

    queue = Table(title=f"Queue ({frame.queued} waiting)", expand=True)
    for column in ("job", "GPUs", "waiting", "reason"):
        queue.add_column(column, justify="right" if column in ("GPUs", "waiting") else "left")
    for waiting in frame.queue:
        queue.add_row(waiting.job_id, str(waiting.gpus), stamp(waiting.waited)[2:], waiting.reason)

    grid = Table.grid(expand=True)
    grid.add_column(ratio=2)
    grid.add_column(ratio=3)
    grid.add_column(ratio=4)
    grid.add_row(jobs, nodes, queue)
    head = (
        f"[bold]{title}[/]   {stamp(frame.elapsed)}   pending GPUs [bold]{frame.pending_gpus}[/]   "
        f"GPUs in use {frame.gpus_in_use}/{frame.gpus_allocatable}   cost ${frame.cost:,.2f}"
    )
    return Panel(
        Group(head, grid, Panel("\n".join(events) or "(nothing yet)", title="events")), title="Squall"
    )


def make_view(
    out: TextIO, *, title: str, follow_jobs: bool, status_every: timedelta | None = None
) -> PlainLiveView | RichLiveView:
    """The live view on a terminal, plain lines anywhere else."""
    isatty: Callable[[], bool] | None = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        from rich.console import Console

        return RichLiveView(console=Console(file=out), title=title, follow_jobs=follow_jobs)
    return PlainLiveView(out=out, follow_jobs=follow_jobs, status_every=status_every)
