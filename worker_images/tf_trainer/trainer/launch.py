"""``python -m trainer.launch [-- COMMAND [ARG...]] | [TRAINER-ARG...]``: bring the job's code, then run it.

With ``SQUALL_CODE_URI`` set (a job submitted with ``squall submit --code DIR``, or a
spec naming ``codeUri``), before the command runs:

1. fetch the archive (``s3://`` through the trainer's S3 adapter, which honours
   ``AWS_ENDPOINT_URL``; a local path too), at most `MAX_ARCHIVE_BYTES`;
2. check its sha256 against its name, ``<sha256>.tar.gz``: an archive changed after it
   was packed is refused (exit `CODE_REFUSED`) and nothing of it is unpacked;
3. unpack it into a fresh working directory, refusing absolute names, ``..``, links that
   lead out, hard links, devices, and more than the packer's limits allow: files,
   bytes, directories (those a name implies counted), names deeper than `MAX_DEPTH`
   or longer than a file system takes, oversized tar headers (refused before they
   are read). Every check holds against the bytes read, not what a header claims,
   and time and memory grow no faster than the archive;
4. ``pip install -r requirements.txt`` when the code has one, into a directory of its
   own put on PYTHONPATH (what the image has already is not installed again), its
   output shown less the "Requirement already satisfied" lines, then one summary
   line; ``SQUALL_SKIP_REQUIREMENTS=1`` skips it;
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
3 (`CODE_REFUSED`) an archive that fails its checks (any of them: a limit, an unsafe
name, a name the file system refuses), 1 one that cannot be fetched or
requirements that do not install, 127 a command that does not exist, 143 SIGTERM
before the command started (nothing lost: a re-run starts over).
"""

from __future__ import annotations

import errno
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
from dataclasses import dataclass, field
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
# Counted as they are made, the parents a name implies included ("a/b/c/f" makes three).
MAX_DIRECTORIES = MAX_FILES
MAX_ENTRIES = MAX_FILES + MAX_DIRECTORIES  # members of any kind, a directory named twice included
# What a file system takes, held against the bytes of each name (UTF-8).
MAX_NAME_BYTES = 255  # one name (NAME_MAX)
MAX_PATH_BYTES = 1024  # a member's path, a link's target
MAX_DEPTH = 64  # names in one path
MAX_LINK_HOPS = 40  # links followed to resolve one; the kernel's own limit (MAXSYMLINKS)
# tarfile reads an extended header (PAX, GNU long name or link) whole into memory.
MAX_EXTENDED_HEADER_BYTES = 64 * 1024  # one of them; a PAX name is at most MAX_PATH_BYTES
MAX_GLOBAL_HEADER_BYTES = 4 * 1024  # global PAX headers together: tarfile applies them to every member
_MAX_EXTENDED_IN_A_ROW = 4  # tarfile parses each with one more level of recursion
# What tarfile may read for one member's headers: the extended ones, the member's own,
# the previous member's padding, and its read-ahead of a record or two.
_MAX_HEADER_READ = _MAX_EXTENDED_IN_A_ROW * (MAX_EXTENDED_HEADER_BYTES + 1024) + 4 * tarfile.RECORDSIZE
_EXTENDED_HEADERS = frozenset(
    {
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    }
)
# OSErrors that say what the archive holds, not that the disk failed: refused, not retried.
_REFUSED_BY_THE_FILE_SYSTEM = frozenset(
    {errno.ENAMETOOLONG, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ELOOP}
)
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
    name = storage.key_path(location.prefix.rpartition("/")[2])
    if name is None:
        raise LaunchError(f"{CODE_URI_ENV}={uri!r} does not end in a file name", exits.USAGE)
    staging.mkdir(parents=True, exist_ok=True)
    target = staging / name
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
    directories: int  # every one made, the parents a name implies included
    bytes: int


