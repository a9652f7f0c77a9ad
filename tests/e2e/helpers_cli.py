"""The `squall` command in a child process, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_squall(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`squall ARGS`: its exit code, stdout and stderr (text); a non-zero exit is the caller's to assert."""
    return subprocess.run(
        [sys.executable, "-m", "squall.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
