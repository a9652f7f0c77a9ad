"""Costs as the functions count them: the fleet's overhead each scale check, each job's cost as
reconcile sees it start and end, and a team's spend this month for budgets (core/costs.py
has the arithmetic; the ledger, DynamoDB or memory, keeps the sums).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger

from squall.core import costs
from squall.core.costs import JobRate, OverheadCauses, UnpricedError
from squall.core.errors import MAX_ERROR_TEXT, SquallError
from squall.core.jobs import Job, JobStatus
from squall.core.telemetry import SERVICE, Metric
from squall.planner import Node, NodeGroup, Pod
from squall.planner.kube import ParseCache, node_cache, parse_pods
from squall.ports import Cluster, CostLedger, JobHistory, JobStore, MetricsSink

logger = Logger(service=SERVICE, child=True)


@dataclass
class FleetCostMeter:
    """The scale check's CostMeter: what no job held of the fleet since the last check, per group
    and per team that caused it (core/costs.py attribute_overhead), the rest unattributed.

    The interval since the last accrual is counted at the rates, and the attribution, the
    fleet had then (each check measures what holds until the next). The last accrual is
    kept in the ledger, so a cold Lambda goes on where the last one left off; the very
    first call only records it.
    """

    ledger: CostLedger
    metrics: MetricsSink

    def accrue(
        self,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        groups: Sequence[NodeGroup],
        now: datetime,
        causes: OverheadCauses | None = None,
    ) -> None:
        previous = self.ledger.last_accrual()
        if previous is not None and now <= previous.at:
            return  # a check whose clock is behind the last one's: nothing to count
        accrual = costs.attribute_overhead(
            nodes=nodes, pods=pods, groups=groups, now=now, causes=causes, last=previous
        )
        overhead = costs.overhead_between(previous, now) if previous is not None else []
        if not self.ledger.accrue(previous=previous, accrual=accrual, overhead=overhead):
            logger.info("overhead counted by another check already")
            return
        by_group: dict[str, float] = {}
        for row in overhead:
            by_group[row.group] = by_group.get(row.group, 0.0) + row.dollars
        for group, dollars in sorted(by_group.items()):
            self.metrics.add(Metric.OVERHEAD_COST, dollars, unit="None", dimensions={"Group": group})


@dataclass
class TeamSpend:
    """The SpendLedger budgets read: the ledger's finished jobs of this month, plus what the
    running jobs have cost this month so far (their records' rates)."""

    ledger: CostLedger
    store: JobStore

    def month_to_date(self, *, now: datetime) -> dict[str, float]:
        spend = dict(self.ledger.finished_in_month(now=now))
        for job in self.store.list_by_status(JobStatus.RUNNING, limit=200_000):
            if job.is_sweep:
                continue  # its trials are counted
            dollars = costs.month_to_date_of_running(job, run_start=run_start(job, self.store), now=now)
            if dollars:
                spend[job.team] = spend.get(job.team, 0.0) + dollars
        return spend


def run_start(job: Job, history: JobHistory) -> datetime | None:
    """When the job's current (or last) run began (core/costs.py current_run_start); the
    events are read only for a job that went back to the queue before."""
    return costs.current_run_start(job, history.events(job.id) if job.ran_seconds > 0 else ())


@dataclass
class JobCosting:
    """What reconcile asks to cost a job: its rate from its pods, its record's cost fields as a
    run starts and stops, and its final cost added to the ledger once. Any other writer that
    ends a running job (a cancel) asks `on_transition` too, with `rate=unpriced`."""

    groups: Sequence[NodeGroup]
    ledger: CostLedger | None
    history: JobHistory
    metrics: MetricsSink

    def rate(self, *, pods: Sequence[Pod], nodes: Sequence[Node]) -> JobRate:
        """The job's rate from its bound pods; UnpricedError says why it cannot be priced."""
        return costs.job_rate(pods=pods, nodes=nodes, groups=self.groups)

    def on_transition(
        self, current: Job, *, to: JobStatus, at: datetime, rate: Callable[[], JobRate]
    ) -> dict[str, Any]:
        """The cost fields to change with `current`'s transition to `to` (at `at`).

        A run starting records its rate (`rate` prices its pods, asked only when needed:
        UnpricedError, and the rate is unknown); a run stopping keeps what it cost in `cost`
        (a job going back to the queue also keeps its run time), its spot savings at the
        share its pods say now (none when they are gone). A final cost is added to the
        ledger here, before the record is written: the ledger adds it once however often a
        lost race or a retry brings the same end back.
        """
        if current.is_sweep:
            return {}
        if to is JobStatus.RUNNING and current.status is not JobStatus.RUNNING:
            return costs.started(current, rate=_priced(current, rate, when="started"))
        if current.status is not JobStatus.RUNNING or to is JobStatus.RUNNING:
            return {}
        started = run_start(current, self.history)
        priced = _priced(current, rate, when="stopped", quiet=current.cost_rate is not None)
        ratio = costs.savings_ratio(priced)
        if current.cost_rate is None and priced is not None:
            current = _with_rate(current, priced)  # unknown when it started: its pods say now
        changes = costs.stopped(
            current, run_start=started, end=at, requeued=to is JobStatus.QUEUED, savings_ratio=ratio
        )
        if to is JobStatus.QUEUED:
            return changes
        if changes["cost"] is None:
            logger.info("job ended with no known cost", job_id=current.id, status=to.value)
            return changes
        final = _finished(current, changes, at=at)
        charge = costs.charge(final, run_start=started)
        if charge is not None and self.ledger is not None and self.ledger.add_job(charge):
            self.metrics.add(Metric.JOB_COST, charge.dollars, unit="None", dimensions={"Team": charge.team})
        return changes


def unpriced() -> JobRate:
    """The `rate` of a transition made without the job's pods at hand (a cancel): its recorded
    rate is what it is costed at."""
    raise costs.UnpricedError("its pods are not looked at here")


def _priced(job: Job, rate: Callable[[], JobRate], *, when: str, quiet: bool = False) -> JobRate | None:
    try:
        return rate()
    except costs.UnpricedError as exc:
        if not quiet:
            logger.info("job cost unknown", job_id=job.id, run=when, why=str(exc))
        return None


def _with_rate(job: Job, rate: JobRate) -> Job:
    return dataclasses.replace(
        job,
        cost_rate=rate.dollars_per_hour,
        cost=job.cost or 0.0,
        spot_savings=job.spot_savings or 0.0,
    )


def _finished(job: Job, changes: dict[str, Any], *, at: datetime) -> Job:
    return dataclasses.replace(job, finished_at=at, **changes)


@dataclass
class RunPrices:
    """A reconcile run's pods of each job it observed, and its clusters' nodes: listed once a
    run, and only when a job is priced (the parses are kept between runs)."""

    clusters: Mapping[str, Cluster]
    parses: dict[str, ParseCache[Node]]
    pods: dict[str, tuple[str, list[dict[str, Any]]]] = field(default_factory=dict)
    nodes: dict[str, list[Node] | UnpricedError] = field(default_factory=dict)

    def observe(self, job_id: str, cluster: str, pods: list[dict[str, Any]]) -> None:
        self.pods[job_id] = (cluster, pods)

    def rate(self, costing: JobCosting, job_id: str) -> JobRate:
        """A job's rate from its pods this run observed, on its cluster's nodes; UnpricedError says why not."""
        if job_id not in self.pods:
            raise UnpricedError("its pods were not observed")
        cluster, objects = self.pods[job_id]
        qualified = cluster if len(self.clusters) > 1 else None
        nodes = self.nodes.get(cluster)
        if nodes is None:
            parses = self.parses.setdefault(cluster, node_cache(qualified))
            try:
                # A node that cannot be read is left out: a job on it is the one not priced.
                nodes = parses.parse_all(
                    self.clusters[cluster].list_nodes(), unreadable=lambda _item, _why: None
                )
            except (SquallError, ValueError) as exc:
                nodes = UnpricedError(
                    f"the nodes of cluster {cluster} cannot be read: {exc}"[:MAX_ERROR_TEXT]
                )
            self.nodes[cluster] = nodes
        if isinstance(nodes, UnpricedError):
            raise nodes
        try:
            pods = parse_pods(objects, cluster=qualified)
        except ValueError as exc:
            raise UnpricedError(f"its pods cannot be read: {exc}"[:MAX_ERROR_TEXT]) from None
        return costing.rate(pods=pods, nodes=nodes)
