"""How Squall names things in Auto Scaling: a group, and a lifecycle action pending on one.

Pure values. They live in core, not in ports.py (which re-exports them), because the
drain record (core/drain.py) names the action it answers as the Fleet port does, and
core may not import the ports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupRef:
    """An Auto Scaling group, by name, in one region."""

    name: str
    region: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LifecycleAction:
    """One instance waiting on a lifecycle hook of its group: what completing or heartbeating it names.

    ``token`` is the event's LifecycleActionToken; without one, Auto Scaling finds the
    action by the instance and the hook alone.
    """

    ref: GroupRef
    hook_name: str
    instance_id: str
    token: str | None = None
