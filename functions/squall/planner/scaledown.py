"""Which nodes to remove: only empty ones, idle long enough, never below a group's min.

Removal is cordon, then terminate that very instance with a decrement: desired capacity
is never lowered to remove a node, because AWS would choose the victim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from squall.planner.inventory import IN_SERVICE, GroupView, InstanceStatus, Inventory, NodeView
from squall.planner.model import GroupInstance, NodeGroup, Policy, ScaleDown


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleDownContext:
    policy: Policy
    now: datetime
    # desired capacity per group once this plan's give-backs are applied
    sizes: Mapping[str, int]
    # nodes that pending pods are planned onto: not idle any more
    absorbing: frozenset[str]
    # groups this plan scales up: removing their nodes would only fight the launch
    growing: frozenset[str]


def timed_out_instances(
    views: Iterable[GroupView], *, sizes: dict[str, int], policy: Policy
) -> list[ScaleDown]:
    """Instances that never became a ready GPU node in time: terminate them, unless busy.

    `sizes` is updated with each removal, so that idle-node removal honours min size too.
    """
    removals: list[ScaleDown] = []
    for view in views:
        group = view.group
        for instance in view.instances:
            node = instance.node
            if instance.status is not InstanceStatus.TIMED_OUT or not instance.known_state:
                continue
            if (node is not None and node.busy) or sizes[group.name] - 1 < group.min_size:
                continue
            sizes[group.name] -= 1
            removals.append(
                ScaleDown(
                    node=node.node.name if node is not None else None,
                    instance=instance.instance.instance_id,
                    group=group.name,
                    reasons=(
                        f"provision timeout: launched {instance.instance.launch_time.isoformat()}, "
                        f"not a ready node with its GPUs within {_duration(policy.provision_timeout)}",
                        "nothing but DaemonSet/mirror pods on it"
                        if node is not None
                        else "never joined the cluster",
                    ),
                )
            )
    return removals


def idle_nodes(inventory: Inventory, context: ScaleDownContext) -> list[ScaleDown]:
    """Empty nodes idle past the threshold, longest idle first, a bounded number per check."""
    serving = _serving_group_nodes(inventory)
    limit = _removal_limit(len(serving), context.policy.max_scale_down_fraction)
    candidates = sorted(
        (
            (idle_since, member)
            for member in serving
            if (idle_since := _removable_since(member, context)) is not None
        ),
        key=lambda candidate: (candidate[0], candidate[1].view.node.name),
    )
    sizes = dict(context.sizes)
    removals: list[ScaleDown] = []
    for idle_since, member in candidates:
        group = member.group
        size = sizes[group.name]
        if len(removals) >= limit:
            break
        if size - 1 < group.min_size:
            continue
        sizes[group.name] = size - 1
        removals.append(
            ScaleDown(
                node=member.view.node.name,
                instance=member.instance.instance_id,
                group=group.name,
                reasons=(
                    "empty: nothing but DaemonSet/mirror pods",
                    f"idle for {_duration(context.now - idle_since)} "
                    f"(threshold {_duration(context.policy.idle_threshold)})",
                    f"{group.name} goes from {size} to {size - 1} (min size {group.min_size})",
                ),
            )
        )
    return removals


@dataclass(frozen=True, slots=True, kw_only=True)
class _GroupNode:
    view: NodeView
    group: NodeGroup
    instance: GroupInstance


def _serving_group_nodes(inventory: Inventory) -> list[_GroupNode]:
    """Ready nodes of in-service group instances: the only ones ever removed when idle."""
    return [
        _GroupNode(view=view, group=view.group, instance=view.instance)
        for view in inventory.nodes
        if view.group is not None
        and view.instance is not None
        and view.instance.lifecycle_state == IN_SERVICE
        and view.serving
    ]


def _removable_since(member: _GroupNode, context: ScaleDownContext) -> datetime | None:
    """Since when the node has been idle, if it may be removed now; else None."""
    view, node = member.view, member.view.node
    if view.busy or node.name in context.absorbing or member.group.name in context.growing:
        return None
    if node.unschedulable and not node.cordoned_by_squall:
        return None  # someone else cordoned it: theirs to decide
    if view.idle_since is None or context.now - view.idle_since < context.policy.idle_threshold:
        return None
    born = max(t for t in (member.instance.launch_time, node.created_at) if t is not None)
    if context.now - born < context.policy.boot_grace:
        return None
    return view.idle_since


def _removal_limit(serving_nodes: int, fraction: float) -> int:
    """At most this fraction of the managed nodes per check, but at least one (if any)."""
    if fraction <= 0 or serving_nodes == 0:
        return 0
    return max(1, math.floor(serving_nodes * fraction))


def _duration(duration: timedelta) -> str:
    minutes = int(duration.total_seconds() // 60)
    if minutes >= 120:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    return f"{minutes}m"
