"""``python -m trainer.launch [-- COMMAND [ARG...]] | [TRAINER-ARG...]``: bring the job's code, then run it.

With ``SQUALL_CODE_URI`` set (a job submitted with ``squall submit --code DIR``, or a
spec naming ``codeUri``), before the command runs:

1. fetch the archive (``s3://`` through the trainer's S3 adapter, which honours
   ``AWS_ENDPOINT_URL``; a local path too), at most `MAX_ARCHIVE_BYTES`;
2. check its sha256 against its name, ``<sha256>.tar.gz``: an archive changed after it
   was packed is refused (exit `CODE_REFUSED`) and nothing of it is unpacked;
3. unpack it into a fresh working directory, refusing absolute names, ``..``, links that
   lead out, hard links, devices, and more than the packer's limits allow;
4. ``pip install -r requirements.txt`` when the code has one, into a directory of its
   own put on PYTHONPATH (what the image has already is not installed again);
   ``SQUALL_SKIP_REQUIREMENTS=1`` skips it;
5. replace this process with the command (os.execvpe), in that directory: it keeps the
   pid, so SIGTERM from Kubernetes reaches it, and its exit code is the pod's.

Without ``SQUALL_CODE_URI`` it only runs the command where it is. The command is what
follows ``--`` (Squall renders ``python -m trainer.launch -- <command> <args>``); with
no ``--`` the arguments are the trainer's, ``python -m trainer ARGS``. ``python`` (and
``python3``) in the command is this interpreter, the one with the trainer's dependencies.

The code directory comes first on PYTHONPATH, then the installed requirements, then
the image's own ``trainer`` package, so that code shipping its own ``trainer`` runs that
one, and code without one still has ``python -m trainer``.

Exit codes (see trainer.exits): 2 a malformed SQUALL_CODE_URI or working directory,
3 (`CODE_REFUSED`) an archive that fails its checks, 1 one that cannot be fetched or
requirements that do not install, 127 a command that does not exist, 143 SIGTERM
before the command started (nothing lost: a re-run starts over).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from trainer import exits, logs, storage

log = logs.get_logger("trainer.launch")

CODE_URI_ENV = "SQUALL_CODE_URI"
# The launcher's scratch directory (default: a new temporary one); the code goes in <dir>/code.
CODE_DIR_ENV = "SQUALL_CODE_DIR"
SKIP_REQUIREMENTS_ENV = "SQUALL_SKIP_REQUIREMENTS"
CODE_SHA256_ENV = "SQUALL_CODE_SHA256"  # set for the command: which code it runs
REQUIREMENTS = "requirements.txt"
DEFAULT_COMMAND = ("python", "-m", "trainer")

# 3: the archive failed its checks (its hash is not its name, or it is unsafe or too
# large). Permanent: the same archive fails again; Squall's Jobs fail at once.
CODE_REFUSED = 3
COMMAND_NOT_FOUND = 127
COMMAND_NOT_EXECUTABLE = 126

# The packer's limits (squall.core.codepack; the trainer never imports squall, and
# tests/worker/test_launch.py holds the two together).
MiB = 1024**2
MAX_ARCHIVE_BYTES = 100 * MiB
MAX_UNPACKED_BYTES = 512 * MiB
MAX_FILE_BYTES = MAX_UNPACKED_BYTES
MAX_FILES = 20_000  # files and links; as many directories again
# Tar headers and padding on top of the data: at most 16 blocks of 512 bytes a member
# (a header, a PAX header for a long name, the padding of the last block).
_MEMBER_OVERHEAD = 16 * 512

ARCHIVE_NAME = re.compile(r"(?P<sha256>[0-9a-f]{64})\.tar\.gz")
_CHUNK = MiB


class LaunchError(Exception):
    """The launcher cannot go on; `code` is the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class CodeRefused(LaunchError):
    """The archive failed its checks: nothing of it is run."""

    def __init__(self, message: str) -> None:
        super().__init__(message, CODE_REFUSED)


# ---- the command ----


def command_of(argv: Sequence[str]) -> list[str]:
    """What to run: what follows ``--``, else the trainer with these arguments."""
    if argv and argv[0] == "--":
        command = list(argv[1:]) or list(DEFAULT_COMMAND)
    else:
        command = [*DEFAULT_COMMAND, *argv]
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    return command


# ---- fetch and check ----


