"""A code directory packed into a deterministic .tar.gz, named by its sha256.

`squall submit --code DIR` packs DIR with `pack`, uploads the archive once per content
(``s3://<artifacts bucket>/code/<team>/<sha256>.tar.gz``) and records that URI as the
spec's ``codeUri``; the worker image's entrypoint (``python -m trainer.launch``) checks
the hash against the name before it unpacks anything.

The same directory always gives the same bytes, hence the same hash: entries are sorted,
and every field that says where or when the files were written is fixed (mtime 0, uid and
gid 0, no user or group names, mode 0644 or 0755 by the executable bit, a gzip header
without a file name or time). Edit a file and the hash changes; touch it and it does not.

Left out: version control directories (always), caches and virtual environments (unless
``.squallignore`` re-includes them with ``!``) and what ``.squallignore`` at the root of
DIR lists, in the gitignore grammar (see `IgnoreRules`). An ignored directory is never
walked, so a large ignored ``data/`` costs nothing. Symbolic links are kept as links when
they point inside DIR and refused when they point outside it. Sockets, pipes and devices
are skipped.

Bounded by construction: the walk stops at the first file past `MAX_FILE_BYTES` or
`MAX_UNPACKED_BYTES` in all, past `MAX_FILES` entries packed or `MAX_SCANNED` examined,
and packing stops as soon as the archive passes `MAX_ARCHIVE_BYTES`: an enormous
directory fails fast, before anything is uploaded. The worker's unpacker holds archives
to the same limits (tests/worker/test_launch.py holds the two together).

Pure: no AWS client here; it reads DIR and writes the archive to a file the caller names.
"""

from __future__ import annotations

import gzip
import hashlib
import heapq
import os
import stat
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

MiB = 1024**2

MAX_ARCHIVE_BYTES = 100 * MiB  # the packed archive, as uploaded
MAX_UNPACKED_BYTES = 512 * MiB  # the files' sizes added up
MAX_FILE_BYTES = MAX_UNPACKED_BYTES  # one file
MAX_FILES = 20_000  # files and links packed
MAX_SCANNED = 200_000  # directory entries examined, ignored ones included
MAX_IGNORE_FILE_BYTES = 64 * 1024
MAX_IGNORE_PATTERNS = 1_000
MAX_PATTERN_LENGTH = 1_024
# The shape the worker's unpacker accepts (trainer/launch.py): refused here, at submit,
# rather than with exit 3 when the job starts.
MAX_NAME_BYTES = 255  # one name (NAME_MAX)
MAX_PATH_BYTES = 1_024  # a packed path, a link's target
MAX_DEPTH = 64  # names in one path

IGNORE_FILE = ".squallignore"
ARCHIVE_SUFFIX = ".tar.gz"

# Never packed, whatever .squallignore says: repository metadata is not code.
VCS_DIRECTORIES = (".git", ".hg", ".svn")
# Left out unless .squallignore re-includes them ("!.venv").
DEFAULT_IGNORES = (
    "__pycache__/",
    "*.pyc",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".venv/",
    "node_modules/",
    ".ipynb_checkpoints/",
    ".DS_Store",
)

_COMPRESS_LEVEL = 9


class PackError(ValueError):
    """The directory cannot be packed: what is wrong, naming the path or limit."""


@dataclass(frozen=True)
class PackedCode:
    """A packed directory: the archive, its hash and what went into it."""

    path: Path
    sha256: str
    archive_bytes: int
    files: int  # regular files packed
    links: int  # symbolic links packed
    unpacked_bytes: int  # the files' sizes added up
    ignored: int  # entries left out by the ignore rules (an ignored directory counts once)
    skipped: tuple[str, ...] = ()  # sockets, pipes, devices: not files, left out

    @property
    def name(self) -> str:
        """The archive's object name: its hash, then .tar.gz."""
        return f"{self.sha256}{ARCHIVE_SUFFIX}"


