"""What jobs and the fleet cost, in dollars. Pure: no I/O, time is passed in.

A running job's pods hold a share of their nodes: on a GPU node its GPUs' share of the
node's GPUs, elsewhere the largest of its CPU and memory shares. That share of the
node's group price per hour is the pod's cost rate; of a spot group's saving against
its on-demand price, its spot savings rate. A job's rate is its pods' sum, recorded
on its record when it starts; its cost is that rate times its run time, plus what its
earlier runs cost (kept across a requeue). What no job held of the fleet between two
scale checks (booting, idle and draining nodes, the unheld part of partly used ones)
is its group's overhead: job costs and overhead add up to the fleet's cost.

The ledger keeps these per team and UTC calendar month (the records below); budgets
read a team's month to date.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from squall.conventions import NODE_GROUP_LABEL
from squall.core.jobs import Job, JobEvent, JobStatus
from squall.planner import Node, NodeGroup, Pod

HOUR_SECONDS = 3600.0
# Instances in these Auto Scaling states are gone or going: no longer billed as booting.
_GONE_PREFIXES = ("Terminat", "Detach", "Standby", "EnteringStandby", "Warmed:")


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
    """What no job held of one node group's instances in one month."""

    group: str
    month: str
    dollars: float = 0.0


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
    """Where the overhead meter left off: when, and each group's overhead rate then ($/h)."""

    at: datetime
    rates: Mapping[str, float]


# ---- months ----------------------------------------------------------------


def month_key(at: datetime) -> str:
    """The UTC calendar month of `at`: "YYYY-MM"."""
    return at.astimezone(UTC).strftime("%Y-%m")


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
    index = NodeGroups(groups)
    owners = {node.name: index.of(node) for node in nodes}
    held: dict[str, float] = {}
    by_name = {node.name: node for node in nodes}
    for pod in pods:
        if pod.job_id is None or not pod.is_active or pod.node_name not in by_name:
            continue
        node = by_name[pod.node_name]
        held[node.name] = held.get(node.name, 0.0) + pod_share(pod, node, owners[node.name])
    rates: dict[str, float] = {}
    seen_instances: set[str] = set()
    for node in nodes:
        group = owners[node.name]
        if group is None or group.price_per_hour is None:
            continue
        if node.instance_id:
            seen_instances.add(node.instance_id)
        unheld = max(0.0, 1.0 - held.get(node.name, 0.0))
        rates[group.name] = rates.get(group.name, 0.0) + unheld * group.price_per_hour
    for group in groups:
        if group.price_per_hour is None:
            continue
        booting = sum(
            1
            for i in group.instances
            if i.instance_id not in seen_instances and not i.lifecycle_state.startswith(_GONE_PREFIXES)
        )
        if booting:
            rates[group.name] = rates.get(group.name, 0.0) + booting * group.price_per_hour
    return rates


def overhead_between(last: FleetAccrual, now: datetime) -> list[GroupOverhead]:
    """The overhead from `last.at` to `now` at the rates of `last`, split by month."""
    if now <= last.at:
        return []
    found: list[GroupOverhead] = []
    for month, seconds in split_by_month(last.at, now):
        for group, rate in sorted(last.rates.items()):
            if rate > 0:
                found.append(GroupOverhead(group=group, month=month, dollars=rate * seconds / HOUR_SECONDS))
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
    """`--since 30d` (or 12h, 2w): the time that long before `now`; ValueError otherwise."""
    units = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.isdigit() or int(number) <= 0:
        raise ValueError(f"expected a duration such as 30d, 12h or 2w, got {text[:20]!r}")
    return now - int(number) * units[unit]