def expected_sha256(uri: str) -> str:
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    match = ARCHIVE_NAME.fullmatch(name)
    if match is None:
        raise LaunchError(
            f"{CODE_URI_ENV}={uri!r}: a code archive's name must be its sha256 (64 lowercase hex "
            "digits) then .tar.gz, as squall submit --code writes it",
            exits.USAGE,
        )
    return match["sha256"]


@dataclass(frozen=True)
class Fetched:
    path: Path
    sha256: str
    size: int


def fetch(uri: str, *, staging: Path) -> Fetched:
    """The archive as a local file, hashed as it is read; refused past MAX_ARCHIVE_BYTES."""
    if storage.is_s3(uri):
        return _fetch_s3(uri, staging=staging)
    path = Path(uri.removeprefix("file://"))
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise LaunchError(f"code archive {uri}: {exc.strerror or exc}", exits.FAILED) from exc
    _check_archive_size(size, uri)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        _copy(handle, None, digest=digest, limit=MAX_ARCHIVE_BYTES, what=uri)
    return Fetched(path=path, sha256=digest.hexdigest(), size=size)


def _fetch_s3(uri: str, *, staging: Path) -> Fetched:
    location = storage.S3Location.parse(uri)
    staging.mkdir(parents=True, exist_ok=True)
    target = staging / Path(location.prefix).name
    digest = hashlib.sha256()
    client = storage.s3_client()
    with storage._wrap("download", uri):
        response = client.get_object(Bucket=location.bucket, Key=location.prefix)
        body = response["Body"]
        try:
            _check_archive_size(int(response.get("ContentLength") or 0), uri)
            with target.open("wb") as out:
                size = _copy(body, out, digest=digest, limit=MAX_ARCHIVE_BYTES, what=uri)
        finally:
            body.close()
    return Fetched(path=target, sha256=digest.hexdigest(), size=size)


def _check_archive_size(size: int, uri: str) -> None:
    if size > MAX_ARCHIVE_BYTES:
        raise CodeRefused(f"code archive {uri} is {size:,} bytes, over the {MAX_ARCHIVE_BYTES:,} allowed")


def _copy(source: Any, out: BinaryIO | None, *, digest: Any, limit: int, what: str) -> int:
    count = 0
    while chunk := source.read(_CHUNK):
        count += len(chunk)
        if count > limit:
            raise CodeRefused(f"code archive {what} is over the {limit:,} bytes allowed")
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return count


def verify(fetched: Fetched, *, expected: str, uri: str) -> None:
    if fetched.sha256 != expected:
        raise CodeRefused(
            f"code archive {uri} was changed after it was packed: its sha256 is {fetched.sha256}, "
            f"its name says {expected}; refusing to run it (submit the code again with squall submit --code)"
        )


# ---- unpack ----


@dataclass(frozen=True)
class Unpacked:
    files: int
    links: int
    directories: int
    bytes: int


class _BoundedReader:
    """The decompressed stream, refused once it is longer than any valid archive can be."""

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self._raw = raw
        self._limit = limit
        self._count = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._limit - self._count + 1
        data = self._raw.read(size)
        self._count += len(data)
        if self._count > self._limit:
            raise CodeRefused(f"the code archive unpacks to more than {self._limit:,} bytes")
        return data


