"""A ProcessRunner on a local endpoint: Squall's resources on moto's server, the pods' output in its log group."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.local.aws import LOG_GROUP, client, create_resources, local_endpoint
from squall.local.processes import ProcessRunner


@dataclass(frozen=True)
class LocalProcesses:
    endpoint: str
    logs: Any  # the endpoint's CloudWatch Logs client, which the runner writes the pods' output with
    runner: ProcessRunner


@contextmanager
def local_processes(work_dir: Path) -> Iterator[LocalProcesses]:
    """The runner's pods work in `work_dir`; it is closed (waiting up to 5 s) before the endpoint stops."""
    with local_endpoint() as endpoint:
        create_resources(endpoint)
        logs = client("logs", endpoint)
        runner = ProcessRunner(endpoint=endpoint, log_group=LOG_GROUP, work_dir=work_dir, logs_client=logs)
        try:
            yield LocalProcesses(endpoint, logs, runner)
        finally:
            runner.close(wait=5)
