"""Shared fixtures: recorded events, a Lambda context, fake AWS credentials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.properties import FAST, FAST_EXAMPLES

EVENTS = Path(__file__).parent / "events"


settings.register_profile("fast", max_examples=FAST_EXAMPLES)
if FAST:
    settings.load_profile("fast")

# The slow tier, by where a test lives: TensorFlow training (worker/), CDK synthesis
# (infrastructure/), the local runtime end to end (e2e/). Elsewhere a test says it is slow
# with @pytest.mark.slow. `make test-fast` runs everything else.
SLOW_FOLDERS = ("worker", "infrastructure", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        path = Path(str(item.path))
        if path.is_relative_to(tests) and path.relative_to(tests).parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


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
