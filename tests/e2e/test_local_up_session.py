"""A `squall local up` session end to end: its credentials are its own and private, a
second shell gets them with `squall local env`, a web page's requests are refused, and
after `down` the commands say that the local runtime is stopped.
"""

from __future__ import annotations

import http.client
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from squall.cli import main
from squall.local import control
from tests.e2e.test_local_up import Local, free_port, parse_exports

SPEED = "30"


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Local]:
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # this session's credentials, not a cached one's
    state = Local(tmp_path / "state", free_port())
    monkeypatch.setenv("SQUALL_STATE_DIR", str(state.state_dir))  # where the hints look
    try:
        yield state
    finally:
        control.down(state_dir=state.state_dir, timeout=20)


def post(port: int, path: str, headers: dict[str, str], body: bytes = b"") -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.mark.timeout(240)
def test_a_session_from_up_to_down(
    local: Local, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (
        main(["local", "up", *local.args(), "--port", str(local.port), "--speed", SPEED, "--no-real-pods"])
        == 0
    )
    captured = capsys.readouterr()
    env = parse_exports(captured.out)
    assert "squall local env" in captured.err  # how another shell gets it

    # Credentials of this session only, kept where only this user reads them.
    assert env["AWS_ACCESS_KEY_ID"] != "testing" and len(env["AWS_SECRET_ACCESS_KEY"]) >= 32
    assert stat.S_IMODE(local.state_dir.stat().st_mode) == 0o700
    for name in ("local.json", "server.log"):
        assert stat.S_IMODE((local.state_dir / name).stat().st_mode) == 0o600, name

    # Another shell: `squall local env` prints the same exports.
    assert main(["local", "env", *local.args()]) == 0
    assert parse_exports(capsys.readouterr().out) == env
    # A second `up` is refused, and says where the environment is.
    assert main(["local", "up", *local.args(), "--port", str(free_port())]) == 1
    assert 'eval "$(squall local env)"' in capsys.readouterr().err

    # A shell without the exports is told about the one that runs.
    for key in ("SQUALL_TABLE_NAME", "SQUALL_JOBS_QUEUE_URL"):
        monkeypatch.delenv(key, raising=False)
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert "SQUALL_TABLE_NAME is not set" in err and 'eval "$(squall local env)"' in err
    assert env["AWS_ENDPOINT_URL"] in err

    # A web page's form post to moto's reset, and a SendMessage with a made-up signature.
    port = local.port
    assert post(port, "/moto-api/reset", {"Content-Type": "application/x-www-form-urlencoded"}) == 403
    forged = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "AmazonSQS.SendMessage",
        "Origin": "https://evil.example",
        "Authorization": f"AWS4-HMAC-SHA256 Credential={env['AWS_ACCESS_KEY_ID']}/20260101/us-west-2/sqs/"
        "aws4_request, SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
        "X-Amz-Date": "20260101T000000Z",
    }
    body = json.dumps({"QueueUrl": env["SQUALL_JOBS_QUEUE_URL"], "MessageBody": "{}"}).encode()
    assert post(port, "/", forged, body) == 403
    del forged["Origin"]
    assert post(port, "/", forged, body) == 403

    # With the exports, the commands work; the state survived the reset attempt.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["list", "--json"]) == 0
    capsys.readouterr()
    sqs = boto3.client("sqs")
    assert "Messages" not in sqs.receive_message(QueueUrl=env["SQUALL_JOBS_QUEUE_URL"], VisibilityTimeout=0)
    # A shell with another session's credentials is refused, and told what to run.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "from-an-earlier-up")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    assert main(["list"]) == 1
    assert 'eval "$(squall local env)"' in capsys.readouterr().err
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["AWS_SECRET_ACCESS_KEY"])
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)

    # `down` says what goes with it; then the commands say the runtime is stopped.
    assert main(["local", "down", *local.args()]) == 0
    assert "jobs, queues and logs are gone" in capsys.readouterr().err
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert "EndpointConnectionError" not in err
    assert "stopped" in err and 'eval "$(squall local up)"' in err
    assert main(["local", "env", *local.args()]) == 1
    assert "not running" in capsys.readouterr().err
