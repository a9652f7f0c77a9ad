"""What jobs and the fleet cost, in dollars. Pure: no I/O, time is passed in.

A running job's pods hold a share of their nodes: on a GPU node its GPUs' share of the
node's GPUs, elsewhere the largest of its CPU and memory shares. That share of the
node's group price per hour is the pod's cost rate; of a spot group's saving against
its on-demand price, its spot savings rate. A job's rate is its pods' sum, recorded
on its record when it starts; its cost is that rate times its run time, plus what its
earlier runs cost (kept across a requeue). What no job held of the fleet between two
scale checks (booting, idle and draining nodes, the unheld part of partly used ones)
is its group's overhead: job costs and overhead add up to the fleet's cost. Part of it is
put down to the team that caused it (`attribute_overhead` says how); the rest is
unattributed.

The ledger keeps these per team and UTC calendar month (the records below); budgets
read a team's month to date.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from squall.conventions import NODE_GROUP_LABEL
from squall.core.jobs import Job, JobEvent, JobStatus
from squall.planner import Node, NodeGroup, Pod, Resources
from squall.planner.demand import PodShape, shape_of
from squall.planner.fit import blocking_taints
from squall.planner.model import Policy

HOUR_SECONDS = 3600.0
# Instances in these Auto Scaling states are gone or going: no longer billed as booting.
_GONE_PREFIXES = ("Terminat", "Detach", "Standby", "EnteringStandby", "Warmed:")
# A group's overhead is put down to at most this many teams (those that caused the most);
# the rest is unattributed, so an accrual and the ledger's rows stay bounded however many
# teams' jobs wait.
MAX_TEAMS_PER_GROUP = 20
# In a group's buyers: the waiting pods of teams beyond MAX_TEAMS_PER_GROUP, or of jobs no
# team is known for (their share of the booting overhead is unattributed).
OTHERS = ""


class UnpricedError(ValueError):
    """A job's pods cannot be priced: the message says why (the cost is then unknown)."""


@dataclass(frozen=True, slots=True)
class JobRate:
    """What a running job costs per hour, and what spot capacity saves it per hour."""

    dollars_per_hour: float
    savings_per_hour: float


@dataclass(frozen=True, slots=True)
class TeamMonth:
    """A team's finished jobs in one UTC calendar month, as the ledger sums them."""

    team: str
    month: str  # "YYYY-MM"
    jobs: int = 0
    gpu_hours: float = 0.0
    dollars: float = 0.0
    spot_savings: float = 0.0


@dataclass(frozen=True, slots=True)
class GroupOverhead:
    """What no job held of one node group's instances in one month: the part one team caused
    (`team`), or the unattributed part (`team` None)."""

    group: str
    month: str
    dollars: float = 0.0
    team: str | None = None


@dataclass(frozen=True, slots=True)
class JobCharge:
    """A finished job's cost as the ledger adds it, once, to its team's month."""

    job_id: str
    team: str
    month: str
    gpu_hours: float
    dollars: float
    spot_savings: float


@dataclass(frozen=True, slots=True)
class FleetAccrual:
    """Where the overhead meter left off: when, and each group's overhead rate then ($/h).

    `caused`: group -> team -> the part of the group's rate that team caused (the rest is
    unattributed). `buyers`: group -> team -> the node shares its waiting pods asked of the
    group's booting instances then (OTHERS: of no team told apart), for a check that finds
    nothing changed and so plans nothing new (attribute_overhead).
    """

    at: datetime
    rates: Mapping[str, float]
    caused: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    buyers: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Holder:
    """The job that held the most of a node when it was last busy, its team ("": not known),
    and since when the node has been empty (None: it is busy)."""

    job_id: str
    team: str
    empty_since: datetime | None = None


@dataclass(slots=True)
class OverheadMemory:
    """What earlier checks of this process saw: node -> its Holder. Kept one per process (a
    warm function keeps it); a cold one knows no node's last holder until it sees the node
    busy (or a pod that ended on it). Bounded by the nodes listed."""

    holders: dict[str, Holder] = field(default_factory=dict)
    # The pods and nodes the busy nodes' holders were last read from, and those holders: a
    # check that lists the very same objects again (most do) reads them from here.
    pods: Sequence[Pod] = ()
    nodes: Sequence[Node] = ()
    busy: dict[str, Holder] = field(default_factory=dict)
    # The last accrual made of those pods and nodes and of `groups`, and until when it holds
    # (the first booting instance or node to pass the provision timeout, kept-warm node to
    # pass the idle threshold): a check that plans nothing new before then repeats it.
    groups: Sequence[NodeGroup] = ()
    accrual: FleetAccrual | None = None
    holds_until: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OverheadCauses:
    """What a scale check knows of who caused the overhead (attribute_overhead).

    `team_of`: job id -> team, of the jobs the check read (queued, running and finished
    ones); called at most once, and only when a team is wanted. `demand`: the waiting pods
    the check's plan places beyond the pending pods listed (admission's demand: queued jobs'
    pods); None: the plan is the last check's (nothing changed), so are the buyers.
    `policy`: its provision timeout says how long an instance counts as booting, its idle
    threshold how long an empty node is kept warm for the job that last ran on it.
    `memory`: the process's OverheadMemory (None: no node's last holder is known).
    """

    team_of: Callable[[], Mapping[str, str]]
    demand: Sequence[Pod] | None = None
    policy: Policy = field(default_factory=Policy)
    memory: OverheadMemory | None = None


# ---- months ----------------------------------------------------------------


def month_key(at: datetime) -> str:
    """The UTC calendar month of `at`: "YYYY-MM"."""
    utc = at.astimezone(UTC)
    return f"{utc.year:04d}-{utc.month:02d}"  # strftime's %Y does not pad years before 1000


def month_start(at: datetime) -> datetime:
    """Midnight UTC on the first day of `at`'s month."""
    utc = at.astimezone(UTC)
    return datetime(utc.year, utc.month, 1, tzinfo=UTC)


def next_month_start(at: datetime) -> datetime:
    start = month_start(at)
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def split_by_month(start: datetime, end: datetime) -> list[tuple[str, float]]:
    """The interval [start, end) cut at month boundaries: (month key, seconds) each."""
    parts: list[tuple[str, float]] = []
    at = start
    while at < end:
        cut = min(end, next_month_start(at))
        parts.append((month_key(at), (cut - at).total_seconds()))
        at = cut
    return parts


# ---- nodes and their groups ------------------------------------------------


class NodeGroups:
    """The groups, indexed to tell each node's: by instance id, the node-group label, then labels.

    Built once per pricing (a check prices thousands of pods on thousands of nodes).
    """

    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self.groups = tuple(groups)
        self._by_instance = {i.instance_id: g for g in self.groups for i in g.instances}
        self._by_name = {g.name: g for g in self.groups}
        self._templates = [(g, g.template_labels()) for g in self.groups]

    def of(self, node: Node) -> NodeGroup | None:
        """The group a node belongs to, the way the planner joins them, then by its labels.

        By instance id when the groups carry their instances (the scale check's do); else
        by the node-group label Squall's simulated nodes carry; else the group whose
        template labels (region, instance type, declared labels, cluster) the node carries
        all of. Several such groups name one only when they agree on the price (else None:
        which one bills the node cannot be told).
        """
        if node.instance_id and (owner := self._by_instance.get(node.instance_id)) is not None:
            return owner
        labels = node.labels
        named = self._by_name.get(labels.get(NODE_GROUP_LABEL, ""))
        if named is not None and all(
            labels.get(key) in (None, value) for key, value in named.template_labels().items()
        ):
            return named
        matching = [
            g for g, template in self._templates if all(labels.get(k) == v for k, v in template.items())
        ]
        prices = {(g.price_per_hour, g.spot, g.on_demand_price_per_hour) for g in matching}
        return matching[0] if len(prices) == 1 else None


def pod_share(pod: Pod, node: Node, group: NodeGroup | None = None) -> float:
    """The share of `node` that `pod` holds, 0..1.

    A GPU node's share is by GPUs (a GPU is what such a node is bought for); its GPUs are
    the group's while the device plugin has not advertised them yet. Elsewhere the
    largest of the pod's CPU and memory shares.
    """
    gpus = node.allocatable.gpu or (group.allocatable.gpu if group is not None else 0)
    if gpus > 0:
        return min(1.0, pod.requests.gpu / gpus)
    shares = [
        pod.requests.cpu / node.allocatable.cpu if node.allocatable.cpu else 0.0,
        pod.requests.memory / node.allocatable.memory if node.allocatable.memory else 0.0,
    ]
    return min(1.0, max(shares))


