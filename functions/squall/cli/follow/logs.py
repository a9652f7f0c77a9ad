"""`squall logs`: a job's container output, merged across its replicas by time.

A job's pods are its replica Jobs' pods: `<job id>-<type>-<index>-<5 random>`, the
Job controller's generateName (core/manifests.py names the Jobs), with the prefix cut
at 58 characters as Kubernetes cuts it. Every container run is one stream
(core/logstreams.py), so a restarted container or a retried pod adds a stream to the
same replica. Only streams in the job's own namespace and of its trainer container
are read: another team's pods never match, even with a look-alike name.

Reading is bounded: each stream is read page by page to its end (the token repeats),
at most `max_pages` pages a pass; the merge across streams holds one page per stream.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from squall.cli.follow.clock import patient
from squall.cli.human import moment
from squall.cli.text import printable
from squall.core.errors import RetryableError
from squall.core.job_outputs import LogEvent, LogStreamInfo
from squall.core.jobs import Job, JobEvent, JobStatus, is_terminal
from squall.core.logstreams import ContainerStream, parse_stream
from squall.core.manifests import CONTAINER
from squall.planner.text import counted

if TYPE_CHECKING:  # for annotations only: ports.py imports pydantic, which `squall plan` does without
    from squall.ports import FollowClock, JobHistory, LogSource

# Kubernetes' generateName: at most 63 - 5 characters of prefix, then 5 random ones.
GENERATE_PREFIX_LIMIT = 58
GENERATED_SUFFIX = re.compile(r"[a-z0-9]{5}")
REPLICA = re.compile(r"(?P<type>[a-z]+)-(?P<index>[0-9]{1,3})")
MAX_PAGES_PER_PASS = 1_000  # per stream: 10 million events at GetLogEvents' 10,000 a page
MAX_MESSAGE_LINES = 10_000


class LogsError(ValueError):
    """Bad input to `squall logs` (a --since or --replica that cannot be used)."""


# ---- which streams are the job's ----


def replica_names(job: Job) -> tuple[str, ...]:
    """`chief-0`, `worker-1`, ... from the job's recorded spec; () when it has none that loads."""
    from squall.core.spec import SpecError, load_spec

    if not job.spec:
        return ()
    try:
        spec = load_spec(job.spec)
    except SpecError:
        return ()
    return tuple(f"{r.type}-{r.index}" for r in spec.replica_list())


def _generate_prefix(job_id: str, replica: str) -> str:
    return f"{job_id}-{replica}-"[:GENERATE_PREFIX_LIMIT]


def pod_replicas(pod: str, *, job_id: str, replicas: Sequence[str]) -> tuple[str, ...]:
    """The replicas of job `job_id` that pod `pod` may be (more than one only when its name was cut)."""
    if replicas:
        return tuple(
            r
            for r in replicas
            if (prefix := _generate_prefix(job_id, r))
            and len(pod) == len(prefix) + 5
            and pod.startswith(prefix)
            and GENERATED_SUFFIX.fullmatch(pod[len(prefix) :])
        )
    # No spec to read the replicas from: a name that was not cut still says which one it is.
    head = f"{job_id}-"
    if not pod.startswith(head):
        return ()
    rest = pod[len(head) :]
    replica, _, suffix = rest.rpartition("-")
    if REPLICA.fullmatch(replica) and GENERATED_SUFFIX.fullmatch(suffix):
        return (replica,)
    return ()


@dataclass(frozen=True)
class JobStream:
    name: str
    label: str  # the replica, or the pod's name when its name was cut to fit several
    replicas: tuple[str, ...]
    parsed: ContainerStream


def select_streams(
    infos: Iterable[LogStreamInfo],
    *,
    job_id: str,
    namespace: str,
    replicas: Sequence[str],
    replica: str | None = None,
) -> list[JobStream]:
    """The streams of the job's trainer containers in its namespace (of one replica when asked)."""
    chosen: list[JobStream] = []
    for info in infos:
        parsed = parse_stream(info.name)
        if parsed is None or parsed.namespace != namespace or parsed.container != CONTAINER:
            continue
        candidates = pod_replicas(parsed.pod, job_id=job_id, replicas=replicas)
        if not candidates or (replica is not None and replica not in candidates):
            continue
        label = candidates[0] if len(candidates) == 1 else parsed.pod
        chosen.append(JobStream(name=info.name, label=label, replicas=candidates, parsed=parsed))
    return chosen


def check_replica(replica: str, *, job_id: str, replicas: Sequence[str]) -> str:
    """`replica` as given, or LogsError saying what the job's replicas are."""
    if not REPLICA.fullmatch(replica):
        raise LogsError(f"--replica: expected a replica such as chief-0 or worker-1, got {replica[:60]!r}")
    if replicas and replica not in replicas:
        raise LogsError(
            f"--replica: job {job_id} has no replica {replica}; its replicas: {', '.join(replicas)}"
        )
    return replica


# ---- --since ----

_SINCE = re.compile(r"(?P<amount>[0-9]{1,7})(?P<unit>s|m|h|d)")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
MAX_SINCE = timedelta(days=3650)


def parse_since(text: str, *, now: datetime) -> datetime:
    """`10m`, `2h`, `3d`, `90s` before `now`, or an ISO 8601 time with a timezone."""
    value = text.strip()
    match = _SINCE.fullmatch(value)
    if match is not None:
        delta = timedelta(**{_UNITS[match["unit"]]: int(match["amount"])})
        if delta > MAX_SINCE:
            raise LogsError(f"--since: at most 3650d, got {value!r}")
        return now - delta
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise LogsError(
            f"--since: expected a duration (90s, 10m, 2h, 3d) or an ISO 8601 time with a timezone, got {value[:60]!r}"
        ) from None
    if moment.utcoffset() is None:
        raise LogsError(f"--since: the time needs a timezone, e.g. {value}Z or {value}+00:00")
    return moment.astimezone(UTC)


# ---- what is printed ----


def message_lines(message: str) -> list[str]:
    """The container's own text: the log agent's JSON envelope (`{"log": ...}`) unwrapped, one entry per line."""
    text = message
    if text.startswith("{"):
        try:
            envelope = json.loads(text)
        except ValueError:
            envelope = None
        if isinstance(envelope, dict) and isinstance(envelope.get("log"), str):
            text = envelope["log"]
    lines = text.rstrip("\r\n").split("\n")
    if len(lines) > MAX_MESSAGE_LINES:
        lines = [
            *lines[:MAX_MESSAGE_LINES],
            f"... ({counted(len(lines) - MAX_MESSAGE_LINES, 'more line')} in this event)",
        ]
    return [line.rstrip("\r") for line in lines]


def format_event(event: LogEvent, *, label: str, timestamps: bool) -> list[str]:
    """The event's lines as printed: `[chief-0] text`, control characters escaped.

    A container's output is not the terminal's to obey: an escape sequence in it would set
    the window title, clear the screen, write the clipboard (OSC 52) or hide a link.
    """
    prefix = f"[{printable(label, newlines=False)}] "
    if timestamps:
        at = datetime.fromtimestamp(event.timestamp_ms / 1000, tz=UTC)
        prefix = moment(at, milliseconds=True) + " " + prefix
    return [prefix + printable(line, newlines=False) for line in message_lines(event.message)]


def waiting_line(job: Job, events: Sequence[JobEvent]) -> str:
    """Why a followed job has no lines yet: `job gan-1 is QUEUED (Queued: 2nd in research, ...)`, escaped."""
    latest = events[-1] if events else None
    message = (
        f": {latest.message}" if latest is not None and latest.message and latest.reason == job.reason else ""
    )
    return printable(
        f"job {job.id} is {job.status.value} ({job.reason}{message}): its lines follow once it runs",
        newlines=False,
    )


def await_placement(
    job: Job,
    *,
    store: JobHistory,
    clock: FollowClock,
    poll: float = 2.0,
    on_status: Callable[[str], None] = lambda text: None,
) -> Job:
    """Wait while a followed job waits in the queue, in no cluster; its record once placed or final.

    Its logs are in the log group of the cluster admission chooses, so none can be read
    before. `on_status` hears why it waits, once per change of the line.
    """
    job_id, said = job.id, None
    while job.cluster is None and job.status is JobStatus.QUEUED:
        line = waiting_line(job, store.events(job_id))
        if line != said:
            on_status(line)
            said = line
        clock.sleep(poll)
        job = patient(lambda: store.get(job_id), clock=clock, wait=poll) or job
    return job


# ---- reading ----


@dataclass
class _Cursor:
    stream: JobStream
    order: int
    token: str | None = None


@dataclass(frozen=True, order=True)
class _Tagged:
    timestamp_ms: int
    order: int
    sequence: int
    event: LogEvent = field(compare=False)
    label: str = field(compare=False)


@dataclass
class LogFollower:
    """The streams of one job and how far each was read."""

    source: LogSource
    job_id: str
    namespace: str
    replicas: tuple[str, ...]
    replica: str | None = None
    since: datetime | None = None
    max_pages: int = MAX_PAGES_PER_PASS
    cursors: dict[str, _Cursor] = field(default_factory=dict)
    on_warning: Callable[[str], None] = lambda text: None

    def refresh(self) -> int:
        """List the group again; returns how many streams of the job are new."""
        found = select_streams(
            self.source.streams(),
            job_id=self.job_id,
            namespace=self.namespace,
            replicas=self.replicas,
            replica=self.replica,
        )
        if self.source.truncated:
            self.on_warning(
                f"log group {self.source.group} has more streams than are listed in one pass; "
                "streams past the bound were not searched"
            )
        new = 0
        for stream in sorted(found, key=lambda s: (s.label, s.name)):
            if stream.name not in self.cursors:
                self.cursors[stream.name] = _Cursor(stream=stream, order=len(self.cursors))
                new += 1
        return new

    def _pages(self, cursor: _Cursor) -> Iterator[_Tagged]:
        """The cursor's events past its token, page by page, until the token repeats (or the bound)."""
        sequence = 0
        for _ in range(self.max_pages):
            page = self.source.read(cursor.stream.name, start=self.since, token=cursor.token)
            repeated = page.next_token == cursor.token
            for event in page.events:
                yield _Tagged(event.timestamp_ms, cursor.order, sequence, event, cursor.stream.label)
                sequence += 1
            # Moved on only once the page is out: a pass that fails midway reads it again
            # (a line printed twice rather than one lost).
            cursor.token = page.next_token
            if repeated or (not page.events and not page.next_token):
                return
        self.on_warning(
            f"stream {cursor.stream.name}: more than {self.max_pages} pages in one pass; the rest follows"
        )

    def read_new(self) -> Iterator[_Tagged]:
        """Every stream's new events, merged by time (one page per stream held at once)."""
        return heapq.merge(*(self._pages(c) for c in list(self.cursors.values())))


@dataclass(frozen=True)
class FollowSettings:
    poll: float = 2.0  # seconds between reads of every stream
    refresh: float = 30.0  # seconds between listings of the group (new pods, restarts)
    grace: float = 15.0  # after the job is final: how long the agent may still be shipping its last lines
    per_stream_call: float = 0.1  # seconds of poll per stream: GetLogEvents allows 25 calls a second


def print_logs(
    follower: LogFollower,
    *,
    out: TextIO,
    timestamps: bool = False,
    follow: bool = False,
    store: JobHistory | None = None,
    clock: FollowClock | None = None,
    settings: FollowSettings = FollowSettings(),
    on_status: Callable[[str], None] = lambda text: None,
) -> int:
    """Print the job's lines (and with `follow`, new ones until the job is final and drained); returns
    how many events. `log_events` says how it follows."""
    printed = 0
    for lines in log_events(
        follower,
        timestamps=timestamps,
        follow=follow,
        store=store,
        clock=clock,
        settings=settings,
        on_status=on_status,
        on_quiet=out.flush,
    ):
        for line in lines:
            out.write(line + "\n")
        printed += 1
    out.flush()
    return printed


