"""The cluster as the planner sees it: which node is whose, what runs where, what is booting.

Joins nodes to group instances (by instance id), sums what bound pods request on each
node, and sorts every instance into ready, booting (in-flight), timed out or gone.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import NamedTuple

from squall.conventions import CLUSTER_LABEL
from squall.planner.fit import blocking_taints
from squall.planner.model import REGION_LABEL, GroupInstance, Node, NodeGroup, Pod, Policy, Taint, Vector
from squall.planner.sites import site

PENDING_STATES = frozenset({"Pending", "Pending:Wait", "Pending:Proceed"})
IN_SERVICE = "InService"
# States in which an instance is leaving (or out of) the group's serving capacity.
GONE_STATES = frozenset(
    {
        "Terminating",
        "Terminating:Wait",
        "Terminating:Proceed",
        "Terminated",
        "Detaching",
        "Detached",
        "EnteringStandby",
        "Standby",
    }
)
_LEGACY_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"


class InstanceStatus(Enum):
    READY = "ready"  # a Ready node with its GPUs allocatable
    BOOTING = "booting"  # launched, not ready yet, within the provision timeout
    TIMED_OUT = "timed-out"  # still not ready past the provision timeout
    GONE = "gone"  # terminating, detached, in standby or a warm pool


def is_gone_state(state: str) -> bool:
    return state in GONE_STATES or state.startswith("Warmed:")


def is_known_state(state: str) -> bool:
    return state in PENDING_STATES or state == IN_SERVICE or is_gone_state(state)


# Frozen: a build of the very same nodes, pods and groups shares the last build's views.
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeView:
    node: Node
    group: NodeGroup | None
    instance: GroupInstance | None
    used: Vector
    busy: bool
    idle_since: datetime | None
    region: str  # its site: the region, of its cluster when the planner sees several (planner/sites.py)

    @property
    def gpus_ready(self) -> bool:
        """A GPU node is only ready once the device plugin advertises its GPUs."""
        return self.group is None or self.group.allocatable.gpu == 0 or self.node.allocatable.gpu > 0

    @property
    def serving(self) -> bool:
        return self.node.ready and self.gpus_ready


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceView:
    instance: GroupInstance
    node: NodeView | None
    status: InstanceStatus

    @property
    def known_state(self) -> bool:
        return is_known_state(self.instance.lifecycle_state)


@dataclass(slots=True, kw_only=True)
class GroupView:
    group: NodeGroup
    instances: list[InstanceView] = field(default_factory=list)

    @property
    def live_count(self) -> int:
        """Instances that hold a place in the group's desired capacity."""
        return sum(1 for i in self.instances if i.status is not InstanceStatus.GONE)

    @property
    def missing_count(self) -> int:
        """Desired capacity that no instance exists for yet (being launched, or failing to)."""
        return max(0, self.group.desired - self.live_count)

    @property
    def size(self) -> int:
        return max(self.group.desired, self.live_count)

    def ready_since_launch(self, since: datetime) -> bool:
        """Did an instance launched after `since` come up fine? (evidence of recovery)"""
        return any(
            i.status is InstanceStatus.READY and i.instance.launch_time > since for i in self.instances
        )


class NodeRoom(NamedTuple):
    """A node up for pods: ready and schedulable, or ready and cordoned by Squall only."""

    view: NodeView
    free: Vector
    cordoned: bool
    taints: tuple[
        Taint, ...
    ]  # those that can keep a pod off it (a cordon's transient ones not, when cordoned)


@dataclass(slots=True)
class _Derived:
    """What is read from an inventory's nodes more than once a check, worked out once.

    Shared with the inventories with_pending makes of it (pending pods change none of it)
    and with the next build of the very same nodes, pods and groups (see _Joined): only
    what follows from those belongs here, nothing that depends on the time or the policy.
    """

    rooms: tuple[NodeRoom, ...] | None = None


