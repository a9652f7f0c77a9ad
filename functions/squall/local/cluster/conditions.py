"""Status conditions the simulated cluster writes as they change: one shape for Jobs and Nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from squall.local.cluster.state import timestamp


def changed_condition(
    kind: str, *, true: bool, at: datetime, reason: str, message: str, seen_field: str = "lastProbeTime"
) -> dict[str, Any]:
    """A condition that took its status `at`; `seen_field` is the kind's last-seen time (a Node's lastHeartbeatTime)."""
    stamp = timestamp(at)
    return {
        "type": kind,
        "status": "True" if true else "False",
        seen_field: stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }
