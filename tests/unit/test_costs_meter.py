"""services/costs.py: the overhead meter goes on where the last check left off (per team that
caused some, the rest unattributed), team spend this month, and a job's cost fields as its
runs start and stop (in-memory ledger and store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squall.core.costs import JobCharge, JobRate, OverheadCauses, UnpricedError
from squall.core.jobs import JobStatus, new_job, transition
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cost_ledger import InMemoryCostLedger
from squall.local.memory import InMemoryJobStore
from squall.planner import GroupInstance, Pod, Resources
from squall.services.costs import FleetCostMeter, JobCosting, TeamSpend, run_start, unpriced
from tests.unit.test_costs import group, node, pod

T0 = datetime(2026, 5, 31, 23, 0, tzinfo=UTC)


def meter() -> tuple[FleetCostMeter, InMemoryCostLedger, RecordingMetrics]:
    ledger = InMemoryCostLedger()
    metrics = RecordingMetrics(VirtualClock(T0))
    return FleetCostMeter(ledger=ledger, metrics=metrics), ledger, metrics


def test_the_first_check_only_records_and_the_next_counts_at_the_rates_it_saw() -> None:
    cost_meter, ledger, metrics = meter()
    p3 = group()
    nodes = [node("n1", of=p3), node("n2", of=p3)]
    # given one of two nodes idle and a quarter of the other unheld: $15/h of overhead
    cost_meter.accrue(nodes=nodes, pods=[pod("a", on="n1", gpu=3)], groups=[p3], now=T0)
    assert ledger.overhead(since=T0) == []
    # when the next check comes 20 minutes later, with both nodes full by now
    full = [pod("a", on="n1", gpu=4), pod("b", on="n2", gpu=4, job="j-2")]
    cost_meter.accrue(nodes=nodes, pods=full, groups=[p3], now=T0 + timedelta(minutes=20))
    # then the 20 minutes are counted at the first check's rates
    (row,) = ledger.overhead(since=T0)
    assert (row.group, row.month, row.dollars) == ("p3", "2026-05", pytest.approx(5.0))
    assert metrics.total("OverheadCost") == pytest.approx(5.0)
    # and a cold start (a new meter on the same ledger) goes on from there, at the new rates: nothing
    fresh = FleetCostMeter(ledger=ledger, metrics=metrics)
    fresh.accrue(nodes=nodes, pods=full, groups=[p3], now=T0 + timedelta(minutes=40))
    assert sum(r.dollars for r in ledger.overhead(since=T0)) == pytest.approx(5.0)


def test_a_check_whose_clock_is_behind_the_last_one_counts_nothing() -> None:
    cost_meter, ledger, _ = meter()
    p3 = group()
    cost_meter.accrue(nodes=[node("n1", of=p3)], pods=[], groups=[p3], now=T0)
    cost_meter.accrue(nodes=[node("n1", of=p3)], pods=[], groups=[p3], now=T0 - timedelta(minutes=1))
    last = ledger.last_accrual()
    assert last is not None and last.at == T0 and ledger.overhead(since=T0) == []


def test_the_overhead_a_team_caused_is_counted_as_its_own_and_the_rest_unattributed() -> None:
    cost_meter, ledger, metrics = meter()
    # given a draining node and one booting instance bought for research's queued job
    p3 = group(instances=(GroupInstance(instance_id="i-9", lifecycle_state="Pending", launch_time=T0),))
    nodes = [node("n1", of=p3, unschedulable=True)]
    teams = {"r-1": "research"}
    demand = [Pod(namespace="team-research", name="r-1-0", requests=Resources(gpu=4), job_id="r-1")]
    cost_meter.accrue(
        nodes=nodes, pods=[], groups=[p3], now=T0,
        causes=OverheadCauses(team_of=lambda: teams, demand=demand),
    )  # fmt: skip
    # when the next check, one that plans nothing new, comes 5 minutes later
    cost_meter.accrue(
        nodes=nodes, pods=[], groups=[p3], now=T0 + timedelta(minutes=5),
        causes=OverheadCauses(team_of=lambda: teams),
    )  # fmt: skip
    # then the booting half is research's, the draining node nobody's
    rows = {(r.group, r.team): r.dollars for r in ledger.overhead(since=T0)}
    assert rows == {("p3", "research"): pytest.approx(1.0), ("p3", None): pytest.approx(1.0)}
    assert metrics.total("OverheadCost") == pytest.approx(2.0), "the group's metric counts both"
    # and the quiet check kept the last plan's buyers for the next interval
    last = ledger.last_accrual()
    assert last is not None and last.caused == {"p3": {"research": pytest.approx(12.0)}}


def running_job(store: InMemoryJobStore, job_id: str, *, team: str, at: datetime, rate: float) -> None:
    job, event = new_job(
        job_id=job_id, name="t", team=team, namespace=f"team-{team}", at=at - timedelta(hours=1)
    )
    store.create(job, event)
    store.save(*transition(job, to=JobStatus.RUNNING, reason="Started", at=at, cost_rate=rate, cost=0.0))


def test_team_spend_adds_finished_jobs_of_the_month_and_running_jobs_since_it_began() -> None:
    ledger, store = InMemoryCostLedger(), InMemoryJobStore()
    running_job(store, "r-1", team="research", at=T0 - timedelta(hours=3), rate=2.0)
    running_job(store, "v-1", team="vision", at=T0 + timedelta(hours=2), rate=1.0)
    ledger.add_job(
        JobCharge(job_id="old", team="research", month="2026-06", gpu_hours=1, dollars=7, spot_savings=0)
    )
    ledger.add_job(
        JobCharge(job_id="may", team="research", month="2026-05", gpu_hours=1, dollars=100, spot_savings=0)
    )
    now = T0 + timedelta(hours=4)  # 03:00 on June 1st
    assert TeamSpend(ledger=ledger, store=store).month_to_date(now=now) == {
        "research": pytest.approx(7 + 2.0 * 3),
        "vision": pytest.approx(1.0 * 2),
    }


def test_a_requeued_jobs_current_run_starts_at_its_latest_start() -> None:
    store = InMemoryJobStore()
    running_job(store, "j-1", team="research", at=T0, rate=1.0)
    job = store.get("j-1")
    assert job is not None and run_start(job, store) == T0
    back, event = transition(
        job, to=JobStatus.QUEUED, reason="NodeLost", at=T0 + timedelta(minutes=30), ran_seconds=1800.0
    )
    store.save(back, event)
    again = transition(back, to=JobStatus.RUNNING, reason="Started", at=T0 + timedelta(hours=1))
    store.save(*again)
    assert again[0].started_at == T0, "started_at stays the first run's"
    assert run_start(again[0], store) == T0 + timedelta(hours=1)


def test_costing_a_run_that_cannot_be_priced_records_no_rate_and_no_cost() -> None:
    store, ledger = InMemoryJobStore(), InMemoryCostLedger()
    costing = JobCosting(groups=[], ledger=ledger, history=store, metrics=RecordingMetrics(VirtualClock(T0)))
    job, _ = new_job(job_id="j-1", name="t", team="research", namespace="team-research", at=T0)

    def unpriced() -> JobRate:
        raise UnpricedError("node n1 matches no configured node group with one price")

    assert costing.on_transition(job, to=JobStatus.RUNNING, at=T0, rate=unpriced) == {
        "cost_rate": None,
        "cost": None,
        "spot_savings": None,
    }


def test_a_cancel_costs_a_running_job_at_its_recorded_rate_and_the_ledger_counts_it_once() -> None:
    store, ledger = InMemoryJobStore(), InMemoryCostLedger()
    metrics = RecordingMetrics(VirtualClock(T0))
    costing = JobCosting(groups=[], ledger=ledger, history=store, metrics=metrics)
    running_job(store, "j-1", team="research", at=T0, rate=3.0)
    job = store.get("j-1")
    assert job is not None
    end = T0 + timedelta(minutes=40)
    for _ in range(2):  # a lost race brings the same end back
        changes = costing.on_transition(job, to=JobStatus.CANCELLED, at=end, rate=unpriced)
        assert changes == {"cost": pytest.approx(2.0), "spot_savings": 0.0, "cost_rate": None}
    (row,) = ledger.team_months(since=end)
    assert (row.team, row.month, row.jobs, row.dollars) == ("research", "2026-05", 1, pytest.approx(2.0))
    assert metrics.total("JobCost") == pytest.approx(2.0)
