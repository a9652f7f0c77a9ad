"""Code packing: one directory, one archive, one hash; the ignore rules; the limits, before anything is read."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from squall.core import codepack
from squall.core.codepack import IgnoreRules, PackedCode, PackError, pack

pytestmark = pytest.mark.timeout(60)


def tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def names(packed: PackedCode) -> list[str]:
    with tarfile.open(packed.path) as tar:
        return tar.getnames()


CODE = {
    "train.py": "print('hi')\n",
    "requirements.txt": "numpy\n",
    "lib/model.py": "x = 1\n",
    "lib/data/loader.py": "y = 2\n",
}


@pytest.fixture
def code(tmp_path: Path) -> Path:
    return tree(tmp_path / "code", CODE)


def test_the_same_directory_gives_the_same_bytes_and_hash(code: Path, tmp_path: Path) -> None:
    first = pack(code, tmp_path / "a.tar.gz")
    # given the same files touched later, copied elsewhere, with other owners' modes
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(code, copy)
    for path in copy.rglob("*"):
        os.utime(path, (1_900_000_000, 1_900_000_000))
    (copy / "train.py").chmod(0o600)

    second = pack(copy, tmp_path / "b.tar.gz")

    assert first.sha256 == second.sha256
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.sha256 == hashlib.sha256(first.path.read_bytes()).hexdigest()
    assert first.name == f"{first.sha256}.tar.gz"
    assert (first.files, first.links, first.unpacked_bytes) == (4, 0, sum(len(v) for v in CODE.values()))


def test_a_changed_file_or_executable_bit_changes_the_hash(code: Path, tmp_path: Path) -> None:
    before = pack(code, tmp_path / "a.tar.gz").sha256
    (code / "lib/model.py").write_text("x = 2\n")
    edited = pack(code, tmp_path / "b.tar.gz").sha256
    (code / "train.py").chmod(0o755)
    executable = pack(code, tmp_path / "c.tar.gz").sha256

    assert len({before, edited, executable}) == 3


def test_entries_are_sorted_and_say_nothing_of_where_or_when(code: Path, tmp_path: Path) -> None:
    (code / "train.py").chmod(0o755)
    packed = pack(code, tmp_path / "a.tar.gz")
    raw = packed.path.read_bytes()

    assert raw[4:8] == b"\0\0\0\0", "gzip header time must be 0"
    assert not raw[3] & 0x08, "gzip header must not carry a file name"
    with tarfile.open(packed.path) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(CODE)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    modes = {m.name: m.mode for m in members}
    assert modes["train.py"] == 0o755 and modes["lib/model.py"] == 0o644


def test_vcs_directories_caches_and_environments_are_left_out(code: Path, tmp_path: Path) -> None:
    tree(
        code,
        {
            ".git/HEAD": "ref",
            ".hg/store": "x",
            ".svn/entries": "x",
            "lib/__pycache__/model.cpython-311.pyc": b"\0",
            "stale.pyc": b"\0",
            ".pytest_cache/v": "x",
            ".mypy_cache/v": "x",
            ".ruff_cache/v": "x",
            ".venv/bin/python": "x",
            "web/node_modules/left-pad/index.js": "x",
            "notebooks/.ipynb_checkpoints/a.ipynb": "x",
            ".DS_Store": b"\0",
            "lib/.DS_Store": b"\0",
        },
    )

    packed = pack(code, tmp_path / "a.tar.gz")

    assert names(packed) == sorted(CODE)
    assert packed.ignored == 13


SQUALLIGNORE = """\
# data and outputs stay out
data/
*.ckpt
!best.ckpt
/build
docs/**/*.png
logs/**
\\#literal
"""


@pytest.mark.parametrize(
    ("path", "is_dir", "ignored"),
    [
        ("data", True, True),
        ("lib/data", True, True),  # no "/" before the end: any depth
        ("data", False, False),  # "data/" matches directories only
        ("model.ckpt", False, True),
        ("runs/3/model.ckpt", False, True),
        ("best.ckpt", False, False),  # re-included by "!"
        ("runs/best.ckpt", False, False),
        ("build", True, True),
        ("lib/build", True, False),  # "/build" is anchored to the root
        ("docs/a.png", False, True),  # "**/" matches zero directories too
        ("docs/x/y/a.png", False, True),
        ("docs/x/a.jpg", False, False),
        ("logs/a/b", False, True),
        ("logs", True, False),  # "logs/**" matches what is inside, not the directory
        ("#literal", False, True),
        ("train.py", False, False),
    ],
)
def test_squallignore_follows_the_gitignore_grammar(path: str, is_dir: bool, ignored: bool) -> None:
    rules = IgnoreRules.parse(SQUALLIGNORE)
    assert rules.ignored(path, is_dir=is_dir) is ignored


