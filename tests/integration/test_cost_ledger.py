"""The cost ledger, DynamoDB (on moto) and in memory: one contract.

A job's cost is added to its team's month once, however often it is offered; the
fleet's overhead moves on only from the accrual the meter read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.adapters.aws.cost_ledger import DynamoCostLedger
from squall.core.costs import FleetAccrual, GroupOverhead, JobCharge, TeamMonth
from squall.local.cost_ledger import InMemoryCostLedger

T0 = datetime(2026, 4, 10, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["dynamodb", "memory"])
def ledger(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryCostLedger()
    return DynamoCostLedger(request.getfixturevalue("jobs_table"), "jobs")


def charge(
    job_id: str, *, team: str = "research", month: str = "2026-04", dollars: float = 10.0
) -> JobCharge:
    return JobCharge(job_id=job_id, team=team, month=month, gpu_hours=2.5, dollars=dollars, spot_savings=1.25)


def test_the_same_jobs_cost_offered_twice_is_added_once(ledger: Any) -> None:
    assert ledger.add_job(charge("j-1")) is True
    assert ledger.add_job(charge("j-1")) is False, "a retry or a second reconcile run adds nothing"
    assert ledger.add_job(charge("j-2", dollars=5.5)) is True
    assert ledger.team_months(since=T0) == [
        TeamMonth(team="research", month="2026-04", jobs=2, gpu_hours=5.0, dollars=15.5, spot_savings=2.5)
    ]


def test_team_months_since_a_date_and_of_one_team(ledger: Any) -> None:
    ledger.add_job(charge("old", month="2026-02"))
    ledger.add_job(charge("a", month="2026-03"))
    ledger.add_job(charge("b", team="vision", month="2026-04", dollars=3.0))
    since = T0 - timedelta(days=40)  # in March
    assert [(r.team, r.month) for r in ledger.team_months(since=since)] == [
        ("research", "2026-03"),
        ("vision", "2026-04"),
    ]
    assert [r.month for r in ledger.team_months(since=since, team="vision")] == ["2026-04"]
    assert ledger.finished_in_month(now=T0) == {"vision": 3.0}


def test_the_first_accrual_only_records_and_the_next_adds_the_overhead(ledger: Any) -> None:
    assert ledger.last_accrual() is None
    first = FleetAccrual(at=T0, rates={"p3": 12.0})
    assert ledger.accrue(previous=None, accrual=first, overhead=[]) is True
    assert ledger.last_accrual() == first
    second = FleetAccrual(at=T0 + timedelta(minutes=5), rates={"p3": 6.0})
    rows = [
        GroupOverhead(group="p3", month="2026-04", dollars=1.0),
        GroupOverhead(group="g5", month="2026-04", dollars=0.5),
    ]
    assert ledger.accrue(previous=first, accrual=second, overhead=rows) is True
    assert ledger.last_accrual() == second
    assert sorted(ledger.overhead(since=T0), key=str) == sorted(rows, key=str)


def test_an_accrual_from_one_that_moved_on_adds_nothing(ledger: Any) -> None:
    first = FleetAccrual(at=T0, rates={"p3": 12.0})
    ledger.accrue(previous=None, accrual=first, overhead=[])
    second = FleetAccrual(at=T0 + timedelta(minutes=1), rates={"p3": 12.0})
    rows = [GroupOverhead(group="p3", month="2026-04", dollars=0.2)]
    assert ledger.accrue(previous=first, accrual=second, overhead=rows) is True
    # a second meter that read `first` too (a retried check) counts the same minute again: refused
    late = FleetAccrual(at=T0 + timedelta(minutes=1, seconds=5), rates={})
    assert ledger.accrue(previous=first, accrual=late, overhead=rows) is False
    assert ledger.accrue(previous=None, accrual=late, overhead=rows) is False
    assert ledger.overhead(since=T0) == rows
    assert ledger.last_accrual() == second


def test_more_overhead_rows_than_one_transaction_holds_are_all_added(ledger: Any) -> None:
    first = FleetAccrual(at=T0, rates={})
    ledger.accrue(previous=None, accrual=first, overhead=[])
    rows = [GroupOverhead(group=f"g{n:03d}", month="2026-04", dollars=1.0) for n in range(150)]
    assert ledger.accrue(
        previous=first, accrual=FleetAccrual(at=T0 + timedelta(minutes=1), rates={}), overhead=rows
    )
    assert sum(r.dollars for r in ledger.overhead(since=T0)) == 150.0


def test_overhead_is_kept_per_team_that_caused_it_and_the_accrual_keeps_who_caused_what(ledger: Any) -> None:
    first = FleetAccrual(
        at=T0,
        rates={"p3": 12.0, "g5": 4.0},
        caused={"p3": {"research": 8.0, "vision": 1.5}},
        buyers={"p3": {"research": 1.0, "vision": 0.25, "": 0.5}},
    )
    assert ledger.accrue(previous=None, accrual=first, overhead=[]) is True
    assert ledger.last_accrual() == first, "a cold meter charges the next interval as this one saw it"
    rows = [
        GroupOverhead(group="p3", month="2026-04", dollars=4.0, team="research"),
        GroupOverhead(group="p3", month="2026-04", dollars=0.75, team="vision"),
        GroupOverhead(group="p3", month="2026-04", dollars=1.25),
        GroupOverhead(group="g5", month="2026-04", dollars=2.0),
    ]
    second = FleetAccrual(at=T0 + timedelta(minutes=30), rates={})
    assert ledger.accrue(previous=first, accrual=second, overhead=rows) is True
    assert ledger.accrue(previous=second, accrual=FleetAccrual(at=T0 + timedelta(hours=1), rates={}),
                         overhead=rows[:1])  # fmt: skip
    found = {(r.group, r.team): r.dollars for r in ledger.overhead(since=T0)}
    assert found == {
        ("p3", "research"): 8.0,
        ("p3", "vision"): 0.75,
        ("p3", None): 1.25,
        ("g5", None): 2.0,
    }


def test_overhead_and_an_accrual_written_before_teams_were_told_apart_read_as_unattributed(
    jobs_table: Any,
) -> None:
    # given the items an earlier version wrote: no team in the key, an accrual with rates only
    jobs_table.put_item(
        TableName="jobs",
        Item={"pk": {"S": "OVERHEAD"}, "sk": {"S": "2026-04#p3"}, "dollars": {"N": "7.25"}},
    )
    jobs_table.put_item(
        TableName="jobs",
        Item={
            "pk": {"S": "OVERHEAD#ACCRUAL"},
            "sk": {"S": "ACCRUAL"},
            "at": {"S": T0.isoformat()},
            "rates": {"S": '{"p3": 12.0}'},
        },
    )
    ledger = DynamoCostLedger(jobs_table, "jobs")
    assert ledger.overhead(since=T0) == [GroupOverhead(group="p3", month="2026-04", dollars=7.25, team=None)]
    assert ledger.last_accrual() == FleetAccrual(at=T0, rates={"p3": 12.0}, caused={}, buyers={})
    # and the next accrual goes on from it
    later = FleetAccrual(at=T0 + timedelta(minutes=1), rates={}, caused={"p3": {"research": 1.0}})
    added = [GroupOverhead(group="p3", month="2026-04", dollars=0.2, team="research")]
    assert ledger.accrue(previous=ledger.last_accrual(), accrual=later, overhead=added) is True
    assert {(r.team, r.dollars) for r in ledger.overhead(since=T0)} == {(None, 7.25), ("research", 0.2)}
