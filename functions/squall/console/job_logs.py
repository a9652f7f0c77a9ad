"""A job's output for its console page: the last lines now, then what follows, by a cursor.

The same reader `squall logs` uses (cli/follow/logs.py LogFollower over the cluster's
CloudWatch Logs group, adapters/aws/logs.py), read in bounded passes instead of a loop: a
pass lists the job's streams, goes on from where the cursor says each stream was read, reads
at most MAX_PAGES pages a stream, and answers the lines (escaped as `squall logs` escapes
them, then by the template) and a new cursor. The page shows the last lines of the first
pass; static/job.js asks for the next passes while the job runs (`/jobs/<id>/logs.json`).

The cursor is the console's: base64url of JSON {stream name: CloudWatch token}, read back
strictly (a hostile one is refused naming `after`). A token is only used for a stream that
the pass found to be the job's own, so a cursor cannot point the reader at another stream.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from squall.cli.errors import CommandError
from squall.core.jobs import Job, is_terminal

MAX_PAGES = 5  # per stream and pass: 50,000 events at GetLogEvents' largest page
MAX_CURSOR_CHARS = 16_000
MAX_CURSOR_STREAMS = 200
MAX_NAME_CHARS = 512
MAX_TOKEN_CHARS = 512
# The log agent ships a container's last lines a little after the job ends (FollowSettings.grace).
GRACE = timedelta(seconds=15)


@dataclass(frozen=True)
class Tail:
    lines: tuple[str, ...]
    cursor: str  # where the next pass goes on from ("" when nothing was read)
    final: bool  # the job is final and its last lines are in: no pass follows
    notes: tuple[str, ...] = ()  # what is said about the output rather than in it
    dropped: int = 0  # lines read but not kept (more than the lines asked for)


def encode_cursor(tokens: dict[str, str]) -> str:
    if not tokens:
        return ""
    text = json.dumps(tokens, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(text: str | None) -> dict[str, str]:
    """The stream -> token map of a cursor; CommandError (400) naming `after` for anything else."""
    if not text:
        return {}
    if len(text) > MAX_CURSOR_CHARS or not text.isascii():
        raise CommandError("after: not a log cursor of this console (too long)")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError) as exc:
        raise CommandError("after: not a log cursor of this console (not base64url JSON)") from exc
    if not isinstance(value, dict) or len(value) > MAX_CURSOR_STREAMS:
        raise CommandError("after: not a log cursor of this console (expected an object of streams)")
    for name, token in value.items():
        if not (
            isinstance(token, str) and 0 < len(name) <= MAX_NAME_CHARS and 0 < len(token) <= MAX_TOKEN_CHARS
        ):
            raise CommandError("after: not a log cursor of this console (a stream's name or token)")
    return dict(value)


@dataclass
class _Notes:
    said: list[str] = field(default_factory=list)
    cut: bool = False  # a stream had more pages than a pass reads (LogFollower said so)

    def __call__(self, text: str) -> None:
        self.cut = self.cut or "pages in one pass" in text
        if text not in self.said and len(self.said) < 20:
            self.said.append(text)


def read_tail(client: Any, job: Job, *, after: dict[str, str], most: int, now: datetime) -> Tail:
    """One bounded pass over the job's output from `after` (empty: from the start), keeping the
    last `most` lines; CommandError when the job has no output to read (never ran, a sweep)."""
    from squall.cli import deployment
    from squall.cli.client import log_cluster, sweep_refused, unplaced
    from squall.cli.follow.logs import LogFollower, format_event, replica_names
    from squall.core.errors import NotFoundError
    from squall.core.logstreams import log_group

    final = is_terminal(job.status) and (job.finished_at is None or now - job.finished_at >= GRACE)
    if job.is_sweep:
        return Tail((), "", True, (str(sweep_refused(job, "logs")),))
    notes = _Notes()
    place = log_cluster(job, deployment.clusters()) if job.namespace else None
    if place is None:
        return Tail((), encode_cursor(after), final, (unplaced(job),))
    from squall.adapters.aws.logs import CloudWatchLogReader, LogAccessDenied

    follower = LogFollower(
        source=CloudWatchLogReader(deployment.aws_client("logs", region=place.region), log_group(place.name)),
        job_id=job.id,
        namespace=job.namespace,
        replicas=replica_names(job),
        max_pages=MAX_PAGES,
        on_warning=notes,
    )
    kept: deque[str] = deque(maxlen=most)
    read = 0
    try:
        follower.refresh()
        for name, cursor in follower.cursors.items():
            cursor.token = after.get(name)
        for tagged in follower.read_new():
            for line in format_event(tagged.event, label=tagged.label, timestamps=False):
                kept.append(line)
                read += 1
    except NotFoundError as exc:
        notes(f"{exc}: no such log group yet (is the cluster's log agent installed?)")
    except LogAccessDenied as exc:
        notes(f"{exc}: these credentials may not read the job's logs")
    if not follower.cursors:
        notes(f"no log streams of job {job.id} yet")
    tokens = {name: c.token for name, c in follower.cursors.items() if c.token} if follower.cursors else after
    # A final job whose output is longer than a pass is not done: the next passes read the rest.
    return Tail(
        tuple(kept),
        encode_cursor(tokens),
        final and not notes.cut,
        tuple(notes.said),
        dropped=read - len(kept),
    )
