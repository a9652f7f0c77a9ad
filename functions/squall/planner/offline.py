"""The planner offline (`squall plan`): kubectl JSON + the GROUPS document -> plan JSON.

GROUPS is the node-group configuration (as in cdk.json's `nodeGroups`, read by
planner/inputs.py as every other reader reads it) where each group may also carry its
live state: `desired`, `instances` ([{id, lifecycleState, launchTime}]), `failures`
([{time, reason}]), `backoffUntil` and `consecutiveFailures`. Every problem is reported
with the field it is in, e.g. `nodeGroups[2].allocatable.cpu: invalid quantity 'lots': ...`,
all at once. The policy is cdk.json's (cli.py reads it), so an offline plan is the
deployment's plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from squall.planner.inputs import GroupsError, read_node_groups
from squall.planner.kube import parse_nodes, parse_pods, parse_time
from squall.planner.model import GroupHealth, NodeGroup, Policy
from squall.planner.planning import plan

__all__ = ["GroupsError", "PlanInputError", "parse_groups", "plan_offline"]


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
    return read_node_groups(doc)
