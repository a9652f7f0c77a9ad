"""``trainer.launch``'s unpacker holds its limits against the bytes of the archive: every
directory it makes is counted, depth and name lengths are rules (not a matter of time),
tar headers are bounded before tarfile reads them, and every refusal exits 3."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest
from trainer import launch
from trainer.launch import CodeRefused

from tests.python_child import run_module

pytestmark = pytest.mark.timeout(120)

MiB = 1024**2


def info(name: str, data: bytes = b"", *, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.size = len(data) if kind == tarfile.REGTYPE else 0
    member.linkname = target
    return member


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)


def header(member: tarfile.TarInfo) -> bytes:
    """One raw 512-byte header, as tarfile writes it, whatever its type and size say."""
    return member.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")


def named(tmp_path: Path, raw_tar: bytes) -> Path:
    """The tar stream gzipped and named by its sha256, as the artifacts bucket keeps it."""
    data = gzip.compress(raw_tar, compresslevel=6, mtime=0)
    path = tmp_path / f"{hashlib.sha256(data).hexdigest()}.tar.gz"
    path.write_bytes(data)
    return path


def archive(tmp_path: Path, members: list[tarfile.TarInfo], *, data: dict[str, bytes] | None = None) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            body = (data or {}).get(member.name, b"")
            tar.addfile(member, io.BytesIO(body) if member.isreg() else None)
    return named(tmp_path, raw.getvalue())


def refused(archive_path: Path, dest: Path, match: str) -> CodeRefused:
    with pytest.raises(CodeRefused, match=match) as caught:
        launch.unpack(archive_path, dest)
    assert caught.value.code == launch.CODE_REFUSED == 3
    return caught.value


def made(dest: Path) -> list[Path]:
    return list(dest.rglob("*")) if dest.exists() else []


# ---- directories, depth, names ----


def test_the_directories_a_name_implies_are_counted(tmp_path: Path) -> None:
    unpacked = launch.unpack(
        archive(tmp_path, [info("a/b/c/f.py"), info("a/b/g.py"), info("h/i.py")]), tmp_path / "d"
    )
    assert unpacked.directories == 4  # a, a/b, a/b/c, h: none of them named by a member of its own


def test_a_directory_bomb_is_refused_with_the_refusal_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: files 60 names deep, each under a directory of its own, and not one
    # directory member among them: 60 directories a file, from a few bytes each
    # (at the real limit, 20,000 directories, the test would spend its time in mkdir)
    monkeypatch.setattr(launch, "MAX_DIRECTORIES", 1_000)
    deep = "/".join(["d"] * 59)
    bomb = archive(tmp_path, [info(f"{i}/{deep}/f") for i in range(20)])
    assert bomb.stat().st_size < 2_000

    # when / then
    with pytest.raises(CodeRefused, match="more than 1,000 directories") as caught:
        launch.prepare({launch.CODE_URI_ENV: str(bomb), launch.CODE_DIR_ENV: str(tmp_path / "s")})
    assert caught.value.code == launch.CODE_REFUSED
    assert not (tmp_path / "s" / "code").exists()


def test_no_more_directories_are_made_than_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "MAX_DIRECTORIES", 50)
    dest = tmp_path / "d"
    refused(
        archive(tmp_path, [info(f"{i}/a/b/c/d/e/f/g/h/i/f") for i in range(6)]),
        dest,
        "more than 50 directories",
    )
    assert len([p for p in made(dest) if p.is_dir()]) == 50


def test_a_path_1000_names_deep_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    dest = tmp_path / "d"
    # 20,000 such files took the old unpacker about 27 minutes: refused by rule here, at the first
    deep = archive(tmp_path, [info("/".join(["a"] * 999) + f"/f{i}") for i in range(20)])
    refused(deep, dest, "1000 names deep, over the 64 allowed")
    assert made(dest) == []


def test_the_deepest_path_allowed_unpacks(tmp_path: Path) -> None:
    name = "/".join(["a"] * (launch.MAX_DEPTH - 1)) + "/f"
    launch.unpack(archive(tmp_path, [info(name, b"x")], data={name: b"x"}), tmp_path / "d")
    assert (tmp_path / "d" / name).read_bytes() == b"x"
    refused(archive(tmp_path, [info("b/" + name)]), tmp_path / "e", "65 names deep")


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("x" * 256, "a name of 256 bytes, over the 255"),
        ("lib/" + "é" * 128, "a name of 256 bytes"),  # bytes, not characters
        ("/".join(["n" * 200] * 6), "a path of 1,205 bytes, over the 1,024 allowed"),
    ],
    ids=["256-byte name", "256 bytes in 128 characters", "long path"],
)
def test_names_longer_than_a_file_system_takes_are_refused(tmp_path: Path, name: str, match: str) -> None:
    dest = tmp_path / "d"
    refused(archive(tmp_path, [info(name, b"x")], data={name: b"x"}), dest, match)
    assert made(dest) == []


def test_a_255_byte_name_unpacks(tmp_path: Path) -> None:
    name = "x" * 255
    launch.unpack(archive(tmp_path, [info(name)]), tmp_path / "d")
    assert (tmp_path / "d" / name).is_file()


def test_a_256_byte_name_exits_3_not_1(trainer_env: dict[str, str], tmp_path: Path) -> None:
    code = archive(tmp_path, [info("ok.py"), info("y" * 256)])
    env = {**trainer_env, launch.CODE_URI_ENV: str(code), launch.CODE_DIR_ENV: str(tmp_path / "s")}

    result = run_module("trainer.launch", "--", "true", timeout=60, cwd=tmp_path, env=env)

    assert result.returncode == launch.CODE_REFUSED, result.stderr
    assert "a name of 256 bytes" in result.stderr
    assert not (tmp_path / "s" / "code").exists()


def test_a_directory_named_again_and_again_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "MAX_ENTRIES", 10)
    refused(archive(tmp_path, [info("d", kind=tarfile.DIRTYPE)] * 11), tmp_path / "d", "more than 10 entries")


# ---- tar headers ----


def pax_bomb(tmp_path: Path, size: int) -> Path:
    """A PAX header of `size` bytes (one valid record) before a small file."""
    value = b"z" * (size - len(b" comment=\n") - len(str(size)))
    record = str(size).encode() + b" comment=" + value + b"\n"
    assert len(record) == size
    pax = info("././@PaxHeader", kind=tarfile.XHDTYPE)
    pax.size = size
    return named(tmp_path, header(pax) + padded(record) + header(info("f.py")) + b"\0" * 1024)


def test_a_huge_pax_header_is_refused_without_being_read(tmp_path: Path) -> None:
    bomb = pax_bomb(tmp_path, 32 * MiB)
    assert bomb.stat().st_size < 200_000

    tracemalloc.start()
    try:
        refused(bomb, tmp_path / "d", "an extended header of 33,554,432 bytes, over the 65,536 allowed")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 2 * MiB  # the header is 32 MiB; tarfile would have held it whole, and copies


def test_a_pax_header_within_the_limit_is_read(tmp_path: Path) -> None:
    launch.unpack(pax_bomb(tmp_path, launch.MAX_EXTENDED_HEADER_BYTES), tmp_path / "d")
    assert (tmp_path / "d" / "f.py").is_file()


def test_a_huge_gnu_long_name_is_refused_without_being_read(tmp_path: Path) -> None:
    longname = info("././@LongLink", kind=tarfile.GNUTYPE_LONGNAME)
    longname.size = 8 * MiB
    bomb = named(tmp_path, header(longname) + b"a/" * (4 * MiB) + header(info("f.py")) + b"\0" * 1024)
    refused(bomb, tmp_path / "d", "an extended header of 8,388,608 bytes")


def test_a_run_of_extended_headers_is_refused(tmp_path: Path) -> None:
    # tarfile parses each one with a level of recursion more: 600 of them was a RecursionError
    pax = info("././@PaxHeader", kind=tarfile.XHDTYPE)
    raw = header(pax) * 600 + header(info("f.py")) + b"\0" * 1024
    refused(named(tmp_path, raw), tmp_path / "d", "more than 4 extended headers in a row")


def test_global_headers_are_bounded_together(tmp_path: Path) -> None:
    record = b"27 comment=0123456789abcdef\n"
    glob = info("././@GlobalHead", kind=tarfile.XGLTYPE)
    glob.size = len(record)
    one = header(glob) + padded(record) + header(info("f.py"))
    launch.unpack(named(tmp_path, one + b"\0" * 1024), tmp_path / "d")  # git archive writes one such
    many = (header(glob) + padded(record) + header(info("d/", kind=tarfile.DIRTYPE))) * 200
    refused(
        named(tmp_path, many + b"\0" * 1024),
        tmp_path / "e",
        "global headers are over the 4,096 bytes allowed",
    )


def test_a_sparse_file_is_refused_before_its_map_is_read(tmp_path: Path) -> None:
    # An old-GNU sparse header says "more map follows" in byte 482, block after block.
    sparse = bytearray(header(info("s", kind=tarfile.GNUTYPE_SPARSE)))
    sparse[482] = 1
    sparse[148:156] = b" " * 8
    sparse[148:155] = b"%06o\0" % sum(sparse)
    extension = b"\0" * 504 + b"\1" + b"\0" * 7  # another block of map, and another...
    raw = bytes(sparse) + extension * 20_000
    refused(named(tmp_path, raw), tmp_path / "d", "a sparse file, 's'")


@pytest.mark.parametrize(
    "pax",
    [
        {"GNU.sparse.map": "0,0", "GNU.sparse.realsize": str(64 * MiB)},  # GNU sparse 0.1
        {"GNU.sparse.size": str(64 * MiB), "GNU.sparse.numblocks": "0"},  # GNU sparse 0.0
    ],
)
def test_a_pax_sparse_file_is_refused_not_written_out_in_zeros(tmp_path: Path, pax: dict[str, str]) -> None:
    # ~170 bytes of archive wrote its declared size in zeros (up to 512 MiB a file)
    member = info("s")
    member.pax_headers = pax
    error = refused(archive(tmp_path, [member]), tmp_path / "d", "a sparse file, 's'")
    assert error.code == 3
    assert made(tmp_path / "d") == []


def test_a_negative_size_is_refused(tmp_path: Path) -> None:
    # PAX size -1..-511 keeps tarfile's offsets in step and took bytes off the unpacked total
    member = info("n")
    member.pax_headers = {"size": "-511"}
    raw = archive(tmp_path, [member, info("ok", b"abc")], data={"ok": b"abc"})
    refused(raw, tmp_path / "d", "'n' with a negative size")


def test_what_tarfile_reads_between_two_members_is_bounded(tmp_path: Path) -> None:
    # A PAX "GNU sparse 1.0" member: tarfile reads its map from the data, as many
    # numbers as its first line says, before handing the member over.
    records = b"".join(
        f"{len(line) + len(str(len(line))) + 1} {line}".encode()
        for line in (
            "GNU.sparse.major=1\n",
            "GNU.sparse.minor=0\n",
            "GNU.sparse.name=f\n",
            "GNU.sparse.realsize=1\n",
        )
    )
    pax = info("././@PaxHeader", kind=tarfile.XHDTYPE)
    pax.size = len(records)
    body = b"99999999\n" + b"0\n" * (4 * MiB)
    member = info("f")
    member.size = len(body)
    raw = header(pax) + padded(records) + header(member) + padded(body) + b"\0" * 1024

    tracemalloc.start()
    try:
        refused(named(tmp_path, raw), tmp_path / "d", "bytes of headers for one entry")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB


def test_a_header_field_tarfile_cannot_read_is_refused_not_a_traceback(tmp_path: Path) -> None:
    record = b"24 GNU.sparse.map=a,b,c\n"  # tarfile's int() of each number raised ValueError
    pax = info("././@PaxHeader", kind=tarfile.XHDTYPE)
    pax.size = len(record)
    raw = header(pax) + padded(record) + header(info("f")) + b"\0" * 1024
    refused(named(tmp_path, raw), tmp_path / "d", "a header that is not valid")


# ---- links ----


def test_a_long_chain_of_links_is_refused_by_rule(tmp_path: Path) -> None:
    # 3,000 links each to the next: os.path.realpath recursed once a link (RecursionError)
    chain = [info(f"l{i}", kind=tarfile.SYMTYPE, target=f"l{i + 1}") for i in range(3000)]
    refused(archive(tmp_path, [*chain, info("l3000")]), tmp_path / "d", "more than 40 links in a row")


def test_a_short_chain_of_links_and_links_through_links_unpack(tmp_path: Path) -> None:
    chain = [info(f"l{i}", kind=tarfile.SYMTYPE, target=f"l{i + 1}") for i in range(30)]
    through = [
        info("lib/pkg/m.py", b"M"),
        info("pkg", kind=tarfile.SYMTYPE, target="lib/pkg"),
        info("up", kind=tarfile.SYMTYPE, target="pkg/.."),  # lib, through the link
        info("m.py", kind=tarfile.SYMTYPE, target="up/pkg/m.py"),
    ]
    dest = tmp_path / "d"
    launch.unpack(archive(tmp_path, [*chain, info("l30"), *through], data={"lib/pkg/m.py": b"M"}), dest)
    assert (dest / "m.py").read_bytes() == b"M"
    assert os.path.realpath(dest / "l0") == str((dest / "l30").resolve())


def test_a_link_that_loops_is_refused(tmp_path: Path) -> None:
    loop = [info("a", kind=tarfile.SYMTYPE, target="b"), info("b", kind=tarfile.SYMTYPE, target="sub/../a")]
    refused(archive(tmp_path, [info("sub/", kind=tarfile.DIRTYPE), *loop]), tmp_path / "d", "link a loops")


def test_a_link_out_through_a_deep_link_is_refused(tmp_path: Path) -> None:
    members = [
        info("x/y/z/", kind=tarfile.DIRTYPE),
        info("top", kind=tarfile.SYMTYPE, target="x/y/z/deep/../../../.."),  # lexically: the top
        info("x/y/z/deep", kind=tarfile.SYMTYPE, target="."),  # z: so top is z/../../.. = outside
    ]
    refused(archive(tmp_path, members), tmp_path / "d", "link top leads outside it")