class _BoundedReader:
    """The decompressed stream, refused once it is longer than any valid archive can be.

    While tarfile reads the headers of one member (`reading_headers`), at most
    `_MAX_HEADER_READ` bytes: whatever tarfile does between two members (an extended
    header, a sparse map, a run of headers) reads a bounded amount, never an
    archive-sized one into memory.
    """

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self._raw = raw
        self._limit = limit
        self._count = 0
        self._headers_from: int | None = None

    def reading_headers(self) -> None:
        self._headers_from = self._count

    def reading_data(self) -> None:
        self._headers_from = None

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._limit - self._count + 1
        if self._headers_from is not None:
            size = min(size, self._headers_from + _MAX_HEADER_READ - self._count + 1)
        data = self._raw.read(size)
        self._count += len(data)
        if self._count > self._limit:
            raise CodeRefused(f"the code archive unpacks to more than {self._limit:,} bytes")
        if self._headers_from is not None and self._count - self._headers_from > _MAX_HEADER_READ:
            raise CodeRefused(
                f"the code archive has more than {_MAX_HEADER_READ:,} bytes of headers for one entry"
            )
        return data


class _HeaderRules:
    """Checked on each 512-byte header as tarfile parses it, before it reads what follows."""

    def __init__(self) -> None:
        self.entries = 0
        self.extended_in_a_row = 0
        self.global_bytes = 0

    def check(self, info: tarfile.TarInfo) -> None:
        if info.type == tarfile.GNUTYPE_SPARSE:  # tarfile reads its map block by block, with no end
            raise CodeRefused(f"the code archive holds a sparse file, {info.name!r}: not allowed")
        if info.type not in _EXTENDED_HEADERS:
            self.extended_in_a_row = 0
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                raise CodeRefused(f"the code archive has more than {MAX_ENTRIES:,} entries")
            return
        # tarfile reads an extended header whole, and the header after it from within
        # (one level of recursion each): both are bounded here, before the read.
        self.extended_in_a_row += 1
        if self.extended_in_a_row > _MAX_EXTENDED_IN_A_ROW:
            raise CodeRefused(
                f"the code archive has more than {_MAX_EXTENDED_IN_A_ROW} extended headers in a row"
            )
        if info.size > MAX_EXTENDED_HEADER_BYTES:
            raise CodeRefused(
                f"the code archive has an extended header of {info.size:,} bytes, "
                f"over the {MAX_EXTENDED_HEADER_BYTES:,} allowed"
            )
        if info.type == tarfile.XGLTYPE:  # tarfile applies them to every member after
            self.global_bytes += info.size
            if self.global_bytes > MAX_GLOBAL_HEADER_BYTES:
                raise CodeRefused(
                    f"the code archive's global headers are over the {MAX_GLOBAL_HEADER_BYTES:,} bytes allowed"
                )


def _checked_tarinfo(rules: _HeaderRules) -> type[tarfile.TarInfo]:
    """A TarInfo whose every header goes through `rules` (frombuf is tarfile's one way in)."""

    class CheckedTarInfo(tarfile.TarInfo):
        __slots__ = ()

        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> CheckedTarInfo:
            info = super().frombuf(buf, encoding, errors)
            rules.check(info)
            return info

    return CheckedTarInfo


def _next(tar: tarfile.TarFile, stream: _BoundedReader) -> tarfile.TarInfo | None:
    stream.reading_headers()
    member = tar.next()
    stream.reading_data()
    # A streamed archive is read once: drop what tarfile keeps for getmembers(), so
    # memory holds one member, not all of them with their extended headers.
    tar.members.clear()  # type: ignore[attr-defined]
    return member


