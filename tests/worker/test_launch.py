"""``python -m trainer.launch``: the code archive fetched, checked against its name, unpacked
safely, its requirements installed, and the command exec'd in it (same pid, so SIGTERM reaches it)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trainer import exits, launch, storage
from trainer.launch import CodeRefused, LaunchError

from squall.core import codepack
from tests.python_child import run_module

pytestmark = pytest.mark.timeout(120)

SHOW = (
    "import json, os, sys; "
    "print(json.dumps({'cwd': os.getcwd(), 'pid': os.getpid(), 'files': sorted(os.listdir('.')), "
    "'path': os.environ['PYTHONPATH'], 'sha': os.environ.get('SQUALL_CODE_SHA256'), 'argv': sys.argv[1:]})); "
    "sys.exit(7)"
)


def named(path: Path) -> Path:
    """The archive renamed to its hash, as the artifacts bucket keeps it."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return path.rename(path.with_name(f"{digest}.tar.gz"))


def packed(tmp_path: Path, files: dict[str, str]) -> Path:
    code = tmp_path / "src"
    for name, text in files.items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text(text)
    return named(codepack.pack(code, tmp_path / "code.tar.gz").path)


Member = tuple[tarfile.TarInfo, bytes]


def member(name: str, data: bytes = b"", **fields: Any) -> Member:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> Member:
    return member(name, type=kind, linkname=target)


def crafted(tmp_path: Path, members: list[Member], *, pax: dict[str, str] | None = None) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers=pax) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    path = tmp_path / "crafted.tar.gz"
    path.write_bytes(raw.getvalue())
    return named(path)


def run_launch(
    env: dict[str, str], *command: str, uri: Path | str | None, scratch: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {
        **env,
        launch.CODE_DIR_ENV: str(scratch),
        launch.SKIP_REQUIREMENTS_ENV: env.get(launch.SKIP_REQUIREMENTS_ENV, "1"),
    }
    if uri is not None:
        env[launch.CODE_URI_ENV] = str(uri)
    return run_module("trainer.launch", *command, timeout=timeout, cwd=scratch.parent, env=env)


def shown(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    (found,) = [line for line in lines if "cwd" in line]
    return found


# ---- the packer and the unpacker agree ----


def test_the_launcher_holds_archives_to_the_packers_limits() -> None:
    assert launch.MAX_ARCHIVE_BYTES == codepack.MAX_ARCHIVE_BYTES
    assert launch.MAX_UNPACKED_BYTES == codepack.MAX_UNPACKED_BYTES
    assert launch.MAX_FILE_BYTES == codepack.MAX_FILE_BYTES
    assert launch.MAX_FILES == codepack.MAX_FILES
    assert launch.MAX_NAME_BYTES == codepack.MAX_NAME_BYTES
    assert launch.MAX_PATH_BYTES == codepack.MAX_PATH_BYTES
    assert launch.MAX_DEPTH == codepack.MAX_DEPTH


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["--", "bash", "run.sh"], ["bash", "run.sh"]),
        (["--", "python", "train.py", "--lr", "1"], [sys.executable, "train.py", "--lr", "1"]),
        (["--"], [sys.executable, "-m", "trainer"]),
        ([], [sys.executable, "-m", "trainer"]),
        (["--steps", "10"], [sys.executable, "-m", "trainer", "--steps", "10"]),
    ],
)
def test_the_command_follows_the_double_dash_else_the_trainer_gets_the_arguments(
    argv: list[str], command: list[str]
) -> None:
    assert launch.command_of(argv) == command


# ---- end to end, as the pod runs it ----