def savings_per_hour(group: NodeGroup) -> float:
    """What one of the group's instances saves per hour against its on-demand price."""
    if not group.spot or group.price_per_hour is None or group.on_demand_price_per_hour is None:
        return 0.0
    return max(0.0, group.on_demand_price_per_hour - group.price_per_hour)


def job_rate(*, pods: Iterable[Pod], nodes: Sequence[Node], groups: Sequence[NodeGroup]) -> JobRate:
    """A job's cost and spot savings per hour, from its pods bound to nodes.

    UnpricedError when it has no bound pod, or one is on a node that is not listed,
    whose group cannot be told, or whose group has no price.
    """
    by_name = {node.name: node for node in nodes}
    index = NodeGroups(groups)
    dollars = savings = 0.0
    bound = 0
    for pod in pods:
        if pod.node_name is None:
            continue
        bound += 1
        node = by_name.get(pod.node_name)
        if node is None:
            raise UnpricedError(f"pod {pod.key} is on node {pod.node_name}, which is not listed")
        group = index.of(node)
        if group is None:
            raise UnpricedError(f"node {node.name} matches no configured node group with one price")
        if group.price_per_hour is None:
            raise UnpricedError(f"node group {group.name} has no price per hour")
        share = pod_share(pod, node, group)
        dollars += share * group.price_per_hour
        savings += share * savings_per_hour(group)
    if not bound:
        raise UnpricedError("none of its pods is on a node")
    return JobRate(dollars_per_hour=dollars, savings_per_hour=savings)


# ---- the fleet's overhead ----------------------------------------------------


def overhead_rates(
    *, nodes: Sequence[Node], pods: Iterable[Pod], groups: Sequence[NodeGroup]
) -> dict[str, float]:
    """Per group, the dollars per hour that no job holds of its instances now.

    A node's unheld part is 1 minus the shares its jobs' active pods hold (DaemonSet and
    other pods that are no job's hold nothing: they are the node's own overhead). An
    instance with no node yet (booting) counts whole. Groups without a price, and nodes
    of no group, are left out: nothing can say what they cost.
    """
    return _Unheld.of(nodes=nodes, pods=pods, groups=groups).rates


def attribute_overhead(
    *,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    groups: Sequence[NodeGroup],
    now: datetime,
    causes: OverheadCauses | None,
    last: FleetAccrual | None = None,
) -> FleetAccrual:
    """The accrual at `now`: each group's overhead rate (overhead_rates), and who caused it.

    - An empty node (Ready, schedulable, no job's pod on it) is kept warm for the job that
      held the most of it last (a pod of it that ended there, else the process's memory of
      its holders): its cost goes to that job's team until the idle threshold has passed
      since it became empty (since that pod ended, or Squall found it empty).
    - Capacity waiting for pods (an instance launched less than the provision timeout ago
      whose node is not up yet: none, not Ready, or its GPUs not advertised; and an empty
      node kept warm for no one) is there for the pods that wait: its cost goes to their
      teams in proportion to the share of one of the group's nodes that each team's waiting
      pods that fit the group ask for (by GPUs on a GPU group, else the larger of CPU and
      memory). The waiting pods are the plan's: job pods pending in the cluster and
      `causes.demand`; a pod whose team is not known keeps its part unattributed. A check
      that plans nothing new (`causes.demand` None) keeps the last accrual's buyers.
    - The rest (the unheld part of partly used nodes, draining and cordoned nodes,
      instances past the provision timeout, capacity no waiting pod fits) is unattributed.
      So is everything when `causes` is None.

    At most MAX_TEAMS_PER_GROUP teams per group, those that caused the most. Bounded:
    one pass over nodes and pods, then over pod shapes times groups with waiting capacity.
    """
    memory = causes.memory if causes is not None else None
    seen = memory is not None and _same(memory.pods, pods) and _same(memory.nodes, nodes)
    if seen and memory is not None and causes is not None and causes.demand is None:
        kept = memory.accrual
        if (
            kept is not None
            and last is not None
            and last.at == kept.at  # what this process counted last is what the ledger holds
            and _same(memory.groups, groups)
            and (memory.holds_until is None or now < memory.holds_until)
        ):
            memory.accrual = FleetAccrual(at=now, rates=kept.rates, caused=kept.caused, buyers=kept.buyers)
            return memory.accrual
    unheld = _Unheld.of(
        nodes=nodes, pods=pods, groups=groups, now=now, causes=causes, holders=memory is not None and not seen
    )
    if causes is None:
        return FleetAccrual(at=now, rates=unheld.rates)
    teams = _Teams(causes.team_of)
    warm = _keep_warm(unheld, now=now, causes=causes, teams=teams, seen=seen)
    if not unheld.arriving:
        buyers: dict[str, dict[str, float]] = {}
    elif causes.demand is None:
        before = last.buyers if last is not None else {}
        buyers = {name: dict(before[name]) for name in unheld.arriving if name in before}
    else:
        waiting = [p for p in pods if p.job_id is not None and p.is_pending]
        waiting.extend(causes.demand)
        buyers = _buyers(waiting, [g for g in groups if g.name in unheld.arriving], teams)
    caused: dict[str, dict[str, float]] = {}
    for name, dollars in unheld.arriving.items():
        weights = buyers.get(name, {})
        total = sum(weights.values())
        if total <= 0:
            continue
        mine = caused.setdefault(name, {})
        for team, weight in weights.items():
            if team != OTHERS and weight > 0:
                mine[team] = mine.get(team, 0.0) + dollars * weight / total
    for (name, team), dollars in warm.items():
        mine = caused.setdefault(name, {})
        mine[team] = mine.get(team, 0.0) + dollars
    accrual = FleetAccrual(
        at=now,
        rates=unheld.rates,
        caused={name: _largest(by_team) for name, by_team in caused.items() if by_team},
        buyers=buyers,
    )
    if memory is not None:
        memory.pods, memory.nodes, memory.groups = pods, nodes, groups
        memory.accrual, memory.holds_until = accrual, unheld.holds_until
    return accrual


@dataclass(slots=True)
class _Unheld:
    """One pass over the fleet: each group's unheld rate, and (with causes) the capacity that
    waits for pods (group -> $/h), the empty nodes, and who holds or last held each node."""

    rates: dict[str, float] = field(default_factory=dict)
    arriving: dict[str, float] = field(default_factory=dict)
    # empty node -> its group, $/h, and when Squall found it empty (its squall.io/empty-since)
    empty: dict[str, tuple[str, float, datetime | None]] = field(default_factory=dict)
    # busy node -> the job whose pod holds the most of it (with `holders` only)
    holders: dict[str, str] = field(default_factory=dict)
    ended: dict[str, tuple[datetime, str]] = field(default_factory=dict)  # node -> last job pod to end
    # when the first of what counts by the time (booting, kept warm) stops counting so
    holds_until: datetime | None = None

    def until(self, at: datetime) -> None:
        if self.holds_until is None or at < self.holds_until:
            self.holds_until = at

    @classmethod
    def of(
        cls,
        *,
        nodes: Sequence[Node],
        pods: Iterable[Pod],
        groups: Sequence[NodeGroup],
        now: datetime | None = None,
        causes: OverheadCauses | None = None,
        holders: bool = False,
    ) -> _Unheld:
        found = cls()
        index = NodeGroups(groups)
        owners = {node.name: index.of(node) for node in nodes}
        by_name = {node.name: node for node in nodes}
        held: dict[str, float] = {}
        most: dict[str, float] = {}  # node -> the largest share one pod holds (of found.holders' job)
        for pod in pods:
            job_id = pod.job_id
            if job_id is None or pod.node_name not in by_name:
                continue
            node = by_name[pod.node_name]
            if pod.is_active:
                share = pod_share(pod, node, owners[node.name])
                held[node.name] = held.get(node.name, 0.0) + share
                if holders and share > most.get(node.name, -1.0):
                    most[node.name], found.holders[node.name] = share, job_id
            elif causes is not None and pod.finished_at is not None:
                last = found.ended.get(node.name)
                if last is None or pod.finished_at > last[0]:
                    found.ended[node.name] = (pod.finished_at, job_id)
        launched: dict[str, datetime] | None = None  # instance id -> launch time, made when wanted
        seen_instances: set[str] = set()
        for node in nodes:
            group = owners[node.name]
            if group is None or group.price_per_hour is None:
                continue
            if node.instance_id:
                seen_instances.add(node.instance_id)
            dollars = max(0.0, 1.0 - held.get(node.name, 0.0)) * group.price_per_hour
            found.rates[group.name] = found.rates.get(group.name, 0.0) + dollars
            if causes is None or now is None or dollars <= 0:
                continue
            if not node.ready or (group.allocatable.gpu > 0 and node.allocatable.gpu == 0):
                if launched is None:
                    launched = {i.instance_id: i.launch_time for g in groups for i in g.instances}
                since = launched.get(node.instance_id or "") or node.created_at
                if since is not None and now - since < causes.policy.provision_timeout:
                    found.arriving[group.name] = found.arriving.get(group.name, 0.0) + dollars
                    found.until(since + causes.policy.provision_timeout)
            elif node.name not in held and not node.unschedulable:
                found.empty[node.name] = (group.name, dollars, node.empty_since)
        for group in groups:
            if group.price_per_hour is None:
                continue
            booting = [
                i
                for i in group.instances
                if i.instance_id not in seen_instances and not i.lifecycle_state.startswith(_GONE_PREFIXES)
            ]
            if booting:
                found.rates[group.name] = (
                    found.rates.get(group.name, 0.0) + len(booting) * group.price_per_hour
                )
            if not booting or causes is None or now is None:
                continue
            timeout = causes.policy.provision_timeout
            young = [i.launch_time + timeout for i in booting if now - i.launch_time < timeout]
            if young:
                found.until(min(young))
                found.arriving[group.name] = (
                    found.arriving.get(group.name, 0.0) + len(young) * group.price_per_hour
                )
        return found


