"""The packer refuses, at submit, the shapes the worker's unpacker would refuse when the job starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from squall.core.codepack import MAX_DEPTH, MAX_NAME_BYTES, MAX_PATH_BYTES, PackError, pack


def test_a_path_deeper_than_the_unpacker_takes_is_refused_naming_the_limit(tmp_path: Path) -> None:
    code = tmp_path / "code"
    deep = code.joinpath(*["d"] * MAX_DEPTH)
    deep.mkdir(parents=True)
    (deep / "train.py").write_text("print('deep')\n")
    with pytest.raises(PackError, match=f"{MAX_DEPTH + 1} names deep.*at most {MAX_DEPTH} deep"):
        pack(code, tmp_path / "code.tar.gz")


def test_a_path_at_the_depth_limit_is_packed(tmp_path: Path) -> None:
    code = tmp_path / "code"
    deep = code.joinpath(*["d"] * (MAX_DEPTH - 1))
    deep.mkdir(parents=True)
    (deep / "train.py").write_text("print('deep')\n")
    assert pack(code, tmp_path / "code.tar.gz").path.is_file()


def test_a_long_path_is_refused(tmp_path: Path) -> None:
    code = tmp_path / "code"
    folder = code.joinpath(*["x" * 200] * 6)  # 1,206 bytes with the separators, 6 deep
    folder.mkdir(parents=True)
    (folder / "a.py").write_text("")
    with pytest.raises(PackError, match=f"at most {MAX_PATH_BYTES:,} bytes"):
        pack(code, tmp_path / "code.tar.gz")


def test_a_name_over_255_bytes_is_refused() -> None:
    # Linux's file systems refuse such a name themselves; others (and a mount of one) may not.
    from squall.core.codepack import _check_name

    _check_name("é" * 127, Path("/code"))  # 254 bytes
    with pytest.raises(PackError, match=f"over {MAX_NAME_BYTES} bytes"):
        _check_name("src/" + "é" * 128, Path("/code"))  # 256 bytes in 128 characters


def test_a_link_with_a_very_long_target_is_refused(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text("")
    os.symlink("./" * 600 + "t.py", code / "link.py")
    with pytest.raises(PackError, match="target is over"):
        pack(code, tmp_path / "code.tar.gz")
