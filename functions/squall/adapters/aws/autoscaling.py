"""The Fleet port, and the AutoScalingFleet adapter over EC2 Auto Scaling (boto3).

The port is what the scale and lifecycle services need from the node groups of
every configured region: observe them (groups, instances, recent scaling
activities) and act on them (desired capacity, terminate one instance with
decrement, scale-in protection, lifecycle hook completion and heartbeats).
Observations are plain frozen dataclasses, so the planner can take them without
knowing that AWS exists.

The adapter does I/O and nothing else. Every botocore exception is translated
into a Squall error by squall.adapters.aws.errors (chained with ``raise ... from
exc``): throttling, contention and transport failures are retryable, everything
else is permanent, with two refinements of the Fleet's own that callers rely on: ``NotFoundError`` for an instance or group Auto
Scaling does not know (any more), and ``LifecycleActionGone`` when a lifecycle
action has already been completed or has timed out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from squall.adapters.aws import errors
from squall.core.errors import LifecycleActionGone, NotFoundError, PermanentError, SquallError
from squall.ports import (
    TERMINAL_ACTIVITY_STATUSES,
    Fleet,
    FleetGroup,
    FleetInstance,
    GroupRef,
    LifecycleAction,
    LifecycleResult,
    ScalingActivity,
)

__all__ = [
    "TERMINAL_ACTIVITY_STATUSES",
    "AutoScalingFleet",
    "Fleet",
    "FleetGroup",
    "FleetInstance",
    "GroupRef",
    "LifecycleAction",
    "LifecycleActionGone",
    "LifecycleResult",
    "ScalingActivity",
]

# --- the adapter -------------------------------------------------------------------

# DescribeAutoScalingGroups takes 50 names by default and up to 100 when MaxRecords
# says so; DescribeScalingActivities returns at most 100 a page; SetInstanceProtection
# takes at most 50 instance ids.
_GROUP_NAMES_PER_CALL = 100
_ACTIVITIES_PER_PAGE = 100
_PROTECTION_IDS_PER_CALL = 50
# EC2 DescribeInstances: values of one filter per call, and a page.
_EC2_IDS_PER_CALL = 200
_EC2_PAGE_SIZE = 1000

# Auto Scaling words "no such group or instance" as a ValidationError.
_NOT_FOUND_WORDS = ("not found", "is not part of auto scaling group")
_LIFECYCLE_GONE_WORDS = "no active lifecycle action found"

_T = TypeVar("_T")


class AutoScalingFleet:
    """Fleet over the EC2 Auto Scaling API of every region, one client per region.

    ``clients`` maps a region name to a boto3 ``autoscaling`` client (the
    composition root creates and caches them). ``ec2_clients``, when given, maps
    a region to a boto3 ``ec2`` client and is used only to fill in instances'
    launch times, which Auto Scaling does not report (one DescribeInstances call
    per region and 200 instances).
    """

    def __init__(
        self,
        clients: Callable[[str], Any],
        *,
        ec2_clients: Callable[[str], Any] | None = None,
    ) -> None:
        self._clients = clients
        self._ec2_clients = ec2_clients

    # observe ---------------------------------------------------------------------

    def describe_groups(self, refs: Sequence[GroupRef]) -> list[FleetGroup]:
        found: dict[GroupRef, FleetGroup] = {}
        for region, page in _pages_by_batch(
            "DescribeAutoScalingGroups",
            clients=self._clients,
            values=_names_by_region(refs),
            batch_size=_GROUP_NAMES_PER_CALL,
            method="describe_auto_scaling_groups",
            page_size=_GROUP_NAMES_PER_CALL,
            params=lambda names: {"AutoScalingGroupNames": names},
        ):
            for raw in page.get("AutoScalingGroups", []):
                group = _group(raw, region=region)
                found[group.ref] = group
        if self._ec2_clients is not None:
            found = self._with_launch_times(found)
        return [found[ref] for ref in dict.fromkeys(refs) if ref in found]

    def recent_activities(self, refs: Sequence[GroupRef], *, since: datetime) -> list[ScalingActivity]:
        since = _aware(since)
        activities: list[ScalingActivity] = []
        for ref in dict.fromkeys(refs):
            pages = _pages(
                "DescribeScalingActivities",
                clients=self._clients,
                region=ref.region,
                method="describe_scaling_activities",
                page_size=_ACTIVITIES_PER_PAGE,
                AutoScalingGroupName=ref.name,
            )
            activities.extend(_activities_since(pages, ref=ref, since=since))
        return activities

    # act -------------------------------------------------------------------------

    def set_desired_capacity(self, *, ref: GroupRef, desired: int) -> None:
        if desired < 0:
            raise PermanentError(f"desired capacity of {ref.name} cannot be {desired}")
        with _translated("SetDesiredCapacity", region=ref.region):
            self._clients(ref.region).set_desired_capacity(
                AutoScalingGroupName=ref.name,
                DesiredCapacity=desired,
                HonorCooldown=False,
            )

    def terminate_instance(self, *, region: str, instance_id: str, decrement: bool = True) -> None:
        with _translated("TerminateInstanceInAutoScalingGroup", region=region):
            self._clients(region).terminate_instance_in_auto_scaling_group(
                InstanceId=instance_id,
                ShouldDecrementDesiredCapacity=decrement,
            )

    def set_scale_in_protection(self, *, ref: GroupRef, instance_ids: Sequence[str], protected: bool) -> None:
        for batch in _chunks(list(dict.fromkeys(instance_ids)), _PROTECTION_IDS_PER_CALL):
            with _translated("SetInstanceProtection", region=ref.region):
                self._clients(ref.region).set_instance_protection(
                    AutoScalingGroupName=ref.name,
                    InstanceIds=batch,
                    ProtectedFromScaleIn=protected,
                )

    def complete_lifecycle_action(self, action: LifecycleAction, result: LifecycleResult) -> None:
        region = action.ref.region
        with _translated("CompleteLifecycleAction", region=region):
            self._clients(region).complete_lifecycle_action(
                **_lifecycle_params(action), LifecycleActionResult=result
            )

    def record_lifecycle_heartbeat(self, action: LifecycleAction) -> None:
        region = action.ref.region
        with _translated("RecordLifecycleActionHeartbeat", region=region):
            self._clients(region).record_lifecycle_action_heartbeat(**_lifecycle_params(action))

    # launch times ----------------------------------------------------------------

    def _with_launch_times(self, groups: dict[GroupRef, FleetGroup]) -> dict[GroupRef, FleetGroup]:
        assert self._ec2_clients is not None
        ids_by_region: dict[str, list[str]] = {}
        for group in groups.values():
            ids_by_region.setdefault(group.region, []).extend(
                instance.instance_id for instance in group.instances
            )
        launch_times: dict[str, datetime] = {}
        for _, page in _pages_by_batch(
            "DescribeInstances",
            clients=self._ec2_clients,
            values=ids_by_region,
            batch_size=_EC2_IDS_PER_CALL,
            method="describe_instances",
            page_size=_EC2_PAGE_SIZE,
            # A filter, not InstanceIds: an id EC2 no longer knows must not fail the whole observation.
            params=lambda ids: {"Filters": [{"Name": "instance-id", "Values": ids}]},
        ):
            for reservation in page.get("Reservations", []):
                for raw in reservation.get("Instances", []):
                    if raw.get("LaunchTime") is not None:
                        launch_times[raw["InstanceId"]] = raw["LaunchTime"]
        return {
            ref: replace(
                group,
                instances=tuple(
                    replace(instance, launch_time=launch_times.get(instance.instance_id))
                    for instance in group.instances
                ),
            )
            for ref, group in groups.items()
        }


# --- helpers -----------------------------------------------------------------------


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _names_by_region(refs: Sequence[GroupRef]) -> dict[str, list[str]]:
    names: dict[str, dict[str, None]] = {}
    for ref in refs:
        names.setdefault(ref.region, {})[ref.name] = None
    return {region: list(by_name) for region, by_name in names.items()}


def _chunks(items: list[_T], size: int) -> Iterator[list[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _group(raw: dict[str, Any], *, region: str) -> FleetGroup:
    name = raw["AutoScalingGroupName"]
    return FleetGroup(
        name=name,
        region=region,
        desired=int(raw["DesiredCapacity"]),
        min_size=int(raw["MinSize"]),
        max_size=int(raw["MaxSize"]),
        instances=tuple(
            FleetInstance(
                instance_id=instance["InstanceId"],
                group=name,
                region=region,
                lifecycle_state=str(instance.get("LifecycleState", "")),
                health_status=str(instance.get("HealthStatus", "")),
                launch_time=None,
                protected_from_scale_in=bool(instance.get("ProtectedFromScaleIn", False)),
                availability_zone=str(instance.get("AvailabilityZone", "")),
            )
            for instance in raw.get("Instances", [])
        ),
        tags={tag["Key"]: tag.get("Value", "") for tag in raw.get("Tags", [])},
    )


def _activities_since(pages: Any, *, ref: GroupRef, since: datetime) -> Iterator[ScalingActivity]:
    """Activities started at or after ``since``, reading no more pages than needed.

    Auto Scaling lists activities still in progress first, then the others by
    start time, newest first: so the first finished activity older than ``since``
    ends the search, while an old one still in progress is only skipped.
    """
    for page in pages:
        for raw in page.get("Activities", []):
            activity = _activity(raw, ref=ref)
            if activity.start_time >= since:
                yield activity
            elif activity.finished:
                return


def _activity(raw: dict[str, Any], *, ref: GroupRef) -> ScalingActivity:
    return ScalingActivity(
        activity_id=raw["ActivityId"],
        group=raw.get("AutoScalingGroupName", ref.name),
        region=ref.region,
        status_code=str(raw.get("StatusCode", "")),
        status_message=str(raw.get("StatusMessage", "")),
        description=str(raw.get("Description", "")),
        start_time=raw["StartTime"],
        end_time=raw.get("EndTime"),
        cause=str(raw.get("Cause", "")),
    )


def _lifecycle_params(action: LifecycleAction) -> dict[str, str]:
    params = {
        "AutoScalingGroupName": action.ref.name,
        "LifecycleHookName": action.hook_name,
        "InstanceId": action.instance_id,
    }
    if action.token:
        params["LifecycleActionToken"] = action.token
    return params


def _translated(operation: str, *, region: str) -> AbstractContextManager[None]:
    """Turn any botocore exception raised inside into a Squall error, chained (with the Fleet's rules)."""
    return errors.translated(f"{operation} in {region}", rules=_FLEET_RULES)


def _pages(
    api: str, *, clients: Callable[[str], Any], region: str, method: str, page_size: int, **params: Any
) -> Iterator[dict[str, Any]]:
    """The pages of one paginated call in one region (boto3's paginator), read as they are needed."""
    doing = f"{api} in {region}"
    with errors.translated(doing, rules=_FLEET_RULES):
        client = clients(region)  # building a client can fail too (a malformed region)
    yield from errors.pages(doing, client, method, page_size=page_size, rules=_FLEET_RULES, **params)


def _pages_by_batch(
    api: str,
    *,
    clients: Callable[[str], Any],
    values: Mapping[str, list[str]],
    batch_size: int,
    method: str,
    page_size: int,
    params: Callable[[list[str]], dict[str, Any]],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(region, page) of one paginated call per region and batch of at most ``batch_size`` values."""
    for region, region_values in values.items():
        for batch in _chunks(region_values, batch_size):
            for page in _pages(
                api, clients=clients, region=region, method=method, page_size=page_size, **params(batch)
            ):
                yield region, page


def _lifecycle_gone(exc: ClientError, text: str) -> SquallError | None:
    """Auto Scaling's answer for an action already completed or timed out (a ValidationError)."""
    return LifecycleActionGone(text) if _LIFECYCLE_GONE_WORDS in errors.error_message(exc).lower() else None


def _group_or_instance_gone(exc: ClientError, text: str) -> SquallError | None:
    lowered = errors.error_message(exc).lower()
    if errors.error_code(exc) == "ValidationError" and any(words in lowered for words in _NOT_FOUND_WORDS):
        return NotFoundError(text)
    return None


_FLEET_RULES: tuple[errors.Rule, ...] = (
    _lifecycle_gone,
    _group_or_instance_gone,
    errors.not_found("InvalidInstanceID.NotFound"),
)
