"""When the plan could change with nothing else changing: the planner's timers. Pure.

`plan()` reads the time in a few rules only: a node idle past the idle threshold (and
past its boot grace) may go; an instance not a ready node within the provision timeout
backs its group off; a backoff ends; a failure leaves the failure window. Given the same
nodes, pods, groups and health, the plan at any time before the earliest of these is
the plan of now. The scale check uses it to end a check that sees nothing changed
before a timer is due, after its reads, without planning again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from squall.planner.inventory import InstanceStatus, Inventory, build_inventory
from squall.planner.model import GroupHealth, Node, NodeGroup, Pod, Policy, require_aware


def next_timer(
    *,
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    groups: Sequence[NodeGroup],
    health: Mapping[str, GroupHealth],
    policy: Policy,
    now: datetime,
    inventory: Inventory | None = None,
) -> datetime | None:
    """The earliest time after `now` at which a time rule of the planner may decide otherwise.

    None: no timer is running (every node busy, nothing booting, no backoff or failure
    on record): only a change to the inputs can change the plan. `inventory`: as for `plan`.
    """
    require_aware("now", now)
    if inventory is None:
        inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=policy, now=now)
    due: list[datetime] = []
    for view in inventory.nodes:
        if view.busy or view.idle_since is None:
            continue
        due.append(view.idle_since + policy.idle_threshold)
        born = [t for t in (view.instance.launch_time if view.instance else None, view.node.created_at) if t]
        if born:
            due.append(max(born) + policy.boot_grace)
    for group_view in inventory.groups.values():
        for instance in group_view.instances:
            if instance.status is InstanceStatus.BOOTING:
                due.append(instance.instance.launch_time + policy.provision_timeout)
        for failure in group_view.group.failures:
            due.append(failure.time + policy.failure_window)
    for state in health.values():
        if state.backoff_until is not None:
            due.append(state.backoff_until)
        if state.last_failure_at is not None:
            due.append(state.last_failure_at + policy.failure_window)
    return min((t for t in due if t > now), default=None)
