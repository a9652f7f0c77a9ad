"""CloudWatch Logs adapter: a job's ``squall-metric`` lines, as the cluster's log agent shipped them.

One FilterLogEvents call a read: the server-side filter pattern ``"squall-metric"`` (a
job's ordinary output costs nothing to skip), ``logStreamNames`` of the job's containers
(core/logstreams.py's layout: host = the pod's node, container id from its
``containerStatuses``, this run's and the last one's), at most ``limit`` events. IAM
authorizes FilterLogEvents on the log group: the reconcile function is granted it on the
clusters' application groups only.

A pod whose statuses carry no container id (the local runtime's real pods) is looked up
by its streams' prefix (DescribeLogStreams, one call per such pod); so are the job's pods
when CloudWatch answers that a named stream does not exist (a container that printed
nothing yet has none): the read is then made over the streams that exist.

The cursor is compact JSON: the newest event time read (``t``) and the ids of the events
read at that very millisecond (``i``), so that the next read starts at ``t`` and skips
them; while CloudWatch has more for the same request, its token (``k``) with the
request's start (``s``) and streams (``h``, a digest) to go on with. A token that no longer
holds (expired, or the job's streams changed) is dropped and the read starts at ``t``.
The log agent's events are JSON with the container's line under ``"log"``; any other
message is taken as the line itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from squall.adapters.aws import errors
from squall.adapters.aws.logs import LogAccessDenied
from squall.core.errors import NotFoundError, PermanentError, SquallError
from squall.core.jobs import Job
from squall.core.logstreams import ContainerStream, log_group, parse_stream, stream_prefix
from squall.core.metrics import MAX_CURSOR_CHARS, MAX_LINE_CHARS, METRIC_PREFIX, MetricLinesPage
from squall.ports import Cluster, KubeObject

FILTER_PATTERN = f'"{METRIC_PREFIX}"'  # a quoted term: the exact text, "-" included
MAX_EVENTS = 10_000  # FilterLogEvents' largest page
MAX_STREAM_NAMES = 100  # FilterLogEvents' logStreamNames holds at most 100
MAX_PODS = 20  # the job's pods read (by name), each with its containers' streams
MAX_IDS = 16  # event ids kept in the cursor; more at one millisecond: the read moves past it
MAX_LINES_PER_EVENT = 64
_RUNTIME_PREFIX = "://"  # containerd://<id>, docker://<id>, cri-o://<id>


class LogStreamMissing(NotFoundError):
    """A stream named in the request does not exist (a container that printed nothing has none)."""


@dataclass(frozen=True)
class _ReadCursor:
    time: int | None = None
    ids: tuple[str, ...] = ()
    token: str | None = None
    start: int | None = None
    streams: str | None = None

    def text(self) -> str | None:
        if self.time is None and self.token is None:
            return None
        doc: dict[str, Any] = {"t": self.time, "i": list(self.ids)}
        if self.token is not None:
            doc |= {"k": self.token, "s": self.start, "h": self.streams}
        text = json.dumps(doc, separators=(",", ":"))
        if len(text) > MAX_CURSOR_CHARS:  # a token CloudWatch made too long to keep: go on from the time
            return _ReadCursor(time=self.time, ids=self.ids).text()
        return text


def _read_cursor(text: str | None) -> _ReadCursor:
    """The cursor a record holds; a fresh one for none, or for text that is not one of ours."""
    if not text:
        return _ReadCursor()
    try:
        doc = json.loads(text)
    except ValueError:
        return _ReadCursor()
    if not isinstance(doc, dict):
        return _ReadCursor()
    time, start = doc.get("t"), doc.get("s")
    ids, token, streams = doc.get("i"), doc.get("k"), doc.get("h")
    return _ReadCursor(
        time=time if _is_int(time) else None,
        ids=tuple(i for i in ids[:MAX_IDS] if isinstance(i, str)) if isinstance(ids, list) else (),
        token=token if isinstance(token, str) and _is_int(start) and isinstance(streams, str) else None,
        start=start if _is_int(start) else None,
        streams=streams if isinstance(streams, str) else None,
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def container_streams(pods: Sequence[KubeObject]) -> tuple[list[str], list[KubeObject]]:
    """The log streams of the pods' containers (this run's and the last one's), and the pods
    whose statuses name no container id (their streams are found by prefix)."""
    names: set[str] = set()
    unnamed: list[KubeObject] = []
    for pod in _pods(pods):
        metadata, host = pod.get("metadata") or {}, (pod.get("spec") or {}).get("nodeName")
        found = False
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if not isinstance(status, Mapping) or not isinstance(status.get("name"), str):
                continue
            last = ((status.get("lastState") or {}).get("terminated") or {}).get("containerID")
            for container_id in (status.get("containerID"), last):
                if not isinstance(container_id, str) or _RUNTIME_PREFIX not in container_id:
                    continue
                stream = ContainerStream(
                    host=str(host),
                    pod=str(metadata.get("name")),
                    namespace=str(metadata.get("namespace")),
                    container=status["name"],
                    container_id=container_id.split(_RUNTIME_PREFIX, 1)[1],
                )
                if parse_stream(stream.name) == stream:  # names CloudWatch could hold, nothing else
                    names.add(stream.name)
                    found = True
        if not found:
            unnamed.append(pod)
    return sorted(names), unnamed


def _pods(pods: Sequence[KubeObject]) -> list[KubeObject]:
    """The pods that have run somewhere (a node), by name, at most MAX_PODS."""
    placed = [
        p
        for p in pods
        if isinstance(p, Mapping)
        and isinstance((p.get("spec") or {}).get("nodeName"), str)
        and isinstance((p.get("metadata") or {}).get("name"), str)
        and isinstance((p.get("metadata") or {}).get("namespace"), str)
    ]
    return sorted(placed, key=lambda p: str(p["metadata"]["name"]))[:MAX_PODS]


def event_lines(message: str) -> list[str]:
    """The container's lines in one event that hold the metric prefix (the agent's JSON unwrapped)."""
    text = message
    if text.startswith("{"):
        try:
            envelope = json.loads(text)
        except ValueError:
            envelope = None
        if isinstance(envelope, dict) and isinstance(envelope.get("log"), str):
            text = envelope["log"]
    lines = [line for line in text.split("\n") if METRIC_PREFIX in line]
    # A line over the parser's bound is still passed on (cut), so that it is counted as ignored.
    return [line[: MAX_LINE_CHARS + 1] for line in lines[:MAX_LINES_PER_EVENT]]


class CloudWatchMetricLines:
    """MetricLines on CloudWatch Logs: the job's pods from its cluster, its lines from the cluster's log group.

    `logs_client(cluster)` is the `logs` client of the cluster's region; `log_group_of(cluster)`
    its application log group (core/logstreams.py's, unless a runtime keeps its own).
    """

    def __init__(
        self,
        *,
        clusters: Mapping[str, Cluster],
        logs_client: Callable[[str], Any],
        log_group_of: Callable[[str], str] = log_group,
    ) -> None:
        self._clusters = clusters
        self._logs_client = logs_client
        self._log_group_of = log_group_of

    def read(self, job: Job, *, cursor: str | None, limit: int) -> MetricLinesPage:
        if job.cluster is None or job.cluster not in self._clusters or not job.namespace:
            return MetricLinesPage(lines=(), cursor=cursor)
        group = self._log_group_of(job.cluster)
        pods = self._clusters[job.cluster].list_pods(namespace=job.namespace, job_id=job.id)
        names, unnamed = container_streams(pods)
        client = self._logs_client(job.cluster)
        if unnamed:
            names = sorted({*names, *self._existing(client, group, unnamed)})
        if not names:
            return MetricLinesPage(lines=(), cursor=cursor)
        try:
            return self._filter(client, group, names[:MAX_STREAM_NAMES], _read_cursor(cursor), limit)
        except LogStreamMissing:
            pass
        # A named stream does not exist (yet): read those that do.
        existing = self._existing(client, group, _pods(pods))
        if not existing:
            return MetricLinesPage(lines=(), cursor=cursor)
        return self._filter(client, group, existing[:MAX_STREAM_NAMES], _read_cursor(cursor), limit)

    def _filter(
        self, client: Any, group: str, names: list[str], cursor: _ReadCursor, limit: int
    ) -> MetricLinesPage:
        digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
        params: dict[str, Any] = {
            "logGroupName": group,
            "logStreamNames": names,
            "filterPattern": FILTER_PATTERN,
            "limit": max(1, min(limit, MAX_EVENTS)),
        }
        # Always a start (0: from the first event), so that a token goes on with the very request.
        following = cursor.token is not None and cursor.streams == digest
        if following:
            params |= {"startTime": cursor.start, "nextToken": cursor.token}
        else:
            params["startTime"] = cursor.time or 0
        try:
            response = self._call(client, group, params)
        except PermanentError as exc:
            if not following or isinstance(exc, NotFoundError | LogAccessDenied):
                # (a missing group or stream, or no access: the token is not the trouble)
                raise
            # Its token no longer holds (they expire): from the time read up to.
            following = False
            params.pop("nextToken")
            params["startTime"] = cursor.time or 0
            response = self._call(client, group, params)
        time, ids = cursor.time, list(cursor.ids)
        lines: list[str] = []
        for event in response.get("events") or []:
            stamp, event_id = event.get("timestamp"), f"{event.get('logStreamName')}/{event.get('eventId')}"
            if not _is_int(stamp):
                continue
            event_key = hashlib.sha256(event_id.encode()).hexdigest()[:20]
            if not following and time is not None and (stamp < time or (stamp == time and event_key in ids)):
                continue  # read before (a read starts at the newest millisecond it read)
            if time is None or stamp > time:
                time, ids = stamp, []
            if stamp == time and event_key not in ids:
                ids.append(event_key)
            lines.extend(event_lines(str(event.get("message", ""))))
        if len(ids) > MAX_IDS:
            # More events at one millisecond than the cursor keeps: go on after it.
            time, ids = (time or 0) + 1, []
        token = response.get("nextToken")
        after = _ReadCursor(
            time=time,
            ids=tuple(ids),
            token=token if isinstance(token, str) else None,
            start=params["startTime"],
            streams=digest,
        )
        return MetricLinesPage(lines=tuple(lines), cursor=after.text())

    def _existing(self, client: Any, group: str, pods: Sequence[KubeObject]) -> list[str]:
        """The streams that exist of these pods' containers (DescribeLogStreams by prefix, one call a pod)."""
        found: set[str] = set()
        for pod in _pods(pods):
            metadata = pod["metadata"]
            prefix = stream_prefix(pod["spec"]["nodeName"], metadata["name"], metadata["namespace"])
            response = self._call_describe(client, group, prefix)
            for stream in response.get("logStreams") or []:
                name = stream.get("logStreamName")
                parsed = parse_stream(name) if isinstance(name, str) else None
                if parsed is not None and parsed.pod == metadata["name"]:
                    found.add(str(name))
        return sorted(found)

    def _call(self, client: Any, group: str, params: Mapping[str, Any]) -> dict[str, Any]:
        response: dict[str, Any] = errors.call(
            f"reading the metric lines in log group {group}",
            client.filter_log_events,
            rules=_rules(group),
            **params,
        )
        return response

    def _call_describe(self, client: Any, group: str, prefix: str) -> dict[str, Any]:
        response: dict[str, Any] = errors.call(
            f"listing the log streams {prefix}* of log group {group}",
            client.describe_log_streams,
            rules=_rules(group),
            logGroupName=group,
            logStreamNamePrefix=prefix,
            limit=50,
        )
        return response


def _rules(group: str) -> list[errors.Rule]:
    def missing(exc: ClientError, text: str) -> SquallError | None:
        if errors.error_code(exc) != "ResourceNotFoundException":
            return None
        if "stream" in errors.error_message(exc).lower():
            return LogStreamMissing(f"{text} (log group {group})")
        return NotFoundError(f"{text} (log group {group})")

    def denied(exc: ClientError, text: str) -> SquallError | None:
        if errors.error_code(exc) in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
            return LogAccessDenied(text)
        return None

    return [missing, denied]
