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

Many clusters: one ClusterSnapshot per cluster (its nodes, pods and, optionally, its
replica Jobs). With more than one, each cluster's objects are read for it (node names
"<cluster>/<node>", planner/kube.py) and every node group must name one of them; with
one, nothing is qualified and the plan reads as a one-cluster plan does. The queue may
be given directly as ReplicaJobs (`queued`: core/queue.py `replica_jobs` of the queue
records), for admission to place across the clusters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from squall.planner.admission import TeamShare, admit
from squall.planner.inputs import CLUSTER_NAME, CLUSTER_NAME_WORDS, GroupsError, read_node_groups
from squall.planner.kube import parse_nodes, parse_pods, parse_replica_jobs, parse_time
from squall.planner.model import GroupHealth, Node, NodeGroup, Pod, Policy
from squall.planner.planning import plan
from squall.planner.queue_types import ReplicaJob

__all__ = ["ClusterSnapshot", "GroupsError", "PlanInputError", "parse_groups", "plan_offline"]

Document = Mapping[str, Any] | Sequence[Any]


class PlanInputError(ValueError):
    """One input of `squall plan` is invalid: `document` says which (nodes, pods, groups, jobs or now),
    and `cluster` whose snapshot it is in (None: not one cluster's)."""

    def __init__(self, document: str, message: str, *, cluster: str | None = None) -> None:
        self.document = document
        self.cluster = cluster
        super().__init__(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSnapshot:
    """One cluster's objects as kubectl prints them (`kubectl get nodes|pods -A|jobs -A -o json`)."""

    name: str
    nodes_doc: Document
    pods_doc: Document
    # Its replica Jobs: those let go count toward the teams' quotas; suspended ones queue.
    jobs_doc: Document | None = None


def plan_offline(
    *,
    groups_doc: Document,
    now: datetime,
    nodes_doc: Document | None = None,
    pods_doc: Document | None = None,
    policy: Policy | None = None,
    jobs_doc: Document | None = None,
    teams: Mapping[str, TeamShare] | None = None,
    clusters: Sequence[ClusterSnapshot] = (),
    queued: Sequence[ReplicaJob] | None = None,
) -> dict[str, Any]:
    """Plan from kubectl output and a GROUPS document; returns the `squall plan --json` dict.

    One cluster's snapshot as `nodes_doc` and `pods_doc` (and `jobs_doc`), or each
    cluster's as `clusters`, not both. With a Job list or `queued` (the queue's
    ReplicaJobs, core/queue.py `replica_jobs` with qualify_cluster when `clusters` has
    more than one) the dict also has `admission` (AdmissionPlan.to_dict: admitted,
    waiting, waitingTotal, inUse), and the plan is made for the pods plus the
    admission's demand. PlanInputError names the input (and cluster) and the field of
    the first problem (every problem, for the GROUPS document).
    """
    try:
        moment = parse_time(now)
    except ValueError as exc:
        raise PlanInputError("now", str(exc)) from None
    if moment is None:
        raise PlanInputError("now", "a time to plan at is required")
    snapshots = _snapshots(clusters, nodes_doc=nodes_doc, pods_doc=pods_doc, jobs_doc=jobs_doc)
    try:
        groups, health = parse_groups(groups_doc)
    except GroupsError as exc:
        raise PlanInputError("groups", str(exc)) from None
    groups = _groups_of_clusters(groups, [snapshot.name for snapshot in snapshots])
    qualify = len(snapshots) > 1
    nodes: list[Node] = []
    pods: list[Pod] = []
    listed: list[ReplicaJob] | None = None
    for snapshot in snapshots:
        cluster = snapshot.name if qualify else None
        named = snapshot.name if clusters else None
        try:
            nodes += parse_nodes(snapshot.nodes_doc, cluster=cluster)
        except ValueError as exc:
            raise PlanInputError("nodes", str(exc), cluster=named) from None
        try:
            pods += parse_pods(snapshot.pods_doc, cluster=cluster)
        except ValueError as exc:
            raise PlanInputError("pods", str(exc), cluster=named) from None
        if snapshot.jobs_doc is not None:
            try:
                listed = [*(listed or ()), *parse_replica_jobs(snapshot.jobs_doc, cluster=cluster)]
            except ValueError as exc:
                raise PlanInputError("jobs", str(exc), cluster=named) from None
    jobs = listed if queued is None else [*(listed or ()), *queued]
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


def parse_groups(doc: Document) -> tuple[list[NodeGroup], dict[str, GroupHealth]]:
    """Node groups and their persisted health from a list, {nodeGroups: [...]} or cdk.json."""
    return read_node_groups(doc)


def _snapshots(
    clusters: Sequence[ClusterSnapshot],
    *,
    nodes_doc: Document | None,
    pods_doc: Document | None,
    jobs_doc: Document | None,
) -> list[ClusterSnapshot]:
    """Each cluster's snapshot: `clusters`, or the one cluster of nodes_doc and pods_doc."""
    if not clusters:
        if nodes_doc is None:
            raise PlanInputError("nodes", "a node list is required (kubectl get nodes -o json)")
        if pods_doc is None:
            raise PlanInputError("pods", "a pod list is required (kubectl get pods -A -o json)")
        return [ClusterSnapshot(name="", nodes_doc=nodes_doc, pods_doc=pods_doc, jobs_doc=jobs_doc)]
    if nodes_doc is not None or pods_doc is not None or jobs_doc is not None:
        raise PlanInputError(
            "nodes", "give one cluster's nodes and pods, or each cluster's snapshot, not both"
        )
    names = [snapshot.name for snapshot in clusters]
    for name in names:
        if not CLUSTER_NAME.fullmatch(name):
            raise PlanInputError("clusters", f"{name!r} is not {CLUSTER_NAME_WORDS}")
        if names.count(name) > 1:
            raise PlanInputError("clusters", f"cluster {name} is given twice")
    return list(clusters)


def _groups_of_clusters(groups: list[NodeGroup], clusters: Sequence[str]) -> list[NodeGroup]:
    """The groups as the planner sees them: each in its cluster when there are several, none named for one.

    With several clusters every group names one of them. With one (or one unnamed
    snapshot), a group may name it, and nothing is qualified: the plan reads as it did.
    """
    named = [c for c in clusters if c]
    errors = []
    for index, group in enumerate(groups):
        if len(clusters) > 1 and not group.cluster:
            errors.append(
                f"nodeGroups[{index}].cluster: required with more than one cluster ({', '.join(named)})"
            )
        elif group.cluster and named and group.cluster not in named:
            errors.append(
                f"nodeGroups[{index}].cluster: {group.cluster} is none of the clusters given ({', '.join(named)})"
            )
    if not named and len({group.cluster for group in groups} - {""}) > 1:
        errors.append("nodeGroups: the groups name more than one cluster: give each cluster's snapshot")
    if errors:
        raise PlanInputError("groups", str(GroupsError(errors)))
    if len(clusters) > 1:
        return groups
    return [dataclasses.replace(group, cluster="") if group.cluster else group for group in groups]