def unpack(archive: Path, dest: Path) -> Unpacked:
    """Unpack into `dest` (created; must be empty): regular files, directories and links
    that stay inside, nothing else, within the limits (the packer's, and names a file
    system takes). Time and memory grow with the archive's size, never faster."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise LaunchError(f"{dest} is not empty: the code is unpacked into a fresh directory", exits.USAGE)
    tree = _Tree(Path(os.path.realpath(dest)))
    files = links = total = 0
    stream_limit = MAX_UNPACKED_BYTES + 2 * (MAX_FILES + 1) * _MEMBER_OVERHEAD
    try:
        with gzip.open(archive, "rb") as gz:
            stream = _BoundedReader(gz, stream_limit)
            stream.reading_headers()  # tarfile.open reads the first one
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_checked_tarinfo(_HeaderRules())) as tar:
                while (member := _next(tar, stream)) is not None:
                    parts = _member_parts(member.name)
                    if member.isdir():
                        tree.directory(parts)
                        continue
                    name = "/".join(parts)
                    if not parts:
                        raise CodeRefused(f"the code archive holds a {_kind(member)} named {member.name!r}")
                    if member.islnk():
                        raise CodeRefused(f"the code archive holds a hard link, {name!r}: not allowed")
                    if not (member.issym() or member.isreg()):
                        raise CodeRefused(
                            f"the code archive holds {name!r}, which is not a file, a directory or a link"
                        )
                    if files + links >= MAX_FILES:
                        raise CodeRefused(f"the code archive holds more than {MAX_FILES:,} files")
                    if member.issym():
                        _check_link(name, member.linkname)
                        os.symlink(member.linkname, tree.add(parts, link=member.linkname))
                        links += 1
                        continue
                    # PAX's GNU sparse maps: a few bytes declare the file's size, written out in zeros
                    if member.sparse is not None:
                        raise CodeRefused(f"the code archive holds a sparse file, {name!r}: not allowed")
                    # A PAX size of -1..-511 keeps tarfile's offsets in step, and lowered `total`
                    if member.size < 0:
                        raise CodeRefused(f"the code archive holds {name!r} with a negative size")
                    if member.size > MAX_FILE_BYTES or total + member.size > MAX_UNPACKED_BYTES:
                        raise CodeRefused(
                            f"the code archive unpacks to more than {MAX_UNPACKED_BYTES:,} bytes (at {name!r})"
                        )
                    total += member.size
                    _write(tar, member, tree.add(parts))
                    files += 1
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise CodeRefused(f"the code archive is not a valid .tar.gz: {exc}") from exc
    except ValueError as exc:  # what tarfile's parsing of a field lets through (a sparse map's numbers)
        raise CodeRefused(f"the code archive has a header that is not valid: {exc}") from exc
    except OSError as exc:
        if exc.errno in _REFUSED_BY_THE_FILE_SYSTEM:  # a backstop: the checks above come first
            raise CodeRefused(f"the code archive holds {exc.filename}: {exc.strerror}") from exc
        raise
    # Each link was checked lexically as it came; now that every link it may lead
    # through exists, where each one really leads: none may resolve outside.
    tree.check_links()
    return Unpacked(files=files, links=links, directories=tree.directories, bytes=total)


def _kind(member: tarfile.TarInfo) -> str:
    return "link" if member.issym() or member.islnk() else "file" if member.isreg() else "special file"


def _member_parts(raw: str) -> list[str]:
    """The names along a member's path; [] for the top directory. Refused: an absolute
    path, '..', a path or a name longer than a file system takes, one too deep."""
    if raw.startswith("/") or "\x00" in raw:
        raise CodeRefused(f"the code archive holds an absolute name, {raw[:200]!r}: not allowed")
    try:
        size = len(os.fsencode(raw))
    except UnicodeError:
        raise CodeRefused(f"the code archive holds a name that is not valid, {raw[:200]!r}") from None
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise CodeRefused(f"the code archive holds a name with '..', {raw[:200]!r}: not allowed")
    if len(parts) > MAX_DEPTH:
        raise CodeRefused(
            f"the code archive holds a path {len(parts)} names deep, over the {MAX_DEPTH} allowed"
        )
    if size > MAX_PATH_BYTES:
        raise CodeRefused(
            f"the code archive holds a path of {size:,} bytes, over the {MAX_PATH_BYTES:,} allowed: {raw[:200]!r}..."
        )
    for part in parts:
        if (length := len(os.fsencode(part))) > MAX_NAME_BYTES:
            raise CodeRefused(
                f"the code archive holds a name of {length} bytes, over the "
                f"{MAX_NAME_BYTES} a file system takes: {part[:60]!r}..."
            )
    return parts


def _check_link(name: str, target: str) -> None:
    """What a link's own text shows: relative, short enough, not out of the archive by its '..'."""
    if not target or target.startswith("/") or "\x00" in target:
        raise CodeRefused(
            f"the code archive's link {name!r} points at {target[:200]!r}: only relative links inside"
        )
    try:
        size = len(os.fsencode(target))
    except UnicodeError:
        raise CodeRefused(f"the code archive's link {name!r} points at a name that is not valid") from None
    if size > MAX_PATH_BYTES:
        raise CodeRefused(
            f"the code archive's link {name!r} points at a path over the {MAX_PATH_BYTES:,} bytes allowed"
        )
    lexical = os.path.normpath(os.path.join(os.path.dirname(name), target))
    if lexical == ".." or lexical.startswith("../"):
        raise CodeRefused(f"the code archive's link {name!r} points at {target!r}, outside it")


