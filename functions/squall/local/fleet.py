"""The simulated EC2 capacity behind moto's Auto Scaling groups.

moto's groups hold desired capacity and instances, and Squall's real
AutoScalingFleet adapter talks to them. What moto cannot know is whether AWS has
the capacity: here each region has a number of instances it can run per instance
type, and a boot time. An instance beyond a region's capacity is not launched:
it is hidden from the group's instances and reported as a failed scaling activity
in AWS's own words, as an insufficient-capacity launch failure is in AWS. An
instance within capacity becomes a Ready node in the simulated cluster once it
has booted. Launch times are virtual (first seen on the virtual clock).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from squall.fleet import FleetGroup, FleetInstance, GroupRef, ScalingActivity
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.manifests import CAPACITY_TYPE, NODE_GROUP
from squall.planner import NodeGroup
from squall.planner.quantity import format_cpu, format_memory

ICE_MESSAGE = (
    "We currently do not have sufficient {instance_type} capacity in the Availability Zone you "
    "requested ({zone}). Our system will be working on provisioning additional capacity. You can "
    "currently get {instance_type} capacity by not specifying an Availability Zone in your request "
    "or choosing {other_zone}. Launching EC2 instance failed."
)


@dataclass(frozen=True)
class RegionCapacity:
    """How many instances of each type a region can run, and how long one takes to boot."""

    instances: Mapping[str, int]  # instance type -> count; absent type: unlimited
    boot_time: timedelta = timedelta(minutes=3)


@dataclass
class _Tracked:
    instance_id: str
    group: str
    region: str
    zone: str
    first_seen: datetime
    launched: bool  # within capacity: will boot into a node
    node: str | None = None


@dataclass
class LocalFleet:
    """Fleet port for the local runtime: the real adapter on moto, plus simulated capacity."""

    adapter: Any  # AutoScalingFleet on moto, or InMemoryAutoScaling
    clock: VirtualClock
    cluster: SimulatedCluster
    groups: Sequence[NodeGroup]
    capacity: Mapping[str, RegionCapacity] = field(default_factory=dict)
    tracked: dict[str, _Tracked] = field(default_factory=dict)
    failures: list[ScalingActivity] = field(default_factory=list)
    nodes_added: int = 0
    nodes_removed: int = 0
    # moto's groups change only when Squall calls them: between calls a cached
    # observation is exact, and it spares a round trip on every simulation step.
    _observed: list[FleetGroup] | None = None

    # ---- the Fleet port ------------------------------------------------------

    def describe_groups(self, refs: Sequence[GroupRef]) -> list[FleetGroup]:
        wanted = {(r.region, r.name) for r in refs}
        return [self._visible(g) for g in self._all_groups() if (g.region, g.name) in wanted]

    def _all_groups(self) -> list[FleetGroup]:
        if self._observed is None:
            refs = [GroupRef(name=g.asg_name or g.name, region=g.region) for g in self.groups]
            self._observed = self.adapter.describe_groups(refs)
            self._track(self._observed)
        return self._observed

    def recent_activities(self, refs: Sequence[GroupRef], *, since: datetime) -> list[ScalingActivity]:
        wanted = {(r.region, r.name) for r in refs}
        return [a for a in self.failures if (a.region, a.group) in wanted and a.start_time >= since]

    def set_desired_capacity(self, *, ref: GroupRef, desired: int) -> None:
        observed = [g for g in self._all_groups() if (g.region, g.name) == (ref.region, ref.name)]
        self._observed = None
        if observed and desired < observed[0].desired:
            # AWS cancels launches it could not make before touching running
            # instances; moto would pick any instance, so remove those first.
            current = observed[0].desired
            for instance in observed[0].instances:
                tracked = self.tracked.get(instance.instance_id)
                if current > desired and tracked is not None and not tracked.launched:
                    self.adapter.terminate_instance(
                        region=ref.region, instance_id=instance.instance_id, decrement=True
                    )
                    del self.tracked[instance.instance_id]
                    current -= 1
            if current == desired:
                return
        self.adapter.set_desired_capacity(ref=ref, desired=desired)

    def terminate_instance(self, *, region: str, instance_id: str, decrement: bool = True) -> None:
        self._observed = None
        self.adapter.terminate_instance(region=region, instance_id=instance_id, decrement=decrement)

    def set_scale_in_protection(self, *, ref: GroupRef, instance_ids: Sequence[str], protected: bool) -> None:
        self.adapter.set_scale_in_protection(ref=ref, instance_ids=instance_ids, protected=protected)

    def complete_lifecycle_action(self, **kwargs: Any) -> None:
        raise NotImplementedError("lifecycle hooks arrive with the lifecycle runtime")

    def record_lifecycle_heartbeat(self, **kwargs: Any) -> None:
        raise NotImplementedError("lifecycle hooks arrive with the lifecycle runtime")

    # ---- the simulation ------------------------------------------------------

    def advance(self) -> None:
        """Turn booted instances into nodes and remove the nodes of terminated instances."""
        alive = {i.instance_id for g in self._all_groups() for i in g.instances}
        now = self.clock.now()
        for instance_id, tracked in list(self.tracked.items()):
            if instance_id not in alive:
                if tracked.node is not None:
                    self.cluster.remove_node(tracked.node, reason="instance terminated")
                    self.nodes_removed += 1
                del self.tracked[instance_id]
                continue
            boot = self._capacity(tracked.region).boot_time
            if tracked.launched and tracked.node is None and now - tracked.first_seen >= boot:
                self._join(tracked)

    def _track(self, observed: Sequence[FleetGroup]) -> None:
        now = self.clock.now()
        templates = {(g.region, g.asg_name or g.name): g for g in self.groups}
        used: dict[tuple[str, str], int] = defaultdict(int)
        for tracked in self.tracked.values():
            if tracked.launched:
                template = templates[(tracked.region, tracked.group)]
                used[(tracked.region, template.instance_type)] += 1
        for group in observed:
            template = templates[(group.region, group.name)]
            for instance in group.instances:
                if instance.instance_id in self.tracked:
                    continue
                key = (group.region, template.instance_type)
                limit = self._capacity(group.region).instances.get(template.instance_type)
                launched = limit is None or used[key] < limit
                used[key] += 1 if launched else 0
                self.tracked[instance.instance_id] = _Tracked(
                    instance_id=instance.instance_id,
                    group=group.name,
                    region=group.region,
                    zone=instance.availability_zone,
                    first_seen=now,
                    launched=launched,
                )
                if not launched:
                    self.failures.append(_insufficient_capacity(instance, template, now))

    def _visible(self, group: FleetGroup) -> FleetGroup:
        instances = tuple(
            dataclasses.replace(i, launch_time=self.tracked[i.instance_id].first_seen)
            for i in group.instances
            if self.tracked[i.instance_id].launched
        )
        return dataclasses.replace(group, instances=instances)

    def _capacity(self, region: str) -> RegionCapacity:
        return self.capacity.get(region, RegionCapacity(instances={}))

    def _join(self, tracked: _Tracked) -> None:
        template = next(g for g in self.groups if (g.asg_name or g.name) == tracked.group and g.region == tracked.region)
        allocatable = template.allocatable
        name = f"{template.name}-{tracked.instance_id[-8:]}"
        self.cluster.add_node(
            name=name,
            allocatable={
                "cpu": format_cpu(allocatable.cpu),
                "memory": format_memory(allocatable.memory),
                "nvidia.com/gpu": str(allocatable.gpu),
                "pods": str(allocatable.pods),
            },
            labels=template.template_labels()
            | {NODE_GROUP: template.name, CAPACITY_TYPE: "spot" if template.spot else "on-demand"},
            taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in template.taints],
            provider_id=f"aws:///{tracked.zone}/{tracked.instance_id}",
        )
        tracked.node = name
        self.nodes_added += 1


def _insufficient_capacity(instance: FleetInstance, template: NodeGroup, now: datetime) -> ScalingActivity:
    zone = instance.availability_zone or f"{template.region}a"
    return ScalingActivity(
        activity_id=f"sim-{instance.instance_id}",
        group=instance.group,
        region=instance.region,
        status_code="Failed",
        status_message=ICE_MESSAGE.format(
            instance_type=template.instance_type, zone=zone, other_zone=f"{template.region}b"
        ),
        description=f"Launching a new EC2 instance. Status Reason: insufficient {template.instance_type} capacity",
        start_time=now,
        end_time=now,
    )
