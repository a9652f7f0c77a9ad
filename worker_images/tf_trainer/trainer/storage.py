"""Local paths and s3:// URIs behind one small interface.

TensorFlow writes checkpoints, event files and SavedModels to local disk only (S3
support left core TensorFlow for tensorflow-io), so an s3:// model dir is mirrored:
the trainer works in a local directory, pulls it from S3 once at start, and pushes
after every checkpoint. A local model dir is used in place, with nothing to sync.

The boto3 adapter lives here and nowhere else in the trainer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from trainer.logs import get_logger

log = get_logger(__name__)

# Written last and deleted never: CheckpointManager's index ("checkpoint") names the
# latest checkpoint, so uploading it after the shards it points at means a reader
# never finds an index naming files that are not there yet.
INDEX_FILES = frozenset({"checkpoint"})
# The trainer's report of its latest checkpoint to Squall (trainer/report.py): uploaded
# after the index, so it never names a checkpoint a reader cannot restore yet.
REPORT_FILE = "squall-checkpoint.json"


class StorageError(RuntimeError):
    """Reading or writing a model dir, export or data URI failed."""


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


NAME_MAX_BYTES = 255  # the most a local file system takes for one name


def key_path(relative: str) -> PurePosixPath | None:
    """The local path, below the directory a download goes to, of an S3 key less the
    prefix it was listed under; None for one that must not become a local path.

    Every download that turns keys into local paths goes through here (the checkpoint
    pull, a data prefix, trainer.fetch_model's SavedModel): a key is anyone's text,
    and a prefix is only a string, so ``ckpt/../../code/sitecustomize.py`` lists under
    ``ckpt/``. Refused: the prefix itself and folder markers (empty, ending in "/"),
    "." and "..", empty names (an absolute path, "//"), a backslash (a separator
    elsewhere), NUL, a name longer than a file system takes.
    """
    if not relative or relative.endswith("/") or "\\" in relative or "\x00" in relative:
        return None
    parts = relative.split("/")
    if any(
        part in ("", ".", "..") or len(part.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES
        for part in parts
    ):
        return None
    return PurePosixPath(*parts)


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading or trailing "/"; "" for the whole bucket

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        if not is_s3(uri):
            raise StorageError(f"not an s3:// URI: {uri!r}")
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        if not bucket:
            raise StorageError(f"s3 URI has no bucket: {uri!r}")
        return cls(bucket=bucket, prefix=prefix.strip("/"))

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


class Mirror(Protocol):
    """A local directory standing in for a local path or an s3:// URI."""

    @property
    def local(self) -> Path: ...

    def pull(self) -> None: ...

    def push(self) -> None: ...


@dataclass
class LocalMirror:
    """A local model dir: used in place, nothing to sync."""

    local: Path

    def pull(self) -> None:
        self.local.mkdir(parents=True, exist_ok=True)

    def push(self) -> None:
        pass


@dataclass
class S3Mirror:
    """An s3:// prefix mirrored in a local staging directory.

    ``push`` uploads what changed since the last pull or push and, when ``prune``
    is set, deletes objects whose local file is gone (checkpoints that
    CheckpointManager rotated out), so S3 keeps what local disk keeps.
    """

    location: S3Location
    local: Path
    prune: bool = True
    client: Any = None
    _synced: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.client is None:
            self.client = s3_client()

    def pull(self) -> None:
        """Download every key under the prefix that is a safe path below `local`
        (`key_path`); any other is skipped, with a warning naming it."""
        self.local.mkdir(parents=True, exist_ok=True)
        count = skipped = 0
        for key in self._remote_keys():
            relative = key_path(self._relative(key))
            if relative is None:
                log.warning(
                    "skipped a key that is not a path below the prefix", uri=str(self.location), key=key
                )
                skipped += 1
                continue
            target = self.local.joinpath(*relative.parts)
            uri = f"s3://{self.location.bucket}/{key}"
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with _wrap("download", uri):
                    self.client.download_file(self.location.bucket, key, str(target))
            except OSError as exc:  # a key that is both a file and a prefix, a full disk
                raise StorageError(f"download {uri} to {target} failed: {exc}") from exc
            self._synced[relative.as_posix()] = _stamp(target)
            count += 1
        log.info("pulled", uri=str(self.location), files=count, skipped=skipped, local=str(self.local))

    def push(self) -> None:
        local_files = {p.relative_to(self.local).as_posix(): p for p in _files(self.local)}
        changed = [rel for rel, path in local_files.items() if self._synced.get(rel) != _stamp(path)]
        # Shards first, then the index (see INDEX_FILES), then the report (REPORT_FILE).
        changed.sort(key=lambda rel: (_upload_order(Path(rel).name), rel))
        for rel in changed:
            path = local_files[rel]
            stamp = _stamp(path)
            with _wrap("upload", f"{self.location}/{rel}"):
                self.client.upload_file(str(path), self.location.bucket, self.location.key(rel))
            self._synced[rel] = stamp
        stale: list[str] = []
        if self.prune:
            stale = [
                key
                for key in self._remote_keys()
                if self._relative(key) not in local_files and Path(key).name not in INDEX_FILES
            ]
            for start in range(0, len(stale), 1000):  # DeleteObjects takes 1000 keys at most
                batch = [{"Key": k} for k in stale[start : start + 1000]]
                with _wrap("delete", str(self.location)):
                    self.client.delete_objects(Bucket=self.location.bucket, Delete={"Objects": batch})
            for key in stale:
                self._synced.pop(self._relative(key), None)
        if changed or stale:
            log.info("pushed", uri=str(self.location), uploaded=len(changed), deleted=len(stale))

    def _relative(self, key: str) -> str:
        return key[len(self.location.key("")) :]

    def _remote_keys(self) -> Iterator[str]:
        prefix = self.location.key("")
        with _wrap("list", str(self.location)):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    if not item["Key"].endswith("/"):  # "folder" markers from the console
                        yield item["Key"]


def _upload_order(name: str) -> int:
    return 2 if name == REPORT_FILE else 1 if name in INDEX_FILES else 0


def mirror(uri: str, *, staging: Path, prune: bool = True) -> Mirror:
    """A Mirror for ``uri``; ``staging`` is where an s3:// URI is kept locally."""
    if is_s3(uri):
        return S3Mirror(location=S3Location.parse(uri), local=staging, prune=prune)
    return LocalMirror(local=Path(uri))


def fetch(uri: str, *, staging: Path) -> Path:
    """A local path holding ``uri``: the path itself, or a download of an s3:// object
    or of every object under an s3:// prefix (a directory of TFRecord shards)."""
    if not is_s3(uri):
        path = Path(uri)
        if not path.exists():
            raise StorageError(f"data not found: {uri}")
        return path
    location = S3Location.parse(uri)
    name = key_path(location.prefix.rpartition("/")[2] or location.bucket)
    if name is None:
        raise StorageError(f"{uri}: its last name cannot be a local file name")
    client = s3_client()
    target = staging / name
    if _is_object(client, location):
        staging.mkdir(parents=True, exist_ok=True)
        with _wrap("download", uri):
            client.download_file(location.bucket, location.prefix, str(target))
        return target
    shards = S3Mirror(location=location, local=target, prune=False, client=client)
    shards.pull()
    if not any(_files(target)):
        raise StorageError(f"data not found: nothing at {uri}")
    return target


def s3_client() -> Any:
    # Imported here so that local runs (and the tests of everything else) need no
    # boto3. The endpoint comes from AWS_ENDPOINT_URL(_S3) when set, which is how
    # the local runtime points the trainer at its embedded S3.
    import boto3

    return boto3.client("s3")


@contextmanager
def _wrap(operation: str, uri: str) -> Iterator[None]:
    """Turn botocore errors into StorageError naming the operation and the URI."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError, Boto3Error) as exc:
        raise StorageError(f"{operation} {uri} failed: {exc}") from exc


def _is_object(client: Any, location: S3Location) -> bool:
    """Whether the URI names one object (else it is a prefix of several)."""
    from botocore.exceptions import ClientError

    if not location.prefix:
        return False
    try:
        client.head_object(Bucket=location.bucket, Key=location.prefix)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise StorageError(f"head {location} failed: {exc}") from exc
    return True


def _files(root: Path) -> Iterator[Path]:
    if root.is_dir():
        for directory, _, names in os.walk(root):
            for name in names:
                yield Path(directory) / name


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns
