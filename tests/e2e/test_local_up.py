"""`squall local up/status/down`, and the job commands against what it runs.

Each test starts its own server in a temporary state directory on a free port, at
30x (a node boots in under a second, a scale check comes every two), and always
stops it.
"""

from __future__ import annotations

import json
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from squall.cli import main
from squall.core.logstreams import parse_stream
from squall.local import control
from tests.e2e.waiting import until

ROOT = Path(__file__).resolve().parents[2]
SPEED = "30"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        words = shlex.split(line)
        assert words[0] == "export", line
        key, _, value = words[1].partition("=")
        env[key] = value
    return env


class Local:
    def __init__(self, state_dir: Path, port: int) -> None:
        self.state_dir = state_dir
        self.port = port

    def args(self) -> list[str]:
        return ["--state-dir", str(self.state_dir)]


@pytest.fixture
def local_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Local]:
    # Each `up` has credentials of its own; boto3's default session keeps the first it read.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    local = Local(tmp_path / "state", free_port())
    try:
        yield local
    finally:
        control.down(state_dir=local.state_dir, timeout=20)


def up(local: Local, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, str]:
    code = main(["local", "up", *local.args(), "--port", str(local.port), "--speed", SPEED, *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return parse_exports(captured.out)


@pytest.mark.timeout(240)
def test_up_status_down(local_dir: Local, capsys: pytest.CaptureFixture[str]) -> None:
    env = up(local_dir, capsys, "--no-real-pods")
    assert env["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{local_dir.port}"
    assert (
        env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"] and env["AWS_DEFAULT_REGION"] == "us-west-2"
    )
    assert env["SQUALL_ARTIFACTS_BUCKET"] == "squall-artifacts" and env["SQUALL_CLUSTER_NAME"] == "squall"
    state = json.loads((local_dir.state_dir / "local.json").read_text())
    assert state["port"] == local_dir.port and state["env"] == env

    assert main(["local", "status", *local_dir.args(), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["running"] and shown["pid"] == state["pid"] and shown["port"] == local_dir.port
    assert "nodes" in shown and "jobs" in shown
    # without --groups: the demo's groups, in one cluster
    assert [c["name"] for c in shown["clusters"]] == ["local"] and shown["groups"] is None
    assert main(["local", "status", *local_dir.args()]) == 0
    assert f"port {local_dir.port}" in capsys.readouterr().out

    # The resources the CLI's other commands use are there.
    # (With the session's credentials that `up` printed: the endpoint takes no others.)
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-west-2",
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    assert "squall-artifacts" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    logs = boto3.client("logs", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-west-2",
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    groups = [g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]]
    assert "/aws/containerinsights/squall/application" in groups

    # One at a time: a second `up` refuses, and leaves the first running.
    assert main(["local", "up", *local_dir.args(), "--port", str(free_port())]) == 1
    assert "already running" in capsys.readouterr().err
    assert control.status(state_dir=local_dir.state_dir)["running"]

    assert main(["local", "down", *local_dir.args()]) == 0
    assert "stopped" in capsys.readouterr().err
    assert not (local_dir.state_dir / "local.json").exists()
    assert main(["local", "status", *local_dir.args()]) == 1
    assert "not running" in capsys.readouterr().out
    assert main(["local", "down", *local_dir.args()]) == 0  # idempotent
    assert "not running" in capsys.readouterr().err
    with socket.socket() as sock:  # the port is free again: nothing listens there
        # As a restarted server binds (moto's does): connections the server closed may
        # still sit in TIME_WAIT on the port, which only a listener should make fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", local_dir.port))


@pytest.mark.timeout(60)
def test_up_refuses_a_port_that_is_taken(local_dir: Local, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", local_dir.port))
        sock.listen()
        assert main(["local", "up", *local_dir.args(), "--port", str(local_dir.port)]) == 1
    err = capsys.readouterr().err
    assert f"port {local_dir.port}" in err and "--port" in err
    assert not (local_dir.state_dir / "local.json").exists()


def test_up_refuses_bad_options(local_dir: Local, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "up", *local_dir.args(), "--speed", "0"]) == 2
    assert "--speed" in capsys.readouterr().err
    assert main(["local", "up", *local_dir.args(), "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_stale_state_file_does_not_block_down_or_up(
    local_dir: Local, capsys: pytest.CaptureFixture[str]
) -> None:
    local_dir.state_dir.mkdir(parents=True)
    (local_dir.state_dir / "local.json").write_text(json.dumps({"pid": 2**22 + 12345, "endpoint": "x"}))
    assert main(["local", "status", *local_dir.args()]) == 1
    assert main(["local", "down", *local_dir.args()]) == 0
    assert "not running" in capsys.readouterr().err
    assert not (local_dir.state_dir / "local.json").exists()


@pytest.mark.timeout(300)
def test_the_job_commands_work_against_it(
    local_dir: Local, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = up(local_dir, capsys, "--no-real-pods")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    assert main(["submit", "examples/single-gpu.yaml", "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["jobId"]
    assert main(["submit", "examples/distributed.yaml", "--json"]) == 0
    other = json.loads(capsys.readouterr().out)["jobId"]

    def status_of(job: str) -> str | None:
        if main(["status", job, "--json"]) != 0:
            capsys.readouterr()
            return None
        return str(json.loads(capsys.readouterr().out)["status"])

    assert until(lambda: status_of(other) in ("QUEUED", "RUNNING"))
    assert main(["cancel", other]) == 0
    capsys.readouterr()
    assert until(lambda: status_of(other) == "CANCELLED")
    # A pod of the example keeps its simulated run time (a minute of cluster time) here.
    assert until(lambda: status_of(job_id) == "SUCCEEDED", seconds=150)
    assert main(["describe", job_id]) == 0
    history = capsys.readouterr().out
    assert "Submitted" in history and "SUCCEEDED" in history
    assert main(["list", "--json"]) == 0
    listed = capsys.readouterr().out
    assert job_id in listed and other in listed
    assert main(["queue", "--json"]) == 0
    capsys.readouterr()

    def counted() -> dict[str, Any]:
        assert main(["local", "status", *local_dir.args(), "--json"]) == 0
        return dict(json.loads(capsys.readouterr().out)["jobs"])

    # status.json is rewritten every second
    assert until(lambda: counted() == {"SUCCEEDED": 1, "CANCELLED": 1}, seconds=10)


@pytest.mark.timeout(300)
def test_a_worker_image_pod_runs_for_real_and_its_output_is_in_the_local_logs(
    local_dir: Local, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = up(local_dir, capsys)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "name: tiny\nteam: research\n"
        "image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/squall/tf-trainer:1.0\n"
        "command: [python, -c, \"import os; print('real', os.environ['SQUALL_JOB_ID'])\"]\n"
        "resources: {cpu: '1', memory: 1Gi, gpu: 1}\n"
    )
    assert main(["submit", str(spec), "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["jobId"]

    def status_of() -> str:
        assert main(["status", job_id, "--json"]) in (0, 1)
        out = capsys.readouterr().out
        return str(json.loads(out)["status"]) if out else ""

    assert until(lambda: status_of() in ("SUCCEEDED", "FAILED"), seconds=150)
    assert status_of() == "SUCCEEDED"
    logs = boto3.client("logs")
    group = "/aws/containerinsights/squall/application"
    streams = [s["logStreamName"] for s in logs.describe_log_streams(logGroupName=group)["logStreams"]]
    mine = [s for s in streams if (p := parse_stream(s)) is not None and p.pod.startswith(f"{job_id}-")]
    assert len(mine) == 1
    events = logs.get_log_events(logGroupName=group, logStreamName=mine[0], startFromHead=True)["events"]
    assert [json.loads(e["message"])["log"] for e in events] == [f"real {job_id}\n"]