def _keep_warm(
    unheld: _Unheld, *, now: datetime, causes: OverheadCauses, teams: _Teams, seen: bool
) -> dict[tuple[str, str], float]:
    """(group, team) -> $/h of empty nodes kept warm for that team; the other empty nodes join
    the capacity waiting for pods. Brings the memory of holders up to date (`seen`: the
    pods and nodes are the very ones it last read the busy nodes' holders from)."""
    memory = causes.memory
    remembered = memory.holders if memory is not None else {}
    if seen and memory is not None:
        busy = memory.busy
    else:
        busy = {}
        for name, job_id in unheld.holders.items():
            known = remembered.get(name)
            same = known is not None and known.job_id == job_id and known.empty_since is None
            busy[name] = known if same and known is not None else Holder(job_id, teams.of(job_id) or "")
    holders = dict(busy)
    warm: dict[tuple[str, str], float] = {}
    threshold = causes.policy.idle_threshold
    for name, (group, dollars, stamped) in unheld.empty.items():
        ended = unheld.ended.get(name)
        last = Holder(ended[1], teams.of(ended[1]) or "", ended[0]) if ended else remembered.get(name)
        if last is not None:
            since = last.empty_since or stamped or now
            if now - since < threshold:
                unheld.until(since + threshold)
                holders[name] = last if last.empty_since == since else Holder(last.job_id, last.team, since)
                if last.team:
                    warm[group, last.team] = warm.get((group, last.team), 0.0) + dollars
                continue  # kept warm (for a team not known: unattributed)
        unheld.arriving[group] = unheld.arriving.get(group, 0.0) + dollars
    if memory is not None:
        memory.holders, memory.busy = holders, busy  # of listed nodes only: others are forgotten
    return warm


class _Teams:
    """Job id -> team, asked of the check once, and only when a team is wanted."""

    def __init__(self, read: Callable[[], Mapping[str, str]]) -> None:
        self._read = read
        self._teams: Mapping[str, str] | None = None

    def of(self, job_id: str) -> str | None:
        if self._teams is None:
            self._teams = self._read()
        return self._teams.get(job_id) or None


def _same(these: Sequence[object], those: Sequence[object]) -> bool:
    """The very same objects in the same order (at C speed)."""
    return len(these) == len(those) and all(map(operator.is_, these, those))


def _buyers(
    waiting: Iterable[Pod], groups: Sequence[NodeGroup], teams: _Teams
) -> dict[str, dict[str, float]]:
    """Per group: team -> the node shares its waiting pods that fit the group ask of it."""
    interned: dict[tuple[object, ...], PodShape] = {}
    counts: dict[tuple[PodShape, str], int] = {}
    for pod in waiting:
        key = (shape_of(pod, interned), teams.of(pod.job_id or "") or OTHERS)
        counts[key] = counts.get(key, 0) + 1
    buyers: dict[str, dict[str, float]] = {}
    for group in groups:
        labels = group.template_labels()
        taints = blocking_taints(group.taints, ignore_transient=True)
        capacity = group.allocatable
        shares: dict[PodShape, float | None] = {}
        weights: dict[str, float] = {}
        for (shape, team), count in counts.items():
            if shape not in shares:
                shares[shape] = (
                    _template_share(shape, capacity)
                    if shape.placement_mismatch(labels, taints) is None
                    else None
                )
            share = shares[shape]
            if share:
                weights[team] = weights.get(team, 0.0) + share * count
        if weights:
            buyers[group.name] = _largest(weights, others=True)
    return buyers


def _template_share(shape: PodShape, capacity: Resources) -> float | None:
    """The share of one of the group's new nodes a pod of this shape asks for; None: it does not fit one."""
    cpu, memory, gpu, _ = shape.request
    if cpu > capacity.cpu or memory > capacity.memory or gpu > capacity.gpu:
        return None
    if capacity.gpu > 0:
        return gpu / capacity.gpu
    return max(
        cpu / capacity.cpu if capacity.cpu else 0.0, memory / capacity.memory if capacity.memory else 0.0
    )


def _largest(by_team: Mapping[str, float], *, others: bool = False) -> dict[str, float]:
    """The MAX_TEAMS_PER_GROUP teams with the most; with `others`, the rest summed under OTHERS."""
    ranked = sorted(((t, v) for t, v in by_team.items() if t != OTHERS), key=lambda tv: (-tv[1], tv[0]))
    kept = dict(ranked[:MAX_TEAMS_PER_GROUP])
    if others:
        rest = by_team.get(OTHERS, 0.0) + sum(v for _, v in ranked[MAX_TEAMS_PER_GROUP:])
        if rest > 0:
            kept[OTHERS] = rest
    return kept


def overhead_between(last: FleetAccrual, now: datetime) -> list[GroupOverhead]:
    """The overhead from `last.at` to `now` at the rates of `last`, split by month, each
    group's into the part each team caused and the unattributed rest."""
    if now <= last.at:
        return []
    found: list[GroupOverhead] = []
    for month, seconds in split_by_month(last.at, now):
        hours = seconds / HOUR_SECONDS
        for group, rate in sorted(last.rates.items()):
            if rate <= 0:
                continue
            attributed = 0.0
            for team, caused in sorted(last.caused.get(group, {}).items()):
                caused = min(caused, rate - attributed)
                if caused > 0:
                    found.append(GroupOverhead(group=group, month=month, dollars=caused * hours, team=team))
                    attributed += caused
            rest = rate - attributed
            if rest > rate * 1e-9:
                found.append(GroupOverhead(group=group, month=month, dollars=rest * hours))
    return found


# ---- a job's cost ------------------------------------------------------------


def run_seconds(start: datetime | None, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds()) if start is not None else 0.0


def started(job: Job, *, rate: JobRate | None) -> dict[str, Any]:
    """The record's cost fields as a run starts: its rate (None: unknown), what earlier runs cost."""
    return {
        "cost_rate": rate.dollars_per_hour if rate is not None else None,
        "cost": job.cost if job.cost is not None else (0.0 if rate is not None else None),
        "spot_savings": job.spot_savings
        if job.spot_savings is not None
        else (0.0 if rate is not None else None),
    }


def savings_ratio(rate: JobRate | None) -> float | None:
    """Spot savings per dollar of a rate (None: no rate, or a free one)."""
    if rate is None or rate.dollars_per_hour <= 0:
        return None
    return rate.savings_per_hour / rate.dollars_per_hour


