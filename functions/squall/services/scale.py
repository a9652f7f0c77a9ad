"""The scale check: observe -> plan (pure) -> act -> record.

One check at a time (a lease in DynamoDB), whatever invoked it: the schedule, a
scale-check request from intake, or a launch-unsuccessful event. Acting follows
the safety rules of docs/design.md ("Planning rules"): uncordon before launching,
never lower desired capacity to remove a node, re-check a node is still empty right
before it goes.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger

from squall.conventions import CORDONED_AT_ANNOTATION, EMPTY_SINCE_ANNOTATION, TERMINATION_REASON_ANNOTATION
from squall.core.costs import OverheadCauses, OverheadMemory
from squall.core.errors import MAX_ERROR_TEXT, NotFoundError, SquallError
from squall.core.jobs import JobStatus, Reason, reason_code, transition
from squall.core.telemetry import SERVICE, Metric
from squall.planner import (
    GroupHealth,
    Node,
    NodeGroup,
    Plan,
    Pod,
    Policy,
    ScalingFailure,
    plan,
)
from squall.planner.admission import AdmissionPlan, TeamShare
from squall.planner.inventory import Inventory, build_inventory
from squall.planner.kube import ParseCache, busy_stand_in, node_cache, parse_pods, pod_cache
from squall.planner.timers import next_timer
from squall.ports import (
    Clock,
    Cluster,
    CostMeter,
    Fleet,
    FleetGroup,
    GroupRef,
    JobStore,
    MetricsSink,
    ScaleState,
    SpendLedger,
)
from squall.services.admission import AdmissionMemory, Admitter, job_failed, note_or_report
from squall.services.decision_record import shrunk_to_fit
from squall.services.intake import Change, update_job
from squall.services.preemption import Preempter
from squall.services.prices import GroupPrices
from squall.services.quiet import Quiet
from squall.services.scale_plan import (
    StrandedGang,
    all_placed,
    fallbacks,
    plan_acts,
    scaling,
    stranded_gangs,
    with_live_state,
)

logger = Logger(service=SERVICE, child=True)

LEASE = "scale"
# A decision record's plan and actions together, as JSON: DynamoDB takes 400 KB an
# item, keys and attribute names included. A check that admits thousands of jobs or
# finds thousands of pods unschedulable records the first part of each list.
MAX_DECISION_BYTES = 300_000


@dataclass(frozen=True)
class ScaleConfig:
    groups: Sequence[NodeGroup]  # the configured templates; live state is observed
    policy: Policy
    # team -> its GPU quota and weight; a team not here has no quota and weight 1
    teams: Mapping[str, TeamShare] = field(default_factory=dict)
    dry_run: bool = False
    lease_duration: timedelta = timedelta(minutes=2)
    # what admission's objects are created with (the policy's jobTtlAfterFinished)
    ttl_after_finished: timedelta = timedelta(hours=1)
    # team -> its monthly budget in dollars; a team not here has none
    budgets: Mapping[str, float] = field(default_factory=dict)
    # what admitted jobs' pods get from SIGTERM to checkpoint (preemption's grace); None: the default
    termination_grace: timedelta | None = None

    @functools.cached_property
    def group_refs(self) -> list[tuple[GroupRef, NodeGroup]]:
        """Each configured group's Auto Scaling group, with its template."""
        return [(GroupRef(name=g.asg_name or g.name, region=g.region), g) for g in self.groups]