def test_the_command_runs_in_the_unpacked_code_in_place_of_the_launcher(
    trainer_env: dict[str, str], tmp_path: Path
) -> None:
    archive = packed(tmp_path, {"train.py": "print('hi')\n", "pkg/mod.py": "X = 1\n"})

    with subprocess.Popen(
        [sys.executable, "-m", "trainer.launch", "--", "python", "-c", SHOW, "--lr", "0.1"],
        env={**trainer_env, "SQUALL_CODE_URI": str(archive), "SQUALL_CODE_DIR": str(tmp_path / "scratch")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        out, err = process.communicate(timeout=60)

    assert process.returncode == 7, err  # the command's own exit code
    seen = shown(subprocess.CompletedProcess([], 7, out, err))
    code = tmp_path / "scratch" / "code"
    assert seen["pid"] == process.pid, "the command must replace the launcher (exec), not run as its child"
    assert Path(seen["cwd"]) == code.resolve() or Path(seen["cwd"]) == code
    assert seen["files"] == ["pkg", "train.py"]
    assert seen["sha"] == archive.name.removesuffix(".tar.gz")
    assert seen["argv"] == ["--lr", "0.1"]
    path = seen["path"].split(os.pathsep)
    assert path[0] == str(code) and path[-1] == str(Path(launch.__file__).resolve().parents[1])


def test_code_without_a_trainer_still_runs_the_images_trainer(
    trainer_env: dict[str, str], tmp_path: Path
) -> None:
    archive = packed(tmp_path, {"notes.txt": "x"})
    result = run_launch(
        trainer_env, "--", "python", "-m", "trainer", "--help", uri=archive, scratch=tmp_path / "s"
    )
    assert result.returncode == 0, result.stderr
    assert "--model-dir" in result.stdout


def test_sigterm_reaches_the_command(trainer_env: dict[str, str], tmp_path: Path) -> None:
    archive = packed(tmp_path, {"serve.py": "x"})
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('stopping', flush=True), sys.exit(143)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-m", "trainer.launch", "--", "python", "-c", script],
        env={**trainer_env, "SQUALL_CODE_URI": str(archive), "SQUALL_CODE_DIR": str(tmp_path / "scratch")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip() == "ready":
                break
        process.send_signal(signal.SIGTERM)
        rest, err = process.communicate(timeout=30)

    assert process.returncode == exits.RETRY, err
    assert "stopping" in rest


def test_without_code_the_command_runs_where_it_is(trainer_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "here.txt").write_text("x")
    result = run_launch(trainer_env, "--", "python", "-c", SHOW, uri=None, scratch=tmp_path / "unused")
    assert result.returncode == 7, result.stderr
    assert Path(shown(result)["cwd"]) == tmp_path
    assert not (tmp_path / "unused").exists()


def test_a_tampered_archive_is_refused_and_nothing_runs(trainer_env: dict[str, str], tmp_path: Path) -> None:
    archive = packed(tmp_path, {"train.py": "open('ran', 'w')\n"})
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, after packing
    archive.write_bytes(bytes(data))

    result = run_launch(trainer_env, "--", "python", "train.py", uri=archive, scratch=tmp_path / "scratch")

    assert result.returncode == launch.CODE_REFUSED == 3
    assert "was changed after it was packed" in result.stderr and "refusing to run it" in result.stderr
    assert not (tmp_path / "scratch" / "code").exists()
    assert not list(tmp_path.rglob("ran"))
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["event"] == "code not run" and events[-1]["exit"] == 3


def test_an_archive_not_named_by_its_hash_is_a_usage_error(
    trainer_env: dict[str, str], tmp_path: Path
) -> None:
    archive = packed(tmp_path, {"train.py": ""})
    plain = archive.rename(tmp_path / "code.tar.gz")
    result = run_launch(trainer_env, "--", "true", uri=plain, scratch=tmp_path / "s")
    assert result.returncode == exits.USAGE
    assert "name must be its sha256" in result.stderr


def test_a_missing_command_exits_127(trainer_env: dict[str, str], tmp_path: Path) -> None:
    archive = packed(tmp_path, {"train.py": ""})
    result = run_launch(trainer_env, "--", "no-such-command-xyz", uri=archive, scratch=tmp_path / "s")
    assert result.returncode == launch.COMMAND_NOT_FOUND


def test_a_working_directory_already_in_use_is_refused(trainer_env: dict[str, str], tmp_path: Path) -> None:
    archive = packed(tmp_path, {"train.py": ""})
    (tmp_path / "s" / "code").mkdir(parents=True)
    (tmp_path / "s" / "code" / "old.py").write_text("")
    result = run_launch(trainer_env, "--", "true", uri=archive, scratch=tmp_path / "s")
    assert result.returncode == exits.USAGE and "not empty" in result.stderr


# ---- requirements ----


def wheel(directory: Path) -> Path:
    """A pure-Python wheel built by hand, so that pip installs it with no index and no build."""
    files = {
        "demo_pkg/__init__.py": b"VALUE = 42\n",
        "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        "demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    files["demo_pkg-1.0.dist-info/RECORD"] = (
        "\n".join([*record, "demo_pkg-1.0.dist-info/RECORD,,"]) + "\n"
    ).encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


@pytest.mark.timeout(300)
def test_requirements_are_installed_beside_the_code_and_importable(
    trainer_env: dict[str, str], tmp_path: Path
) -> None:
    source = tmp_path / "src"
    wheel(source / "wheels")
    (source / "requirements.txt").write_text("./wheels/demo_pkg-1.0-py3-none-any.whl\n")
    archive = named(codepack.pack(source, tmp_path / "code.tar.gz").path)
    env = {**trainer_env, launch.SKIP_REQUIREMENTS_ENV: "", "PIP_NO_INDEX": "1"}  # nothing from the network

    result = run_launch(
        env, "--", "python", "-c", "import demo_pkg; print(demo_pkg.VALUE, demo_pkg.__file__)",
        uri=archive, scratch=tmp_path / "scratch", timeout=240,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    value, location = result.stdout.splitlines()[-1].split(" ", 1)
    assert value == "42"
    assert Path(location).is_relative_to(tmp_path / "scratch" / "packages")
    assert not (tmp_path / "scratch" / "code" / "demo_pkg").exists()


@pytest.mark.timeout(300)
def test_requirements_that_do_not_install_stop_the_job(trainer_env: dict[str, str], tmp_path: Path) -> None:
    archive = packed(
        tmp_path, {"requirements.txt": "./missing-0.1-py3-none-any.whl\n", "train.py": "open('ran', 'w')\n"}
    )
    env = {**trainer_env, launch.SKIP_REQUIREMENTS_ENV: "", "PIP_NO_INDEX": "1"}
    result = run_launch(env, "--", "python", "train.py", uri=archive, scratch=tmp_path / "s", timeout=240)
    assert result.returncode == exits.FAILED
    assert "pip install -r requirements.txt failed" in result.stderr
    assert not list(tmp_path.rglob("ran"))


def test_requirements_can_be_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "requirements.txt").write_text("anything\n")
    monkeypatch.setattr(launch.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    assert launch.install_requirements(tmp_path, tmp_path / "p", {launch.SKIP_REQUIREMENTS_ENV: "1"}) == []


# ---- S3 ----


def test_the_archive_comes_from_s3(s3: Any, tmp_path: Path) -> None:
    archive = packed(tmp_path, {"train.py": "print('hi')\n"})
    key = f"code/research/{archive.name}"
    s3.put_object(Bucket="squall", Key=key, Body=archive.read_bytes())

    code, env = launch.prepare(
        {
            launch.CODE_URI_ENV: f"s3://squall/{key}",
            launch.CODE_DIR_ENV: str(tmp_path / "s"),
            "PYTHONPATH": "/x",
        }
    )

    assert (code / "train.py").read_text() == "print('hi')\n"
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(code), "/x"]
    assert not (tmp_path / "s" / "download").exists()


def test_an_s3_archive_over_the_limit_is_refused_before_it_is_read(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = packed(tmp_path, {"train.py": "x" * 5000})
    s3.put_object(Bucket="squall", Key=archive.name, Body=archive.read_bytes())
    monkeypatch.setattr(launch, "MAX_ARCHIVE_BYTES", 100)

    with pytest.raises(CodeRefused, match="over the 100 allowed"):
        launch.prepare(
            {launch.CODE_URI_ENV: f"s3://squall/{archive.name}", launch.CODE_DIR_ENV: str(tmp_path / "s")}
        )
    assert not (tmp_path / "s" / "code").exists()


def test_a_missing_s3_archive_is_a_storage_error(s3: Any, tmp_path: Path) -> None:
    with pytest.raises(storage.StorageError, match="download s3://squall/"):
        launch.prepare(
            {launch.CODE_URI_ENV: "s3://squall/" + "0" * 64 + ".tar.gz", launch.CODE_DIR_ENV: str(tmp_path)}
        )


# ---- unsafe archives ----


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


def refused(tmp_path: Path, members: list[Member], match: str, **kwargs: Any) -> Path:
    archive = crafted(tmp_path, members, **kwargs)
    dest = tmp_path / "dest"
    with pytest.raises(CodeRefused, match=match):
        launch.unpack(archive, dest)
    return dest


UNSAFE: dict[str, tuple[Callable[[Path], list[Member]], str]] = {
    "absolute name": (lambda out: [member(str(out / "evil"), b"x")], "absolute name"),
    "parent directory": (lambda out: [member("../outside/evil", b"x")], r"name with '\.\.'"),
    "nested parent": (lambda out: [member("a/../../outside/evil", b"x")], r"name with '\.\.'"),
    "absolute link": (lambda out: [link("evil", str(out))], "only relative links inside"),
    "relative link out": (lambda out: [link("a/evil", "../../outside")], "outside it"),
    "link out through a link": (lambda out: [link("x", "y/.."), link("y", ".")], "leads outside it"),
    "write through a link": (lambda out: [member("sub/", type=tarfile.DIRTYPE), link("lib", "sub"), member("lib/evil.py", b"x")], "through its own link"),
    "hard link": (lambda out: [member("a", b"x"), link("b", "a", tarfile.LNKTYPE)], "hard link"),
    "device": (lambda out: [member("dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)], "not a file, a directory or a link"),
    "fifo": (lambda out: [member("pipe", type=tarfile.FIFOTYPE)], "not a file, a directory or a link"),
    "twice": (lambda out: [member("a", b"x"), member("a", b"y")], "twice"),
    "file then directory": (lambda out: [member("a", b"x"), member("a/b", b"y")], "both as a file and a directory"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(UNSAFE), ids=list(UNSAFE))
def test_unsafe_archives_are_refused_and_write_nothing_outside(
    tmp_path: Path, outside: Path, case: str
) -> None:
    members, match = UNSAFE[case]
    refused(tmp_path, members(outside), match)
    assert list(outside.iterdir()) == []


def test_too_many_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "MAX_FILES", 3)
    refused(tmp_path, [member(f"f{i}", b"x") for i in range(5)], "more than 3 files")


def test_too_many_bytes_are_refused_before_they_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "MAX_UNPACKED_BYTES", 1000)
    dest = refused(
        tmp_path, [member("a", b"x" * 600), member("b", b"y" * 600)], r"more than 1,000 bytes \(at 'b'\)"
    )
    assert not (dest / "b").exists()


def test_a_decompression_bomb_stops_at_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A PAX header is read whole into memory by tarfile: the stream itself must be bounded,
    # a backstop behind the header limits (test_launch_limits.py), lifted here to reach it.
    for limit in ("MAX_EXTENDED_HEADER_BYTES", "MAX_GLOBAL_HEADER_BYTES", "_MAX_HEADER_READ"):
        monkeypatch.setattr(launch, limit, 10**9)
    monkeypatch.setattr(launch, "MAX_UNPACKED_BYTES", 1000)
    monkeypatch.setattr(launch, "MAX_FILES", 1)
    refused(tmp_path, [member("a", b"x")], "unpacks to more than", pax={"comment": "z" * 4_000_000})


def test_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.tar.gz"
    path.write_bytes(b"not gzip at all" * 100)
    with pytest.raises(CodeRefused, match=r"not a valid \.tar\.gz"):
        launch.unpack(named(path), tmp_path / "dest")


def test_links_inside_and_directories_from_other_tools_unpack(tmp_path: Path) -> None:
    archive = crafted(
        tmp_path,
        [
            member("./", type=tarfile.DIRTYPE),
            member("./lib/", type=tarfile.DIRTYPE),
            member("./lib/model.py", b"X = 1\n", mode=0o755),
            link("./current", "lib"),
            link("./lib/again.py", "model.py"),
        ],
    )
    dest = tmp_path / "dest"
    unpacked = launch.unpack(archive, dest)
    assert (unpacked.files, unpacked.links) == (1, 2)
    assert (dest / "current" / "again.py").read_text() == "X = 1\n"
    assert os.stat(dest / "lib" / "model.py").st_mode & 0o777 == 0o755


def test_what_the_packer_makes_the_launcher_unpacks(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "lib").mkdir(parents=True)
    (source / "lib" / "m.py").write_text("m\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "link.py").symlink_to("lib/m.py")
    (source / "abs.py").symlink_to(source / "lib" / "m.py")
    archive = named(codepack.pack(source, tmp_path / "c.tar.gz").path)

    launch.unpack(archive, tmp_path / "dest")

    dest = tmp_path / "dest"
    assert (dest / "link.py").read_text() == (dest / "abs.py").read_text() == "m\n"
    assert os.access(dest / "run.sh", os.X_OK)


def test_a_refused_archive_leaves_no_code_to_run(tmp_path: Path) -> None:
    archive = crafted(tmp_path, [member("ok.py", b"x"), member("../evil", b"x")])
    with pytest.raises(LaunchError):
        launch.prepare({launch.CODE_URI_ENV: str(archive), launch.CODE_DIR_ENV: str(tmp_path / "s")})
    assert not (tmp_path / "s" / "code").exists()
