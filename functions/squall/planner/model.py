"""The planner's plain data: what it is given and the Plan it returns.

Every type is a frozen dataclass with keyword-only fields. Times are timezone-aware
datetimes (a naive one is refused, so that no comparison can mix the two). Resources
are integers: cpu in millicores, memory in bytes, GPUs and pods as counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from squall.conventions import CLUSTER_LABEL, GPU_RESOURCE, REGION_LABEL
from squall.planner.quantity import format_cpu, format_memory
from squall.planner.sites import site

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
TOLERATION_OPERATORS = frozenset({"Equal", "Exists"})
SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
# Where a node group's prices come from (NodeGroup.price_from).
PRICE_SOURCES = ("config", "ec2")

# A resource vector as the hot loops use it: (cpu millicores, memory bytes, gpus, pods).
Vector = tuple[int, int, int, int]


def require_aware(name: str, value: datetime | None) -> None:
    """Refuse naive datetimes: comparing one with an aware one raises mid-plan."""
    if value is not None and value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {value.isoformat()}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """An amount of each resource the planner tracks."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0
    pods: int = 0

    def __post_init__(self) -> None:
        for name in ("cpu", "memory", "gpu", "pods"):
            amount = getattr(self, name)
            if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
                raise ValueError(f"Resources.{name} must be a non-negative int, got {amount!r}")

    def vector(self) -> Vector:
        return (self.cpu, self.memory, self.gpu, self.pods)

    def describe(self) -> str:
        return describe_vector(self.vector())


