"""The console's pages over the local runtime, in process: the SDK's Client reads the runtime's
moto endpoint, and Flask's test client sends the requests a browser would (the console's own
host, the session's cookie, a same-origin form for a change)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from squall.cli.client import Client
from squall.console.app import create_app
from squall.console.context import ConsoleContext
from squall.console.guard import COOKIE, TOKEN_FIELD
from squall.local.runtime import LocalRuntime
from tests.e2e.helpers_runtime import GROUPS

PORT = 8080
TOKEN = "test-session-token"
BUCKET = "squall-artifacts"
ORIGIN = f"http://127.0.0.1:{PORT}"


class RuntimeClock:
    """The Client's clock: the runtime's virtual time, moved on by stepping the runtime."""

    def __init__(self, runtime: LocalRuntime) -> None:
        self.runtime = runtime

    def now(self) -> Any:
        return self.runtime.clock.now()

    def sleep(self, seconds: float) -> None:
        self.runtime.step(timedelta(seconds=seconds))


@dataclass
class Browser:
    """Requests as the console's own pages send them: its host, its cookie, its origin on a POST."""

    http: FlaskClient

    def get(self, path: str, **kwargs: Any) -> TestResponse:
        return self.http.get(path, base_url=ORIGIN, **kwargs)

    def post(self, path: str, data: dict[str, str] | None = None, **kwargs: Any) -> TestResponse:
        form = {TOKEN_FIELD: TOKEN, **(data or {})}
        headers = {"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin", **kwargs.pop("headers", {})}
        return self.http.post(path, base_url=ORIGIN, data=form, headers=headers, **kwargs)

    def text(self, path: str) -> str:
        response = self.get(path)
        assert response.status_code == 200, (
            path,
            response.status_code,
            response.get_data(as_text=True)[:2000],
        )
        return response.get_data(as_text=True)


@dataclass
class Console:
    runtime: LocalRuntime
    sdk: Client
    browser: Browser

    def step(self, seconds: float) -> None:
        self.runtime.step(timedelta(seconds=seconds))


def console_for(runtime: LocalRuntime, *, allow_actions: bool = False) -> Console:
    sdk = Client(clock=RuntimeClock(runtime))
    context = ConsoleContext(client=sdk, token=TOKEN, allow_actions=allow_actions, now=runtime.clock.now)
    app = create_app(context, port=PORT)
    app.testing = True
    http = app.test_client()
    http.set_cookie(COOKIE, TOKEN, domain="127.0.0.1")
    return Console(runtime=runtime, sdk=sdk, browser=Browser(http))


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    """The local runtime on its virtual clock, named by the environment as `squall local up` names it."""
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    with LocalRuntime.start(node_groups=GROUPS) as runtime:
        monkeypatch.setenv("SQUALL_TABLE_NAME", runtime.resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", runtime.resources.jobs_queue_url)
        monkeypatch.setenv("SQUALL_ARTIFACTS_BUCKET", BUCKET)
        s3 = boto3.client("s3")
        if BUCKET not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=BUCKET)
        yield runtime


@pytest.fixture
def console(local: LocalRuntime) -> Console:
    """The read-only console over the local runtime."""
    return console_for(local)


@pytest.fixture
def console_with_actions(local: LocalRuntime) -> Console:
    """The console started with --allow-actions."""
    return console_for(local, allow_actions=True)
