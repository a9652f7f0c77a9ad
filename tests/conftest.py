"""Shared fixtures: recorded events, a Lambda context, fake AWS credentials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

EVENTS = Path(__file__).parent / "events"


def load_event(name: str) -> dict[str, Any]:
    """A recorded AWS event sample from tests/events/<name>.json."""
    return dict(json.loads((EVENTS / f"{name}.json").read_text()))


@pytest.fixture
def lambda_context() -> Any:
    from squall.local.lambda_events import LocalContext

    return LocalContext(function_name="squall-test")


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