def describe_vector(vector: Vector) -> str:
    """A request as a reader wants it in a reason: "cpu 4, memory 16Gi, nvidia.com/gpu 1"."""
    cpu, memory, gpu, _ = vector
    parts = [f"cpu {format_cpu(cpu)}", f"memory {format_memory(memory)}"]
    if gpu:
        parts.append(f"{GPU_RESOURCE} {gpu}")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if self.effect not in TAINT_EFFECTS:
            raise ValueError(f"taint {self.key}: unknown effect {self.effect!r}")

    def describe(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    """An empty key with operator Exists tolerates every taint; an empty effect, every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def __post_init__(self) -> None:
        if self.operator not in TOLERATION_OPERATORS:
            raise ValueError(f"toleration {self.key}: unknown operator {self.operator!r}")
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise ValueError(f"toleration {self.key}: unknown effect {self.effect!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in SELECTOR_OPERATORS:
            raise ValueError(f"node affinity {self.key}: unknown operator {self.operator!r}")

    def describe(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorTerm:
    """Requirements that must all hold; a pod's terms are alternatives."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    instance_id: str | None = None
    ready: bool = True
    unschedulable: bool = False
    # Set only when Squall cordoned it (spec.unschedulable + squall.io/cordoned-at).
    cordoned_by_squall: bool = False
    # When the Ready condition last changed: idle time runs from here with no pods.
    ready_since: datetime | None = None
    created_at: datetime | None = None
    # When Squall first saw it with no workload (annotation squall.io/empty-since).
    empty_since: datetime | None = None

    def __post_init__(self) -> None:
        require_aware(f"node {self.name} ready_since", self.ready_since)
        require_aware(f"node {self.name} created_at", self.created_at)
        require_aware(f"node {self.name} empty_since", self.empty_since)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    namespace: str
    name: str
    requests: Resources = Resources()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Required node affinity: the pod fits a node matching any one term.
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    job_id: str | None = None
    node_name: str | None = None
    phase: str = "Pending"
    daemonset: bool = False
    mirror: bool = False
    deleting: bool = False
    # Latest container termination: a node's idle time runs from the last one.
    finished_at: datetime | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        require_aware(f"pod {self.key} finished_at", self.finished_at)

    def with_priority(self, priority: int) -> Pod:
        """The same pod at another priority (admission's demand makes thousands a check).

        `dataclasses.replace` but three times as fast: nothing else changes, so the
        fields are not checked again.
        """
        pod = object.__new__(Pod)
        for name in _POD_FIELDS:
            _set(pod, name, getattr(self, name))
        _set(pod, "priority", priority)
        return pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_pending(self) -> bool:
        return self.phase == "Pending" and self.node_name is None and not self.deleting

    @property
    def is_active(self) -> bool:
        """Still holds its requests on a node."""
        return self.node_name is not None and self.phase not in ("Succeeded", "Failed")

    @property
    def is_workload(self) -> bool:
        """Pods that make a node busy: everything but DaemonSet and mirror pods."""
        return not (self.daemonset or self.mirror)


_POD_FIELDS = tuple(f.name for f in fields(Pod))
_set = object.__setattr__


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInstance:
    instance_id: str
    lifecycle_state: str
    launch_time: datetime

    def __post_init__(self) -> None:
        require_aware(f"instance {self.instance_id} launch_time", self.launch_time)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingFailure:
    """A failed scaling activity, its reason as AWS words it."""

    time: datetime
    reason: str

    def __post_init__(self) -> None:
        require_aware("scaling failure time", self.time)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    """An Auto Scaling group: its node template and its live state."""

    name: str
    region: str
    instance_type: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    priority: int = 0  # lower is preferred
    min_size: int = 0
    max_size: int
    desired: int = 0
    instances: tuple[GroupInstance, ...] = ()
    failures: tuple[ScalingFailure, ...] = ()
    price_per_hour: float | None = None
    spot: bool = False
    asg_name: str = ""
    # The cluster its nodes join, named only when the planner sees more than one (its
    # nodes and pods are then read qualified by cluster: planner/kube.py).
    cluster: str = ""
    # How long a new instance takes to become a Ready node (start estimates count it).
    boot_time: timedelta = timedelta(minutes=5)
    # The on-demand price of its instance type (spot savings are counted against it); None: price_per_hour.
    on_demand_price_per_hour: float | None = None
    # Where its prices come from: "config" (the two above as written) or "ec2" (refreshed from
    # EC2's price APIs by services/prices.py, the written ones kept for when they cannot answer).
    price_from: str = "config"

    def __post_init__(self) -> None:
        if not 0 <= self.min_size <= self.max_size:
            raise ValueError(
                f"group {self.name}: need 0 <= min_size <= max_size, got {self.min_size} and {self.max_size}"
            )
        if self.desired < 0:
            raise ValueError(f"group {self.name}: desired must not be negative")
        if self.price_from not in PRICE_SOURCES:
            raise ValueError(f"group {self.name}: price_from must be one of {', '.join(PRICE_SOURCES)}")

    def template_labels(self) -> dict[str, str]:
        """The labels a new node will carry: declared ones plus those AWS always sets
        (and its cluster's, as the planner reads a node of a named cluster)."""
        labels = {
            REGION_LABEL: self.region,
            INSTANCE_TYPE_LABEL: self.instance_type,
            **self.labels,
        }
        if self.cluster:
            labels[CLUSTER_LABEL] = self.cluster
        return labels

    @property
    def site(self) -> str:
        """Where a gang on its nodes lives: its region, of its cluster (planner/sites.py)."""
        return site(self.region, self.cluster)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupHealth:
    """What the planner remembers about a group between checks (kept in DynamoDB)."""

    backoff_until: datetime | None = None
    consecutive_failures: int = 0
    # The newest failure already counted, so that no failure is counted twice.
    last_failure_at: datetime | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        require_aware("backoff_until", self.backoff_until)
        require_aware("last_failure_at", self.last_failure_at)

    def in_backoff(self, now: datetime) -> bool:
        return self.backoff_until is not None and self.backoff_until > now


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """What the planner is told to do. The defaults are the deployment's: cdk.json's `policy`
    is read by planner/inputs.py, which takes every planner default from here."""

    provision_timeout: timedelta = timedelta(minutes=10)
    idle_threshold: timedelta = timedelta(minutes=10)
    boot_grace: timedelta = timedelta(minutes=5)
    max_scale_down_fraction: float = 0.2
    backoff_base: timedelta = timedelta(minutes=5)
    backoff_max: timedelta = timedelta(minutes=30)
    # Admission lets a job use room kept for one ahead of it when its declared maxRuntime
    # ends before that one's estimated start (planner/timeline.py); False: today's reservations only.
    backfill: bool = True
    # With backfill, a job that has waited longer than this goes ahead of the fair share in
    # its priority band, oldest first: backfill's guard against starving a busy team.
    aged_after: timedelta = timedelta(days=5)
    # Failures older than this no longer back a group off, and a group that has
    # not failed for this long starts again from the base backoff.
    failure_window: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        for name in ("provision_timeout", "backoff_base", "backoff_max", "failure_window", "aged_after"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"policy {name} must be positive")
        for name in ("idle_threshold", "boot_grace"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"policy {name} must not be negative")
        if self.backoff_max < self.backoff_base:
            raise ValueError("policy backoff_max must be at least backoff_base")
        if not 0.0 < self.max_scale_down_fraction <= 1.0:
            raise ValueError("policy max_scale_down_fraction must be more than 0 and at most 1")


# --- the plan --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DesiredChange:
    """A group's desired capacity set from one number to another."""

    group: str
    from_desired: int
    to_desired: int
    reasons: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "from": self.from_desired,
            "to": self.to_desired,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleUp(DesiredChange):
    """Raise desired capacity for what is pending."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Uncordon:
    node: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleDown:
    """Cordon the node (if any), then terminate the instance with a decrement."""

    node: str | None
    instance: str
    group: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Unschedulable:
    pod: str  # namespace/name
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """A group's health changed (backed off, extended, or recovered): persist it."""

    group: str
    health: GroupHealth
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GiveBack(DesiredChange):
    """Lower desired capacity that a backed-off group cannot fulfil (no instance exists for it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    scale_ups: tuple[ScaleUp, ...] = ()
    uncordons: tuple[Uncordon, ...] = ()
    scale_downs: tuple[ScaleDown, ...] = ()
    unschedulable: tuple[Unschedulable, ...] = ()
    backoffs: tuple[Backoff, ...] = ()
    give_backs: tuple[GiveBack, ...] = ()
    # Jobs whose replicas are bound in a region that cannot take the rest of them,
    # while another region could: the scale function lets them start over.
    stranded: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The `squall plan --json` shape."""
        return {
            "scaleUp": [s.as_dict() for s in self.scale_ups],
            "uncordon": [u.node for u in self.uncordons],
            "uncordonReasons": {u.node: list(u.reasons) for u in self.uncordons},
            "scaleDown": [
                {"node": d.node, "instance": d.instance, "group": d.group, "reasons": list(d.reasons)}
                for d in self.scale_downs
            ],
            "unschedulable": [{"pod": u.pod, "reason": u.reason} for u in self.unschedulable],
            "stranded": list(self.stranded),
            "backoff": [
                {
                    "group": b.group,
                    "until": _iso(b.health.backoff_until),
                    "consecutiveFailures": b.health.consecutive_failures,
                    "lastFailureAt": _iso(b.health.last_failure_at),
                    "reasons": list(b.reasons),
                }
                for b in self.backoffs
            ],
            "giveBack": [g.as_dict() for g in self.give_backs],
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
