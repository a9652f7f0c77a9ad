"""Fixtures for the TensorFlow trainer's tests; helpers live in harness.py."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.worker.harness import TRAINER_ROOT, TrainerProcess


@pytest.fixture
def trainer_env() -> dict[str, str]:
    """Environment for a trainer subprocess: no TF_CONFIG, no sweep, quiet C++ logs."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SQUALL_")}
    env["PYTHONPATH"] = str(TRAINER_ROOT)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def spawn(trainer_env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    """Start trainer subprocesses; any still running at the end of the test is killed."""
    started: list[TrainerProcess] = []

    def start(
        args: Sequence[str], *, env: dict[str, str] | None = None, name: str = "trainer"
    ) -> TrainerProcess:
        process = TrainerProcess(
            args=args,
            env={**trainer_env, **(env or {})},
            stderr=tmp_path / f"{name}-{len(started)}.stderr",
            name=name,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's in-memory S3 with an empty bucket named "squall"; yields a client."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket="squall")
        yield client