# ---- ignore rules: the gitignore grammar, matched without regular expressions ----


@dataclass(frozen=True)
class _Pattern:
    text: str
    segments: tuple[tuple[_Token, ...] | None, ...]  # None: "**", any number of parts; _INSIDE: one or more
    anchored: bool  # matched from the root (it had a "/" before its end); else at any depth
    directory_only: bool  # it ended in "/"
    negated: bool  # "!": re-include


# A token of one path segment's glob: a literal character, "?" (any one), "*" (any run),
# or a character class (negated?, characters, ranges).
_Token = tuple[str, str] | tuple[str, bool, str, tuple[tuple[str, str], ...]]


# A trailing "/**": one or more parts ("abc/**" matches what is inside abc, not abc).
_INSIDE: tuple[_Token, ...] = (("inside", ""),)


def _tokens(segment: str) -> tuple[_Token, ...]:
    tokens: list[_Token] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "\\" and i + 1 < len(segment):
            tokens.append(("lit", segment[i + 1]))
            i += 2
        elif char == "*":
            if not (tokens and tokens[-1] == ("star", "")):  # "**" inside a segment is "*"
                tokens.append(("star", ""))
            i += 1
        elif char == "?":
            tokens.append(("any", ""))
            i += 1
        elif char == "[":
            parsed = _char_class(segment, i)
            if parsed is None:  # no closing "]": a literal "["
                tokens.append(("lit", "["))
                i += 1
            else:
                token, i = parsed
                tokens.append(token)
        else:
            tokens.append(("lit", char))
            i += 1
    return tuple(tokens)


def _char_class(segment: str, start: int) -> tuple[_Token, int] | None:
    i = start + 1
    negated = i < len(segment) and segment[i] in "!^"
    if negated:
        i += 1
    chars: list[str] = []
    ranges: list[tuple[str, str]] = []
    first = True
    while i < len(segment):
        char = segment[i]
        if char == "]" and not first:
            return ("class", negated, "".join(chars), tuple(ranges)), i + 1
        if char == "\\" and i + 1 < len(segment):
            i += 1
            char = segment[i]
        if i + 2 < len(segment) and segment[i + 1] == "-" and segment[i + 2] != "]":
            ranges.append((char, segment[i + 2]))
            i += 3
        else:
            chars.append(char)
            i += 1
        first = False
    return None


def _token_matches(token: _Token, char: str) -> bool:
    kind = token[0]
    if kind == "lit":
        return token[1] == char
    if kind == "any":
        return True
    _, negated, chars, ranges = token  # type: ignore[misc]
    inside = char in chars or any(low <= char <= high for low, high in ranges)
    return inside != negated


def _segment_matches(tokens: tuple[_Token, ...], name: str) -> bool:
    """Wildcard match of one segment; the classic single-backtrack walk, O(len * tokens)."""
    t = n = 0
    star_t, star_n = -1, 0
    while n < len(name):
        if t < len(tokens) and tokens[t][0] == "star":
            star_t, star_n = t, n
            t += 1
        elif t < len(tokens) and _token_matches(tokens[t], name[n]):
            t += 1
            n += 1
        elif star_t >= 0:
            t = star_t + 1
            star_n += 1
            n = star_n
        else:
            return False
    while t < len(tokens) and tokens[t][0] == "star":
        t += 1
    return t == len(tokens)


def _path_matches(segments: tuple[tuple[_Token, ...] | None, ...], parts: Sequence[str]) -> bool:
    """Whether the segment patterns match the path's parts whole; "**" spans any number."""
    # reachable[j]: the patterns seen so far can match parts[:j]. O(segments * parts).
    reachable = [True] + [False] * len(parts)
    for segment in segments:
        following = [False] * (len(parts) + 1)
        if segment is None or segment is _INSIDE:
            # "**" spans zero or more parts; a trailing "/**", one or more (what is inside).
            seen = False
            for j in range(len(parts) + 1):
                following[j] = seen or (reachable[j] and segment is None)
                seen = seen or reachable[j]
        else:
            for j in range(len(parts)):
                if reachable[j] and _segment_matches(segment, parts[j]):
                    following[j + 1] = True
        reachable = following
    return reachable[len(parts)]