class _Outside(Exception):
    """A path resolved above the top of the code."""


@dataclass(eq=False)
class _Node:
    """One entry of the unpacked tree, as the unpacker made it (nothing else writes there)."""

    parent: _Node | None
    kind: str  # "directory", "file" or "link"
    name: str = ""  # a link's path, for messages
    target: str = ""  # a link's target
    children: dict[str, _Node] = field(default_factory=dict)
    leads_to: tuple[_Node, int] | None = None  # a link's resolution, once known
    resolving: bool = False


class _Tree:
    """The unpacked tree in memory: which names exist and what each one is, so that
    each member costs a walk down its own path (no file system call per parent seen
    before) and links resolve without the file system (in time linear in their number)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.top = _Node(parent=None, kind="directory")
        self.directories = 0
        self._links: list[_Node] = []

    def directory(self, parts: Sequence[str]) -> _Node:
        """The directory `parts`, made with its missing parents, never through a link."""
        node = self.top
        for depth, part in enumerate(parts, start=1):
            child = node.children.get(part)
            if child is None:
                self.directories += 1
                if self.directories > MAX_DIRECTORIES:
                    raise CodeRefused(
                        f"the code archive makes more than {MAX_DIRECTORIES:,} directories "
                        "(those its names imply included)"
                    )
                os.mkdir(self.root.joinpath(*parts[:depth]), 0o755)
                child = node.children[part] = _Node(parent=node, kind="directory")
            elif child.kind == "link":
                raise CodeRefused(f"the code archive writes through its own link {'/'.join(parts[:depth])}")
            elif child.kind == "file":
                raise CodeRefused(
                    f"the code archive holds {'/'.join(parts[:depth])} both as a file and a directory"
                )
            node = child
        return node

    def add(self, parts: Sequence[str], *, link: str | None = None) -> Path:
        """Claim the name `parts` for a file or a link: the path to create it at."""
        parent = self.directory(parts[:-1])
        name = "/".join(parts)
        existing = parent.children.get(parts[-1])
        if existing is not None and existing.kind == "directory":
            raise CodeRefused(f"the code archive holds {name} both as a file and a directory")
        if existing is not None:
            raise CodeRefused(f"the code archive holds {name!r} twice")
        node = _Node(parent=parent, kind="file" if link is None else "link", name=name, target=link or "")
        parent.children[parts[-1]] = node
        if link is not None:
            self._links.append(node)
        return self.root.joinpath(*parts)

    def check_links(self) -> None:
        for link in self._links:
            try:
                self._resolve(link, hops=0)
            except _Outside:
                raise CodeRefused(f"the code archive's link {link.name} leads outside it") from None

    def _resolve(self, link: _Node, *, hops: int) -> tuple[_Node, int]:
        if link.leads_to is not None:
            return link.leads_to
        if link.resolving:
            raise CodeRefused(f"the code archive's link {link.name} loops")
        if hops >= MAX_LINK_HOPS:  # the kernel would not follow them either (ELOOP)
            raise CodeRefused(
                f"the code archive has more than {MAX_LINK_HOPS} links in a row, at {link.name}"
            )
        assert link.parent is not None  # a link is never the top
        link.resolving = True
        link.leads_to = self._walk(link.parent, link.target, hops=hops + 1)
        link.resolving = False
        return link.leads_to

    def _walk(self, start: _Node, path: str, *, hops: int) -> tuple[_Node, int]:
        """Where `path` leads from the directory `start`, as the kernel resolves it: the
        deepest entry that exists, and how many names past it do not (taken lexically)."""
        node, missing = start, 0
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if missing:
                    missing -= 1
                elif node.parent is None:
                    raise _Outside
                else:
                    node = node.parent
            elif missing or (child := node.children.get(part)) is None:
                missing += 1
            elif child.kind == "link":
                node, missing = self._resolve(child, hops=hops)
            else:
                node = child
        return node, missing


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
        "--progress-bar", "off", "--prefix", str(packages), "-r", REQUIREMENTS,
    ]  # fmt: skip
    log.info("installing requirements", file=REQUIREMENTS, prefix=str(packages))
    pip = run_pip(command, cwd=code)
    if pip.returncode != 0:
        raise LaunchError(f"pip install -r {REQUIREMENTS} failed (exit {pip.returncode})", exits.FAILED)
    log.info(
        "requirements installed",
        file=REQUIREMENTS,
        installed=len(pip.installed),
        already_satisfied=pip.satisfied,
        packages=list(pip.installed),
    )
    return site_directories(packages)


@dataclass(frozen=True)
class PipRun:
    returncode: int
    installed: tuple[str, ...]  # "name-version", as pip's "Successfully installed" line says
    satisfied: int  # requirements (theirs included) the image or the prefix already had


_SATISFIED = "Requirement already satisfied"  # one line a package the image has: dropped
_INSTALLED = "Successfully installed "
# What pip says before it does anything: shown once it goes on to do something, else not.
_PREAMBLE = ("Looking in indexes:", "Looking in links:", "Ignoring ")


def run_pip(command: Sequence[str], *, cwd: Path) -> PipRun:
    """Run pip, its lines to stderr as they come (stdout carries JSON lines only), less
    the "Requirement already satisfied" ones, and less its preamble ("Looking in
    links...") when it then has nothing to do: what is left is what pip did, or why
    it failed, and nothing at all when the image had everything."""
    installed: list[str] = []
    satisfied = 0
    held: list[str] | None = []  # the preamble, until pip does something (then None)

    def show(line: str) -> None:
        sys.stderr.write(line)
        sys.stderr.flush()

    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None  # stdout=PIPE
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace")
            if line.startswith(_SATISFIED):
                satisfied += 1
                continue
            if line.startswith(_INSTALLED):
                installed.extend(line[len(_INSTALLED) :].split())
            if held is not None:
                if line.startswith(_PREAMBLE):
                    held.append(line)
                    continue
                for earlier in held:
                    show(earlier)
                held = None
            show(line)
        returncode = process.wait()
    except BaseException:  # SIGTERM (SystemExit) included: pip goes with the launcher
        process.kill()
        process.wait()
        raise
    finally:
        if process.stdout is not None:
            process.stdout.close()
    if returncode != 0:
        for earlier in held or ():
            show(earlier)
    return PipRun(returncode=returncode, installed=tuple(installed), satisfied=satisfied)


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
