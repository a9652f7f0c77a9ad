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
from squall.planner.model import Policy, ScaleDown


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
    serving = [view for view in inventory.nodes if _serving_group_node(view)]
    limit = _removal_limit(len(serving), context.policy.max_scale_down_fraction)
    candidates = sorted(
        (view for view in serving if _removable(view, context)),
        key=lambda view: (view.idle_since, view.node.name),
    )
    sizes = dict(context.sizes)
    removals: list[ScaleDown] = []
    for view in candidates:
        if len(removals) >= limit:
            break
        assert view.group is not None and view.instance is not None and view.idle_since is not None
        group = view.group
        size = sizes[group.name]
        if size - 1 < group.min_size:
            continue
        sizes[group.name] = size - 1
        removals.append(
            ScaleDown(
                node=view.node.name,
                instance=view.instance.instance_id,
                group=group.name,
                reasons=(
                    "empty: nothing but DaemonSet/mirror pods",
                    f"idle for {_duration(context.now - view.idle_since)} "
                    f"(threshold {_duration(context.policy.idle_threshold)})",
                    f"{group.name} goes from {size} to {size - 1} (min size {group.min_size})",
                ),
            )
        )
    return removals


def _serving_group_node(view: NodeView) -> bool:
    return (
        view.group is not None
        and view.instance is not None
        and view.instance.lifecycle_state == IN_SERVICE
        and view.serving
    )


def _removable(view: NodeView, context: ScaleDownContext) -> bool:
    node = view.node
    assert view.group is not None and view.instance is not None
    if view.busy or node.name in context.absorbing or view.group.name in context.growing:
        return False
    if node.unschedulable and not node.cordoned_by_squall:
        return False  # someone else cordoned it: theirs to decide
    if view.idle_since is None or context.now - view.idle_since < context.policy.idle_threshold:
        return False
    born = max(t for t in (view.instance.launch_time, node.created_at) if t is not None)
    return context.now - born >= context.policy.boot_grace


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
