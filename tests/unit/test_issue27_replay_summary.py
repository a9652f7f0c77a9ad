"""The summary's p99 waits, start estimates and costs, and --jobs-out's estimate and cost cells, from records."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from squall.core.jobs import Job, JobStatus
from squall.local.summary import (
    JOBS_CSV_COLUMNS,
    cost_stats,
    estimate_stats,
    job_rows,
    judged_estimates,
    wait_stats,
)
from tests.unit.test_jobs_report import T0, record


def estimated(
    job_id: str,
    *,
    submitted: float,
    started: float | None,
    starts_by: float | None,
    likely: float | None = None,
    priority: int = 50,
    team: str = "research",
    cost: float | None = None,
) -> Job:
    job = record(job_id, team=team, submitted=submitted, started=started, spec={"priority": priority})
    return replace(
        job,
        priority=priority,
        first_starts_by=None if starts_by is None else T0 + timedelta(seconds=starts_by),
        first_likely_start=None if likely is None else T0 + timedelta(seconds=likely),
        cost=cost,
    )


# ---- p99 -------------------------------------------------------------------------------------------


def test_wait_stats_have_a_nearest_rank_p99() -> None:
    waits = [float(n) for n in range(1, 201)]  # 1..200
    assert wait_stats(waits) == {"p50": 100.0, "p90": 180.0, "p99": 198.0, "max": 200.0}
    assert wait_stats([]) == {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}


# ---- estimates -------------------------------------------------------------------------------------


def test_a_job_is_judged_unless_a_higher_priority_job_submitted_later_started_first() -> None:
    jobs = [
        # overtaken: "urgent" came later, at a higher priority, and started before it
        estimated("overtaken", submitted=0, started=500, starts_by=300),
        estimated("urgent", submitted=100, started=200, starts_by=None, priority=90),
        # a later, lower or equal priority job starting first (backfill) does not excuse a job
        estimated("late", submitted=110, started=900, starts_by=600),
        estimated("backfilled", submitted=120, started=150, starts_by=None, priority=50),
        # a higher priority job submitted before it is no excuse either: startsBy already saw it
        estimated("behind", submitted=130, started=700, starts_by=800, likely=650),
        # a higher priority job submitted later that started after it does not matter
        estimated("first", submitted=20, started=100, starts_by=100, likely=160),
        estimated("after", submitted=30, started=400, starts_by=None, priority=80),
        # no estimate (admitted at once), never started, a sweep parent: nothing to judge
        estimated("at-once", submitted=40, started=40, starts_by=None),
        estimated("waiting", submitted=50, started=None, starts_by=1_000),
        replace(estimated("sweep", submitted=60, started=70, starts_by=65), trial_ids=("sweep-t000",)),
    ]
    judged = judged_estimates(jobs)
    assert sorted(e.job_id for e in judged) == ["behind", "first", "late"]
    assert estimate_stats(jobs) == {
        "startedByStartsBy": round(2 / 3, 4),  # first (exactly at it) and behind; late missed by 300 s
        "judged": 3,
        "likelyStartMedianError": 55.0,  # |700 - 650| and |100 - 160|: 50 and 60
    }


def test_jobs_submitted_at_the_same_instant_do_not_overtake_one_another() -> None:
    jobs = [
        estimated("low", submitted=0, started=300, starts_by=300),
        estimated("high", submitted=0, started=10, starts_by=10, priority=90),
    ]
    assert sorted(e.job_id for e in judged_estimates(jobs)) == ["high", "low"]


def test_no_judged_job_is_said_as_null_not_as_a_perfect_score() -> None:
    jobs = [estimated("a", submitted=0, started=0, starts_by=None)]
    assert estimate_stats(jobs) == {"startedByStartsBy": None, "judged": 0, "likelyStartMedianError": None}


# ---- costs -----------------------------------------------------------------------------------------


def test_costs_split_the_fleets_cost_into_jobs_and_overhead_by_team() -> None:
    jobs = [
        estimated("a", submitted=0, started=10, starts_by=None, cost=12.344),
        estimated("b", submitted=0, started=10, starts_by=None, cost=7.5, team="vision"),
        estimated("c", submitted=0, started=10, starts_by=None, cost=0.5),
        estimated("unpriced", submitted=0, started=None, starts_by=None),  # never ran: no cost
        # a sweep parent's cost, if its record carries one, is its trials': not counted twice
        replace(estimated("hp", submitted=0, started=10, starts_by=None, cost=99.0), trial_ids=("hp-t000",)),
        estimated("hp-t000", submitted=0, started=10, starts_by=None, cost=99.0, team="vision"),
    ]
    assert cost_stats(jobs, fleet=150.0) == {
        "jobs": 119.34,
        "overhead": 30.66,  # 150 - 119.34: the three add up to the cent
        "fleet": 150.0,
        "byTeam": {"research": 12.84, "vision": 106.5},
    }


def test_jobs_and_overhead_add_up_to_the_fleet_to_the_cent() -> None:
    # 4.48875 and a fleet of 6.04499: each rounded alone they would say 4.49 + 1.56 = 6.04
    jobs = [estimated("a", submitted=0, started=10, starts_by=None, cost=4.48875)]
    costs = cost_stats(jobs, fleet=6.04499)
    assert (costs["jobs"], costs["overhead"], costs["fleet"]) == (4.49, 1.55, 6.04)


def test_no_job_cost_leaves_the_whole_fleet_as_overhead() -> None:
    jobs = [estimated("a", submitted=0, started=10, starts_by=None)]
    assert cost_stats(jobs, fleet=42.0) == {"jobs": 0.0, "overhead": 42.0, "fleet": 42.0, "byTeam": {}}


# ---- --jobs-out ------------------------------------------------------------------------------------


def test_jobs_out_rows_carry_the_first_estimates_and_the_cost() -> None:
    assert JOBS_CSV_COLUMNS[-3:] == ("starts_by_s", "likely_start_s", "cost")
    job = estimated("a", submitted=30, started=400, starts_by=450.5, likely=380, cost=3.14159)
    # the latest estimates are not the first: the row has the first
    job = replace(job, starts_by=T0 + timedelta(seconds=420), likely_start=T0 + timedelta(seconds=399))
    queued = replace(estimated("b", submitted=40, started=None, starts_by=None), status=JobStatus.QUEUED)
    first, second = job_rows([job, queued], start=T0)
    assert (first.starts_by_s, first.likely_start_s, first.cost) == (450.5, 380.0, 3.14159)
    assert first.cells()[-3:] == ["450.5", "380", "3.1416"]
    assert second.cells()[-3:] == ["", "", ""]
