"""The `squall` command in a child process, as a user runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.python_child import run_module


def run_squall(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`squall ARGS`: its exit code, stdout and stderr (text); a non-zero exit is the caller's to assert."""
    return run_module("squall.cli", *args, timeout=timeout, cwd=cwd)
