"""FakeFleet: the Fleet port in memory, for services and handlers under test.

It records every call (``calls``), fails the next call with ``next_error``, and
lets a test lay out groups, instances and scaling activities. It behaves like
Auto Scaling where callers depend on it:

- a group that does not exist is omitted from ``describe_groups``, and acting
  on it raises NotFoundError;
- ``set_desired_capacity`` outside min..max raises PermanentError (AWS answers
  ValidationError);
- ``terminate_instance`` moves the instance to ``Terminating`` (a second call
  changes nothing), decrements desired when asked, refuses to go below min, and
  raises NotFoundError for an instance no group holds;
- lifecycle actions are pending only while an instance is in a ``...:Wait``
  state: completing moves it on (``Pending:Wait`` -> ``Pending:Proceed``,
  ABANDON at launch -> ``Terminating``, ``Terminating:Wait`` ->
  ``Terminating:Proceed``), and completing or heartbeating an instance in any
  other state raises LifecycleActionGone, as AWS does for a second completion.

Tokens and hook names are recorded but not checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from squall.core.errors import LifecycleActionGone, NotFoundError, PermanentError
from squall.core.fleet_refs import GroupRef, LifecycleAction
from squall.ports import FleetGroup, FleetInstance, LifecycleResult, ScalingActivity


@dataclass(frozen=True)
class FleetCall:
    """One call made to the fake: the method's name and its arguments."""

    method: str
    args: Mapping[str, object]