def _compile(line: str) -> _Pattern | None:
    text = line.rstrip("\n").rstrip("\r")
    # Trailing spaces are dropped unless escaped with a backslash.
    stripped = text.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(text):
        stripped += " "
    text = stripped
    if not text or text.startswith("#"):
        return None
    negated = text.startswith("!")
    if negated or text.startswith(("\\!", "\\#")):
        text = text[1:]
    directory_only = text.endswith("/")
    text = text.rstrip("/")
    if not text:
        return None
    anchored = "/" in text
    raw = [part for part in text.lstrip("/").split("/") if part]
    if not raw:
        return None
    segments: tuple[tuple[_Token, ...] | None, ...] = tuple(
        None if part == "**" else _tokens(part) for part in raw
    )
    if len(segments) > 1 and segments[-1] is None:
        segments = (*segments[:-1], _INSIDE)
    if not anchored:
        segments = (None, *segments)  # at any depth
    return _Pattern(
        text=line.strip(),
        segments=segments,
        anchored=anchored,
        directory_only=directory_only,
        negated=negated,
    )


def _literal(tokens: tuple[_Token, ...]) -> str | None:
    """The text a segment matches when it has no wildcard, else None."""
    if all(token[0] == "lit" for token in tokens):
        return "".join(str(token[1]) for token in tokens)
    return None


def _affixes(tokens: tuple[_Token, ...]) -> tuple[str, str]:
    """The literal text a segment's matches must start and end with."""
    head = []
    for token in tokens:
        if token[0] != "lit":
            break
        head.append(str(token[1]))
    tail = []
    for token in reversed(tokens):
        if token[0] != "lit":
            break
        tail.append(str(token[1]))
    return "".join(head), "".join(reversed(tail))


