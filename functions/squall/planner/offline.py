"""The planner offline (`squall plan`): kubectl JSON + the GROUPS document -> plan JSON.

With a Job list (`kubectl get jobs -A -o json`, `--jobs`) it decides admission first,
as the scale check does: which suspended jobs would be admitted now and where, and
the queue in admission order with each job's reason; the planner is then given the
pods plus the admission's demand (the pods of admitted jobs not created yet and the
queue's, head first), so the plan buys what the queue will admit next. Teams' quotas
and weights are the deployment's (cli/commands.py reads cdk.json's `teams`).

GROUPS is the node-group configuration (as in cdk.json's `nodeGroups`, read by
planner/inputs.py as every other reader reads it) where each group may also carry its
live state: `desired`, `instances` ([{id, lifecycleState, launchTime}]), `failures`
([{time, reason}]), `backoffUntil` and `consecutiveFailures`. Every problem is reported
with the field it is in, e.g. `nodeGroups[2].allocatable.cpu: invalid quantity 'lots': ...`,
all at once. The policy is cdk.json's (cli/commands.py reads it), so an offline plan is the
deployment's plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from squall.planner.admission import TeamShare, admit
from squall.planner.inputs import GroupsError, read_node_groups
from squall.planner.kube import parse_nodes, parse_pods, parse_replica_jobs, parse_time
from squall.planner.model import GroupHealth, NodeGroup, Policy
from squall.planner.planning import plan

__all__ = ["GroupsError", "PlanInputError", "parse_groups", "plan_offline"]


class PlanInputError(ValueError):
    """One input of `squall plan` is invalid: `document` says which (nodes, pods, groups, jobs or now)."""

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
    jobs_doc: Mapping[str, Any] | Sequence[Any] | None = None,
    teams: Mapping[str, TeamShare] | None = None,
) -> dict[str, Any]:
    """Plan from kubectl output and a GROUPS document; returns the `squall plan --json` dict.

    With `jobs_doc` (a Job list) the dict also has `admission` (AdmissionPlan.to_dict:
    admitted, waiting, waitingTotal, inUse), and the plan is made for the pods plus
    the admission's demand. PlanInputError names the input and the field of the first
    problem (every problem, for the GROUPS document).
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
    jobs = None
    if jobs_doc is not None:
        try:
            jobs = parse_replica_jobs(jobs_doc)
        except ValueError as exc:
            raise PlanInputError("jobs", str(exc)) from None
    policy = policy or Policy()
    try:
        admission = None
        if jobs is not None:
            admission = admit(
                jobs=jobs,
                nodes=nodes,
                pods=pods,
                groups=groups,
                teams=teams or {},
                policy=policy,
                now=moment,
            )
            pods = [*pods, *admission.demand]
        result = plan(nodes=nodes, pods=pods, groups=groups, health=health, policy=policy, now=moment)
    except ValueError as exc:  # what only the inputs together say, e.g. a node group declared twice
        raise PlanInputError("groups", str(exc)) from None
    planned = result.to_dict()
    if admission is not None:
        # Every waiting job, not the decision record's first part: an offline plan has no item limit.
        planned["admission"] = admission.to_dict(most=len(admission.waiting))
    return planned


def parse_groups(doc: Mapping[str, Any] | Sequence[Any]) -> tuple[list[NodeGroup], dict[str, GroupHealth]]:
    """Node groups and their persisted health from a list, {nodeGroups: [...]} or cdk.json."""
    return read_node_groups(doc)
