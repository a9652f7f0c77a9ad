"""Budgets at admission: a team stops at its monthly budget while another runs. Pure."""

from __future__ import annotations

import dataclasses
from typing import Any

from squall.planner.admission import AdmissionPlan, admit
from squall.planner.kube import parse_replica_jobs
from squall.planner.queue_types import TeamBudget

from .builders import NOW, POLICY, node_of
from .test_backfill import jobs_of, p4d


def admit_on_two_free_nodes(jobs: list[dict[str, Any]], budgets: dict[str, TeamBudget]) -> AdmissionPlan:
    """Admission onto 2 free p4d nodes of 8 GPUs at $32 an hour ($4 per GPU-hour)."""
    fleet = dataclasses.replace(p4d(nodes=2, max_size=2), price_per_hour=32.0)
    return admit(
        jobs=parse_replica_jobs(jobs),
        nodes=[node_of(fleet, i.instance_id) for i in fleet.instances],
        pods=[],
        groups=[fleet],
        teams={},
        policy=POLICY,
        now=NOW,
        budgets=budgets,
    )


def test_a_team_stops_at_its_budget_while_another_team_runs() -> None:
    # given: 2 free nodes of 8 GPUs at $32/hour (so $4 per GPU-hour); each job: 8 GPUs for 4 hours = $128
    capped = jobs_of("capped")
    for obj in capped:
        obj["metadata"]["labels"]["squall.io/team"] = "vision"
    other = jobs_of("other", minute=1)
    # when: vision has spent $1,900 of $2,000; research has no budget
    result = admit_on_two_free_nodes(capped + other, {"vision": TeamBudget(monthly=2000, spent=1900)})
    # then: vision's job waits for its budget, research's runs
    assert [a.job_id for a in result.admitted] == ["other"]
    [held] = result.waiting
    assert (held.job_id, held.reason, held.position) == ("capped", "BudgetExceeded", 0)
    assert held.message.startswith("BudgetExceeded: $1,900 of $2,000 this month; it may cost up to $128")
    assert result.held_by_budget == {"vision": 1}
    # never bought for
    assert not [p for p in result.demand if p.job_id == "capped"]


def test_a_job_within_budget_runs_and_its_worst_case_counts_for_the_next() -> None:
    two = jobs_of("first") + jobs_of("second", minute=1)
    result = admit_on_two_free_nodes(two, {"research": TeamBudget(monthly=200, spent=0)})
    # $128 fits under $200; the second's $128 on top would not
    assert [a.job_id for a in result.admitted] == ["first"]
    assert [(w.job_id, w.reason) for w in result.waiting] == [("second", "BudgetExceeded")]
