"""plan(): from what the cluster and the groups look like now, to what to change.

Order of business, each step with its reasons:
1. Group health: new launch failures or provision timeouts back a group off, and the
   desired capacity it cannot fulfil is given back.
2. Pending pods fill existing room: ready nodes, then nodes Squall cordoned (to be
   uncordoned), then nodes not up yet (booting, or desired but not launched yet), so
   that a burst is never launched twice.
3. The rest is packed onto new nodes of the preferred groups; a job stays in one region.
4. Nodes that never came up in time, and empty nodes idle long enough, are removed.

See packing.py for how pods are packed, and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from squall.planner.demand import Demand, Gang, PodShape, build_demand
from squall.planner.fit import blocking_taints
from squall.planner.health import PROVISION_TIMEOUT, GroupAssessment, assess_group
from squall.planner.inventory import GroupView, InstanceStatus, Inventory, build_inventory, free_of
from squall.planner.model import (
    GroupHealth,
    Node,
    NodeGroup,
    Plan,
    Pod,
    Policy,
    ScaleUp,
    Uncordon,
    Unschedulable,
    Vector,
    require_aware,
)
from squall.planner.packing import GroupOption, Packer, Room, RoomKind, names
from squall.planner.scaledown import ScaleDownContext, idle_nodes, timed_out_instances

_LISTED_SHAPES = 4


def plan(
    *,
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    groups: Sequence[NodeGroup],
    health: Mapping[str, GroupHealth],
    policy: Policy,
    now: datetime,
    inventory: Inventory | None = None,
) -> Plan:
    """Decide scale-ups, uncordons, scale-downs and backoffs. Pure: no I/O, no clock.

    `inventory`: build_inventory's of these nodes, pods and groups, where the caller
    has it already (the scale check builds one for admission, the plan and the timers).
    """
    require_aware("now", now)
    if inventory is None:
        inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=policy, now=now)
    assessments = {
        name: assess_group(view, previous=health.get(name, GroupHealth()), policy=policy, now=now)
        for name, view in inventory.groups.items()
    }
    demand = build_demand(inventory.pending, job_regions=inventory.job_regions)
    packer, unschedulable = _pack(inventory, assessments, demand)
    scale_ups = [
        _scale_up(option, inventory.groups[option.name]) for option in packer.options if option.new_nodes
    ]
    sizes = {
        name: a.give_back.to_desired if a.give_back else inventory.groups[name].group.desired
        for name, a in assessments.items()
    }
    scale_downs = timed_out_instances(inventory.groups.values(), sizes=sizes, policy=policy)
    scale_downs += idle_nodes(
        inventory,
        ScaleDownContext(
            policy=policy,
            now=now,
            sizes=sizes,
            absorbing=frozenset(room.name for room in packer.rooms if room.placed),
            growing=frozenset(s.group for s in scale_ups),
        ),
    )
    return Plan(
        scale_ups=tuple(sorted(scale_ups, key=lambda s: s.group)),
        uncordons=tuple(_uncordons(packer.rooms)),
        scale_downs=tuple(scale_downs),
        unschedulable=tuple(sorted(unschedulable, key=lambda u: u.pod)),
        backoffs=tuple(a.change for _, a in sorted(assessments.items()) if a.change is not None),
        give_backs=tuple(a.give_back for _, a in sorted(assessments.items()) if a.give_back is not None),
        stranded=tuple(sorted(packer.stranded)),
    )


# --- existing room ---------------------------------------------------------------------


def rooms_on_nodes_up(inventory: Inventory, *, least: Vector | None = None) -> list[Room]:
    """Free room on nodes that are up: ready ones, and ready ones Squall cordoned (new Rooms each call).

    `least`: only the nodes with at least this much of each resource free.
    """
    return [
        Room(
            kind=RoomKind.CORDONED if up.cordoned else RoomKind.READY,
            name=up.view.node.name,
            group=up.view.group.name if up.view.group is not None else None,
            region=up.view.region,
            free=up.free,
            labels=up.view.node.labels,
            taints=up.taints,
        )
        for up in inventory.nodes_up()
        if least is None
        or (
            up.free[0] >= least[0]
            and up.free[1] >= least[1]
            and up.free[2] >= least[2]
            and up.free[3] >= least[3]
        )
    ]


def _add_nodes_not_up_yet(option: GroupOption, view: GroupView, *, assessment: GroupAssessment) -> None:
    """Booting instances, and desired capacity not launched yet, as nodes of the template.

    A backed-off group's unlaunched capacity is given back, so it counts for nothing.
    A group backed off because its instances do not become nodes (a bad AMI, a
    broken bootstrap) cannot be trusted with the ones still booting either: the
    pods waiting for them spill to the next group instead of waiting for nothing.
    """
    in_backoff = assessment.in_backoff
    if in_backoff and assessment.health.reason.startswith(PROVISION_TIMEOUT):
        return
    template = view.group.allocatable.vector()
    for instance in view.instances:
        if instance.status is InstanceStatus.BOOTING:
            used = instance.node.used if instance.node is not None else (0, 0, 0, 0)
            option.add_booting(free_of(template, used))
    if not in_backoff:
        option.add_booting(template, count=view.missing_count)


# --- new nodes -------------------------------------------------------------------------


def _pack(
    inventory: Inventory, assessments: Mapping[str, GroupAssessment], demand: Demand
) -> tuple[Packer, list[Unschedulable]]:
    """Pack filling nodes not up yet in the shapes' preferred-group order, then, if that
    launches anything while nodes are booting, in the reverse order; keep the better."""
    first = _pack_once(inventory, assessments, demand, preferred_bins_first=True)
    packer = first[0]
    if not any(o.new_nodes for o in packer.options) or not any(o.booting for o in packer.options):
        return first
    second = _pack_once(inventory, assessments, demand, preferred_bins_first=False)
    return second if _launch_cost(*second) < _launch_cost(*first) else first


def _pack_once(
    inventory: Inventory,
    assessments: Mapping[str, GroupAssessment],
    demand: Demand,
    *,
    preferred_bins_first: bool,
) -> tuple[Packer, list[Unschedulable]]:
    options = [_group_option(view, assessments[name]) for name, view in inventory.groups.items()]
    for option in options:
        _add_nodes_not_up_yet(option, inventory.groups[option.name], assessment=assessments[option.name])
    packer = Packer(
        # Room on nodes that are up only matters to pods waiting for it.
        rooms=rooms_on_nodes_up(inventory) if demand.free or demand.gangs else [],
        options=options,
        shapes=_shapes(demand),
        preferred_bins_first=preferred_bins_first,
    )
    return packer, _place(packer, demand)


def _launch_cost(packer: Packer, unschedulable: list[Unschedulable]) -> tuple[int, int]:
    return (len(unschedulable), sum(option.new_nodes for option in packer.options))


def _group_option(view: GroupView, assessment: GroupAssessment) -> GroupOption:
    group = view.group
    blocked = None
    if assessment.in_backoff and assessment.health.backoff_until is not None:
        blocked = (
            f"in backoff until {assessment.health.backoff_until.isoformat()} ({assessment.health.reason})"
        )
    return GroupOption(
        group=group,
        capacity=group.allocatable.vector(),
        labels=group.template_labels(),
        taints=blocking_taints(group.taints, ignore_transient=True),
        headroom=max(0, group.max_size - view.size),
        blocked=blocked,
    )


def _shapes(demand: Demand) -> list[PodShape]:
    shapes = list(demand.free)
    for gang in demand.gangs:
        shapes.extend(gang.pods_by_shape)
    return shapes


def _place(packer: Packer, demand: Demand) -> list[Unschedulable]:
    """Gangs first (they are the hardest to place), then free pods, largest shape first."""
    unschedulable: list[Unschedulable] = []
    for gang in sorted(demand.gangs, key=_gang_order):
        reason = packer.place_gang(gang)
        if reason is not None:
            unschedulable.extend(Unschedulable(pod=pod.key, reason=reason) for pod in gang.pods())
    placements = packer.place_free({shape: len(pods) for shape, pods in demand.free.items()})
    for shape, (placed, skipped) in placements.items():
        pods = demand.free[shape]
        if placed < len(pods):
            reason = packer.no_room_reason(shape, skipped)
            unschedulable.extend(Unschedulable(pod=pod.key, reason=reason) for pod in pods[placed:])
    return unschedulable


def _gang_order(gang: Gang) -> tuple[int, int, int, str]:
    gpus = sum(shape.request[2] * len(pods) for shape, pods in gang.pods_by_shape.items())
    return (-gang.priority, -gpus, -gang.size, gang.job_id)


def _scale_up(option: GroupOption, view: GroupView) -> ScaleUp:
    group = option.group
    pods = sum(option.placed.values())
    by_count = sorted(option.placed.items(), key=lambda item: (-item[1], item[0].describe()))
    listed = ", ".join(f"{count}x ({shape.describe()})" for shape, count in by_count[:_LISTED_SHAPES])
    if len(by_count) > _LISTED_SHAPES:
        listed += f" (+{len(by_count) - _LISTED_SHAPES} more shapes)"
    beyond = f" beyond the {option.booting} on their way" if option.booting else ""
    reasons = [
        f"{pods} pending pod(s) need {option.new_nodes} new {group.instance_type} node(s){beyond}: {listed}"
    ]
    if option.gangs:
        reasons.append(f"keeps job(s) {names(sorted(option.gangs))} together in {group.site}")
    reasons.extend(f"spilled over from {name}: {why}" for name, why in option.spilled_from.items())
    return ScaleUp(
        group=group.name,
        from_desired=group.desired,
        to_desired=view.size + option.new_nodes,
        reasons=tuple(reasons),
    )


def _uncordons(rooms: Iterable[Room]) -> list[Uncordon]:
    return [
        Uncordon(
            node=room.name,
            reasons=(
                f"cordoned by Squall; {room.placed} pending pod(s) fit on it, "
                "so it is uncordoned before anything is launched",
            ),
        )
        for room in rooms
        if room.kind is RoomKind.CORDONED and room.placed
    ]