def unpack(archive: Path, dest: Path) -> Unpacked:
    """Unpack into `dest` (created; must be empty): regular files, directories and links
    that stay inside, nothing else, within the packer's limits."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise LaunchError(f"{dest} is not empty: the code is unpacked into a fresh directory", exits.USAGE)
    root = Path(os.path.realpath(dest))
    files = links = directories = total = 0
    seen: set[str] = set()
    extracted_links: list[Path] = []
    stream_limit = MAX_UNPACKED_BYTES + 2 * (MAX_FILES + 1) * _MEMBER_OVERHEAD
    try:
        with (
            gzip.open(archive, "rb") as gz,
            tarfile.open(fileobj=_BoundedReader(gz, stream_limit), mode="r|") as tar,
        ):
            for member in tar:
                name = _member_name(member.name)
                if member.isdir():
                    directories += 1
                    if directories > MAX_FILES:
                        raise CodeRefused(f"the code archive has more than {MAX_FILES:,} directories")
                    _make_dirs(root, name)
                    continue
                if name == ".":
                    raise CodeRefused(f"the code archive holds a {_kind(member)} named {member.name!r}")
                if name in seen:
                    raise CodeRefused(f"the code archive holds {name!r} twice")
                seen.add(name)
                if files + links >= MAX_FILES:
                    raise CodeRefused(f"the code archive holds more than {MAX_FILES:,} files")
                parent = _make_dirs(root, str(Path(name).parent)) if "/" in name else root
                target = parent / Path(name).name
                if member.issym():
                    _check_link(root, name, member.linkname)
                    os.symlink(member.linkname, target)
                    extracted_links.append(target)
                    links += 1
                elif member.isreg():
                    if member.size > MAX_FILE_BYTES or total + member.size > MAX_UNPACKED_BYTES:
                        raise CodeRefused(
                            f"the code archive unpacks to more than {MAX_UNPACKED_BYTES:,} bytes (at {name!r})"
                        )
                    total += member.size
                    _write(tar, member, target)
                    files += 1
                elif member.islnk():
                    raise CodeRefused(f"the code archive holds a hard link, {name!r}: not allowed")
                else:
                    raise CodeRefused(
                        f"the code archive holds {name!r}, which is not a file, a directory or a link"
                    )
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise CodeRefused(f"the code archive is not a valid .tar.gz: {exc}") from exc
    except FileExistsError as exc:
        raise CodeRefused(f"the code archive holds {exc.filename} twice") from exc
    # Each link was checked as it came; the whole set once more, now that every link it
    # may lead through exists: none may resolve outside.
    for link in extracted_links:
        resolved = Path(os.path.realpath(link))
        if not _within(resolved, root):
            raise CodeRefused(f"the code archive's link {link.relative_to(root)} leads outside it")
    return Unpacked(files=files, links=links, directories=directories, bytes=total)


def _kind(member: tarfile.TarInfo) -> str:
    return "link" if member.issym() or member.islnk() else "file" if member.isreg() else "special file"


def _member_name(raw: str) -> str:
    if raw.startswith("/") or "\x00" in raw:
        raise CodeRefused(f"the code archive holds an absolute name, {raw!r}: not allowed")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise CodeRefused(f"the code archive holds a name with '..', {raw!r}: not allowed")
    if not parts:
        return "."
    return "/".join(parts)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _make_dirs(root: Path, name: str) -> Path:
    """root/name as real directories, never through a link."""
    current = root
    if name in ("", "."):
        return current
    for part in name.split("/"):
        current = current / part
        if current.is_symlink():
            raise CodeRefused(f"the code archive writes through its own link {current.relative_to(root)}")
        if not current.exists():
            current.mkdir(mode=0o755)
        elif not current.is_dir():
            raise CodeRefused(
                f"the code archive holds {current.relative_to(root)} both as a file and a directory"
            )
    return current


def _check_link(root: Path, name: str, target: str) -> None:
    if not target or target.startswith("/") or "\x00" in target:
        raise CodeRefused(
            f"the code archive's link {name!r} points at {target!r}: only relative links inside"
        )
    lexical = os.path.normpath(os.path.join(os.path.dirname(name), target))
    resolved = Path(os.path.realpath(root / os.path.dirname(name) / target))
    if lexical == ".." or lexical.startswith("../") or not _within(resolved, root):
        raise CodeRefused(f"the code archive's link {name!r} points at {target!r}, outside it")


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    mode = 0o755 if member.mode & 0o111 else 0o644
    source = tar.extractfile(member)
    if source is None:  # a regular member always has a file object
        raise CodeRefused(f"the code archive's {member.name!r} cannot be read")
    # O_EXCL and O_NOFOLLOW: never over a name already there, never through a link.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out, source:
        remaining = member.size
        while remaining > 0:
            chunk = source.read(min(_CHUNK, remaining))
            if not chunk:
                raise CodeRefused(f"the code archive is cut short in {member.name!r}")
            out.write(chunk)
            remaining -= len(chunk)
    os.chmod(target, mode)  # whatever the umask took away


# ---- requirements ----


def install_requirements(code: Path, packages: Path, environ: Mapping[str, str]) -> list[Path]:
    """pip install -r requirements.txt into `packages`; the directories to put on PYTHONPATH.

    ``--prefix`` rather than ``--target``: pip then leaves out what the image already
    satisfies (TensorFlow, NumPy...), and installs only what is missing or pinned otherwise.
    """
    if not (code / REQUIREMENTS).is_file():
        return []
    if environ.get(SKIP_REQUIREMENTS_ENV, "").strip().lower() in ("1", "true", "yes"):
        log.info("requirements skipped", why=f"{SKIP_REQUIREMENTS_ENV} is set")
        return []
    command = [
        sys.executable, "-m", "pip", "install",
        "--no-input", "--no-cache-dir", "--disable-pip-version-check", "--no-warn-script-location",
        "--prefix", str(packages), "-r", REQUIREMENTS,
    ]  # fmt: skip
    log.info("installing requirements", file=REQUIREMENTS, prefix=str(packages))
    # pip's output goes to the pod's log as it is; stdout carries JSON lines only.
    result = subprocess.run(command, cwd=code, stdout=2, stderr=2, check=False)
    if result.returncode != 0:
        raise LaunchError(f"pip install -r {REQUIREMENTS} failed (exit {result.returncode})", exits.FAILED)
    return site_directories(packages)


def site_directories(prefix: Path) -> list[Path]:
    """Where pip put packages under a prefix: lib/pythonX.Y/site-packages, or a
    distribution's own layout (Debian's local/lib/pythonX.Y/dist-packages)."""
    found = []
    for pattern in (
        "lib*/python*/site-packages",
        "lib*/python*/dist-packages",
        "local/lib*/python*/*-packages",
    ):
        found.extend(sorted(p for p in prefix.glob(pattern) if p.is_dir()))
    return list(dict.fromkeys(found))


# ---- putting it together ----


def _scratch(environ: Mapping[str, str]) -> Path:
    chosen = environ.get(CODE_DIR_ENV)
    if chosen:
        path = Path(chosen)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix="squall-code-"))


def prepare(environ: Mapping[str, str]) -> tuple[Path, dict[str, str]]:
    """Fetch, check, unpack and install the code; its directory and the command's environment."""
    uri = environ[CODE_URI_ENV].strip()
    expected = expected_sha256(uri)
    scratch = _scratch(environ)
    code, packages, staging = scratch / "code", scratch / "packages", scratch / "download"
    if code.exists() and any(code.iterdir()):
        raise LaunchError(f"{code} is not empty: set {CODE_DIR_ENV} to a fresh directory", exits.USAGE)
    try:
        fetched = fetch(uri, staging=staging)
        verify(fetched, expected=expected, uri=uri)
        log.info("code fetched", uri=uri, sha256=fetched.sha256, bytes=fetched.size)
        unpacked = unpack(fetched.path, code)
    except CodeRefused:
        shutil.rmtree(code, ignore_errors=True)  # nothing of a refused archive stays to be run
        raise
    except OSError as exc:  # the scratch disk: full, read-only
        raise LaunchError(f"cannot unpack the code into {code}: {exc}", exits.FAILED) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("code unpacked", dir=str(code), files=unpacked.files, links=unpacked.links, bytes=unpacked.bytes)
    sites = install_requirements(code, packages, environ)
    env = dict(environ)
    image_root = Path(__file__).resolve().parent.parent  # where the image's trainer package lives
    existing = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(code), *(str(s) for s in sites), *existing, str(image_root)])
    )
    bins = [b for b in (packages / "bin", packages / "local" / "bin") if b.is_dir()]
    if bins:
        env["PATH"] = os.pathsep.join([*(str(b) for b in bins), env.get("PATH", os.defpath)])
    env[CODE_SHA256_ENV] = fetched.sha256
    return code, env