def log_events(
    follower: LogFollower,
    *,
    timestamps: bool = False,
    follow: bool = False,
    store: JobHistory | None = None,
    clock: FollowClock | None = None,
    settings: FollowSettings = FollowSettings(),
    on_status: Callable[[str], None] = lambda text: None,
    on_quiet: Callable[[], None] = lambda: None,
) -> Iterator[list[str]]:
    """The job's events, each as its lines (and with `follow`, new ones until the job is final and drained).

    While a followed job waits in the queue, `on_status` hears why, once per change of
    its state or reason, and once more when it leaves the queue. `on_quiet` is called
    after each round's lines, before the loop waits (a printer flushes there).
    """
    follower.refresh()
    yield from _events(follower, timestamps=timestamps)
    if not follow:
        return
    if store is None or clock is None:
        raise ValueError("following needs the job store and a clock")
    state: dict[str, Any] = {"last_refresh": clock.now(), "final_at": None, "said": None}

    def tell_status(job: Job) -> None:
        """A queued job's reason, once per change; the state it leaves the queue for, once."""
        said_status, said_version, said_line = state["said"] or (None, None, None)
        if job.status is JobStatus.QUEUED:
            if job.version != said_version:
                line = waiting_line(job, store.events(job.id))
                if line != said_line:
                    on_status(line)
                state["said"] = (job.status, job.version, line)
        elif said_status is JobStatus.QUEUED:
            on_status(printable(f"job {job.id} is {job.status.value} ({job.reason})", newlines=False))
            state["said"] = (job.status, job.version, "")

    def check() -> None:
        """The record's state, and the group listed again when it is time (or the job just ended)."""
        job = store.get(follower.job_id)
        if job is not None:
            tell_status(job)
        now = clock.now()
        just_final = state["final_at"] is None and (job is None or is_terminal(job.status))
        if just_final:
            # The agent's lag counts from the job's end: a job that ended long ago is drained at once.
            finished = job.finished_at if job is not None else None
            state["final_at"] = min(now, finished) if finished is not None else now
        if just_final or (now - state["last_refresh"]).total_seconds() >= settings.refresh:
            follower.refresh()
            state["last_refresh"] = now

    while True:
        patient(check, clock=clock, wait=settings.poll, on_warning=follower.on_warning)
        new = yield from _patient_events(follower, timestamps=timestamps, clock=clock, wait=settings.poll)
        on_quiet()
        final_at = state["final_at"]
        quiet = (
            final_at is not None and new == 0 and (clock.now() - final_at).total_seconds() >= settings.grace
        )
        # Quiet since the grace ran out: done, unless one last listing finds a stream the
        # agent created late (then it is read before the end).
        if (
            quiet
            and patient(follower.refresh, clock=clock, wait=settings.poll, on_warning=follower.on_warning)
            == 0
        ):
            return
        clock.sleep(max(settings.poll, settings.per_stream_call * len(follower.cursors)))


def _events(follower: LogFollower, *, timestamps: bool) -> Iterator[list[str]]:
    for tagged in follower.read_new():
        yield format_event(tagged.event, label=tagged.label, timestamps=timestamps)


def _patient_events(
    follower: LogFollower, *, timestamps: bool, clock: FollowClock, wait: float, attempts: int = 10
) -> Generator[list[str], None, int]:
    """One round of new events, read again after `wait` seconds while reading fails retryably
    (`attempts` times at most: a follow loop runs for hours); returns how many there were.
    A cursor moves on only once its page is out, so a retried round repeats no event it yielded
    past a whole page, and loses none."""
    count = 0
    for attempt in range(1, attempts + 1):
        try:
            for lines in _events(follower, timestamps=timestamps):
                yield lines
                count += 1
            return count
        except RetryableError as exc:
            if attempt == attempts:
                raise
            follower.on_warning(f"{exc}; trying again in {wait:g} s ({attempt} of {attempts - 1})")
            clock.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
