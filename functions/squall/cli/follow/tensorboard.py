"""`squall tensorboard`: a job's TensorBoard files, mirrored from S3 into a local directory.

Where they are: Squall passes a job its `checkpointUri` and `outputUri`, and its
trainer keeps its files under `<uri>/<job id>/` (worker_images/tf_trainer/trainer/
config.py: every trial of a sweep shares the URIs), event files in `logs/` below the
checkpoints' prefix (train.py). So the mirror lists `<uri>/<job id>/` of both URIs
(each trial's for a sweep, into a folder per trial, so TensorBoard compares them) and
copies what TensorBoard reads: event files (`*.tfevents.*`), plugin data (`plugins/`)
and projector configs; checkpoints and SavedModels stay in S3.

Keeping in step: each pass lists again and compares each object's size and ETag with
what was copied (recorded in `.squall/manifest.json` beside the files, so a later run
copies only what changed). An event file only ever grows (TensorFlow appends records),
so a grown one gets just its new tail appended in place: TensorBoard keeps its event
files open and reads on from where it was, and would never see a file replaced under
it. Anything else that changed is downloaded whole beside the old one and renamed over
it. A pass is planned before anything is copied and refused whole when it would pass
the bounds (files, bytes), so nothing is half-done; a key that would land outside the
directory (`..`, empty parts) is skipped and reported. Each object is read by byte range
up to the size the listing gave, never further: an object that grows after the listing
(a pod still writing) cannot carry the pass past its bounds; its new tail is copied by
the next pass.

Key names and URIs come from the job's record and its pods: the lines this module writes
for `squall tensorboard` (`warnings`, `progress`, `mirrored`, `nothing_yet`) show them
through `printable`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from squall.cli.follow.clock import patient
from squall.cli.text import printable
from squall.core.job_outputs import StoredObject, split_s3_uri
from squall.core.jobs import Job, JobStatus, is_terminal

if TYPE_CHECKING:  # for annotations only: ports.py imports pydantic, which `squall plan` does without
    from squall.ports import FollowClock, JobReader, ObjectSource


STATE_DIR = ".squall"
MANIFEST = "manifest.json"
DEFAULT_MAX_OBJECTS = 100_000  # listed per prefix and pass
DEFAULT_MAX_FILES = 10_000  # mirrored in all
DEFAULT_MAX_BYTES = 20 * 1024**3
DEFAULT_INTERVAL = 30.0


class MirrorError(ValueError):
    """A pass that cannot be made: a bound it would pass, a job with nowhere to look."""


class ServeError(RuntimeError):
    """TensorBoard could not start serving."""


@dataclass(frozen=True)
class Source:
    """One S3 prefix and the folder (relative to the mirror) its files go to."""

    bucket: str
    prefix: str  # ends with "/"
    local: PurePosixPath

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


RUN_NAME_CHARS = re.compile(r"[^A-Za-z0-9._=+,-]")
RUN_NAME_MAX = 200  # characters (ASCII only): well within a file system's 255 bytes a name


def run_name(trial_id: str, *, sweep_id: str, parameters: Mapping[str, Any]) -> str:
    """A sweep trial's folder, so TensorBoard names its run by its parameters: `t003_lr=0.001_batch=64`.

    Parameter names and values are a spec's text: anything but letters, digits and `._=+,-`
    becomes `_`, so a value cannot make a path, a hidden name or a control sequence; the
    trial's own part of its id comes first, so two trials never share a folder.
    """
    own = trial_id[len(sweep_id) + 1 :] if trial_id.startswith(f"{sweep_id}-") else trial_id
    parts = [own or trial_id, *(f"{name}={_run_value(value)}" for name, value in parameters.items())]
    name = RUN_NAME_CHARS.sub("_", "_".join(parts))[:RUN_NAME_MAX]
    if safe_relative(name) is None or name.startswith("."):  # cannot be, as the characters are; kept safe
        return RUN_NAME_CHARS.sub("_", trial_id)
    return name


def _run_value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def job_sources(job: Job, *, runs: Mapping[str, str] | None = None) -> list[Source]:
    """Where the job's (or each trial's) TensorBoard files may be, by the trainer's convention.

    `runs`: a sweep's trial id -> its folder (`run_name`); a trial it does not name keeps its id.
    """
    runs = runs or {}
    spec = job.spec or {}
    uris = [(spec.get("checkpointUri"), PurePosixPath()), (spec.get("outputUri"), PurePosixPath("output"))]
    ids = job.trial_ids or (job.id,)
    sources: list[Source] = []
    seen: set[tuple[str, str]] = set()
    for run_id in ids:
        for uri, folder in uris:
            if not isinstance(uri, str):
                continue
            try:
                bucket, key = split_s3_uri(uri)
            except ValueError:  # not an s3:// URI, or no bucket: nothing of the job's there
                continue
            base = key.strip("/")
            prefix = f"{base}/{run_id}/" if base else f"{run_id}/"
            if (bucket, prefix) in seen:
                continue
            seen.add((bucket, prefix))
            local = (PurePosixPath(runs.get(run_id, run_id)) / folder) if job.trial_ids else folder
            sources.append(Source(bucket=bucket, prefix=prefix, local=local))
    return sources


def is_tensorboard_file(relative: PurePosixPath) -> bool:
    name = relative.name
    return ".tfevents." in name or "plugins" in relative.parts[:-1] or name == "projector_config.pbtxt"


NAME_MAX_BYTES = 255  # one name, as a local file system takes it


def safe_relative(text: str) -> PurePosixPath | None:
    """`text` as a path inside the mirror, or None when it would leave it (or clash with its state,
    or has a name longer than a file system takes: its ENAMETOOLONG stopped every pass)."""
    parts = text.split("/")
    if any(
        p in ("", ".", "..")
        or "\\" in p
        or "\0" in p
        or len(p.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES
        for p in parts
    ):
        return None
    if parts[0] == STATE_DIR:
        return None
    return PurePosixPath(*parts)


@dataclass
class SyncReport:
    files: int = 0  # TensorBoard files mirrored after the pass
    copied: int = 0  # downloaded whole
    appended: int = 0  # grown files: the new tail added
    unchanged: int = 0
    bytes: int = 0  # transferred in this pass
    skipped: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)  # prefixes with more objects than listed


@dataclass(frozen=True)
class _Step:
    source: Source
    item: StoredObject
    relative: PurePosixPath
    offset: int  # 0: whole; else append from here


class EventFileMirror:
    """The TensorBoard files of some S3 prefixes, kept in a local directory."""

    def __init__(
        self,
        objects: ObjectSource,
        dest: Path,
        sources: Iterable[Source],
        *,
        max_objects: int = DEFAULT_MAX_OBJECTS,
        max_files: int = DEFAULT_MAX_FILES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._objects = objects
        self.dest = dest
        self.sources = list(sources)
        self._max_objects = max_objects
        self._max_files = max_files
        self._max_bytes = max_bytes
        self._manifest: dict[str, dict[str, Any]] = self._load_manifest()

    @property
    def _state(self) -> Path:
        return self.dest / STATE_DIR

    def _load_manifest(self) -> dict[str, dict[str, Any]]:
        path = self._state / MANIFEST
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: everything is compared afresh
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, dict):
            return {}
        return {
            str(k): v
            for k, v in files.items()
            if isinstance(v, dict) and isinstance(v.get("size"), int) and isinstance(v.get("etag"), str)
        }

    def _save_manifest(self) -> None:
        self._state.mkdir(parents=True, exist_ok=True)
        temporary = self._state / f"{MANIFEST}.{uuid.uuid4().hex}"
        temporary.write_text(json.dumps({"files": self._manifest}, indent=1, sort_keys=True))
        os.replace(temporary, self._state / MANIFEST)

    def _plan(self, report: SyncReport) -> list[_Step]:
        steps: list[_Step] = []
        wanted: dict[str, StoredObject] = {}
        for source in self.sources:
            listed = 0
            for item in self._objects.list(source.bucket, source.prefix, limit=self._max_objects + 1):
                listed += 1
                if listed > self._max_objects:
                    report.truncated.append(source.uri)
                    break
                relative_text = item.key[len(source.prefix) :]
                inside = safe_relative(relative_text)
                if inside is None:
                    report.skipped.append(f"s3://{source.bucket}/{item.key}")
                    continue
                if not is_tensorboard_file(inside):
                    continue
                relative = source.local / inside
                key = relative.as_posix()
                if key in wanted:
                    continue
                wanted[key] = item
                steps.append(self._step(source, item, relative))
        report.files = len(wanted)
        if len(wanted) > self._max_files:
            raise MirrorError(
                f"{_files(len(wanted))} under {_uris(self.sources)}: "
                f"more than the {self._max_files} a mirror takes"
            )
        total = sum(item.size for item in wanted.values())
        if total > self._max_bytes:
            raise MirrorError(
                f"the TensorBoard files take {_bytes(total)}: more than the {self._max_bytes} a mirror takes"
            )
        return [s for s in steps if s.offset >= 0]

    def _step(self, source: Source, item: StoredObject, relative: PurePosixPath) -> _Step:
        """What to do for one object: -1 nothing, 0 copy whole, n append from byte n."""
        key = relative.as_posix()
        target = self.dest / relative
        known = self._manifest.get(key)
        size = target.stat().st_size if target.is_file() else None
        if known is not None and size == known["size"]:
            if known["size"] == item.size and known["etag"] == item.etag:
                return _Step(source, item, relative, -1)
            if size is not None and ".tfevents." in relative.name and 0 < size < item.size:
                return _Step(source, item, relative, size)
        return _Step(source, item, relative, 0)

    def sync(self) -> SyncReport:
        """One pass: list, plan (refused whole past the bounds), copy; returns what it did."""
        report = SyncReport()
        steps = self._plan(report)
        report.unchanged = report.files - len(steps)
        if not steps:
            return report
        partial = self._state / "partial"
        partial.mkdir(parents=True, exist_ok=True)
        try:
            for step in steps:
                self._apply(step, partial, report)
        finally:
            self._save_manifest()
            shutil.rmtree(partial, ignore_errors=True)
        return report

    def _apply(self, step: _Step, partial: Path, report: SyncReport) -> None:
        target = self.dest / step.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = partial / uuid.uuid4().hex
        key = step.relative.as_posix()
        if step.offset:
            got = self._objects.download(
                step.source.bucket, step.item.key, temporary, offset=step.offset, end=step.item.size
            )
            if got == step.item.size - step.offset:
                with temporary.open("rb") as tail, target.open("ab") as handle:
                    shutil.copyfileobj(tail, handle)
                self._manifest[key] = {"size": step.item.size, "etag": step.item.etag}
                report.appended += 1
                report.bytes += got
                return
            # The object changed between the listing and the read: take it whole.
        got = self._objects.download(step.source.bucket, step.item.key, temporary, end=step.item.size)
        os.replace(temporary, target)
        # A size other than the listed one means it changed meanwhile: the next pass compares again.
        self._manifest[key] = {"size": got, "etag": step.item.etag if got == step.item.size else ""}
        report.copied += 1
        report.bytes += got


# ---- what `squall tensorboard` prints of a pass ----


def _files(count: int) -> str:
    return f"{count} TensorBoard file{'' if count == 1 else 's'}"


def _bytes(count: int) -> str:
    return f"{count} byte{'' if count == 1 else 's'}"


def _uris(sources: Iterable[Source]) -> str:
    return ", ".join(printable(s.uri, newlines=False) for s in sources)


def warnings(report: SyncReport, *, shown: int = 5) -> list[str]:
    """The pass's skipped keys (the first `shown`) and the prefixes it could not list whole, one line each."""
    lines = [
        f"skipped {printable(key, newlines=False)}: its key would leave the directory"
        for key in report.skipped[:shown]
    ]
    if len(report.skipped) > shown:
        lines.append(f"skipped {len(report.skipped) - shown} more such keys")
    lines += [
        f"{printable(uri, newlines=False)} holds more objects than one pass lists; the rest were not looked at"
        for uri in report.truncated
    ]
    return lines


