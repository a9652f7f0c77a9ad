"""`squall tensorboard`'s mirror against objects that change under it, and the lines it prints."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from squall.cli.follow.tensorboard import (
    EventFileMirror,
    MirrorError,
    Source,
    SyncReport,
    mirrored,
    nothing_yet,
    progress,
    warnings,
)
from squall.core.job_outputs import StoredObject

EVENTS = "ckpt/job-1/logs/events.out.tfevents.1.host.1.v2"
SOURCE = Source(bucket="b", prefix="ckpt/job-1/", local=PurePosixPath())
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e"


@dataclass
class GrowingObjects:
    """An S3 whose objects a pod keeps writing: each read finds `grows_by` more bytes than the listing said."""

    objects: dict[str, bytes] = field(default_factory=dict)
    grows_by: int = 20 * 2**20
    reads: list[tuple[int, int]] = field(default_factory=list)

    def list(self, bucket: str, prefix: str, *, limit: int) -> list[StoredObject]:
        return [
            StoredObject(key=k, size=len(v), etag=hashlib.md5(v).hexdigest())
            for k, v in sorted(self.objects.items())
            if k.startswith(prefix)
        ][:limit]

    def download(self, bucket: str, key: str, target: Path, *, offset: int = 0, end: int) -> int:
        self.reads.append((offset, end))
        self.objects[key] += b"x" * self.grows_by  # written between the listing and this read
        target.write_bytes(self.objects[key][offset:end])
        return target.stat().st_size


def test_an_object_that_grows_after_the_listing_is_copied_up_to_the_listed_size(tmp_path: Path) -> None:
    # given: a 1 KiB event file and a mirror that takes 1 KiB
    s3 = GrowingObjects(objects={EVENTS: b"e" * 1024})
    mirror = EventFileMirror(s3, tmp_path, [SOURCE], max_bytes=1024)

    # when: a pod writes 20 MiB more while the pass copies it
    report = mirror.sync()

    # then: the copy holds what was listed, not what is there now
    copied = tmp_path / "logs" / "events.out.tfevents.1.host.1.v2"
    assert copied.stat().st_size == 1024 == report.bytes
    assert s3.reads == [(0, 1024)]


def test_a_grown_event_file_gets_its_listed_tail_only(tmp_path: Path) -> None:
    s3 = GrowingObjects(objects={EVENTS: b"e" * 100}, grows_by=0)
    EventFileMirror(s3, tmp_path, [SOURCE], max_bytes=1024).sync()
    s3.objects[EVENTS] += b"f" * 100
    s3.grows_by = 20 * 2**20

    report = EventFileMirror(s3, tmp_path, [SOURCE], max_bytes=1024).sync()

    assert (report.appended, report.bytes) == (1, 100)
    assert s3.reads[-1] == (100, 200)
    assert (tmp_path / "logs" / "events.out.tfevents.1.host.1.v2").read_bytes() == b"e" * 100 + b"f" * 100


def _assert_escaped(line: str) -> None:
    for raw in ("\x1b", "\x07", "\x9b", "\u202e", "\n"):
        assert raw not in line
    assert "\\x1b]0;owned\\x07" in line and "\\u202e" in line


def test_skipped_keys_and_truncated_prefixes_are_printed_escaped() -> None:
    report = SyncReport(
        skipped=[f"s3://b/ckpt/job-1/../{HOSTILE}\n.tfevents.1"], truncated=[f"s3://b/{HOSTILE}/"]
    )
    lines = warnings(report)
    assert len(lines) == 2
    for line in lines:
        _assert_escaped(line)


def test_more_skipped_keys_than_shown_are_counted() -> None:
    lines = warnings(SyncReport(skipped=[f"s3://b/../{i}" for i in range(8)]))
    assert lines[-1] == "skipped 3 more such keys" and len(lines) == 6


def test_the_sources_and_the_directory_are_printed_escaped(tmp_path: Path) -> None:
    hostile = Source(bucket="b", prefix=f"{HOSTILE}/job-1/", local=PurePosixPath())
    _assert_escaped(nothing_yet([hostile]))
    report = SyncReport(files=1, copied=1, bytes=1)
    _assert_escaped(mirrored(report, tmp_path / HOSTILE))
    shown = progress(report, tmp_path / HOSTILE)
    assert shown is not None
    _assert_escaped(shown)


def test_counts_are_written_with_their_plural() -> None:
    assert mirrored(SyncReport(files=1), Path("d")) == "d: 1 TensorBoard file"
    assert mirrored(SyncReport(files=2), Path("d")) == "d: 2 TensorBoard files"
    assert progress(SyncReport(copied=1, bytes=1), Path("d")) == "d: 1 copied, 0 grown, 0 unchanged (1 byte)"
    assert progress(SyncReport(), Path("d")) is None


def test_the_bound_on_files_says_it_with_its_plural(tmp_path: Path) -> None:
    s3 = GrowingObjects(objects={EVENTS: b"e"}, grows_by=0)
    with pytest.raises(MirrorError, match=r"^1 TensorBoard file under s3://b/ckpt/job-1/: more than the 0"):
        EventFileMirror(s3, tmp_path, [SOURCE], max_files=0).sync()
    with pytest.raises(MirrorError, match=r"take 1 byte: more than the 0"):
        EventFileMirror(s3, tmp_path, [SOURCE], max_bytes=0).sync()
