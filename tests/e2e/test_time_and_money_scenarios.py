"""scenarios/backfill.yaml, budgets.yaml and aging.yaml end to end, on the memory backend.

The real functions on the simulated cluster and fleet, as `squall local run --scenario` runs
them: a short job backfills before a reserved gang without delaying it (the gang starts by
its first startsBy, the estimate made when it was queued), a long one waits; a team stops
at its monthly budget while another team runs; a busy team's job that has waited past
`agedAfter` goes ahead of the fair share.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from squall.core.jobs import Job, JobEvent, JobStatus
from squall.local.runtime import LocalRuntime
from squall.local.scenario import Simulation, SimulationResult, load_scenario

pytestmark = pytest.mark.timeout(180)

SCENARIOS = Path(__file__).parents[2] / "scenarios"


@dataclass
class Outcome:
    result: SimulationResult
    jobs: dict[str, Job]
    events: dict[str, list[JobEvent]]


def run(name: str) -> Outcome:
    seen: dict[str, object] = {}

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        seen["jobs"] = {job.id: job for job in local.jobs()}
        seen["events"] = {job.id: local.events(job.id) for job in local.jobs()}

    result = Simulation(load_scenario(SCENARIOS / f"{name}.yaml"), backend="memory", pace=False).run(
        after=after
    )
    return Outcome(result, seen["jobs"], seen["events"])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def scenario() -> Callable[[str], Outcome]:
    return functools.cache(run)


def statuses(outcome: Outcome) -> dict[str, JobStatus]:
    """Each job's final status, once no function failed."""
    assert outcome.result.summary["functionErrors"] == {}
    return {job_id: job.status for job_id, job in outcome.jobs.items()}


def test_a_short_job_backfills_before_a_reserved_gang_without_delaying_it(
    scenario: Callable[[str], Outcome],
) -> None:
    outcome = scenario("backfill")
    assert statuses(outcome) == dict.fromkeys(("first", "gang", "quick", "long"), JobStatus.SUCCEEDED)
    jobs = outcome.jobs
    first, gang, quick, long = (jobs[j] for j in ("first", "gang", "quick", "long"))
    assert all(j.started_at is not None for j in (first, gang, quick, long))
    # the gang waited with an estimate: the first run's declared end (4 hours from its start)
    assert gang.first_starts_by is not None and first.started_at is not None
    assert abs((gang.first_starts_by - first.started_at).total_seconds() - 4 * 3600) < 5 * 60
    # the short job ran while the gang waited, on room kept for it...
    assert quick.started_at < gang.started_at  # type: ignore[operator]
    # ...and the gang was not delayed: it started by the estimate made when it was queued
    assert gang.started_at <= gang.first_starts_by  # type: ignore[operator]
    # the long job would have run into the gang's time: it waited for the gang
    assert long.started_at >= gang.started_at  # type: ignore[operator]
    assert long.first_starts_by is not None and long.first_starts_by >= gang.first_starts_by


def test_a_team_stops_at_its_budget_while_another_team_runs(scenario: Callable[[str], Outcome]) -> None:
    outcome = scenario("budgets")
    assert outcome.result.summary["functionErrors"] == {}
    jobs = outcome.jobs
    statuses = {job_id: job.status for job_id, job in jobs.items()}
    assert statuses == {
        "vision-1": JobStatus.SUCCEEDED,
        "vision-2": JobStatus.QUEUED,
        "research-1": JobStatus.SUCCEEDED,
        "research-2": JobStatus.SUCCEEDED,
    }
    held = jobs["vision-2"]
    assert held.reason == "BudgetExceeded"
    message = [e.message for e in outcome.events["vision-2"] if e.reason == "BudgetExceeded"][-1]
    assert message.startswith("BudgetExceeded: $") and "of $40 this month" in message
    # what vision spent is what its first job cost: half an hour of a $32 node
    cost = jobs["vision-1"].cost
    assert cost is not None and 14 <= cost <= 18


def test_a_busy_teams_job_that_waited_past_aged_after_goes_ahead_of_the_fair_share(
    scenario: Callable[[str], Outcome],
) -> None:
    outcome = scenario("aging")
    assert set(statuses(outcome).values()) == {JobStatus.SUCCEEDED}
    jobs = outcome.jobs
    old, research_run, research_next = (jobs[j] for j in ("vision-old", "research-run", "research-next"))
    assert old.started_at and research_run.finished_at and research_next.started_at
    # both waited when research's run freed its node (vision held 8 GPUs, research none):
    # the fair share alone would have started research's; vision's, waiting for six days, went first
    assert research_next.submitted_at < research_run.finished_at
    assert old.started_at < research_next.started_at
    assert old.started_at - old.submitted_at > timedelta(days=5)
    assert research_next.started_at - old.started_at >= timedelta(hours=12)
