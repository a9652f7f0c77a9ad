"""The TensorBoard mirror's rules on an in-memory S3: where it looks, what it copies, its bounds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import pytest

from squall.cli.follow.tensorboard import EventFileMirror, MirrorError, Source, job_sources, keep_in_step
from squall.core.job_outputs import StoredObject
from squall.core.jobs import JobStatus, new_job, transition

AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
EVENTS = "logs/events.out.tfevents.1.host.1.v2"


@dataclass
class FakeObjects:
    """An in-memory S3 that records its calls (ObjectSource)."""

    objects: dict[tuple[str, str], bytes] = field(default_factory=dict)
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def put(self, key: str, body: bytes, bucket: str = "b") -> None:
        self.objects[(bucket, key)] = body

    def list(self, bucket: str, prefix: str, *, limit: int) -> list[StoredObject]:
        found = [
            StoredObject(key=k, size=len(v), etag=hashlib.md5(v).hexdigest())
            for (b, k), v in sorted(self.objects.items())
            if b == bucket and k.startswith(prefix)
        ]
        return found[:limit]

    def download(self, bucket: str, key: str, target: Path, *, offset: int = 0, end: int) -> int:
        self.calls.append((bucket, key, offset))
        target.write_bytes(self.objects[(bucket, key)][offset:end])
        return target.stat().st_size


SOURCE = Source(bucket="b", prefix="ckpt/job-1/", local=PurePosixPath())


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".squall" not in p.parts
    }


def test_it_copies_tensorboard_files_only_and_appends_what_grew(tmp_path: Path) -> None:
    s3 = FakeObjects()
    s3.put(f"ckpt/job-1/{EVENTS}", b"abc")
    s3.put("ckpt/job-1/logs/plugins/profile/run/host.xplane.pb", b"profile")
    s3.put("ckpt/job-1/checkpoints/ckpt-1.index", b"not for tensorboard")
    mirror = EventFileMirror(s3, tmp_path, [SOURCE])
    report = mirror.sync()
    assert (report.copied, report.files) == (2, 2)
    assert files(tmp_path) == {EVENTS: b"abc", "logs/plugins/profile/run/host.xplane.pb": b"profile"}

    s3.put(f"ckpt/job-1/{EVENTS}", b"abcdef")
    s3.calls.clear()
    report = EventFileMirror(s3, tmp_path, [SOURCE]).sync()  # a new run reads what the last one copied
    assert (report.copied, report.appended, report.unchanged, report.bytes) == (0, 1, 1, 3)
    assert s3.calls == [("b", f"ckpt/job-1/{EVENTS}", 3)]
    assert files(tmp_path)[EVENTS] == b"abcdef"

    # rewritten, not grown: copied whole
    s3.put(f"ckpt/job-1/{EVENTS}", b"xy")
    assert EventFileMirror(s3, tmp_path, [SOURCE]).sync().copied == 1
    assert files(tmp_path)[EVENTS] == b"xy"


def test_keys_that_would_leave_the_directory_are_skipped(tmp_path: Path) -> None:
    s3 = FakeObjects()
    for key in (
        "../escape.tfevents.1",
        "logs//x.tfevents.2",
        "./x.tfevents.3",
        ".squall/manifest.json.tfevents.4",
        "logs/" + "x" * 250 + ".tfevents.5",  # a name no file system takes: ENAMETOOLONG ended every pass
    ):
        s3.put(f"ckpt/job-1/{key}", b"bad")
    s3.put(f"ckpt/job-1/{EVENTS}", b"ok")
    report = EventFileMirror(s3, tmp_path / "board", [SOURCE]).sync()
    assert len(report.skipped) == 5 and report.copied == 1
    assert not (tmp_path / "escape.tfevents.1").exists()
    assert files(tmp_path / "board") == {EVENTS: b"ok"}


def test_a_pass_past_its_bounds_is_refused_whole(tmp_path: Path) -> None:
    s3 = FakeObjects()
    for i in range(3):
        s3.put(f"ckpt/job-1/logs/events.out.tfevents.{i}", b"x" * 10)
    with pytest.raises(MirrorError, match="more than the 2 a mirror takes"):
        EventFileMirror(s3, tmp_path, [SOURCE], max_files=2).sync()
    with pytest.raises(MirrorError, match="take 30 bytes: more than the 25"):
        EventFileMirror(s3, tmp_path, [SOURCE], max_bytes=25).sync()
    assert files(tmp_path) == {} and s3.calls == []
    report = EventFileMirror(s3, tmp_path, [SOURCE], max_objects=2).sync()
    assert report.truncated == ["s3://b/ckpt/job-1/"] and report.copied == 2


def test_sources_follow_the_trainers_layout_and_a_sweeps_trials() -> None:
    spec = {"checkpointUri": "s3://b/ckpt/", "outputUri": "s3://out"}
    job, _ = new_job(job_id="job-1", name="gan", team="t", namespace="ns", at=AT, spec=spec)
    assert [(s.uri, str(s.local)) for s in job_sources(job)] == [
        ("s3://b/ckpt/job-1/", "."),
        ("s3://out/job-1/", "output"),
    ]
    sweep, _ = new_job(
        job_id="sw", name="gan", team="t", namespace="ns", at=AT, spec=spec, trial_ids=("sw-0000", "sw-0001")
    )
    assert [(s.uri, str(s.local)) for s in job_sources(sweep)][:2] == [
        ("s3://b/ckpt/sw-0000/", "sw-0000"),
        ("s3://out/sw-0000/", "sw-0000/output"),
    ]
    plain, _ = new_job(job_id="p", name="gan", team="t", namespace="ns", at=AT, spec={"outputUri": "not-s3"})
    assert job_sources(plain) == []


def test_keep_in_step_copies_while_the_job_runs_and_once_more_when_it_is_final(tmp_path: Path) -> None:
    s3 = FakeObjects()
    job, _ = new_job(job_id="job-1", name="gan", team="t", namespace="ns", at=AT, status=JobStatus.RUNNING)
    records = {"job-1": job}

    class Store:
        def get(self, job_id: str) -> object:
            return records.get(job_id)

    class Clock:
        slept = 0

        def now(self) -> datetime:
            return AT

        def sleep(self, seconds: float) -> None:
            self.slept += 1
            s3.put(f"ckpt/job-1/{EVENTS}", b"x" * self.slept)
            if self.slept == 3:  # the job ends after its last push
                records["job-1"] = transition(
                    records["job-1"], to=JobStatus.SUCCEEDED, reason="Completed", at=AT
                )[0]

    reports: list[int] = []
    clock = Clock()
    mirror = EventFileMirror(s3, tmp_path, [SOURCE])
    status = keep_in_step(
        mirror,
        store=Store(),
        job_id="job-1",
        clock=clock,
        interval=30,
        on_report=lambda r: reports.append(r.bytes),
    )  # type: ignore[arg-type]
    assert status is JobStatus.SUCCEEDED
    assert clock.slept == 3 and reports == [0, 1, 1, 1]
    assert files(tmp_path)[EVENTS] == b"xxx"