@dataclass(slots=True, kw_only=True)
class Inventory:
    nodes: list[NodeView]
    groups: dict[str, GroupView]
    pending: list[Pod]
    # Where (the site) a job's replicas already run: its pending replicas must join them.
    job_regions: dict[str, str]
    _derived: _Derived = field(default_factory=_Derived, repr=False, compare=False)

    def nodes_up(self) -> tuple[NodeRoom, ...]:
        """The nodes that are up, with what is free on each, in the order of `nodes`.

        Ready nodes of no group or with a ready instance; a node Squall cordoned counts
        (uncordoning it starts pods soonest). Booting ones are counted with their group.
        """
        rooms = self._derived.rooms
        if rooms is None:
            rooms = self._derived.rooms = tuple(self._nodes_up())
        return rooms

    def _nodes_up(self) -> Iterator[NodeRoom]:
        statuses = {i.instance.instance_id: i.status for view in self.groups.values() for i in view.instances}
        for view in self.nodes:
            node = view.node
            if view.group is not None:
                status = statuses.get(view.instance.instance_id) if view.instance is not None else None
                if status is not InstanceStatus.READY:
                    continue  # booting (counted with its group), timed out, or on its way out
            if not node.ready or (node.unschedulable and not node.cordoned_by_squall):
                continue
            cordoned = node.unschedulable
            yield NodeRoom(
                view=view,
                free=free_of(node.allocatable.vector(), view.used),
                cordoned=cordoned,
                taints=blocking_taints(node.taints, ignore_transient=cordoned),
            )

    def with_pending(self, pods: Iterable[Pod]) -> Inventory:
        """The inventory of the same nodes, pods and groups with these unbound pods added.

        What build_inventory makes of the pods and these together, without joining the
        nodes again: the scale check adds the queue's pods (admission's demand) to the
        cluster's. A bound pod would change what its node has free: refused.
        """
        pending = list(self.pending)
        for pod in pods:
            if pod.node_name is not None:
                raise ValueError(f"pod {pod.key} is bound to {pod.node_name}: build the inventory afresh")
            if pod.is_pending:
                pending.append(pod)
        return Inventory(
            nodes=self.nodes,
            groups=self.groups,
            pending=pending,
            job_regions=self.job_regions,
            _derived=self._derived,
        )


def build_inventory(
    *,
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    groups: Sequence[NodeGroup],
    policy: Policy,
    now: datetime,
) -> Inventory:
    group_views = _group_views(groups)
    joined = _join(tuple(nodes), tuple(pods), tuple(groups))
    for group_view in group_views.values():
        for instance in group_view.group.instances:
            node = joined.by_instance.get(instance.instance_id)
            status = _instance_status(instance, node, policy=policy, now=now)
            group_view.instances.append(InstanceView(instance=instance, node=node, status=status))
    return Inventory(
        nodes=list(joined.views),
        groups=group_views,
        pending=list(joined.usage.pending),
        job_regions=dict(joined.job_regions),
        _derived=joined.derived,
    )


class _Joined(NamedTuple):
    """What a build made of its nodes, pods and groups: none of it depends on the time or the policy.

    Nodes, pods and groups are frozen, so it holds for another build of the very same
    objects in the same order: a warm scale check gets the same ones again from its
    parse caches until the cluster changes, and then often the same pods with other
    nodes. Only the instances' statuses are worked out each build (booting or timed
    out is a matter of time); whether one is ready is not, so the nodes up are shared.
    """

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    groups: tuple[NodeGroup, ...]
    usage: _NodeUsage
    views: list[NodeView]
    by_instance: dict[str, NodeView]
    job_regions: dict[str, str]
    derived: _Derived


class _LastBuild:
    """The latest build's join, for the next (one per process; a build reads it once and replaces it whole)."""

    __slots__ = ("joined",)

    def __init__(self) -> None:
        self.joined: _Joined | None = None


_LAST_BUILD = _LastBuild()