@pytest.mark.parametrize(
    ("pattern", "path", "ignored"),
    [
        ("a?c", "abc", True),
        ("a?c", "a/c", False),  # "?" never matches "/"
        ("[a-c]x", "bx", True),
        ("[!a-c]x", "bx", False),
        ("[!a-c]x", "dx", True),
        ("*.py", "deep/er/x.py", True),
        ("lib/*.py", "lib/x.py", True),
        ("lib/*.py", "lib/sub/x.py", False),  # "*" stays within one directory
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("**/foo", "x/foo", True),
        ("foo\\ ", "foo ", True),  # an escaped trailing space is kept
        ("foo   ", "foo", True),  # trailing spaces are not
        ("[unclosed", "[unclosed", True),
    ],
)
def test_glob_details(pattern: str, path: str, ignored: bool) -> None:
    assert IgnoreRules.parse(pattern).ignored(path, is_dir=False) is ignored


def test_squallignore_applies_when_packing_and_can_re_include_a_default(code: Path, tmp_path: Path) -> None:
    tree(
        code,
        {
            ".squallignore": "data/\n*.log\n!keep.log\n!.venv/\n",
            "data/train.npz": b"\0" * 10,
            "run.log": "x",
            "keep.log": "x",
            ".venv/pinned.txt": "x",
            ".git/config": "x",
        },
    )
    (code / ".gitignore").write_text("!.git\n")  # only .squallignore counts

    listed = names(pack(code, tmp_path / "a.tar.gz"))

    assert "data/train.npz" not in listed and "run.log" not in listed
    assert {"keep.log", ".venv/pinned.txt", ".squallignore", ".gitignore"} <= set(listed)
    assert not any(n.startswith(".git/") for n in listed)


def test_a_vcs_directory_is_left_out_even_when_re_included(code: Path, tmp_path: Path) -> None:
    tree(code, {".squallignore": "!.git/\n!.git\n", ".git/HEAD": "ref"})
    assert not any(n.startswith(".git/") for n in names(pack(code, tmp_path / "a.tar.gz")))


