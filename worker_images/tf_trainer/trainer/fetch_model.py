"""``python -m trainer.fetch_model --source s3://… --target DIR``: a model service's init container.

Squall renders every model service's pod with this as its ``fetch-model`` init
container (core/serving_manifests.py): it copies the SavedModel a job exported
(``<outputUri>/<job id>``, read under the team's Pod Identity role) into the pod's
``models`` volume at ``/models/<name>/<version>``, where TensorFlow Serving then loads
it. TensorFlow Serving cannot read S3 itself (that left core TensorFlow).

Only the SavedModel's parts are copied: ``saved_model.pb``, ``fingerprint.pb`` and
everything under ``variables/``, ``assets/`` and ``assets.extra/``; a key that would
land outside the target (``..``, see trainer.storage.key_path) is never written. The
copy goes to ``<target>.partial`` and is renamed into place once whole, so the server
never sees half a model.

Exit codes (the serving contract): 0 copied; 2 no ``saved_model.pb`` under the source
(reconcile reports ModelNotFound); 1 anything else (bad flags, S3 refused, more than
``MAX_OBJECTS`` objects or ``MAX_MODEL_BYTES`` bytes under the source). On failure the
reason is the last stderr line and, where the kubelet provides one, the container's
termination message (``/dev/termination-log``), which ``kubectl describe`` shows.

Squall's local runtime runs this same command as a model service pod's init container
(squall/local/processes.py), before its stand-in for TensorFlow Serving loads what it copied.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from trainer import exits
from trainer.logs import configure, get_logger
from trainer.storage import S3Location, StorageError, _wrap, is_s3, key_path, s3_client

log = get_logger("trainer.fetch_model")

MAX_OBJECTS = 10_000
MAX_MODEL_BYTES = 16 * 1024**3
SAVED_MODEL_FILES = frozenset({"saved_model.pb", "fingerprint.pb"})
SAVED_MODEL_DIRS = frozenset({"variables", "assets", "assets.extra"})
TERMINATION_LOG = Path("/dev/termination-log")
TERMINATION_MESSAGE_BYTES = 4096  # the kubelet keeps at most this much of it

NO_SAVED_MODEL = 2  # the contract's "no SavedModel at the source"


class NoSavedModelError(StorageError):
    """There is no saved_model.pb under the source."""


def saved_model_part(relative: str) -> PurePosixPath | None:
    """The path below the source of a key that is part of a SavedModel, else None
    (never one that storage.key_path refuses: it would land outside the target)."""
    path = key_path(relative)
    if path is None:
        return None
    if len(path.parts) == 1:
        return path if path.name in SAVED_MODEL_FILES else None
    return path if path.parts[0] in SAVED_MODEL_DIRS else None


def fetch_model(
    source: str,
    target: Path,
    *,
    client: Any = None,
    max_objects: int = MAX_OBJECTS,
    max_bytes: int = MAX_MODEL_BYTES,
) -> int:
    """Copy the SavedModel at the s3:// `source` to `target`; the number of files copied."""
    location = S3Location.parse(source)
    client = client if client is not None else s3_client()
    base = location.key("")
    wanted: list[tuple[str, PurePosixPath]] = []
    listed = 0
    total = 0
    with _wrap("list", str(location)):
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=base):
            for item in page.get("Contents", []):
                listed += 1
                if listed > max_objects:
                    raise StorageError(
                        f"more than {max_objects} objects under {source}: not a SavedModel directory"
                    )
                key = str(item["Key"])
                relative = saved_model_part(key[len(base) :])
                if relative is None:
                    continue
                total += int(item.get("Size", 0))
                if total > max_bytes:
                    raise StorageError(f"the SavedModel at {source} is larger than {max_bytes} bytes")
                wanted.append((key, relative))
    if PurePosixPath("saved_model.pb") not in {relative for _, relative in wanted}:
        raise NoSavedModelError(f"no SavedModel at {source}: no saved_model.pb under it")
    staging = target.with_name(target.name + ".partial")
    try:
        shutil.rmtree(staging, ignore_errors=True)
        for key, relative in wanted:
            path = staging.joinpath(*relative.parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with _wrap("download", f"s3://{location.bucket}/{key}"):
                client.download_file(location.bucket, key, str(path))
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
    except OSError as exc:
        raise StorageError(f"cannot write the SavedModel to {target}: {exc}") from exc
    return len(wanted)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 means "no SavedModel" here
        raise StorageError(f"usage: {message}")


def main(argv: Sequence[str] | None = None, *, termination_log: Path = TERMINATION_LOG) -> int:
    configure()
    parser = _Parser(prog="python -m trainer.fetch_model", description="Copy a SavedModel from S3.")
    parser.add_argument("--source", required=True, help="s3://bucket/prefix of the SavedModel directory")
    parser.add_argument("--target", required=True, type=Path, help="the directory to copy it into")
    try:
        args = parser.parse_args(argv)
        if not is_s3(args.source):
            raise StorageError(f"--source must be an s3:// URI, got {args.source!r}")
        files = fetch_model(args.source, args.target)
    except NoSavedModelError as exc:
        return _fail(str(exc), NO_SAVED_MODEL, termination_log)
    except StorageError as exc:
        return _fail(str(exc), exits.FAILED, termination_log)
    except Exception as exc:
        return _fail(f"{type(exc).__name__}: {exc}", exits.FAILED, termination_log)
    log.info("fetched", source=args.source, target=str(args.target), files=files)
    return exits.OK


def _fail(message: str, code: int, termination_log: Path) -> int:
    log.error("fetch failed", error=message, exit_code=code)
    print(message, file=sys.stderr, flush=True)
    if termination_log.exists():
        with contextlib.suppress(OSError):  # the message is on stderr too
            termination_log.write_text(message.encode()[:TERMINATION_MESSAGE_BYTES].decode("utf-8", "ignore"))
    return code


if __name__ == "__main__":
    sys.exit(main())