def _join(nodes: tuple[Node, ...], pods: tuple[Pod, ...], groups: tuple[NodeGroup, ...]) -> _Joined:
    last = _LAST_BUILD.joined
    same_pods = last is not None and _same(pods, last.pods)
    if last is not None and same_pods and _same(nodes, last.nodes) and _same(groups, last.groups):
        return last
    usage = last.usage if last is not None and same_pods else _NodeUsage.of(pods)
    owners = {instance.instance_id: (group, instance) for group in groups for instance in group.instances}
    node_views: list[NodeView] = []
    views_by_instance: dict[str, NodeView] = {}
    no_owner: tuple[None, None] = (None, None)
    used, busy, last_finished = usage.used, usage.busy, usage.last_finished
    for node in nodes:
        group, instance = owners.get(node.instance_id or "", no_owner)
        name = node.name
        node_view = NodeView(
            node=node,
            group=group,
            instance=instance,
            used=used.get(name, (0, 0, 0, 0)),
            busy=name in busy,
            idle_since=_latest(_latest(node.ready_since, last_finished.get(name)), node.empty_since),
            region=group.site if group is not None else _label_site(node.labels),
        )
        node_views.append(node_view)
        if instance is not None:
            views_by_instance[instance.instance_id] = node_view
    regions_by_node = {v.node.name: v.region for v in node_views}
    job_regions = {
        job: regions_by_node[node_name]
        for job, node_name in usage.job_nodes.items()
        if node_name in regions_by_node
    }
    joined = _Joined(nodes, pods, groups, usage, node_views, views_by_instance, job_regions, _Derived())
    _LAST_BUILD.joined = joined
    return joined


def _same(these: tuple[object, ...], those: tuple[object, ...]) -> bool:
    """The very same objects in the same order (at C speed)."""
    return len(these) == len(those) and all(map(operator.is_, these, those))


def _group_views(groups: Sequence[NodeGroup]) -> dict[str, GroupView]:
    views: dict[str, GroupView] = {}
    for group in groups:
        if group.name in views:
            raise ValueError(f"node group {group.name!r} is declared twice")
        views[group.name] = GroupView(group=group)
    return views


def _instance_status(
    instance: GroupInstance, node: NodeView | None, *, policy: Policy, now: datetime
) -> InstanceStatus:
    if is_gone_state(instance.lifecycle_state):
        return InstanceStatus.GONE
    if node is not None and node.serving:
        return InstanceStatus.READY
    if now - instance.launch_time < policy.provision_timeout:
        return InstanceStatus.BOOTING
    return InstanceStatus.TIMED_OUT


@dataclass(slots=True, kw_only=True)
class _NodeUsage:
    used: dict[str, Vector]
    busy: set[str]
    last_finished: dict[str, datetime]
    job_nodes: dict[str, str]
    pending: list[Pod]

    @classmethod
    def of(cls, pods: Iterable[Pod]) -> _NodeUsage:
        usage = cls(used={}, busy=set(), last_finished={}, job_nodes={}, pending=[])
        used, busy, last_finished, job_nodes = usage.used, usage.busy, usage.last_finished, usage.job_nodes
        for pod in pods:  # once a build of other pods: every bound pod, so kept tight
            if pod.is_pending:
                usage.pending.append(pod)
                continue
            node_name = pod.node_name
            if node_name is None:
                continue
            finished = pod.finished_at
            if finished is not None:
                previous = last_finished.get(node_name)
                if previous is None or finished > previous:
                    last_finished[node_name] = finished
            if not pod.is_active:
                continue
            cpu, memory, gpu, count = used.get(node_name, (0, 0, 0, 0))
            requests = pod.requests
            used[node_name] = (cpu + requests.cpu, memory + requests.memory, gpu + requests.gpu, count + 1)
            if pod.is_workload:
                busy.add(node_name)
            if pod.job_id is not None:
                job_nodes.setdefault(pod.job_id, node_name)
        return usage


def free_of(allocatable: Vector, used: Vector) -> Vector:
    """What is left of a node's allocatable once `used` is taken (never below zero)."""
    return (
        max(0, allocatable[0] - used[0]),
        max(0, allocatable[1] - used[1]),
        max(0, allocatable[2] - used[2]),
        max(0, allocatable[3] - used[3]),
    )


def _latest(first: datetime | None, second: datetime | None) -> datetime | None:
    if first is None:
        return second
    if second is None:
        return first
    return max(first, second)


def _label_site(labels: Mapping[str, str]) -> str:
    region = labels.get(REGION_LABEL) or labels.get(_LEGACY_REGION_LABEL) or ""
    return site(region, labels.get(CLUSTER_LABEL, ""))