@dataclass
class _Index:
    """The patterns sorted by how they can be found: most are a name (``build``), a suffix
    (``*.pyc``) or a path (``/docs/_build``) and are looked up, not tried one by one."""

    names: dict[str, list[int]] = field(default_factory=dict)
    suffixes: dict[str, list[int]] = field(default_factory=dict)
    paths: dict[str, list[int]] = field(default_factory=dict)
    suffix_lengths: list[int] = field(default_factory=list)
    # The other patterns (index, head, tail of the last part), by their tail's last character.
    by_last_char: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    untailed: list[tuple[int, str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, patterns: Sequence[_Pattern]) -> _Index:
        index = cls()
        for number, pattern in enumerate(patterns):
            segments = pattern.segments
            last = segments[-1]
            if not pattern.anchored and len(segments) == 2 and last is not None and last is not _INSIDE:
                literal = _literal(last)
                if literal is not None:
                    index.names.setdefault(literal, []).append(number)
                    continue
                suffix = _literal(last[1:]) if last[0] == ("star", "") else None
                if suffix is not None:
                    index.suffixes.setdefault(suffix, []).append(number)
                    continue
            if pattern.anchored and all(s is not None and s is not _INSIDE for s in segments):
                literals = [_literal(s) for s in segments if s is not None]
                if all(part is not None for part in literals):
                    index.paths.setdefault("/".join(str(part) for part in literals), []).append(number)
                    continue
            head, tail = _affixes(last) if last is not None and last is not _INSIDE else ("", "")
            if tail:
                index.by_last_char.setdefault(tail[-1], []).append((number, head, tail))
            else:
                index.untailed.append((number, head, tail))
        index.suffix_lengths = sorted({len(suffix) for suffix in index.suffixes})
        return index


@dataclass(frozen=True)
class IgnoreRules:
    """gitignore's grammar for one file at the root: ``#`` comments, ``!`` re-includes,
    ``dir/`` matches directories only, a pattern with a ``/`` before its end is anchored
    to the root (else it matches at any depth), ``*`` and ``?`` and ``[a-z]`` within a
    name, ``**`` across directories. The last pattern that matches decides. As in git,
    a file under an ignored directory cannot be re-included (the directory is not walked)."""

    patterns: tuple[_Pattern, ...] = ()
    _index: _Index = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", _Index.of(self.patterns))

    @classmethod
    def parse(cls, text: str, *, source: str = IGNORE_FILE) -> IgnoreRules:
        lines = text.splitlines()
        patterns = []
        for number, line in enumerate(lines, start=1):
            if len(line) > MAX_PATTERN_LENGTH:
                raise PackError(
                    f"{source}:{number}: a pattern may be at most {MAX_PATTERN_LENGTH} characters"
                )
            pattern = _compile(line)
            if pattern is not None:
                patterns.append(pattern)
        if len(patterns) > MAX_IGNORE_PATTERNS:
            raise PackError(f"{source}: at most {MAX_IGNORE_PATTERNS} patterns, found {len(patterns)}")
        return cls(tuple(patterns))

    @classmethod
    def defaults(cls) -> IgnoreRules:
        return cls.parse("\n".join(DEFAULT_IGNORES), source="the default ignores")

    def __add__(self, other: IgnoreRules) -> IgnoreRules:
        return IgnoreRules(self.patterns + other.patterns)

    def ignored(self, path: str, *, is_dir: bool) -> bool:
        """Whether `path` (relative, "/"-separated) is left out: the last matching pattern decides."""
        parts = path.split("/")
        name = parts[-1]
        index = self._index
        found: list[int] = []
        found += index.names.get(name, ())
        found += index.paths.get(path, ())
        for length in index.suffix_lengths:
            if length <= len(name):
                found += index.suffixes.get(name[len(name) - length :], ())
        best = max((n for n in found if is_dir or not self.patterns[n].directory_only), default=-1)
        # The rest, last first, and only those that could still change the verdict: the
        # ones whose literal tail ends with this name's last character, or that have none.
        candidates = heapq.merge(
            reversed(index.by_last_char.get(name[-1:], ())), reversed(index.untailed), reverse=True
        )
        for number, head, tail in candidates:
            if number <= best:
                break
            pattern = self.patterns[number]
            if pattern.directory_only and not is_dir:
                continue
            if (head and not name.startswith(head)) or (tail and not name.endswith(tail)):
                continue
            if _path_matches(pattern.segments, parts):
                best = number
                break
        return best >= 0 and not self.patterns[best].negated


def read_ignore_rules(directory: Path) -> IgnoreRules:
    """The default ignores, then what DIR/.squallignore adds (bounded in size)."""
    rules = IgnoreRules.defaults()
    path = directory / IGNORE_FILE
    if not path.is_file():
        return rules
    with path.open("rb") as handle:
        data = handle.read(MAX_IGNORE_FILE_BYTES + 1)
    if len(data) > MAX_IGNORE_FILE_BYTES:
        raise PackError(f"{path}: at most {MAX_IGNORE_FILE_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PackError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return rules + IgnoreRules.parse(text, source=str(path))


# ---- the walk ----


@dataclass(frozen=True)
class _Entry:
    name: str  # relative, "/"-separated
    path: Path
    size: int = 0
    executable: bool = False
    link: str | None = None  # a symbolic link's target, relative to its directory


@dataclass
class _Walk:
    root: Path
    rules: IgnoreRules
    entries: list[_Entry] = field(default_factory=list)
    scanned: int = 0
    unpacked: int = 0
    ignored: int = 0
    skipped: list[str] = field(default_factory=list)

    def run(self) -> None:
        pending = [""]
        while pending:
            relative_dir = pending.pop()
            directory = self.root / relative_dir if relative_dir else self.root
            try:
                with os.scandir(directory) as listing:
                    children = sorted(self._bounded(listing), key=lambda e: e.name)
            except OSError as exc:
                raise PackError(f"cannot read {directory}: {exc.strerror or exc}") from exc
            for child in children:
                name = f"{relative_dir}/{child.name}" if relative_dir else child.name
                self._visit(child, name, pending)

    def _bounded(self, listing: Iterator[os.DirEntry[str]]) -> Iterator[os.DirEntry[str]]:
        for child in listing:
            self.scanned += 1
            if self.scanned > MAX_SCANNED:
                raise PackError(
                    f"{self.root}: more than {MAX_SCANNED:,} entries to look at; list what the "
                    f"job does not need (data, outputs, environments) in {IGNORE_FILE}"
                )
            yield child

    def _visit(self, child: os.DirEntry[str], name: str, pending: list[str]) -> None:
        _check_name(name, self.root)
        is_link = child.is_symlink()
        is_dir = not is_link and child.is_dir(follow_symlinks=False)
        if (is_dir and child.name in VCS_DIRECTORIES) or self.rules.ignored(name, is_dir=is_dir):
            self.ignored += 1
            return
        if is_dir:
            pending.append(name)
            return
        if is_link:
            self._add(_Entry(name=name, path=Path(child.path), link=self._link_target(child, name)))
            return
        info = child.stat(follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            self.skipped.append(name)
            return
        if info.st_size > MAX_FILE_BYTES:
            raise PackError(
                f"{child.path}: {_size(info.st_size)}, over the {_size(MAX_FILE_BYTES)} a code archive "
                f"may hold; keep data out of the code (list it in {IGNORE_FILE}) and read it from S3"
            )
        self.unpacked += info.st_size
        if self.unpacked > MAX_UNPACKED_BYTES:
            raise PackError(
                f"{self.root}: more than {_size(MAX_UNPACKED_BYTES)} of files to pack (at {name}); "
                f"list what the job does not need (data, checkpoints, outputs) in {IGNORE_FILE}"
            )
        executable = bool(info.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
        self._add(_Entry(name=name, path=Path(child.path), size=info.st_size, executable=executable))

    def _add(self, entry: _Entry) -> None:
        self.entries.append(entry)
        if len(self.entries) > MAX_FILES:
            raise PackError(
                f"{self.root}: more than {MAX_FILES:,} files to pack (at {entry.name}); "
                f"list what the job does not need in {IGNORE_FILE}"
            )

    def _link_target(self, child: os.DirEntry[str], name: str) -> str:
        """The link's target relative to its own directory; refused when it leaves the root."""
        target = os.readlink(child.path)
        if len(target.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
            raise PackError(
                f"{child.path}: a symbolic link whose target is over {MAX_PATH_BYTES:,} bytes; "
                f"list it in {IGNORE_FILE}"
            )
        parent = (self.root / name).parent
        resolved = Path(os.path.realpath(parent / target))
        if not _within(resolved, self.root):
            raise PackError(
                f"{child.path}: a symbolic link to {target}, outside {self.root}; "
                f"only links within the directory can be packed (copy the file in, or list the link in {IGNORE_FILE})"
            )
        lexical = os.path.normpath(os.path.join(os.path.dirname(name), target))
        if os.path.isabs(target) or lexical == ".." or lexical.startswith("../"):
            # Absolute, or lexically outside though it resolves inside: rewritten relative,
            # so that it still points at the same file wherever the archive is unpacked.
            return os.path.relpath(resolved, parent)
        return target


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _check_name(name: str, root: Path) -> None:
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise PackError(
            f"{root}: the name {name!r} is not valid UTF-8; rename it or list it in {IGNORE_FILE}"
        ) from None
    parts = name.split("/")
    if len(parts) > MAX_DEPTH:
        raise PackError(
            f"{root}: {name[:200]!r}... is {len(parts)} names deep; a code archive holds paths at most "
            f"{MAX_DEPTH} deep (list the folder in {IGNORE_FILE})"
        )
    if len(encoded) > MAX_PATH_BYTES:
        raise PackError(
            f"{root}: a path of {len(encoded):,} bytes ({name[:200]!r}...); a code archive holds paths of "
            f"at most {MAX_PATH_BYTES:,} bytes (list it in {IGNORE_FILE})"
        )
    longest = max(parts, key=lambda part: len(part.encode("utf-8")))
    if len(longest.encode("utf-8")) > MAX_NAME_BYTES:
        raise PackError(
            f"{root}: the name {longest[:200]!r}... is over {MAX_NAME_BYTES} bytes (list it in {IGNORE_FILE})"
        )


def _size(count: int) -> str:
    return f"{count / MiB:.1f} MiB" if count >= MiB else f"{count:,} bytes"


# ---- the archive ----


class _HashingWriter:
    """The archive file, hashed and counted as it is written; stops past the limit."""

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self._raw = raw
        self._limit = limit
        self.digest = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes) -> int:
        self.count += len(data)
        if self.count > self._limit:
            raise PackError(
                f"the archive is over {_size(self._limit)} packed; list what the job does not need in {IGNORE_FILE}"
            )
        self.digest.update(data)
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()


def _tarinfo(entry: _Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = entry.link
        info.mode = 0o777
    else:
        info.type = tarfile.REGTYPE
        info.size = entry.size
        info.mode = 0o755 if entry.executable else 0o644
    return info


def pack(directory: Path | str, out: Path | str, *, rules: IgnoreRules | None = None) -> PackedCode:
    """Pack `directory` into the file `out` (created or replaced); the result names its hash.

    Raises PackError, naming the path or the limit, before anything past the limit is read.
    `rules` replaces the default ignores and the directory's .squallignore (the VCS
    directories are left out all the same).
    """
    root = Path(directory)
    if not root.is_dir():
        raise PackError(f"{root}: not a directory")
    root = Path(os.path.realpath(root))
    walk = _Walk(root=root, rules=rules if rules is not None else read_ignore_rules(root))
    walk.run()
    walk.entries.sort(key=lambda e: e.name)

    target = Path(out)
    files = links = written = 0
    try:
        with target.open("wb") as raw:
            writer = _HashingWriter(raw, MAX_ARCHIVE_BYTES)
            # No file name and no time in the gzip header: the same files, the same bytes.
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=writer, compresslevel=_COMPRESS_LEVEL, mtime=0)
            with gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
                for entry in walk.entries:
                    info = _tarinfo(entry)
                    if entry.link is not None:
                        tar.addfile(info)
                        links += 1
                        continue
                    with _open_unchanged(entry) as handle:
                        tar.addfile(info, handle)
                    files += 1
                    written += entry.size
    except PackError:
        target.unlink(missing_ok=True)
        raise
    except OSError as exc:
        target.unlink(missing_ok=True)
        raise PackError(f"packing {root} failed: {exc}") from exc
    return PackedCode(
        path=target,
        sha256=writer.digest.hexdigest(),
        archive_bytes=writer.count,
        files=files,
        links=links,
        unpacked_bytes=written,
        ignored=walk.ignored,
        skipped=tuple(walk.skipped),
    )


class _open_unchanged:
    """A file opened for packing; PackError when it is not the size it was when walked."""

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry
        self._handle: BinaryIO | None = None

    def __enter__(self) -> BinaryIO:
        try:
            self._handle = self._entry.path.open("rb")
        except OSError as exc:
            raise PackError(f"{self._entry.path}: cannot be read: {exc.strerror or exc}") from exc
        size = os.fstat(self._handle.fileno()).st_size
        if size != self._entry.size:
            self._handle.close()
            raise PackError(f"{self._entry.path}: changed while it was packed; pack again")
        return self._handle

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()
