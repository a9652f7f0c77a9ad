"""The simulated EC2 capacity behind moto's Auto Scaling groups.

moto's groups hold desired capacity and instances, and Squall's real
AutoScalingFleet adapter talks to them. What moto cannot know is whether AWS has
the capacity: here each region has a number of instances it can run per instance
type, and a boot time. An instance beyond a region's capacity is not launched:
it is hidden from the group's instances and reported as a failed scaling activity
in AWS's own words, as an insufficient-capacity launch failure is in AWS. An
instance within capacity becomes a Ready node once it has booted, in the simulated
cluster of its group (`NodeGroup.cluster`; a group naming none joins the default
cluster): no cluster ever sees another's nodes. Launch times are virtual (first
seen on the virtual clock).

Instances also go without Squall asking: a spot reclaim (`reclaim`, with its
two-minute notice) and a host that fails without any notice (`lose`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from squall.conventions import CAPACITY_TYPE_LABEL, NODE_GROUP_LABEL
from squall.core.errors import LifecycleActionGone, RetryableError
from squall.core.fleet_refs import GroupRef, LifecycleAction
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.lambda_events import eventbridge_event
from squall.planner import NodeGroup
from squall.planner.quantity import format_cpu, format_memory
from squall.ports import FleetGroup, FleetInstance, LifecycleResult, ScalingActivity

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
    # A GPU node joins Ready first; its GPUs become allocatable once the device plugin runs.
    gpu_plugin_delay: timedelta = timedelta(seconds=30)


_UNLIMITED = RegionCapacity(instances={})  # a region the scenario says nothing about

SPOT_CAUSE = (
    "At {at} an instance was taken out of service in response to an EC2 Spot Instance interruption notice."
)
# What Auto Scaling writes when its EC2 health check finds an instance gone (a failed
# host, an instance retired or terminated outside the group).
HEALTH_CHECK_CAUSE = (
    "At {at} an instance was taken out of service in response to an EC2 health check "
    "indicating it has been terminated or stopped."
)
SCALE_IN_CAUSE = (
    "At {at} instance {instance} was taken out of service in response to a user request, "
    "shrinking the capacity from {before} to {after}."
)


@dataclass(frozen=True)
class FleetHooks:
    """Squall's hooks on every managed group, as the capacity stack creates them."""

    launch: str = "squall-launch"
    terminate: str = "squall-terminate"
    heartbeat_timeout: timedelta = timedelta(minutes=10)  # the terminate hook's
    launch_timeout: timedelta = timedelta(minutes=10)  # the launch hook's: the provision timeout
    # EC2 takes a reclaimed spot instance two minutes after its notice, hook or not.
    spot_notice: timedelta = timedelta(minutes=2)


@dataclass
class _PendingHook:
    name: str
    token: str
    deadline: datetime
    default_result: str  # what Auto Scaling does when the hook times out
    timeout: timedelta  # a heartbeat restarts it
    hard_deadline: datetime | None = None  # a spot reclaim does not wait for anyone


@dataclass
class _Tracked:
    instance_id: str
    group: str
    region: str
    zone: str
    first_seen: datetime
    launched: bool  # within capacity: will boot into a node
    cluster: str = ""  # its group's cluster ("": the fleet's default cluster)
    node: str | None = None
    state: str = "InService"  # Auto Scaling's lifecycle state, as describe reports it
    hook: _PendingHook | None = None
    decrement: bool = True  # for a termination waiting on its hook
    joins: bool = True  # False: the instance boots but its node never registers
    joined_at: datetime | None = None
    gpus_ready: bool = False
    lost: bool = False  # EC2 lost it without notice; Auto Scaling has yet to let it go
    # Replaced already: gone from the adapter's group (which launched its replacement),
    # still running here in Terminating:Wait until its hook is done. As described then.
    held: FleetInstance | None = None


@dataclass
class HookStats:
    terminate_hooks: int = 0
    completed: int = 0
    timed_out: int = 0
    abandoned: int = 0


