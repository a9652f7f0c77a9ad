"""CloudWatch Logs adapter: a job's container output, where the cluster's log agent put it.

The layout is core/logstreams.py's: one group per cluster, one stream per container
run, named host first (`<host>-application.var.log.containers.<pod>_<ns>_<container>-<id>.log`).

Finding a job's streams. CloudWatch Logs selects streams by name *prefix* only
(DescribeLogStreams' and FilterLogEvents' `logStreamNamePrefix`; there is no substring
or pattern selector for stream names), and the prefix here is the node's host name,
which nothing records once the pod is gone. So the group's streams are listed
(DescribeLogStreams in name order, 50 a page, the most it returns) and chosen by their
parsed names. Two things rule out the other routes:

- FilterLogEvents with a filter pattern on the agent's `kubernetes.pod_name` would
  scan every event of the group (every team's), needs `logs:FilterLogEvents` on the
  whole group, and depends on the agent's JSON envelope (which the local runtime
  writes too, local/processes.py, but moto 5.2 matches JSON filter patterns only
  partly, so the local endpoint could not stand in for AWS there).
- DescribeLogStreams ordered by LastEventTime could stop early, but CloudWatch stamps
  `lastEventTimestamp` eventually ("typically within an hour"), so a running job's
  fresh streams sort last and would be missed.

Events are then read stream by stream with GetLogEvents, which IAM authorizes on the
stream's own ARN: a team's readers can be granted `log-stream:*_<namespace>_*` and
nothing else (the CDK app does), while listing names needs only DescribeLogStreams on
the group. The stream listing stops at `max_streams` (a bound, reported to the caller).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from squall.adapters.aws import errors
from squall.core.errors import NotFoundError, PermanentError, SquallError
from squall.core.job_outputs import LogEvent, LogPage, LogStreamInfo

STREAMS_PAGE = 50  # DescribeLogStreams' largest page
EVENTS_PAGE = 10_000  # GetLogEvents' largest page
DEFAULT_MAX_STREAMS = 100_000


class LogAccessDenied(PermanentError):
    """The caller's credentials may not read this group or stream."""


def _rules(group: str) -> list[errors.Rule]:
    def missing(exc: ClientError, text: str) -> SquallError | None:
        if errors.error_code(exc) == "ResourceNotFoundException":
            return NotFoundError(f"{text} (log group {group})")
        return None

    def denied(exc: ClientError, text: str) -> SquallError | None:
        if errors.error_code(exc) in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
            return LogAccessDenied(text)
        return None

    return [missing, denied]


class CloudWatchLogReader:
    """Streams and events of one log group (a boto3 `logs` client)."""

    def __init__(self, client: Any, group: str, *, max_streams: int = DEFAULT_MAX_STREAMS) -> None:
        self._client = client
        self.group = group
        self.max_streams = max_streams
        self._rules = _rules(group)
        # Set by `streams` when the listing stopped at max_streams.
        self.truncated = False

    def streams(self) -> Iterator[LogStreamInfo]:
        """Every stream of the group in name order, at most `max_streams` (then `truncated` is set)."""
        self.truncated = False
        count = 0
        pages = errors.pages(
            f"listing the log streams of {self.group}",
            self._client,
            "describe_log_streams",
            page_size=STREAMS_PAGE,
            rules=self._rules,
            logGroupName=self.group,
        )
        for page in pages:
            for stream in page.get("logStreams", []):
                if count >= self.max_streams:
                    self.truncated = True
                    return
                count += 1
                last = stream.get("lastEventTimestamp")
                yield LogStreamInfo(
                    name=str(stream["logStreamName"]), last_event_ms=int(last) if last is not None else None
                )

    def read(self, stream: str, *, start: datetime | None, token: str | None) -> LogPage:
        """One page of `stream`'s events, oldest first, from `token` (or from `start`, or the head)."""
        params: dict[str, Any] = {
            "logGroupName": self.group,
            "logStreamName": stream,
            "startFromHead": True,
            "limit": EVENTS_PAGE,
        }
        # The same startTime with every token: a token continues the request it came from.
        if start is not None:
            params["startTime"] = int(start.timestamp() * 1000)
        if token is not None:
            params["nextToken"] = token
        response = errors.call(
            f"reading log stream {stream}", self._client.get_log_events, rules=self._rules, **params
        )
        events = tuple(
            LogEvent(timestamp_ms=int(e["timestamp"]), message=str(e.get("message", "")))
            for e in response.get("events", [])
        )
        return LogPage(events=events, next_token=str(response.get("nextForwardToken") or token or ""))
