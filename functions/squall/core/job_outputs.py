"""What a job leaves behind for its researcher: log streams and events, stored objects.

Value types shared by the readers (adapters/aws/logs.py, adapters/aws/s3_objects.py)
and the loops that follow them (squall/cli/follow/), and the one reading of an s3:// URI
they, serving and the SavedModel check share. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

S3_SCHEME = "s3://"


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of an ``s3://bucket/key`` URI; ValueError for anything else."""
    if not uri.startswith(S3_SCHEME):
        raise ValueError(f"{uri[:200]!r} is not an s3:// URI")
    bucket, _, key = uri[len(S3_SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"{uri[:200]!r} names no bucket")
    return bucket, key


@dataclass(frozen=True, slots=True)
class LogStreamInfo:
    """One log stream of a group, as DescribeLogStreams lists it."""

    name: str
    # Milliseconds since the epoch; None while CloudWatch has not stamped the stream yet.
    last_event_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One event of a stream: its time (ms since the epoch) and its message as stored."""

    timestamp_ms: int
    message: str


@dataclass(frozen=True, slots=True)
class LogPage:
    """One GetLogEvents page; `next_token` repeats the token asked with when the stream is read to its end."""

    events: tuple[LogEvent, ...]
    next_token: str


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object under a prefix, as ListObjectsV2 lists it."""

    key: str
    size: int
    etag: str