def test_an_ignored_directory_is_never_walked(
    code: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree(code, {"data/huge/x": "y", "lib/__pycache__/m.pyc": "z", ".git/objects/ab": "c"})
    (code / ".squallignore").write_text("/data/\n")  # anchored: lib/data is walked
    listed: list[str] = []
    scandir = os.scandir

    def recording(path: str | os.PathLike[str]) -> object:
        listed.append(Path(path).relative_to(code.resolve()).as_posix())
        return scandir(path)

    monkeypatch.setattr(codepack.os, "scandir", recording)
    pack(code, tmp_path / "a.tar.gz")

    assert sorted(listed) == [".", "lib", "lib/data"]


def test_links_within_the_directory_are_kept_as_links(code: Path, tmp_path: Path) -> None:
    (code / "current").symlink_to("lib")
    (code / "lib" / "again.py").symlink_to("../train.py")
    (code / "absolute.py").symlink_to(code / "lib" / "model.py")  # absolute, but inside

    packed = pack(code, tmp_path / "a.tar.gz")

    with tarfile.open(packed.path) as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
    assert links == {"current": "lib", "lib/again.py": "../train.py", "absolute.py": "lib/model.py"}
    assert packed.links == 3


@pytest.mark.parametrize("target", ["/etc/passwd", "../../outside.txt", "../lib/../../outside.txt"])
def test_a_link_out_of_the_directory_is_refused(code: Path, tmp_path: Path, target: str) -> None:
    (tmp_path / "outside.txt").write_text("secret")
    (code / "lib" / "escape").symlink_to(target)

    with pytest.raises(PackError, match=r"lib/escape: a symbolic link to .*, outside"):
        pack(code, tmp_path / "a.tar.gz")
    assert not (tmp_path / "a.tar.gz").exists()


def test_a_file_too_large_is_refused_before_it_is_read(code: Path, tmp_path: Path) -> None:
    # a sparse file: its size costs nothing to make, and would cost minutes to read
    with (code / "weights.bin").open("wb") as handle:
        handle.truncate(codepack.MAX_FILE_BYTES + 1)

    with pytest.raises(PackError, match=r"weights.bin: .* MiB, over the 512.0 MiB .*\.squallignore"):
        pack(code, tmp_path / "a.tar.gz")
    assert not (tmp_path / "a.tar.gz").exists()


def test_files_too_large_together_are_refused_before_packing(code: Path, tmp_path: Path) -> None:
    for name in ("a.bin", "b.bin"):
        with (code / name).open("wb") as handle:
            handle.truncate(codepack.MAX_UNPACKED_BYTES // 2 + 1)

    with pytest.raises(PackError, match=r"more than 512.0 MiB of files to pack \(at b.bin\)"):
        pack(code, tmp_path / "a.tar.gz")
    assert not (tmp_path / "a.tar.gz").exists()


def test_too_many_files_stop_the_walk(code: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codepack, "MAX_FILES", 10)
    tree(code, {f"many/{i:03}.py": "" for i in range(50)})

    with pytest.raises(PackError, match="more than 10 files to pack"):
        pack(code, tmp_path / "a.tar.gz")
    assert not (tmp_path / "a.tar.gz").exists()


def test_too_many_entries_to_look_at_stop_the_walk(
    code: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codepack, "MAX_SCANNED", 20)
    tree(code, {f"cache/{i:03}.pyc": "" for i in range(50)})  # ignored, but each is looked at

    with pytest.raises(PackError, match="more than 20 entries to look at"):
        pack(code, tmp_path / "a.tar.gz")


def test_an_archive_past_its_limit_stops_and_leaves_nothing(
    code: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codepack, "MAX_ARCHIVE_BYTES", 64 * 1024)
    (code / "noise.bin").write_bytes(os.urandom(256 * 1024))  # does not compress

    with pytest.raises(PackError, match="the archive is over 65,536 bytes packed"):
        pack(code, tmp_path / "a.tar.gz")
    assert not (tmp_path / "a.tar.gz").exists()


def test_special_files_are_skipped(code: Path, tmp_path: Path) -> None:
    os.mkfifo(code / "pipe")
    packed = pack(code, tmp_path / "a.tar.gz")
    assert packed.skipped == ("pipe",) and "pipe" not in names(packed)


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses names that are not UTF-8")
def test_a_name_that_is_not_utf8_is_refused_naming_it(code: Path, tmp_path: Path) -> None:
    with open(os.path.join(os.fsencode(code), b"caf\xe9.py"), "wb"):  # Latin-1 bytes
        pass
    with pytest.raises(PackError, match="is not valid UTF-8"):
        pack(code, tmp_path / "a.tar.gz")


def test_unicode_and_long_names_round_trip(code: Path, tmp_path: Path) -> None:
    long_name = "/".join(["d" * 60] * 4) + "/é.py"
    tree(code, {long_name: "z = 3\n"})
    packed = pack(code, tmp_path / "a.tar.gz")
    assert long_name in names(packed)
    assert pack(code, tmp_path / "b.tar.gz").sha256 == packed.sha256


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="not a directory"):
        pack(tmp_path / "missing", tmp_path / "a.tar.gz")


def test_an_unreasonable_squallignore_is_refused(code: Path, tmp_path: Path) -> None:
    (code / ".squallignore").write_text("x\n" * (codepack.MAX_IGNORE_PATTERNS + 1))
    with pytest.raises(PackError, match="at most 1000 patterns"):
        pack(code, tmp_path / "a.tar.gz")
    (code / ".squallignore").write_bytes(b"#" * (codepack.MAX_IGNORE_FILE_BYTES + 1))
    with pytest.raises(PackError, match="at most 64 KiB"):
        pack(code, tmp_path / "a.tar.gz")
    (code / ".squallignore").write_bytes(b"\xff\xfe*.py\n")
    with pytest.raises(PackError, match="not UTF-8"):
        pack(code, tmp_path / "a.tar.gz")


@pytest.mark.timeout(10)
def test_hostile_patterns_cost_no_more_than_their_length() -> None:
    # A backtracking matcher takes exponential time on this; the one here is linear in each.
    rules = IgnoreRules.parse("\n".join(["*a" * 200 + "b", "**/" * 200 + "x", "[" * 500]))
    name = "a" * 255
    assert not rules.ignored("/".join([name] * 30), is_dir=False)


def test_the_archive_unpacks_to_the_same_files(code: Path, tmp_path: Path) -> None:
    packed = pack(code, tmp_path / "a.tar.gz")
    with gzip.open(packed.path) as gz:
        data = io.BytesIO(gz.read())
    with tarfile.open(fileobj=data) as tar:
        contents = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert contents == CODE


def reference_ignored(rules: IgnoreRules, path: str, *, is_dir: bool) -> bool:
    """gitignore's rule read plainly: every pattern in order, the last match decides."""
    verdict = False
    for pattern in rules.patterns:
        if pattern.directory_only and not is_dir:
            continue
        if codepack._path_matches(pattern.segments, path.split("/")):
            verdict = not pattern.negated
    return verdict


def test_the_indexed_lookup_decides_as_every_pattern_in_order_would() -> None:
    import random

    rng = random.Random(14)
    pieces = ["a", "b", "lib", "x.py", "y.pyc", "*", "*.py", "?", "[ab]", "**", "build", "*.log", "c*d"]
    lines = []
    for _ in range(300):
        segments = [rng.choice(pieces) for _ in range(rng.randint(1, 3))]
        line = "/".join(segments)
        if rng.random() < 0.3:
            line = "/" + line
        if rng.random() < 0.3:
            line += "/"
        if rng.random() < 0.3:
            line = "!" + line
        lines.append(line)
    rules = IgnoreRules.defaults() + IgnoreRules.parse("\n".join(lines))
    names_ = ["a", "b", "lib", "x.py", "y.pyc", "build", "run.log", "cd", "cxd", "ab", "__pycache__"]
    for _ in range(3000):
        path = "/".join(rng.choice(names_) for _ in range(rng.randint(1, 4)))
        is_dir = rng.random() < 0.5
        assert rules.ignored(path, is_dir=is_dir) == reference_ignored(rules, path, is_dir=is_dir), (
            path,
            is_dir,
        )


@pytest.mark.timeout(30)
def test_a_long_ignore_file_of_names_suffixes_and_paths_is_looked_up() -> None:
    # 1,000 names, suffixes and paths against 20,000 files: each is a lookup, not a pattern tried
    text = "\n".join(
        f"name{i}" if i % 3 == 0 else f"*.ext{i}" if i % 3 == 1 else f"/deep/path{i}" for i in range(1000)
    )
    rules = IgnoreRules.defaults() + IgnoreRules.parse(text)
    paths = [f"src/module{i % 50}/file{i}.py" for i in range(20_000)]
    assert not any(rules.ignored(p, is_dir=False) for p in paths)
    assert rules.ignored("x/name3", is_dir=False) and rules.ignored("a.ext4", is_dir=False)
    assert rules.ignored("deep/path5", is_dir=True) and not rules.ignored("x/deep/path5", is_dir=True)
