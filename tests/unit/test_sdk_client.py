"""The Client's own checks, before it talks to anything: the spec in each form it takes, the
deployment it is pointed at, and what it refuses (as the `squall` command refuses it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from squall import Client, CommandError
from squall.cli.errors import EXIT_FAILED, EXIT_USAGE
from squall.core.spec import parse_spec

SPEC = {
    "name": "mnist",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"gpu": 1},
}


@pytest.fixture(autouse=True)
def local_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES", "SQUALL_TABLE_NAME"):
        monkeypatch.delenv(name, raising=False)


def test_a_spec_is_checked_as_a_mapping_a_jobspec_or_a_file(tmp_path: Path) -> None:
    client = Client()
    (tmp_path / "job.json").write_text(json.dumps(SPEC))
    from_mapping, body = client.check(SPEC)
    from_file, _ = client.check(tmp_path / "job.json")
    from_model, model_body = client.check(
        parse_spec(SPEC, teams=["research"], registries=["registry.example.com"])
    )
    assert from_mapping == from_file == from_model
    assert body == SPEC and model_body["name"] == "mnist"


def test_a_bad_spec_names_every_field_and_is_bad_input() -> None:
    with pytest.raises(CommandError) as refused:
        Client().check({**SPEC, "team": "nobody", "colour": "blue"})
    assert refused.value.code == EXIT_USAGE
    text = str(refused.value)
    assert text.startswith("spec: invalid job spec (2 errors)") and "colour: unknown field" in text
    with pytest.raises(CommandError, match="spec: expected a mapping, a JobSpec or a file's path, got int"):
        Client().check(7)  # type: ignore[arg-type]


def test_the_deployment_is_named_by_the_environment_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # set first, so that the test's end puts back what they were (the Client sets the process's)
    monkeypatch.setenv("AWS_PROFILE", "before")
    monkeypatch.setenv("SQUALL_TABLE_NAME", "before")
    Client(environment={"SQUALL_TABLE_NAME": "squall-jobs"}, profile="research")
    assert os.environ["SQUALL_TABLE_NAME"] == "squall-jobs" and os.environ["AWS_PROFILE"] == "research"
    with pytest.raises(CommandError, match="environment: expected text names and values"):
        Client(environment={"SQUALL_TABLE_NAME": 3})  # type: ignore[dict-item]


def test_a_client_with_no_deployment_says_what_is_missing() -> None:
    with pytest.raises(CommandError, match="SQUALL_TABLE_NAME is not set") as missing:
        Client().get("gan-1")
    assert missing.value.code == EXIT_USAGE


def test_the_local_runtime_that_is_not_running_is_said(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="squall local is not running") as stopped:
        Client.local(tmp_path / "state")
    assert stopped.value.code == EXIT_FAILED


def test_wait_refuses_a_poll_that_would_spin() -> None:
    with pytest.raises(CommandError, match="poll: expected seconds above 0, got 0"):
        Client().wait("gan-1", poll=0)
