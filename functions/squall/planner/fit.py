"""Does a pod fit a node (or a group's node template)? Each check answers with a reason.

A check returns None when the pod fits and otherwise a short reason a person can act
on ("untolerated taint nvidia.com/gpu=true:NoSchedule"), which ends up in the Plan.
The simulated cluster's scheduler (squall.local.cluster.scheduler) filters nodes with
these same predicates, so a replay's planner and scheduler agree on what fits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping

from squall.planner.model import (
    GPU_RESOURCE,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    Toleration,
    Vector,
)
from squall.planner.quantity import format_cpu, format_memory

# Taints that only keep pods off nodes that are not ready yet (or cordoned): a node
# that is still booting will lose them, so they never count against in-flight room.
TRANSIENT_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/unschedulable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_NO_LIMIT = 1 << 62
_RESOURCE_NAMES = ("cpu", "memory", GPU_RESOURCE, "pods")
_FORMATS: tuple[Callable[[int], str], ...] = (format_cpu, format_memory, str, str)


def requirement_holds(requirement: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(requirement.key)
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    return _numeric_comparison_holds(requirement, value)


def _numeric_comparison_holds(requirement: NodeSelectorRequirement, value: str | None) -> bool:
    """Gt / Lt: both sides must be integers, else the requirement does not hold."""
    if value is None or len(requirement.values) != 1:
        return False
    try:
        label, bound = int(value), int(requirement.values[0])
    except ValueError:
        return False
    return label > bound if requirement.operator == "Gt" else label < bound


def selector_mismatch(node_selector: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> str | None:
    for key, wanted in node_selector:
        actual = labels.get(key)
        if actual != wanted:
            has = f"has {actual}" if actual is not None else "label missing"
            return f"node selector {key}={wanted} not matched ({has})"
    return None


def affinity_mismatch(terms: tuple[NodeSelectorTerm, ...], labels: Mapping[str, str]) -> str | None:
    """Required node affinity: any one term must hold in full."""
    if not terms:
        return None
    for term in terms:
        if all(requirement_holds(r, labels) for r in term.match_expressions):
            return None
    failed = [
        next(r for r in term.match_expressions if not requirement_holds(r, labels)).describe()
        for term in terms
    ]
    return f"node affinity not satisfied ({' or '.join(failed)})"


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    for toleration in tolerations:
        if toleration.effect and toleration.effect != taint.effect:
            continue
        if toleration.operator == "Exists":
            if not toleration.key or toleration.key == taint.key:
                return True
        elif toleration.key == taint.key and toleration.value == taint.value:
            return True
    return False


def untolerated_taint(tolerations: tuple[Toleration, ...], taints: Iterable[Taint]) -> Taint | None:
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            return taint
    return None


def blocking_taints(taints: Iterable[Taint], *, ignore_transient: bool) -> tuple[Taint, ...]:
    """The taints that can keep a pod off a node (PreferNoSchedule never does)."""
    return _blocking(tuple(taints), ignore_transient)


@functools.lru_cache(maxsize=1024)  # a fleet has a handful of taint sets, asked for on every plan
def _blocking(taints: tuple[Taint, ...], ignore_transient: bool) -> tuple[Taint, ...]:
    return tuple(
        t
        for t in taints
        if t.effect in _BLOCKING_EFFECTS and not (ignore_transient and t.key in TRANSIENT_TAINT_KEYS)
    )


def resource_shortfall(request: Vector, allocatable: Vector) -> str | None:
    """Why a pod could never fit a node of this size, even an empty one."""
    for name, show, wanted, has in zip(_RESOURCE_NAMES, _FORMATS, request, allocatable, strict=True):
        if wanted > has:
            return f"insufficient {name} (requests {show(wanted)}, node allocatable {show(has)})"
    return None


def fit_count(free: Vector, request: Vector) -> int:
    """How many pods of this request fit into this much free room."""
    count = _NO_LIMIT
    for have, need in zip(free, request, strict=True):
        if need > 0:
            count = min(count, have // need)
    return max(count, 0)
