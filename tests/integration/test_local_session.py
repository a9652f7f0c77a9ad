"""`squall local up`'s session on this machine, without starting a server: which process
`down` may stop, the state directory's modes, `squall local env`, and the hints the
other commands give about the local runtime (running, or stopped).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from squall.cli import deployment, main
from squall.cli.errors import CommandError
from squall.local import control
from squall.local.server import STATE_FILE, private_dir, process_start, write_json

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "state"
    private_dir(directory)
    monkeypatch.setenv("SQUALL_STATE_DIR", str(directory))  # what the hints look at
    return directory


@pytest.fixture
def imitation() -> Iterator[subprocess.Popen[bytes]]:
    """A stranger's process whose command line says squall.local.server."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "-m", "squall.local.server"],
        start_new_session=True,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def record(state_dir: Path, pid: int, start: str | None, **more: object) -> None:
    write_json(
        state_dir / STATE_FILE, {"pid": pid, "processStart": start, "endpoint": "http://127.0.0.1:1", **more}
    )


# ---- which process is ours ----


def test_down_leaves_alone_a_process_that_only_looks_like_the_server(
    state_dir: Path, imitation: subprocess.Popen[bytes]
) -> None:
    # The pid is the stranger's now; the start time the server recorded is not its.
    record(state_dir, imitation.pid, "1")
    assert control.status(state_dir=state_dir)["running"] is False
    said = control.down(state_dir=state_dir, timeout=2)
    assert "not running" in said
    assert imitation.poll() is None  # never signalled
    assert not (state_dir / STATE_FILE).exists()


def test_a_state_file_without_a_start_time_names_no_process(
    state_dir: Path, imitation: subprocess.Popen[bytes]
) -> None:
    # A state from before start times were recorded: its pid may still be the server, or
    # anyone's by now. Nothing is signalled, the state is kept, and down says why.
    record(state_dir, imitation.pid, None)
    with pytest.raises(
        control.ControlError, match=f"whether pid {imitation.pid} is still Squall.s server cannot be told"
    ):
        control.down(state_dir=state_dir, timeout=2)
    assert imitation.poll() is None
    assert (state_dir / STATE_FILE).exists()


def test_the_process_with_the_recorded_start_time_is_stopped(
    state_dir: Path, imitation: subprocess.Popen[bytes]
) -> None:
    start = process_start(imitation.pid)
    assert start is not None
    record(state_dir, imitation.pid, start)
    assert control.status(state_dir=state_dir)["running"] is True
    assert "stopped" in control.down(state_dir=state_dir, timeout=10)
    assert imitation.poll() is not None  # gone (control reaped it: it is this test's child)


def test_process_start_tells_processes_apart() -> None:
    assert process_start(os.getpid()) == process_start(os.getpid()) is not None
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert process_start(process.pid) is None  # gone


# ---- the state directory holds credentials ----


def test_the_state_directory_and_its_files_are_private(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    private_dir(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    fresh = tmp_path / "a" / "b"
    private_dir(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    write_json(fresh / STATE_FILE, {"env": {"AWS_SECRET_ACCESS_KEY": "s"}})
    assert stat.S_IMODE((fresh / STATE_FILE).stat().st_mode) == 0o600
    write_json(fresh / STATE_FILE, {"env": {}})  # rewritten: still private
    assert stat.S_IMODE((fresh / STATE_FILE).stat().st_mode) == 0o600


def test_up_says_why_it_cannot_write_its_log(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (state_dir / "server.log").mkdir()  # as a directory of another user's would refuse it
    assert main(["local", "up", "--state-dir", str(state_dir), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "server.log" in err and "Traceback" not in err


def test_up_prints_the_servers_log_tail_escaped(
    state_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the tail of server.log (what the server logged) is text the command did not write
    def fails(**_: object) -> None:
        raise control.ControlError("squall local did not start (exit 1):\n  \x1b]0;owned\x07\x9b2J\u202e")

    monkeypatch.setattr(control, "up", fails)
    assert main(["local", "up", "--state-dir", str(state_dir)]) == 1
    err = capsys.readouterr().err
    assert "\\x1b]0;owned\\x07\\x9b2J\\u202e" in err
    assert not any(raw in err for raw in ("\x1b", "\x07", "\x9b", "\u202e"))


# ---- squall local env ----


def test_local_env_prints_the_running_sessions_exports(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:4580", "AWS_SECRET_ACCESS_KEY": "s e'cret"}
    record(state_dir, os.getpid(), process_start(os.getpid()), env=env)
    assert main(["local", "env", "--state-dir", str(state_dir)]) == 0
    out = capsys.readouterr().out
    assert out == control.exports(env) + "\n"


def test_local_env_with_nothing_running_says_how_to_start_it(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["local", "env"]) == 1
    err = capsys.readouterr().err
    assert "not running" in err and 'eval "$(squall local up)"' in err


# ---- the other commands' hints ----


def test_an_unset_table_names_squall_local_env_while_a_local_runtime_runs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(deployment.TABLE_ENV, raising=False)
    record(state_dir, os.getpid(), process_start(os.getpid()), env={})
    with pytest.raises(CommandError, match=r'a local runtime is running .*`eval "\$\(squall local env\)"`'):
        deployment.table_name()


def test_an_unset_queue_or_bucket_says_how_to_start_a_local_runtime(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (deployment.QUEUE_ENV, deployment.ARTIFACTS_ENV):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CommandError, match=r'squall local up\)"`$'):
        deployment.jobs_queue_url()
    with pytest.raises(CommandError, match=r'squall local up\)"`$'):
        deployment.artifacts_bucket()


def test_a_command_against_a_stopped_local_runtime_says_so(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # what `squall local down` leaves: nothing listens
    for key, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "us-west-2",
        deployment.TABLE_ENV: "squall-jobs",
        deployment.QUEUE_ENV: f"{endpoint}/123456789012/squall-jobs",
    }.items():
        monkeypatch.setenv(key, value)
    assert main(["status", "abc"]) == 1
    err = capsys.readouterr().err
    assert "EndpointConnectionError" not in err
    assert f"nothing answers on {endpoint}" in err and "stopped" in err
    assert 'eval "$(squall local up)"' in err


def test_a_remote_endpoint_gets_no_local_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://sqs.us-west-2.example")
    assert deployment.stopped_local_endpoint() is None
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    assert deployment.stopped_local_endpoint() is None


def test_the_running_hint_names_the_endpoint(state_dir: Path) -> None:
    record(state_dir, os.getpid(), process_start(os.getpid()), env={})
    assert "http://127.0.0.1:1" in deployment.local_hint()
    (state_dir / STATE_FILE).write_text(json.dumps({"pid": os.getpid()}))  # no start time: not ours
    assert "squall local up" in deployment.local_hint()