def _stop(signum: int, frame: FrameType | None) -> None:
    # As PID 1 of a container, SIGTERM's default (terminate) does not apply: say so
    # ourselves. 143 (128 + SIGTERM) is the re-run-me code; nothing is lost yet.
    raise SystemExit(exits.RETRY)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    argv = list(sys.argv[1:] if argv is None else argv)
    logs.configure()
    signal.signal(signal.SIGTERM, _stop)
    command = command_of(argv)
    cwd, env = Path.cwd(), environ
    if environ.get(CODE_URI_ENV, "").strip():
        try:
            cwd, env = prepare(environ)
        except LaunchError as exc:
            log.error("code not run", error=str(exc), exit=exc.code)
            print(f"trainer.launch: {exc}", file=sys.stderr, flush=True)
            return exc.code
        except storage.StorageError as exc:
            log.error("code not fetched", error=str(exc), exit=exits.FAILED)
            print(f"trainer.launch: {exc}", file=sys.stderr, flush=True)
            return exits.FAILED
    log.info("running", command=command, dir=str(cwd))
    sys.stdout.flush()
    sys.stderr.flush()
    try:  # exec puts SIGTERM back to its default for the command, which sets its own
        os.chdir(cwd)
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        log.error("command not found", command=command[0])
        return COMMAND_NOT_FOUND
    except PermissionError:
        log.error("command not executable", command=command[0])
        return COMMAND_NOT_EXECUTABLE
    return exits.FAILED  # execvpe only returns by raising


if __name__ == "__main__":
    raise SystemExit(main())
