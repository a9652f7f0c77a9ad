"""Capacity planning: pure functions over plain data (no boto3, no kubernetes, no I/O).

`plan()` takes nodes, pods, node groups, group health, a policy and the time, and
returns a Plan whose every entry carries its reasons. `squall.planner.kube` turns
kubectl JSON into the inputs, `squall.planner.offline` runs the whole thing for
`squall plan`.
"""

from squall.planner.health import backoff_duration, classify_failure
from squall.planner.model import (
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    REGION_LABEL,
    Backoff,
    GiveBack,
    GroupHealth,
    GroupInstance,
    Node,
    NodeGroup,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Plan,
    Pod,
    Policy,
    Resources,
    ScaleDown,
    ScaleUp,
    ScalingFailure,
    Taint,
    Toleration,
    Uncordon,
    Unschedulable,
)
from squall.planner.planning import plan
from squall.planner.quantity import parse_quantity

__all__ = [
    "GPU_RESOURCE",
    "INSTANCE_TYPE_LABEL",
    "REGION_LABEL",
    "Backoff",
    "GiveBack",
    "GroupHealth",
    "GroupInstance",
    "Node",
    "NodeGroup",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Plan",
    "Pod",
    "Policy",
    "Resources",
    "ScaleDown",
    "ScaleUp",
    "ScalingFailure",
    "Taint",
    "Toleration",
    "Uncordon",
    "Unschedulable",
    "backoff_duration",
    "classify_failure",
    "parse_quantity",
    "plan",
]
