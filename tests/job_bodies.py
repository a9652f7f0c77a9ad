"""Job specs as a researcher sends them, for the tests that queue and plan jobs."""

from __future__ import annotations

from typing import Any

REGISTRY = "registry.example.com/squall"


def job_body(name: str, team: str, *, priority: int = 50, gpu: int = 1, workers: int = 0) -> dict[str, Any]:
    """A tf-trainer job of 4 CPUs and 16Gi per replica, its id its name; `workers` adds worker replicas."""
    body: dict[str, Any] = {
        "name": name,
        "id": name,
        "team": team,
        "image": f"{REGISTRY}/tf-trainer:1.0",
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpu},
        "priority": priority,
    }
    if workers:
        body["replicas"] = {"worker": workers}
    return body