def cost_of_run(
    job: Job, *, run_start: datetime | None, end: datetime, savings_ratio: float | None = None
) -> tuple[float | None, float | None]:
    """What a job cost and saved up to `end`: its earlier runs' cost plus this run's at its rate.

    (None, None) when its rate is unknown. `savings_ratio`: savings per dollar of this
    run (from its rate when it started; None: no saving known).
    """
    if job.cost_rate is None:
        return None, None
    this_run = job.cost_rate * run_seconds(run_start, end) / HOUR_SECONDS
    saved = this_run * savings_ratio if savings_ratio else 0.0
    return (job.cost or 0.0) + this_run, (job.spot_savings or 0.0) + saved


def stopped(
    job: Job,
    *,
    run_start: datetime | None,
    end: datetime,
    requeued: bool,
    savings_ratio: float | None = None,
) -> dict[str, Any]:
    """The record's cost fields when a run stops: what it cost so far is kept in `cost` and
    the rate cleared; a run that goes back to the queue (`requeued`) adds its time to
    `ran_seconds` (a finished job's last run is from its start to its finish)."""
    cost, saved = cost_of_run(job, run_start=run_start, end=end, savings_ratio=savings_ratio)
    changes: dict[str, Any] = {
        "cost": cost if cost is not None else job.cost,
        "spot_savings": saved if saved is not None else job.spot_savings,
        "cost_rate": None,
    }
    if requeued:
        changes["ran_seconds"] = job.ran_seconds + run_seconds(run_start, end)
    return changes


def charge(job: Job, *, run_start: datetime | None) -> JobCharge | None:
    """What a finished job adds to its team's month (its finish's month, whole); None: no known cost."""
    if job.cost is None or job.finished_at is None:
        return None
    seconds = job.ran_seconds + run_seconds(run_start, job.finished_at)
    return JobCharge(
        job_id=job.id,
        team=job.team,
        month=month_key(job.finished_at),
        gpu_hours=job.gpus * seconds / HOUR_SECONDS,
        dollars=job.cost,
        spot_savings=job.spot_savings or 0.0,
    )


def current_run_start(job: Job, events: Iterable[JobEvent]) -> datetime | None:
    """When the job's current (or last) run began.

    `started_at` is its first run's start; a job that went back to the queue before (it has
    `ran_seconds`) began its latest run when it last moved to RUNNING from another state.
    Only such a job's events are looked at.
    """
    if job.ran_seconds <= 0:
        return job.started_at
    starts = [e.at for e in events if e.status is JobStatus.RUNNING and e.previous is not JobStatus.RUNNING]
    return max(starts, default=job.started_at)


def cost_so_far(job: Job, *, now: datetime, run_start: datetime | None) -> float | None:
    """What a job has cost until `now` (its final cost once it ended); None: not known.

    While it runs, its record's `cost` holds what its earlier runs cost and `cost_rate`
    this run's rate: this adds the run so far (`run_start`: current_run_start).
    """
    if job.status is not JobStatus.RUNNING or job.cost_rate is None:
        return job.cost
    return (job.cost or 0.0) + job.cost_rate * run_seconds(run_start, now) / HOUR_SECONDS


def month_to_date_of_running(job: Job, *, run_start: datetime | None, now: datetime) -> float:
    """What a running job has cost in `now`'s month: its earlier runs' kept cost (counted
    whole: budgets err on the side of holding) and this run's since the month began."""
    if job.status is not JobStatus.RUNNING or job.cost_rate is None or run_start is None:
        return job.cost or 0.0
    since = max(run_start, month_start(now))
    return (job.cost or 0.0) + job.cost_rate * run_seconds(since, now) / HOUR_SECONDS


def since_duration(now: datetime, text: str) -> datetime:
    """`--since 30d` (or 12h, 2w): the time that long before `now`; ValueError otherwise.

    A duration reaching back past the calendar's first day is taken from that day: all of it.
    """
    units = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
    number, unit = text[:-1], text[-1:]
    if (
        unit not in units
        or not (0 < len(number) <= 12 and number.isascii() and number.isdigit())
        or int(number) <= 0
    ):
        raise ValueError(f"expected a duration such as 30d, 12h or 2w, got {text[:20]!r}")
    try:
        return now - int(number) * units[unit]
    except OverflowError:
        return datetime.min.replace(tzinfo=now.tzinfo)