@dataclass
class ScaleResult:
    acted: bool
    plan: dict[str, Any] = field(default_factory=dict)
    done: dict[str, list[Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)


def cordon_patch(at: datetime, *, reason: str | None = None) -> dict[str, Any]:
    """Squall's cordon; with a reason, the drain names it on the jobs it moves (NodeLost:<reason>)."""
    annotations = {CORDONED_AT_ANNOTATION: at.isoformat()}
    if reason:
        annotations[TERMINATION_REASON_ANNOTATION] = reason
    return {"spec": {"unschedulable": True}, "metadata": {"annotations": annotations}}


UNCORDON_PATCH: dict[str, Any] = {
    "spec": {"unschedulable": False},
    "metadata": {"annotations": {CORDONED_AT_ANNOTATION: None, TERMINATION_REASON_ANNOTATION: None}},
}


@dataclass
class ParsedObjects:
    """What earlier checks in this process parsed; keep one per process (a warm Lambda reuses it)."""

    # cluster name -> its nodes and pods, parsed (qualified by the cluster when there are several)
    nodes: dict[str, ParseCache[Node]] = field(default_factory=dict)
    pods: dict[str, ParseCache[Pod]] = field(default_factory=dict)
    # whether the latest reads found a node (a pod) new, changed or gone, in any cluster
    nodes_changed: bool = True
    pods_changed: bool = True
    # the clusters the latest check could not reach
    unreachable: frozenset[str] = frozenset()
    admission: AdmissionMemory = field(default_factory=AdmissionMemory)
    overhead: OverheadMemory = field(default_factory=OverheadMemory)  # who last held each node
    # Set by a check that changed nothing: the fleet and health it saw, and the planner's
    # next timer (until when that stays the plan).
    quiet: Quiet | None = None
    # The last plan, when it decided nothing to do: made again only when what it was made
    # of changes or its timer is due.
    settled: SettledPlan | None = None
    # The pending pods and their GPUs in the pods last parsed (counted again when they change).
    pending: tuple[int, int] | None = None
    # The node groups the last check made of what the fleet showed: (region, name) ->
    # (template, the group observed, its failures, the group as planned).
    groups: dict[tuple[str, str], tuple[NodeGroup, FleetGroup, list[ScalingFailure], NodeGroup]] = field(
        default_factory=dict
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SettledPlan:
    """A plan with nothing to do, the very objects it was made of, and until when it stands.

    `plan` is a pure function of its inputs and the time, and `next_timer` says when
    the time starts to matter: given the same nodes, pods and demand (the same objects,
    which the parse caches and admission hand out again while nothing changed) and
    the same fleet and health, before that time, it would make this plan again. A long
    queue's checks, asked for by each submission while nothing can be bought, skip it.
    """

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    seen: tuple[object, ...]  # the fleet and group health (Scaler._fingerprint)
    until: datetime | None  # None: no timer; only a change to the inputs counts
    plan: Plan

    def holds(
        self, *, nodes: Sequence[Node], pods: Sequence[Pod], seen: tuple[object, ...], now: datetime
    ) -> bool:
        return (
            (self.until is None or now < self.until)
            and _same(nodes, self.nodes)
            and _same(pods, self.pods)
            and seen == self.seen
        )


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    """The very same objects in the same order (identity, never field by field)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


@dataclass
class Scaler:
    state: ScaleState
    # cluster name -> its API, in preference order (one entry for one cluster)
    clusters: Mapping[str, Cluster]
    fleet: Fleet
    clock: Clock
    metrics: MetricsSink
    config: ScaleConfig
    store: JobStore | None = None  # for the reason codes on jobs; None: plan and act only
    # what teams spent this month (budgets); None: no budget is enforced
    ledger: SpendLedger | None = None
    # counts the fleet's cost, check by check (what no job held is overhead); None: not counted
    cost_meter: CostMeter | None = None
    # takes room from running jobs far below a job that cannot be admitted (policy preemption); None: never
    preempter: Preempter | None = None
    # the groups' prices refreshed from EC2 (groups with priceFrom ec2); None: as configured
    prices: GroupPrices | None = None
    holder: str = field(default_factory=lambda: uuid.uuid4().hex)
    parsed: ParsedObjects = field(default_factory=ParsedObjects)
    # the clusters this check could not reach (their lists failed now)
    _unreachable: set[str] = field(default_factory=set, init=False)
    # each reachable cluster's Squall Jobs, as this check listed them with its nodes and pods
    _listed_jobs: dict[str, list[Any]] = field(default_factory=dict, init=False)

    def check(self, *, trigger: str, asked_for: Sequence[str] | None = None) -> ScaleResult:
        """One scale check. `asked_for`: the jobs a submission asked this check for.

        Such a request is about room for those jobs' pods: when each of them has its
        pods and none of them waits for room, the check ends after one pod list.
        Other waiting pods, scale-ins, timeouts and group health are the scheduled
        check's, at most a minute away. Without `asked_for` the check is whole.
        """
        now = self.clock.now()
        self._unreachable = set()
        if asked_for is not None:
            pods = self._pods()
            if all_placed(pods, asked_for):
                self._emit_pending(pods)  # other jobs' pending pods were seen by earlier checks
                logger.info("the jobs asked for have their pods placed", trigger=trigger, jobs=len(asked_for))
                return ScaleResult(acted=False, skipped=["no pod of the jobs asked for waits for room"])
        if not self.state.acquire_lease(
            name=LEASE, holder=self.holder, now=now, duration=self.config.lease_duration
        ):
            logger.info("another scale check holds the lease", trigger=trigger)
            return ScaleResult(acted=False, skipped=["lease held by another check"])
        try:
            return self._check(trigger=trigger, now=now)
        finally:
            self.parsed.unreachable = frozenset(self._unreachable)
            self.state.release_lease(name=LEASE, holder=self.holder)

    # ---- observe -----------------------------------------------------------

    @property
    def qualified(self) -> bool:
        """Whether the planner tells clusters apart (only when there are several)."""
        return len(self.clusters) > 1

    @property
    def admitter(self) -> Admitter:
        return Admitter(
            clusters=self.clusters,
            metrics=self.metrics,
            teams=self.config.teams,
            policy=self.config.policy,
            store=self.store,
            parsed=self.parsed.admission,
            ttl_after_finished=self.config.ttl_after_finished,
            unreachable=self._unreachable,
            budgets=self.config.budgets,
            ledger=self.ledger,
            termination_grace=self.config.termination_grace,
        )

    def cluster_of(self, group: NodeGroup) -> str:
        """The cluster that owns a group (the only one when the groups name none)."""
        return group.cluster or next(iter(self.clusters))

    def node_where(self, node: str) -> tuple[Cluster, str]:
        """The cluster of a node the planner named, and its name there."""
        if self.qualified and "/" in node:
            cluster, name = node.split("/", 1)
            return self.clusters[cluster], name
        return next(iter(self.clusters.values())), node

    def _listed(self, name: str, what: str, read: Any) -> list[Any] | None:
        """One cluster's list; None (and the cluster unreachable for this check) when it fails now."""
        if name in self._unreachable:
            return None
        try:
            return list(read())
        except SquallError as exc:
            # Timeouts and 5xx (retryable), and expired credentials or a revoked role (permanent
            # for the call, not for the cluster): either way it cannot be read now.
            self._unreachable.add(name)
            logger.warning("cluster unreachable", cluster=name, listing=what, error=str(exc)[:MAX_ERROR_TEXT])
            return None

    def _observe(
        self, now: datetime
    ) -> tuple[list[NodeGroup], dict[str, GroupHealth], list[Node], list[Pod]]:
        refs = [ref for ref, _ in self.config.group_refs]
        live = {(fg.region, fg.name): fg for fg in self.fleet.describe_groups(refs)}
        since = now - self.config.policy.failure_window
        failures: dict[tuple[str, str], list[ScalingFailure]] = {}
        for activity in self.fleet.recent_activities(refs, since=since):
            if activity.failed:
                failures.setdefault((activity.region, activity.group), []).append(
                    ScalingFailure(
                        time=activity.end_time or activity.start_time,
                        reason=activity.status_message or activity.description,
                    )
                )
        # A cluster is read whole (its nodes, pods and Jobs) or not at all: a half view would
        # see a busy node as free room. A node the planner cannot read is left out: its room
        # goes unused and it is never scaled down. One object never stops the check for everyone.
        read = self._read_clusters()
        nodes = self._nodes({name: lists[0] for name, lists in read.items()})
        pods = self._pods({name: lists[1] for name, lists in read.items()})
        self._listed_jobs = {name: lists[2] for name, lists in read.items()}
        groups = []
        # At their prices now: budgets, packing and the cost meter all see the same ones.
        templates = self.prices.refreshed(self.config.groups) if self.prices is not None else self.config.groups
        for (ref, _), template in zip(self.config.group_refs, templates, strict=True):
            if self.cluster_of(template) in self._unreachable:
                # Its cluster's nodes cannot be seen: nothing is planned for its groups now
                # (no scale-down of nodes it cannot see, no scale-up for gangs it cannot start).
                continue
            observed = live.get((ref.region, ref.name))
            if observed is None:
                logger.warning("node group not found", group=template.name, region=ref.region)
                continue
            failed = failures.get((ref.region, ref.name), [])
            made = self.parsed.groups.get((ref.region, ref.name))
            if (
                made is not None
                and (made[0] is template or made[0] == template)
                and made[1] == observed
                and made[2] == failed
                # An instance without a launch time counts from now: made anew each check.
                and all(i.launch_time is not None for i in observed.instances)
            ):
                groups.append(made[3])
                continue
            group = with_live_state(template, observed, failed, now)
            self.parsed.groups[(ref.region, ref.name)] = (template, observed, failed, group)
            groups.append(group)
        return groups, self.state.load_health(), nodes, pods

    def _read_clusters(self) -> dict[str, tuple[list[Any], list[Any], list[Any]]]:
        """Each reachable cluster's nodes, pods and Squall Jobs, listed; a cluster whose lists
        fail is unreachable for this check and nothing of it is kept."""
        read: dict[str, tuple[list[Any], list[Any], list[Any]]] = {}
        for name, cluster in self.clusters.items():
            nodes = self._listed(name, "nodes", cluster.list_nodes)
            pods = self._listed(name, "pods", cluster.list_pods) if nodes is not None else None
            jobs = self._listed(name, "jobs", cluster.list_jobs) if pods is not None else None
            if nodes is not None and pods is not None and jobs is not None:
                read[name] = (nodes, pods, jobs)
        return read

    def _nodes(self, listed: Mapping[str, list[Any]]) -> list[Node]:
        nodes: list[Node] = []
        changed = False
        for name, raw in listed.items():
            cache = self.parsed.nodes.get(name)
            if cache is None:
                cache = self.parsed.nodes[name] = node_cache(cluster=name if self.qualified else None)
            nodes += cache.parse_all(raw, unreadable=lambda item, why: None)
            changed = changed or cache.changed
            self._count_unreadable("node", cache.unreadable)
        self.parsed.nodes_changed = changed or self._reach_changed()
        return nodes

    def _fingerprint(
        self, groups: Sequence[NodeGroup], health: Mapping[str, GroupHealth]
    ) -> tuple[object, ...]:
        """The fleet and group health as this check saw them (the cluster's objects are the parse caches')."""
        fleet = tuple(
            (g.name, g.region, g.desired, g.min_size, g.max_size, g.instances, g.failures, g.price_per_hour)
            for g in groups
        )
        return (fleet, tuple(sorted(health.items())))

    def _inputs_changed(self, admitter: Admitter) -> bool:
        return self.parsed.nodes_changed or self.parsed.pods_changed or admitter.queue_changed

    def _reach_changed(self) -> bool:
        """Whether a cluster became unreachable, or reachable again, since the last check."""
        return frozenset(self._unreachable) != self.parsed.unreachable

    def _emit_pending(self, pods: Sequence[Pod]) -> None:
        counted = self.parsed.pending
        if counted is None:
            pending = [pod for pod in pods if pod.is_pending]
            counted = self.parsed.pending = (len(pending), sum(pod.requests.gpu for pod in pending))
        self.metrics.add(Metric.PENDING_PODS, counted[0])
        self.metrics.add(Metric.PENDING_GPUS, counted[1])

    def _pods(self, listed: Mapping[str, list[Any]] | None = None) -> list[Pod]:
        """The pods of `listed` (cluster -> its pod list); None: every reachable cluster's, listed now."""
        if listed is None:
            listed = {
                name: raw
                for name, cluster in self.clusters.items()
                if (raw := self._listed(name, "pods", cluster.list_pods)) is not None
            }
        # An unreadable pod bound to a node keeps that node busy; one not bound is left out.
        pods: list[Pod] = []
        changed = False
        for name, raw in listed.items():
            cache = self.parsed.pods.get(name)
            if cache is None:
                cache = self.parsed.pods[name] = pod_cache(cluster=name if self.qualified else None)
            pods += cache.parse_all(
                raw, unreadable=functools.partial(busy_stand_in, cluster=name if self.qualified else None)
            )
            changed = changed or cache.changed
            self._count_unreadable("pod", cache.unreadable)
        self.parsed.pods_changed = changed or self._reach_changed()
        if self.parsed.pods_changed:
            self.parsed.pending = None  # counted for other pods
        return pods

    def _emit_reach(self) -> None:
        """ClusterUnreachable per cluster: 1 while this check could not reach it, else 0."""
        if not self.qualified and not self._unreachable:
            return
        for name in self.clusters:
            self.metrics.add(
                Metric.CLUSTER_UNREACHABLE, int(name in self._unreachable), dimensions={"Cluster": name}
            )

    def _count_unreadable(self, what: str, problems: list[str]) -> None:
        if problems:
            logger.warning(
                "objects the planner cannot read", kind=what, count=len(problems), first=problems[0][:500]
            )
            self.metrics.add(Metric.UNREADABLE_OBJECTS, len(problems), dimensions={"Kind": what})

    # ---- plan and act --------------------------------------------------------

    def _check(self, *, trigger: str, now: datetime) -> ScaleResult:
        groups, health, nodes, pods = self._observe(now)
        admitter = self.admitter
        if not self.parsed.admission.ratios_loaded:
            admitter.load_ratios(self._latest_decision(now))
        jobs = admitter.read_queue(self._listed_jobs)
        # Whose overhead is whose (costs.py): the teams of the jobs read, the demand the plan places.
        teams, memory = (lambda: {j.job_id: j.team for j in jobs}), self.parsed.overhead
        causes = OverheadCauses(team_of=teams, policy=self.config.policy, memory=memory)
        seen = self._fingerprint(groups, health)
        quiet = self.parsed.quiet
        if quiet is not None and quiet.holds(seen, now) and not self._inputs_changed(admitter):
            self._accrue(nodes=nodes, pods=pods, groups=groups, now=now, causes=causes)
            self._emit_pending(pods)
            logger.info("nothing changed since the last check and no timer is due", trigger=trigger)
            return ScaleResult(acted=False, skipped=["nothing changed since the last check, no timer due"])
        self.parsed.quiet = None
        nodes = self._mark_empty(nodes, pods, now=now)
        # One inventory of the cluster for admission, the plan and the timers.
        inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=self.config.policy, now=now)
        admission = admitter.decide(
            jobs=jobs, nodes=nodes, pods=pods, groups=groups, now=now, inventory=inventory
        )
        causes = dataclasses.replace(causes, demand=admission.demand)
        self._accrue(nodes=nodes, pods=pods, groups=groups, now=now, causes=causes)
        decided = self._plan(
            nodes=nodes,
            pods=pods,
            admission=admission,
            groups=groups,
            health=health,
            seen=seen,
            now=now,
            inventory=inventory,
        )
        result = ScaleResult(acted=not self.config.dry_run, plan=decided.to_dict())
        result.plan["admission"] = admission.to_dict()
        if self.parsed.admission.run_ratios:
            result.plan["admission"]["runRatios"] = {
                team: [round(ratio, 4), count]
                for team, (ratio, count) in sorted(self.parsed.admission.run_ratios.items())
            }
        if self._unreachable:
            result.plan["unreachableClusters"] = sorted(self._unreachable)
        result.fallbacks = fallbacks(decided, groups=groups, health=health, now=now)
        if not self.config.dry_run:
            admitter.act(admission, now=now, outcome=result)
            self._act(decided, groups=groups, nodes=nodes, pods=pods, now=now, result=result)
            self._preempt(admission, nodes=nodes, pods=pods, groups=groups, now=now, result=result)
            admitter.note_queue(admission, now=now, outcome=result, scaling=scaling(decided))
        self._emit(decided, groups=groups, pods=pods, nodes=nodes, result=result, now=now)
        admitter.emit(admission)
        self._emit_reach()
        self.state.record_decision(
            at=now,
            trigger=trigger,
            dry_run=self.config.dry_run,
            plan=shrunk_to_fit(result.plan, MAX_DECISION_BYTES // 2),
            acted=shrunk_to_fit(result.done, MAX_DECISION_BYTES // 2),
        )
        settled = self.parsed.settled  # kept by _plan, with its timer, for a plan with nothing to do
        if (
            _idle(decided, admission, result)
            and not self.config.dry_run
            and settled
            and settled.plan is decided
        ):
            self.parsed.quiet = Quiet(
                seen=seen, until=_until_budgets_renew(settled.until, admission, now=now)
            )
        logger.info(
            "scale check",
            trigger=trigger,
            dry_run=self.config.dry_run,
            scale_ups=[f"{s.group}:{s.from_desired}->{s.to_desired}" for s in decided.scale_ups],
            scale_downs=[d.instance for d in decided.scale_downs],
            fallbacks=result.fallbacks,
            errors=result.errors,
        )
        return result

    def _accrue(
        self,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        groups: Sequence[NodeGroup],
        now: datetime,
        causes: OverheadCauses,
    ) -> None:
        """Count the fleet's cost since the last check (a check that ends early counts it too)."""
        if self.cost_meter is None or self.config.dry_run:
            return
        try:
            self.cost_meter.accrue(nodes=nodes, pods=pods, groups=groups, now=now, causes=causes)
        except SquallError as exc:  # the costs are counted at the next check, over the longer span
            logger.warning("the fleet's cost could not be counted", error=str(exc)[:MAX_ERROR_TEXT])

    def _latest_decision(self, now: datetime) -> dict[str, Any] | None:
        try:
            return self.state.latest_decision(now=now)
        except SquallError as exc:
            logger.warning("the latest decision could not be read", error=str(exc)[:MAX_ERROR_TEXT])
            return None

    def _preempt(
        self,
        admission: AdmissionPlan,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        groups: Sequence[NodeGroup],
        now: datetime,
        result: ScaleResult,
    ) -> None:
        if self.preempter is None:
            return
        try:
            self.preempter.run(
                admission,
                cache=self.parsed.admission.prepared,
                nodes=nodes,
                pods=pods,
                groups=groups,
                now=now,
                outcome=result,
            )
        except SquallError as exc:  # the jobs it would take room from run on; the next check tries again
            result.errors.append(f"preemption: {str(exc)[:MAX_ERROR_TEXT]}")
            logger.warning("preemption failed", error=str(exc)[:MAX_ERROR_TEXT])

    def _plan(
        self,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        admission: AdmissionPlan,
        groups: Sequence[NodeGroup],
        health: Mapping[str, GroupHealth],
        seen: tuple[object, ...],
        now: datetime,
        inventory: Inventory,
    ) -> Plan:
        """The plan for the pods and the queue's demand: the settled one while it holds (SettledPlan)."""
        pending = [*pods, *admission.demand]
        settled = self.parsed.settled
        if settled is not None and settled.holds(nodes=nodes, pods=pending, seen=seen, now=now):
            return settled.plan
        decided = plan(
            nodes=nodes,
            pods=pending,
            groups=groups,
            health=health,
            policy=self.config.policy,
            now=now,
            inventory=inventory.with_pending(admission.demand),
        )
        self.parsed.settled = None
        if not plan_acts(decided):
            until = next_timer(
                nodes=nodes,
                pods=pods,
                groups=groups,
                health=health,
                policy=self.config.policy,
                now=now,
                inventory=inventory,
            )
            self.parsed.settled = SettledPlan(
                nodes=tuple(nodes), pods=tuple(pending), seen=seen, until=until, plan=decided
            )
        return decided

    def _mark_empty(self, nodes: Sequence[Node], pods: Sequence[Pod], *, now: datetime) -> list[Node]:
        """Stamp nodes with when Squall first found them empty; clear it once they are busy.

        Finished pods are deleted within a minute of their job, so a node's idle time
        cannot rest on their finishedAt alone: without the stamp a node older than the
        idle threshold would go the moment it empties.
        """
        busy = {p.node_name for p in pods if p.node_name and p.is_active and p.is_workload}
        marked = []
        for node in nodes:
            if node.name in busy and node.empty_since is not None:
                node = dataclasses.replace(node, empty_since=None)
                self._patch_quietly(node.name, {"metadata": {"annotations": {EMPTY_SINCE_ANNOTATION: None}}})
            elif node.name not in busy and node.empty_since is None and node.ready:
                node = dataclasses.replace(node, empty_since=now)
                self._patch_quietly(
                    node.name, {"metadata": {"annotations": {EMPTY_SINCE_ANNOTATION: now.isoformat()}}}
                )
            marked.append(node)
        return marked

    def _patch_quietly(self, node: str, patch: dict[str, Any]) -> None:
        if self.config.dry_run:
            return
        try:
            cluster, name = self.node_where(node)
            cluster.patch_node(name, patch)
        except SquallError as exc:
            # Only bookkeeping: the next check stamps it again.
            logger.info("could not stamp node", node=node, error=str(exc))

    def _act(
        self,
        decided: Plan,
        *,
        groups: Sequence[NodeGroup],
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        now: datetime,
        result: ScaleResult,
    ) -> None:
        refs = {g.name: GroupRef(name=g.asg_name or g.name, region=g.region) for g in groups}
        done = result.done
        for change in decided.backoffs:
            self._try(
                result,
                f"save health {change.group}",
                lambda c=change: self.state.save_health(c.group, c.health),
            )
        for uncordon in decided.uncordons:
            if self._try(
                result,
                f"uncordon {uncordon.node}",
                lambda u=uncordon: self._patch_node(u.node, UNCORDON_PATCH),
            ):
                done.setdefault("uncordoned", []).append(uncordon.node)
        for give_back in decided.give_backs:
            ref, to = refs[give_back.group], give_back.to_desired
            self._resize(result, ref=ref, group=give_back.group, to=to, what="give back", key="givenBack")
        for scale_up in decided.scale_ups:
            ref, to = refs[scale_up.group], scale_up.to_desired
            self._resize(result, ref=ref, group=scale_up.group, to=to, what="scale up", key="scaledUp")
        for scale_down in decided.scale_downs:
            self._scale_down(
                scale_down.node, scale_down.instance, refs[scale_down.group], now=now, result=result
            )
        for gang in stranded_gangs(decided, pods=pods, nodes=nodes):
            try:
                self._release(gang, now=now, result=result)
            except Exception as exc:
                # One gang's trouble never costs the others (or the record of this check).
                self._job_failed(result, gang.job_id, f"release {gang.job_id}", exc)
                reason = reason_code(Reason.SCALE_CHECK_ERROR, type(exc).__name__)
                self._note(gang.job_id, reason, f"could not release the gang: {exc}", now=now, result=result)

    def _patch_node(self, node: str, patch: dict[str, Any]) -> None:
        cluster, name = self.node_where(node)
        cluster.patch_node(name, patch)

    def _release(self, gang: StrandedGang, *, now: datetime, result: ScaleResult) -> None:
        """Let a gang start over: part of it is bound in a region that cannot take the rest.

        Its Kubernetes objects go, then its record goes back in the queue (no cluster, no
        region), where admission places the whole gang afresh. Only gangs that are not
        running are released: some of their pods wait.
        """
        cluster, region = self.node_where(gang.node)[0], gang.region
        if not self._try(
            result,
            f"release {gang.job_id}",
            lambda: cluster.delete_job_objects(namespace=gang.namespace, job_id=gang.job_id),
        ):
            return
        result.done.setdefault("released", []).append({"job": gang.job_id, "region": region})
        reason = reason_code(Reason.GANG_RELEASED, region)
        if self.store is None:
            return
        _update_if_there(
            self.store,
            gang.job_id,
            lambda current: (
                None
                if current.status is not JobStatus.QUEUED
                else transition(
                    current,
                    to=JobStatus.QUEUED,
                    reason=reason,
                    at=now,
                    message=gang.why,
                    cluster=None,
                    region=None,
                    objects_created=False,
                )
            ),
        )

    def _note(self, job_id: str, reason: str, message: str, *, now: datetime, result: ScaleResult) -> None:
        """A reason code on the job's history; the scale check's actions stand without it."""
        if self.store is not None:
            note_or_report(self.store, job_id, reason, message, now=now, outcome=result, metrics=self.metrics)

    def _job_failed(self, result: ScaleResult, job_id: str, what: str, exc: Exception) -> None:
        job_failed(result, job_id=job_id, what=what, exc=exc, metrics=self.metrics)

    def _scale_down(
        self, node: str | None, instance: str, ref: GroupRef, *, now: datetime, result: ScaleResult
    ) -> None:
        if node is not None:
            try:
                self._patch_node(node, cordon_patch(now, reason="scale-in"))
            except NotFoundError:
                node = None  # it went away since we looked; the instance may still be there
            except SquallError as exc:
                result.errors.append(f"cordon {node}: {exc}")
                return
        if node is not None and _has_workload(self._pods_on(node)):
            # A pod was bound between observing and cordoning: this node is busy now.
            self._try(result, f"uncordon {node}", lambda: self._patch_node(node, UNCORDON_PATCH))
            result.skipped.append(f"{node}: became busy before termination")
            return
        try:
            self.fleet.terminate_instance(region=ref.region, instance_id=instance, decrement=True)
        except NotFoundError:
            result.skipped.append(f"{instance}: already gone")
            return
        except SquallError as exc:
            result.errors.append(f"terminate {instance}: {exc}")
            return
        result.done.setdefault("terminated", []).append(
            {"instance": instance, "node": node, "group": ref.name}
        )

    def _pods_on(self, node: str) -> list[dict[str, Any]]:
        cluster, name = self.node_where(node)
        return cluster.list_pods(node_name=name)

    def _resize(
        self, result: ScaleResult, *, ref: GroupRef, group: str, to: int, what: str, key: str
    ) -> None:
        """Set a group's desired capacity; what was done is recorded under `key`."""
        if self._try(result, f"{what} {group}", lambda: self.fleet.set_desired_capacity(ref=ref, desired=to)):
            result.done.setdefault(key, []).append({"group": group, "to": to})

    def _try(self, result: ScaleResult, what: str, action: Any) -> bool:
        """Run one action; a failure is recorded and the others still run."""
        try:
            action()
        except SquallError as exc:
            result.errors.append(f"{what}: {exc}")
            logger.warning("scale action failed", action=what, error=str(exc))
            return False
        return True

    # ---- metrics -------------------------------------------------------------

    def _emit(
        self,
        decided: Plan,
        *,
        groups: Sequence[NodeGroup],
        pods: Sequence[Any],
        nodes: Sequence[Any],
        result: ScaleResult,
        now: datetime,
    ) -> None:
        pending = [p for p in pods if p.is_pending]
        self.metrics.add(Metric.PENDING_PODS, len(pending))
        self.metrics.add(Metric.PENDING_GPUS, sum(p.requests.gpu for p in pending))
        ready_ids = {n.instance_id for n in nodes if n.ready and n.instance_id}
        in_flight = 0
        for group in groups:
            in_service = sum(1 for i in group.instances if i.instance_id in ready_ids)
            in_flight += sum(1 for i in group.instances if i.instance_id not in ready_ids)
            dims = {"Group": group.name, "Region": group.region}
            desired = next((s.to_desired for s in decided.scale_ups if s.group == group.name), group.desired)
            self.metrics.add(Metric.DESIRED_CAPACITY, desired, dimensions=dims)
            self.metrics.add(Metric.IN_SERVICE_CAPACITY, in_service, dimensions=dims)
        self.metrics.add(Metric.IN_FLIGHT_NODES, in_flight)
        self.metrics.add(Metric.SCALE_UPS, sum(s.to_desired - s.from_desired for s in decided.scale_ups))
        self.metrics.add(Metric.SCALE_DOWNS, len(result.done.get("terminated", [])))
        self.metrics.add(Metric.FALLBACKS, len(result.fallbacks))
        self.metrics.add(Metric.UNSCHEDULABLE_PODS, len(decided.unschedulable))


def _idle(decided: Plan, admission: AdmissionPlan, result: ScaleResult) -> bool:
    """Nothing decided, nothing done, nothing failed: the next check would decide the same."""
    return not (
        plan_acts(decided) or admission.admitted or admission.incomplete or result.done or result.errors
    )


def _until_budgets_renew(
    until: datetime | None, admission: AdmissionPlan, *, now: datetime
) -> datetime | None:
    """A quiet check's end, no later than the next month (UTC) while a budget holds a job: the new
    month's spend starts at nothing, and the held job must be looked at again then."""
    if not any(admission.held_by_budget.values()):
        return until
    month = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    renew = (month + timedelta(days=32)).replace(day=1)
    return renew if until is None else min(until, renew)


def _has_workload(pods: Sequence[dict[str, Any]]) -> bool:
    return any(pod.is_workload and pod.is_active for pod in parse_pods(pods))


def _update_if_there(store: JobStore, job_id: str, change: Change) -> None:
    """Apply `change` to a job's latest record, if it has one."""
    job = store.get(job_id)
    if job is not None:
        update_job(store, job, change)
