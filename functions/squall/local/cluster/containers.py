"""Container statuses as the kubelet reports them, and its restart back-off.

Models: `containerStatuses` and `initContainerStatuses` entries (name, image, ready,
started, restartCount, state, lastState), the states a container is in (waiting
with a reason, running since, terminated with an exit code), and the kubelet's
back-off for restarting a container that exited under restartPolicy Always: 10 s,
doubling with every restart, at most 5 minutes (CrashLoopBackOff in between).

Every entry is built anew, never changed in place: the pod views lists share
(views.py) may hold the old ones.

Leaves out: the back-off being reset after a container ran 10 minutes cleanly,
startup and liveness probes, and sidecar (restartable) init containers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

RESTART_BACKOFF = timedelta(seconds=10)
RESTART_BACKOFF_CAP = timedelta(minutes=5)
CRASH_LOOP = "CrashLoopBackOff"


def restart_delay(restarts: int) -> timedelta:
    """How long the kubelet waits before the `restarts`-th restart of a container (1 = the first)."""
    if restarts < 1:
        return timedelta(0)
    # 10 s doubling reaches the cap at the 6th restart: no need to compute 2 ** restarts.
    return min(RESTART_BACKOFF * (2 ** min(restarts - 1, 16)), RESTART_BACKOFF_CAP)


def status(
    container: Mapping[str, Any],
    *,
    ready: bool,
    state: dict[str, Any],
    restarts: int = 0,
    last_state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": container["name"],
        "image": container.get("image", ""),
        "ready": ready,
        "restartCount": restarts,
        "started": "running" in state,
        "state": state,
    }
    if last_state is not None:  # Job pods' statuses have always left it out
        entry["lastState"] = last_state
    return entry


def waiting(container: Mapping[str, Any], *, reason: str, message: str, **fields: Any) -> dict[str, Any]:
    return status(container, ready=False, state={"waiting": {"reason": reason, "message": message}}, **fields)


def terminated(*, exit_code: int, started: str | None, finished: str) -> dict[str, Any]:
    return {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started,
        "finishedAt": finished,
    }


def init_statuses(pod_spec: Mapping[str, Any], *, started: str | None, finished: str) -> list[dict[str, Any]]:
    """Every init container run to completion (exit 0) before the containers started."""
    return [
        status(
            c, ready=True, state={"terminated": terminated(exit_code=0, started=started, finished=finished)}
        )
        for c in pod_spec.get("initContainers") or []
    ]


def has_readiness_probe(pod_spec: Mapping[str, Any]) -> bool:
    return any(isinstance(c, Mapping) and c.get("readinessProbe") for c in pod_spec.get("containers") or [])
