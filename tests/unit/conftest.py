"""tests/unit is the pure tier: no socket, no child process, no TensorFlow.

Each test runs with the network calls and process starts of the standard library
refused, and fails if it imported TensorFlow. A test that needs any of them belongs in
tests/integration (sockets, processes) or tests/worker (TensorFlow), where the fast
tier's markers find it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest


class PureTierViolation(AssertionError):
    """A unit test reached outside the process: move it to tests/integration."""


def _refuse(what: str) -> Any:
    def refused(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise PureTierViolation(f"a unit test may not {what}: move it to tests/integration")

    return refused


@pytest.fixture(autouse=True)
def _pure_tier(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    tensorflow_before = "tensorflow" in sys.modules
    for method in ("connect", "connect_ex", "bind", "listen"):
        monkeypatch.setattr(socket.socket, method, _refuse("open a socket"))
    monkeypatch.setattr(socket, "create_connection", _refuse("open a socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("start a process"))
    yield
    if not tensorflow_before and "tensorflow" in sys.modules:
        raise PureTierViolation("a unit test may not import TensorFlow: move it to tests/worker")