def progress(report: SyncReport, dest: Path) -> str | None:
    """What the pass copied, or None when it copied nothing."""
    if not (report.copied or report.appended):
        return None
    return (
        f"{printable(str(dest), newlines=False)}: {report.copied} copied, {report.appended} grown, "
        f"{report.unchanged} unchanged ({_bytes(report.bytes)})"
    )


def mirrored(report: SyncReport, dest: Path) -> str:
    return f"{printable(str(dest), newlines=False)}: {_files(report.files)}"


def nothing_yet(sources: Iterable[Source]) -> str:
    return (
        f"no TensorBoard files under {_uris(sources)} yet (Squall's trainer writes them under "
        "<checkpointUri>/<job id>/logs/)"
    )


def keep_in_step(
    mirror: EventFileMirror,
    *,
    store: JobReader,
    job_id: str,
    clock: FollowClock,
    interval: float = DEFAULT_INTERVAL,
    on_report: Callable[[SyncReport], None] = lambda report: None,
) -> JobStatus | None:
    """Pass after pass while the job runs, and one more once it is final; returns its final status."""
    while True:
        job = patient(lambda: store.get(job_id), clock=clock, wait=interval)
        final = job is None or is_terminal(job.status)
        on_report(patient(mirror.sync, clock=clock, wait=interval))
        if final:
            return job.status if job is not None else None
        clock.sleep(interval)


def start_tensorboard(logdir: Path, *, port: int, host: str) -> str:
    """TensorBoard serving `logdir` in this process (its own threads); returns its URL."""
    from tensorboard import program

    board = program.TensorBoard()
    board.configure(logdir=str(logdir), port=port, host=host, reload_interval=5.0)
    try:
        url: str = board.launch()
    except program.TensorBoardServerException as exc:  # the port is taken, say
        raise ServeError(f"TensorBoard cannot serve on {host}:{port}: {exc.msg}") from exc
    return url
