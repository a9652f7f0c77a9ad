"""A module of this interpreter run in a child process, as `python -m` runs it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_module(
    module: str, *args: str, timeout: float, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` (this environment unless `env`): its exit code, stdout and stderr
    (text); a non-zero exit is the caller's to assert."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