class FakeFleet:
    """In-memory Fleet; see the module docstring for what it models."""

    def __init__(self) -> None:
        self.calls: list[FleetCall] = []
        # Raised (once) by the next call, after that call is recorded.
        self.next_error: Exception | None = None
        self._groups: dict[GroupRef, FleetGroup] = {}
        self._activities: list[ScalingActivity] = []

    # --- set-up for tests ----------------------------------------------------------

    def add_group(
        self,
        name: str,
        region: str,
        *,
        desired: int = 0,
        min_size: int = 0,
        max_size: int = 10,
        tags: Mapping[str, str] | None = None,
    ) -> GroupRef:
        ref = GroupRef(name=name, region=region)
        self._groups[ref] = FleetGroup(
            name=name,
            region=region,
            desired=desired,
            min_size=min_size,
            max_size=max_size,
            instances=(),
            tags=dict(tags or {}),
        )
        return ref

    def add_instance(
        self,
        ref: GroupRef,
        instance_id: str,
        *,
        lifecycle_state: str = "InService",
        health_status: str = "Healthy",
        launch_time: datetime | None = None,
        protected_from_scale_in: bool = False,
        availability_zone: str | None = None,
    ) -> FleetInstance:
        """Put an instance in a group. Desired capacity is left as the test set it."""
        group = self.group(ref)
        instance = FleetInstance(
            instance_id=instance_id,
            group=ref.name,
            region=ref.region,
            lifecycle_state=lifecycle_state,
            health_status=health_status,
            launch_time=launch_time,
            protected_from_scale_in=protected_from_scale_in,
            availability_zone=availability_zone or f"{ref.region}a",
        )
        self._groups[ref] = replace(group, instances=(*group.instances, instance))
        return instance

    def set_lifecycle_state(self, instance_id: str, lifecycle_state: str) -> None:
        ref, _ = self._find_instance(instance_id)
        self._update_instance(ref, instance_id, lifecycle_state=lifecycle_state)

    def remove_instance(self, instance_id: str) -> None:
        """The instance has left its group (terminated, detached)."""
        ref, _ = self._find_instance(instance_id)
        group = self._groups[ref]
        self._groups[ref] = replace(
            group, instances=tuple(i for i in group.instances if i.instance_id != instance_id)
        )

    def add_activities(self, activities: Iterable[ScalingActivity]) -> None:
        self._activities.extend(activities)

    def group(self, ref: GroupRef) -> FleetGroup:
        """The group as it stands now (KeyError when there is none)."""
        return self._groups[ref]

    def instance(self, instance_id: str) -> FleetInstance:
        return self._find_instance(instance_id)[1]

    def calls_to(self, method: str) -> list[FleetCall]:
        return [call for call in self.calls if call.method == method]

    # --- the Fleet port --------------------------------------------------------------

    def describe_groups(self, refs: Sequence[GroupRef]) -> list[FleetGroup]:
        self._called("describe_groups", refs=tuple(refs))
        return [
            replace(self._groups[ref], tags=dict(self._groups[ref].tags))
            for ref in dict.fromkeys(refs)
            if ref in self._groups
        ]

    def recent_activities(self, refs: Sequence[GroupRef], *, since: datetime) -> list[ScalingActivity]:
        self._called("recent_activities", refs=tuple(refs), since=since)
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        found: list[ScalingActivity] = []
        for ref in dict.fromkeys(refs):
            mine = [
                activity
                for activity in self._activities
                if activity.group == ref.name
                and activity.region == ref.region
                and activity.start_time >= since
            ]
            found.extend(sorted(mine, key=lambda activity: activity.start_time, reverse=True))
        return found

    def set_desired_capacity(self, *, ref: GroupRef, desired: int) -> None:
        self._called("set_desired_capacity", ref=ref, desired=desired)
        group = self._existing_group(ref)
        if not group.min_size <= desired <= group.max_size:
            raise PermanentError(
                f"New SetDesiredCapacity value {desired} is outside "
                f"{group.min_size}..{group.max_size} for {ref.name}"
            )
        self._groups[ref] = replace(group, desired=desired)

    def terminate_instance(self, *, region: str, instance_id: str, decrement: bool = True) -> None:
        self._called("terminate_instance", region=region, instance_id=instance_id, decrement=decrement)
        found = self._lookup_instance(instance_id)
        if found is None or found[0].region != region:
            raise NotFoundError(
                f"Instance Id not found - No managed instance found for instance ID: {instance_id}"
            )
        ref, instance = found
        if instance.lifecycle_state.startswith("Terminat"):
            return
        group = self._groups[ref]
        if decrement:
            if group.desired - 1 < group.min_size:
                raise PermanentError(
                    f"Currently, desiredSize equals minSize ({group.min_size}). Terminating "
                    "instance without replacement will violate group's min size constraint."
                )
            self._groups[ref] = replace(group, desired=group.desired - 1)
        self._update_instance(ref, instance_id, lifecycle_state="Terminating")

    def set_scale_in_protection(self, *, ref: GroupRef, instance_ids: Sequence[str], protected: bool) -> None:
        self._called(
            "set_scale_in_protection",
            ref=ref,
            instance_ids=tuple(instance_ids),
            protected=protected,
        )
        group = self._existing_group(ref)
        members = {instance.instance_id for instance in group.instances}
        for instance_id in instance_ids:
            if instance_id not in members:
                raise NotFoundError(
                    f"The instance {instance_id} is not part of Auto Scaling group {ref.name}."
                )
        for instance_id in instance_ids:
            self._update_instance(ref, instance_id, protected_from_scale_in=protected)

    def complete_lifecycle_action(self, action: LifecycleAction, result: LifecycleResult) -> None:
        self._called("complete_lifecycle_action", action=action, result=result)
        state = self._waiting_state(action)
        if state.endswith("Pending:Wait"):
            after = state.replace("Pending:Wait", "Pending:Proceed")
            if result == "ABANDON":
                after = "Terminating"
        else:
            after = state.replace("Terminating:Wait", "Terminating:Proceed")
        self._update_instance(action.ref, action.instance_id, lifecycle_state=after)

    def record_lifecycle_heartbeat(self, action: LifecycleAction) -> None:
        self._called("record_lifecycle_heartbeat", action=action)
        self._waiting_state(action)

    # --- internals -------------------------------------------------------------------

    def _called(self, method: str, **args: object) -> None:
        self.calls.append(FleetCall(method=method, args=args))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error

    def _existing_group(self, ref: GroupRef) -> FleetGroup:
        if ref not in self._groups:
            raise NotFoundError(f"AutoScalingGroup name not found - {ref.name} in {ref.region}")
        return self._groups[ref]

    def _find_instance(self, instance_id: str) -> tuple[GroupRef, FleetInstance]:
        found = self._lookup_instance(instance_id)
        if found is None:
            raise KeyError(instance_id)
        return found

    def _lookup_instance(self, instance_id: str) -> tuple[GroupRef, FleetInstance] | None:
        for ref, group in self._groups.items():
            for instance in group.instances:
                if instance.instance_id == instance_id:
                    return ref, instance
        return None

    def _waiting_state(self, action: LifecycleAction) -> str:
        group = self._groups.get(action.ref)
        instance = next(
            (i for i in (group.instances if group else ()) if i.instance_id == action.instance_id),
            None,
        )
        if instance is None or not instance.lifecycle_state.endswith(("Pending:Wait", "Terminating:Wait")):
            raise LifecycleActionGone(
                f"No active Lifecycle Action found with instance ID {action.instance_id}"
            )
        return instance.lifecycle_state

    def _update_instance(
        self,
        ref: GroupRef,
        instance_id: str,
        *,
        lifecycle_state: str | None = None,
        protected_from_scale_in: bool | None = None,
    ) -> None:
        group = self._groups[ref]
        instances = []
        for instance in group.instances:
            if instance.instance_id == instance_id:
                if lifecycle_state is not None:
                    instance = replace(instance, lifecycle_state=lifecycle_state)
                if protected_from_scale_in is not None:
                    instance = replace(instance, protected_from_scale_in=protected_from_scale_in)
            instances.append(instance)
        self._groups[ref] = replace(group, instances=tuple(instances))