@dataclass
class LocalFleet:
    """Fleet port for the local runtime: the real adapter on moto, plus simulated capacity."""

    adapter: Any  # AutoScalingFleet on moto, or InMemoryAutoScaling
    clock: VirtualClock
    cluster: SimulatedCluster  # the default cluster: where the nodes of a group naming none join
    groups: Sequence[NodeGroup]
    # The other clusters by name (a group naming its cluster joins that one's nodes); the
    # default cluster may be among them.
    clusters: Mapping[str, SimulatedCluster] = field(default_factory=dict)
    capacity: Mapping[str, RegionCapacity] = field(default_factory=dict)
    tracked: dict[str, _Tracked] = field(default_factory=dict)
    # scaling activities: failed launches and terminations, oldest first
    failures: list[ScalingActivity] = field(default_factory=list)
    nodes_added: int = 0
    nodes_removed: int = 0
    # Moves on whenever an instance starts or stops being tracked, or its node comes
    # or goes: what it costs and where its nodes are cannot change otherwise.
    revision: int = 0
    # moto's groups change only when Squall calls them: between calls a cached
    # observation is exact, and it spares a round trip on every simulation step.
    _observed: list[FleetGroup] | None = None
    _shown: dict[str, tuple[tuple[FleetInstance, datetime, str], FleetInstance]] = field(default_factory=dict)
    _shown_groups: dict[tuple[str, str], tuple[FleetGroup, tuple[FleetInstance, ...], FleetGroup]] = field(
        default_factory=dict
    )
    _throttled_calls: int = 0
    terminated_busy: list[str] = field(default_factory=list)  # nodes that went with work on them
    # None: groups without lifecycle hooks (instances go at once, as moto does)
    hooks: FleetHooks | None = None
    # EventBridge events the hooks produce, for the runtime to deliver to the lifecycle function
    outbox: list[dict[str, Any]] = field(default_factory=list)
    stats: HookStats = field(default_factory=HookStats)
    _broken_joins: dict[tuple[str, str], int] = field(default_factory=dict)
    _tokens: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _held: set[str] = field(default_factory=set)  # instances with `held` set

    # ---- the Fleet port ------------------------------------------------------

    def describe_groups(self, refs: Sequence[GroupRef]) -> list[FleetGroup]:
        self._maybe_throttle("DescribeAutoScalingGroups")
        wanted = {(r.region, r.name) for r in refs}
        return [self._visible(g) for g in self._all_groups() if (g.region, g.name) in wanted]

    def _all_groups(self) -> list[FleetGroup]:
        if self._observed is None:
            refs = [GroupRef(name=g.asg_name or g.name, region=g.region) for g in self.groups]
            self._observed = self.adapter.describe_groups(refs)
            self._track(self._observed)
        return self._observed

    def recent_activities(self, refs: Sequence[GroupRef], *, since: datetime) -> list[ScalingActivity]:
        self._maybe_throttle("DescribeScalingActivities")
        wanted = {(r.region, r.name) for r in refs}
        # Newest first, as Auto Scaling lists them. Failures are recorded as they happen, so
        # in time order: the walk stops at the first one older than `since`.
        recent = []
        for activity in reversed(self.failures):
            if activity.start_time < since:
                break
            if (activity.region, activity.group) in wanted:
                recent.append(activity)
        return recent

    def set_desired_capacity(self, *, ref: GroupRef, desired: int) -> None:
        self._maybe_throttle("SetDesiredCapacity")
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
        self._maybe_throttle("TerminateInstanceInAutoScalingGroup")
        tracked = self.tracked.get(instance_id)
        if tracked is not None and tracked.region == region and not tracked.state.startswith("Terminating"):
            desired = next((g.desired for g in self._all_groups() if g.name == tracked.group), 0)
            at = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
            self._record_termination(
                tracked,
                cause=SCALE_IN_CAUSE.format(
                    at=at, instance=instance_id, before=desired, after=desired - int(decrement)
                ),
            )
        if self.hooks is not None and tracked is not None and tracked.region == region:
            if not tracked.state.startswith("Terminating"):
                self._start_terminate_hook(tracked, decrement=decrement)
            return
        self._observed = None
        self.adapter.terminate_instance(region=region, instance_id=instance_id, decrement=decrement)

    def set_scale_in_protection(self, *, ref: GroupRef, instance_ids: Sequence[str], protected: bool) -> None:
        self.adapter.set_scale_in_protection(ref=ref, instance_ids=instance_ids, protected=protected)

    def complete_lifecycle_action(self, action: LifecycleAction, result: LifecycleResult) -> None:
        self._maybe_throttle("CompleteLifecycleAction")
        tracked = self._waiting(action)
        self.stats.completed += 1
        self._finish_hook(tracked, result=result)

    def record_lifecycle_heartbeat(self, action: LifecycleAction) -> None:
        self._maybe_throttle("RecordLifecycleActionHeartbeat")
        tracked = self._waiting(action)
        assert tracked.hook is not None
        tracked.hook.deadline = self.clock.now() + tracked.hook.timeout

    def _waiting(self, action: LifecycleAction) -> _Tracked:
        """The instance's open lifecycle action, or LifecycleActionGone as AWS answers."""
        tracked = self.tracked.get(action.instance_id)
        hook = tracked.hook if tracked is not None else None
        if (
            tracked is None
            or hook is None
            or tracked.group != action.ref.name
            or tracked.region != action.ref.region
            or hook.name != action.hook_name
            or (action.token is not None and action.token != hook.token)
        ):
            raise LifecycleActionGone(
                f"No active Lifecycle Action found with instance ID {action.instance_id} (hook {action.hook_name})"
            )
        return tracked

    def hook_stats(self) -> dict[str, int]:
        """Counts for the simulator's summary: drains started, hooks completed, hooks left open."""
        open_now = sum(1 for t in self.tracked.values() if t.hook is not None)
        return {
            "drains": self.stats.terminate_hooks,
            "hooksCompleted": self.stats.completed,
            "hooksLeftOpen": open_now + self.stats.timed_out,
        }

    # ---- lifecycle hooks ---------------------------------------------------------

    def _event(self, tracked: _Tracked, *, transition: str) -> dict[str, Any]:
        assert tracked.hook is not None
        launching = transition == "autoscaling:EC2_INSTANCE_LAUNCHING"
        return eventbridge_event(
            source="aws.autoscaling",
            detail_type=f"EC2 Instance-{'launch' if launching else 'terminate'} Lifecycle Action",
            detail={
                "LifecycleActionToken": tracked.hook.token,
                "AutoScalingGroupName": tracked.group,
                "LifecycleHookName": tracked.hook.name,
                "EC2InstanceId": tracked.instance_id,
                "LifecycleTransition": transition,
                "NotificationMetadata": json.dumps(
                    {"heartbeatTimeout": int(tracked.hook.timeout.total_seconds())}
                ),
                "Origin": "EC2" if launching else "AutoScalingGroup",
                "Destination": "AutoScalingGroup" if launching else "EC2",
            },
            at=self.clock.now(),
            region=tracked.region,
            resources=[
                f"arn:aws:autoscaling:{tracked.region}:123456789012:autoScalingGroup:sim:autoScalingGroupName/{tracked.group}"
            ],
        )

    def _new_hook(self, name: str, *, default_result: str, timeout: timedelta) -> _PendingHook:
        return _PendingHook(
            name=name,
            token=f"00000000-0000-4000-8000-{next(self._tokens):012d}",
            deadline=self.clock.now() + timeout,
            default_result=default_result,
            timeout=timeout,
        )

    def _start_launch_hook(self, tracked: _Tracked) -> None:
        assert self.hooks is not None
        tracked.state = "Pending:Wait"
        tracked.hook = self._new_hook(
            self.hooks.launch, default_result="ABANDON", timeout=self.hooks.launch_timeout
        )
        self.outbox.append(self._event(tracked, transition="autoscaling:EC2_INSTANCE_LAUNCHING"))

    def _record_termination(self, tracked: _Tracked, *, cause: str) -> None:
        now = self.clock.now()
        self.failures.append(
            ScalingActivity(
                activity_id=f"sim-terminate-{tracked.instance_id}",
                group=tracked.group,
                region=tracked.region,
                status_code="InProgress",
                status_message="",
                description=f"Terminating EC2 instance: {tracked.instance_id}",
                start_time=now,
                end_time=None,
                cause=cause,
            )
        )

    def _start_terminate_hook(
        self, tracked: _Tracked, *, decrement: bool, hard_after: timedelta | None = None
    ) -> None:
        assert self.hooks is not None
        tracked.state = "Terminating:Wait"
        tracked.decrement = decrement
        tracked.hook = self._new_hook(
            self.hooks.terminate, default_result="CONTINUE", timeout=self.hooks.heartbeat_timeout
        )
        if hard_after is not None:
            tracked.hook.hard_deadline = self.clock.now() + hard_after
        if not decrement:
            self._replace_now(tracked)
        self.stats.terminate_hooks += 1
        self.outbox.append(self._event(tracked, transition="autoscaling:EC2_INSTANCE_TERMINATING"))

    def _replace_now(self, tracked: _Tracked) -> None:
        """Auto Scaling's default for a replacement, "terminate and launch": the group
        launches the new instance now, while this one waits in Terminating:Wait.

        The adapter (moto, or the in-memory groups) lets the instance go and launches its
        replacement at once; the fleet keeps the old one running, and shows it in its
        group, until the hook is done.
        """
        tracked.held = next(
            (
                i
                for g in self._all_groups()
                if (g.region, g.name) == (tracked.region, tracked.group)
                for i in g.instances
                if i.instance_id == tracked.instance_id
            ),
            None,
        )
        if tracked.held is None:
            return  # not in the group any more: nothing to replace
        self._held.add(tracked.instance_id)
        self._observed = None
        self.adapter.terminate_instance(
            region=tracked.region, instance_id=tracked.instance_id, decrement=False
        )

    def _finish_hook(self, tracked: _Tracked, *, result: str) -> None:
        hook, tracked.hook = tracked.hook, None
        if tracked.state == "Pending:Wait":
            if result == "CONTINUE":
                tracked.state = "InService"
                return
            # ABANDON on launch: Auto Scaling terminates it and launches a replacement.
            self.stats.abandoned += 1
            tracked.state = "Terminating:Proceed"
            self._observed = None
            self.adapter.terminate_instance(
                region=tracked.region, instance_id=tracked.instance_id, decrement=False
            )
            return
        if hook is not None and tracked.state == "Terminating:Wait":
            tracked.state = "Terminating:Proceed"
            self._observed = None
            if tracked.held is not None:
                tracked.held = None  # replaced already: the next step lets it go
                self._held.discard(tracked.instance_id)
                return
            self.adapter.terminate_instance(
                region=tracked.region, instance_id=tracked.instance_id, decrement=tracked.decrement
            )

    def _expire_hooks(self, now: datetime) -> None:
        for tracked in list(self.tracked.values()):
            hook = tracked.hook
            if hook is None:
                continue
            if hook.hard_deadline is not None and now >= hook.hard_deadline:
                self._finish_hook(tracked, result="CONTINUE")  # EC2 takes it now
            elif now >= hook.deadline:
                # Nobody completed the action in time: Auto Scaling applies the default.
                self.stats.timed_out += 1
                self._finish_hook(tracked, result=hook.default_result)

    # ---- faults and capacity ---------------------------------------------------

    def set_capacity(self, *, region: str, instance_type: str, instances: int) -> None:
        """How many instances of a type the region can run from now on (0: a region outage).

        Instances already running keep running; launches beyond the limit fail.
        """
        current = self._capacity(region)
        self.capacity = dict(self.capacity) | {
            region: RegionCapacity(
                instances=dict(current.instances) | {instance_type: instances}, boot_time=current.boot_time
            )
        }

    def reclaim(self, instance_id: str) -> None:
        """EC2 takes an instance back (a spot reclaim): the group replaces it.

        With hooks the terminate hook runs, but EC2 takes the instance when the
        two-minute notice is up, whether the drain is done or not.
        """
        tracked = self.tracked.get(instance_id)
        if tracked is None:
            raise KeyError(f"no instance {instance_id} in the simulated fleet")
        self._record_termination(
            tracked, cause=SPOT_CAUSE.format(at=self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"))
        )
        if self.hooks is not None:
            if not tracked.state.startswith("Terminating"):
                self._start_terminate_hook(tracked, decrement=False, hard_after=self.hooks.spot_notice)
            return
        self._observed = None
        self.adapter.terminate_instance(region=tracked.region, instance_id=instance_id, decrement=False)

    def lose(self, instance_id: str) -> str | None:
        """EC2 loses an instance without any notice (a failed host); its node's name, if it had one.

        The instance is gone at once, and its node with it: the pods on it fail as
        PodGC fails them, with no drain. Auto Scaling's EC2 health check then finds the
        instance terminated, records a health-check termination and launches a
        replacement (the desired capacity stays). Its terminate hook still runs, as it
        does for every health-check replacement, but only after the fact: the
        lifecycle function finds no node left to drain. The health check notices at
        once here; in AWS it runs periodically.
        """
        tracked = self.tracked.get(instance_id)
        if tracked is None:
            raise KeyError(f"no instance {instance_id} in the simulated fleet")
        node, tracked.node = tracked.node, None
        tracked.lost = True
        self.revision += 1
        if node is not None:
            # Not Squall's doing: it never counts as a busy node Squall terminated.
            self.cluster_of(tracked.cluster).remove_node(node, reason="instance lost without notice")
            self.nodes_removed += 1
        self._record_termination(
            tracked, cause=HEALTH_CHECK_CAUSE.format(at=self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"))
        )
        if self.hooks is not None:
            if not tracked.state.startswith("Terminating"):
                self._start_terminate_hook(tracked, decrement=False)
            return node
        self._observed = None
        self.adapter.terminate_instance(region=tracked.region, instance_id=instance_id, decrement=False)
        return node

    def break_joins(self, *, region: str, instance_type: str, count: int) -> None:
        """The next `count` instances of a type in a region boot but never join the cluster."""
        self._broken_joins[(region, instance_type)] = count

    def throttle(self, calls: int) -> None:
        """The next `calls` Auto Scaling calls from Squall are throttled, as AWS does under load."""
        self._throttled_calls = calls

    def _maybe_throttle(self, operation: str) -> None:
        if self._throttled_calls > 0:
            self._throttled_calls -= 1
            raise RetryableError(f"{operation}: Throttling: Rate exceeded")

    def instance_of(self, node: str) -> str | None:
        return next((t.instance_id for t in self.tracked.values() if t.node == node), None)

    def running_nodes(self) -> dict[str, tuple[str, str]]:
        """Node name -> (group, region) of every instance that joined."""
        return {t.node: (t.group, t.region) for t in self.tracked.values() if t.node is not None}

    def node_clusters(self) -> dict[str, str]:
        """Node name -> the name of the cluster it joined, for every instance that joined."""
        return {t.node: self.cluster_of(t.cluster).name for t in self.tracked.values() if t.node is not None}

    def cluster_of(self, name: str) -> SimulatedCluster:
        """The simulated cluster a group's nodes join: the named one, or the default for ''."""
        if not name or name == self.cluster.name:
            return self.cluster
        found = self.clusters.get(name)
        if found is None:
            raise KeyError(
                f"no simulated cluster {name!r} (the fleet has {', '.join(self._cluster_names())})"
            )
        return found

    def _cluster_names(self) -> list[str]:
        return list(dict.fromkeys([self.cluster.name, *self.clusters]))

    # ---- the simulation ------------------------------------------------------

    def next_event_time(self) -> datetime | None:
        """When the fleet next changes on its own: a boot, a GPU plugin, a hook's timeout."""
        times: list[datetime] = []
        for tracked in self.tracked.values():
            capacity = self._capacity(tracked.region)
            if tracked.launched and tracked.joins and not tracked.lost and tracked.node is None:
                times.append(tracked.first_seen + capacity.boot_time)
            if tracked.node is not None and tracked.joined_at is not None and not tracked.gpus_ready:
                times.append(tracked.joined_at + capacity.gpu_plugin_delay)
            if tracked.hook is not None:
                times.append(tracked.hook.deadline)
                if tracked.hook.hard_deadline is not None:
                    times.append(tracked.hook.hard_deadline)
        return min(times, default=None)

    def advance(self) -> None:
        """Turn booted instances into nodes and remove the nodes of terminated instances."""
        now = self.clock.now()
        self._expire_hooks(now)
        alive = {i.instance_id for g in self._all_groups() for i in g.instances}
        for instance_id, tracked in list(self.tracked.items()):
            if instance_id not in alive and tracked.held is None:
                if tracked.node is not None:
                    cluster = self.cluster_of(tracked.cluster)
                    if cluster.remove_node(tracked.node, reason="instance terminated"):
                        self.terminated_busy.append(tracked.node)
                    self.nodes_removed += 1
                del self.tracked[instance_id]
                self.revision += 1
                continue
            boot = self._capacity(tracked.region).boot_time
            if (
                tracked.launched
                and tracked.joins
                and not tracked.lost
                and tracked.node is None
                and now - tracked.first_seen >= boot
            ):
                self._join(tracked)
            elif (
                tracked.node is not None
                and not tracked.gpus_ready
                and tracked.joined_at is not None
                and now - tracked.joined_at >= self._capacity(tracked.region).gpu_plugin_delay
            ):
                self.cluster_of(tracked.cluster).set_gpus_ready(tracked.node)
                tracked.gpus_ready = True

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
                self.revision += 1
                self.tracked[instance.instance_id] = _Tracked(
                    instance_id=instance.instance_id,
                    group=group.name,
                    region=group.region,
                    zone=instance.availability_zone,
                    first_seen=now,
                    launched=launched,
                    cluster=template.cluster,
                )
                tracked = self.tracked[instance.instance_id]
                if not launched:
                    self.failures.append(_insufficient_capacity(instance, template, now))
                    continue
                broken = self._broken_joins.get(key, 0)
                if broken:
                    tracked.joins = False
                    self._broken_joins[key] = broken - 1
                if self.hooks is not None:
                    self._start_launch_hook(tracked)

    def _visible(self, group: FleetGroup) -> FleetGroup:
        """The group as Squall sees it: launched instances, with their simulated state."""
        instances = []
        held = [
            t.held
            for t in (self.tracked[i] for i in self._held)
            if t.held is not None and (t.region, t.group) == (group.region, group.name)
        ]
        for instance in (*group.instances, *held):
            tracked = self.tracked[instance.instance_id]
            if not tracked.launched:
                continue
            # The same instance in the same state looks the same: build it once.
            key = (instance, tracked.first_seen, tracked.state)
            shown = self._shown.get(instance.instance_id)
            if shown is None or shown[0] != key:
                shown = (key, dataclasses.replace(instance, launch_time=key[1], lifecycle_state=key[2]))
                self._shown[instance.instance_id] = shown
            instances.append(shown[1])
        if len(self._shown) > 2 * len(self.tracked) + 100:
            self._shown = {i: v for i, v in self._shown.items() if i in self.tracked}
        shown_instances = tuple(instances)
        # The same group showing the same instances looks the same: build it once.
        made = self._shown_groups.get((group.region, group.name))
        if made is not None and made[0] is group and made[1] == shown_instances:
            return made[2]
        visible = dataclasses.replace(group, instances=shown_instances)
        self._shown_groups[(group.region, group.name)] = (group, shown_instances, visible)
        return visible

    def _capacity(self, region: str) -> RegionCapacity:
        return self.capacity.get(region, _UNLIMITED)

    def _join(self, tracked: _Tracked) -> None:
        template = next(
            g for g in self.groups if (g.asg_name or g.name) == tracked.group and g.region == tracked.region
        )
        allocatable = template.allocatable
        name = f"{template.name}-{tracked.instance_id[-8:]}"
        self.cluster_of(tracked.cluster).add_node(
            name=name,
            allocatable={
                "cpu": format_cpu(allocatable.cpu),
                "memory": format_memory(allocatable.memory),
                "nvidia.com/gpu": str(allocatable.gpu),
                "pods": str(allocatable.pods),
            },
            labels=template.template_labels()
            | {
                NODE_GROUP_LABEL: template.name,
                CAPACITY_TYPE_LABEL: "spot" if template.spot else "on-demand",
            },
            taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in template.taints],
            provider_id=f"aws:///{tracked.zone}/{tracked.instance_id}",
            gpus_ready=allocatable.gpu == 0
            or self._capacity(tracked.region).gpu_plugin_delay <= timedelta(0),
        )
        tracked.node = name
        self.revision += 1
        tracked.joined_at = self.clock.now()
        tracked.gpus_ready = allocatable.gpu == 0
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
