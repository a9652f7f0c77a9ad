"""The planner offline (`squall plan`): kubectl JSON + the GROUPS document -> plan JSON.

GROUPS is the node-group configuration (as in cdk.json's `nodeGroups`, see DESIGN.md)
where each group may also carry its live state: `desired`, `instances`
([{id, lifecycleState, launchTime}]), `failures` ([{time, reason}]), `backoffUntil`
and `consecutiveFailures`. Every problem is reported with the field it is in, e.g.
`nodeGroups[2].allocatable.cpu: invalid quantity 'lots': ...`, all at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from squall.planner.kube import parse_nodes, parse_pods, parse_time
from squall.planner.model import (
    GPU_RESOURCE,
    TAINT_EFFECTS,
    GroupHealth,
    GroupInstance,
    NodeGroup,
    Policy,
    Resources,
    ScalingFailure,
    Taint,
)
from squall.planner.planning import plan
from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes, parse_whole_count
from squall.planner.text import kind, shown

DEFAULT_PODS_PER_NODE = 110
# Bounds on what a group may declare: more than any real Auto Scaling group holds, and
# small enough that the planner's work stays proportional to what it is given.
MAX_GROUP_SIZE = 10_000
MAX_PRIORITY = 1_000_000
MAX_CONSECUTIVE_FAILURES = 1_000_000
MAX_ERRORS_SHOWN = 50
_Value = TypeVar("_Value")


class GroupsError(ValueError):
    """The GROUPS document is invalid; `errors` holds one 'field: problem' per problem (at most 50)."""

    def __init__(self, errors: Sequence[str]) -> None:
        shown_errors = list(errors[:MAX_ERRORS_SHOWN])
        if len(errors) > MAX_ERRORS_SHOWN:
            shown_errors.append(f"... and {len(errors) - MAX_ERRORS_SHOWN} more")
        self.errors = tuple(shown_errors)
        super().__init__("invalid node groups:\n  " + "\n  ".join(self.errors))


class PlanInputError(ValueError):
    """One input of `squall plan` is invalid: `document` says which (nodes, pods, groups or now)."""

    def __init__(self, document: str, message: str) -> None:
        self.document = document
        super().__init__(message)


def plan_offline(
    *,
    nodes_doc: Mapping[str, Any] | Sequence[Any],
    pods_doc: Mapping[str, Any] | Sequence[Any],
    groups_doc: Mapping[str, Any] | Sequence[Any],
    now: datetime,
    policy: Policy | None = None,
) -> dict[str, Any]:
    """Plan from kubectl output and a GROUPS document; returns the `squall plan --json` dict.

    PlanInputError names the input and the field of the first problem (every problem,
    for the GROUPS document).
    """
    try:
        moment = parse_time(now)
    except ValueError as exc:
        raise PlanInputError("now", str(exc)) from None
    if moment is None:
        raise PlanInputError("now", "a time to plan at is required")
    try:
        groups, health = parse_groups(groups_doc)
    except GroupsError as exc:
        raise PlanInputError("groups", str(exc)) from None
    try:
        nodes = parse_nodes(nodes_doc)
    except ValueError as exc:
        raise PlanInputError("nodes", str(exc)) from None
    try:
        pods = parse_pods(pods_doc)
    except ValueError as exc:
        raise PlanInputError("pods", str(exc)) from None
    try:
        result = plan(
            nodes=nodes,
            pods=pods,
            groups=groups,
            health=health,
            policy=policy or Policy(),
            now=moment,
        )
    except ValueError as exc:  # what only the inputs together say, e.g. a node group declared twice
        raise PlanInputError("groups", str(exc)) from None
    return result.to_dict()


def parse_groups(doc: Mapping[str, Any] | Sequence[Any]) -> tuple[list[NodeGroup], dict[str, GroupHealth]]:
    """Node groups and their persisted health from a list, {nodeGroups: [...]} or cdk.json."""
    raw_groups = _group_list(doc)
    errors: list[str] = []
    groups: list[NodeGroup] = []
    health: dict[str, GroupHealth] = {}
    for index, raw in enumerate(raw_groups):
        fields = _Fields(raw, f"nodeGroups[{index}]", errors)
        parsed = _parse_group(fields) if fields.ok_object() else None
        if parsed is not None:
            groups.append(parsed[0])
            health[parsed[0].name] = parsed[1]
    errors.extend(_duplicates(groups))
    if errors:
        raise GroupsError(errors)
    return groups, health


def _group_list(doc: Mapping[str, Any] | Sequence[Any]) -> Sequence[Any]:
    found: object = doc
    if isinstance(doc, Mapping):
        context = doc.get("context")
        holder = context if isinstance(context, Mapping) and "nodeGroups" in context else doc
        if "nodeGroups" not in holder:
            raise GroupsError(
                ["nodeGroups: missing (expected a list of node groups, or {nodeGroups: [...]})"]
            )
        found = holder["nodeGroups"]
    if not isinstance(found, Sequence) or isinstance(found, str):
        raise GroupsError([f"nodeGroups: expected a list, got {kind(found)}"])
    return found


def _parse_group(fields: _Fields) -> tuple[NodeGroup, GroupHealth] | None:
    errors_before = len(fields.errors)
    name = fields.text("name", required=True)
    region = fields.text("region", required=True)
    instance_type = fields.text("instanceType") or "unknown"
    allocatable = _allocatable(fields, name=name, instance_type=instance_type)
    min_size = fields.integer("minSize", default=0, maximum=MAX_GROUP_SIZE)
    max_size = fields.integer("maxSize", required=True, maximum=MAX_GROUP_SIZE)
    instances = fields.objects("instances", _instance)
    desired = fields.integer("desired", default=max(min_size or 0, len(instances)), maximum=MAX_GROUP_SIZE)
    priority = fields.integer("priority", default=0, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)
    labels = fields.labels("labels")
    taints = tuple(fields.objects("taints", _taint))
    failures = tuple(fields.objects("failures", _failure))
    price = fields.number("pricePerHour")
    spot = fields.boolean("spot")
    asg_name = fields.text("asgName") or name
    health = _health(fields)
    if min_size is not None and max_size is not None and min_size > max_size:
        fields.error("maxSize", f"must be at least minSize ({min_size}), got {max_size}")
    if desired is not None and max_size is not None and desired > max_size:
        fields.error("desired", f"must be at most maxSize ({max_size}), got {desired}")
    if (
        len(fields.errors) > errors_before
        or allocatable is None
        or min_size is None
        or max_size is None
        or desired is None
    ):
        return None
    group = NodeGroup(
        name=name,
        region=region,
        instance_type=instance_type,
        allocatable=allocatable,
        labels=labels,
        taints=taints,
        priority=priority or 0,
        min_size=min_size,
        max_size=max_size,
        desired=desired,
        instances=tuple(instances),
        failures=failures,
        price_per_hour=price,
        spot=spot,
        asg_name=asg_name,
    )
    return group, health


def _allocatable(fields: _Fields, *, name: str, instance_type: str) -> Resources | None:
    raw = fields.raw.get("allocatable")
    if not isinstance(raw, Mapping):
        fields.error(
            "allocatable",
            f"group {name or '?'} must declare its per-node allocatable "
            f"{{cpu, memory, {GPU_RESOURCE}, pods}}; the planner has no size for {instance_type}",
        )
        return None
    inner = _Fields(raw, f"{fields.path}.allocatable", fields.errors)
    cpu = inner.quantity("cpu", parse_cpu_millicores, required=True)
    memory = inner.quantity("memory", parse_memory_bytes, required=True)
    gpu_key = GPU_RESOURCE if GPU_RESOURCE in raw else "gpu"
    gpu = inner.quantity(gpu_key, parse_whole_count, default=0)
    pods = inner.quantity("pods", parse_whole_count, default=DEFAULT_PODS_PER_NODE)
    if cpu is None or memory is None or gpu is None or pods is None:
        return None
    return Resources(cpu=cpu, memory=memory, gpu=gpu, pods=pods)


def _instance(fields: _Fields) -> GroupInstance | None:
    instance_id = fields.text("id", required="instanceId" not in fields.raw) or fields.text("instanceId")
    state = fields.text("lifecycleState", required=True)
    launched = fields.time("launchTime", required=True)
    if not instance_id or not state or launched is None:
        return None
    return GroupInstance(instance_id=instance_id, lifecycle_state=state, launch_time=launched)


def _failure(fields: _Fields) -> ScalingFailure | None:
    time = fields.time("time", required=True)
    reason = fields.text("reason", required=True)
    if time is None or not reason:
        return None
    return ScalingFailure(time=time, reason=reason)


def _taint(fields: _Fields) -> Taint | None:
    key = fields.text("key", required=True)
    effect = fields.text("effect") or "NoSchedule"
    if effect not in TAINT_EFFECTS:
        fields.error("effect", f"must be one of {', '.join(sorted(TAINT_EFFECTS))}, got {effect!r}")
        return None
    return Taint(key=key, value=fields.text("value"), effect=effect) if key else None


def _health(fields: _Fields) -> GroupHealth:
    until = fields.time("backoffUntil")
    consecutive = fields.integer(
        "consecutiveFailures", default=1 if until is not None else 0, maximum=MAX_CONSECUTIVE_FAILURES
    )
    return GroupHealth(
        backoff_until=until,
        consecutive_failures=consecutive or 0,
        last_failure_at=fields.time("lastFailureAt"),
        reason="backoff carried over from the GROUPS document" if until is not None else "",
    )


def _duplicates(groups: Sequence[NodeGroup]) -> list[str]:
    errors: list[str] = []
    seen_groups: set[str] = set()
    seen_instances: dict[str, str] = {}
    for group in groups:
        if group.name in seen_groups:
            errors.append(f"nodeGroups: group name {group.name!r} appears twice")
        seen_groups.add(group.name)
        for instance in group.instances:
            other = seen_instances.setdefault(instance.instance_id, group.name)
            if other != group.name:
                errors.append(
                    f"nodeGroups: instance {instance.instance_id} is in both {other} and {group.name}"
                )
    return errors


@dataclass(slots=True)
class _Fields:
    """Reads one object's fields, recording 'path.field: problem' instead of raising."""

    raw: Any
    path: str
    errors: list[str]

    def ok_object(self) -> bool:
        if isinstance(self.raw, Mapping):
            return True
        self.errors.append(f"{self.path}: expected an object, got {kind(self.raw)}")
        return False

    def error(self, key: str, message: str) -> None:
        self.errors.append(f"{self.path}.{key}: {message}")

    def text(self, key: str, *, required: bool = False) -> str:
        value = self.raw.get(key)
        if value is None:
            if required:
                self.error(key, "required")
            return ""
        if not isinstance(value, str) or (required and not value.strip()):
            self.error(key, f"expected a non-empty string, got {shown(value)}")
            return ""
        return value

    def integer(
        self,
        key: str,
        *,
        default: int | None = None,
        required: bool = False,
        minimum: int = 0,
        maximum: int,
    ) -> int | None:
        value = self.raw.get(key)
        if value is None:
            if required:
                self.error(key, "required")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, f"expected a whole number, got {shown(value)}")
            return None
        if not minimum <= value <= maximum:
            self.error(key, f"must be from {minimum} to {maximum}, got {shown(value)}")
            return None
        return value

    def number(self, key: str) -> float | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e12:
            self.error(key, f"expected a non-negative number, got {shown(value)}")
            return None
        return float(value)

    def boolean(self, key: str) -> bool:
        value = self.raw.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.error(key, f"expected true or false, got {shown(value)}")
            return False
        return value

    def quantity(
        self, key: str, parse: Callable[[Any], int], *, required: bool = False, default: int | None = None
    ) -> int | None:
        value = self.raw.get(key)
        if value is None:
            if required:
                self.error(key, "required")
            return default
        try:
            return parse(value)
        except ValueError as exc:
            self.error(key, str(exc))
            return None

    def time(self, key: str, *, required: bool = False) -> datetime | None:
        value = self.raw.get(key)
        if value is None:
            if required:
                self.error(key, "required")
            return None
        try:
            return parse_time(value)
        except ValueError as exc:
            self.error(key, str(exc))
            return None

    def labels(self, key: str) -> dict[str, str]:
        value = self.raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(key, f"expected an object of strings, got {type(value).__name__}")
            return {}
        labels: dict[str, str] = {}
        for name, label in value.items():
            if not isinstance(name, str):
                self.error(key, f"label names must be strings, got {kind(name)} {shown(name)}")
            elif (
                label is None
                or isinstance(label, Mapping | list)
                or (isinstance(label, float) and not math.isfinite(label))
            ):
                self.error(f"{key}.{name}", f"expected a string, got {kind(label)}")
            elif isinstance(label, int) and not isinstance(label, bool) and label.bit_length() > 64:
                self.error(f"{key}.{name}", f"expected a string, got {shown(label)}")
            else:
                # YAML reads `true` or `1` as non-strings; a label is their text.
                labels[str(name)] = str(label).lower() if isinstance(label, bool) else str(label)
        return labels

    def objects(self, key: str, parse: Callable[[_Fields], _Value | None]) -> list[_Value]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(key, f"expected a list, got {kind(value)}")
            return []
        parsed: list[_Value] = []
        for index, item in enumerate(value):
            inner = _Fields(item, f"{self.path}.{key}[{index}]", self.errors)
            result = parse(inner) if inner.ok_object() else None
            if result is not None:
                parsed.append(result)
        return parsed
