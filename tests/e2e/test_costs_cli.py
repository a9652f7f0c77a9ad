"""`squall costs` on the local endpoint: the teams' months and the overhead from the ledger in
the jobs table, as a table and as JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from squall.cli.costs import add_costs_parser, cost_ledger, cost_rows
from squall.core.costs import FleetAccrual, GroupOverhead, JobCharge, TeamMonth
from squall.local.runtime import LocalRuntime

NOW = datetime(2026, 4, 20, 12, 0, tzinfo=UTC)


def costs(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="squall")
    add_costs_parser(parser.add_subparsers(), now=lambda: NOW)
    args = parser.parse_args(["costs", *argv])
    code: int = args.run(args)
    return code


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    """A local runtime whose ledger holds March and April jobs of two teams and April's overhead."""
    monkeypatch.chdir(tmp_path)
    with LocalRuntime.start() as local:
        monkeypatch.setenv("SQUALL_TABLE_NAME", local.resources.table_name)
        ledger = cost_ledger()
        for job_id, team, month, dollars in (
            ("r-1", "research", "2026-03", 100.0),
            ("r-2", "research", "2026-04", 1234.5),
            ("r-3", "research", "2026-04", 10.0),
            ("v-1", "vision", "2026-04", 20.0),
        ):
            ledger.add_job(
                JobCharge(
                    job_id=job_id, team=team, month=month, gpu_hours=4.0, dollars=dollars, spot_savings=1.0
                )
            )
        first = FleetAccrual(at=NOW - timedelta(hours=1), rates={})
        ledger.accrue(previous=None, accrual=first, overhead=[])
        ledger.accrue(
            previous=first,
            accrual=FleetAccrual(at=NOW, rates={}),
            overhead=[GroupOverhead(group="p3", month="2026-04", dollars=7.25)],
        )
        yield local


@pytest.mark.timeout(120)
def test_costs_prints_each_teams_months_the_overhead_and_the_total(
    counted: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    assert costs("--since", "30d") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("costs from 2026-03 ")
    assert lines[1].split() == ["TEAM", "MONTH", "JOBS", "GPU-HOURS", "DOLLARS", "SPOT", "SAVINGS"]
    assert [line.split() for line in lines[2:]] == [
        ["research", "2026-03", "1", "4.0", "$100.00", "$1.00"],
        ["research", "2026-04", "2", "8.0", "$1,244.50", "$2.00"],
        ["vision", "2026-04", "1", "4.0", "$20.00", "$1.00"],
        ["(overhead)", "2026-04", "$7.25"],
        ["total", "4", "16.0", "$1,371.75", "$4.00"],
    ]


@pytest.mark.timeout(120)
def test_costs_of_one_team_since_a_date_as_json(
    counted: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    assert costs("--team", "research", "--since", "2026-04-01", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fromMonth"] == "2026-04" and shown["team"] == "research"
    assert shown["teams"] == [
        {
            "team": "research",
            "month": "2026-04",
            "jobs": 2,
            "gpuHours": 8.0,
            "dollars": 1244.5,
            "spotSavings": 2.0,
        }
    ]
    assert shown["overhead"] == [], "overhead is nobody's: not shown for one team"


def test_a_since_that_is_neither_a_duration_nor_a_date_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        costs("--since", "last week")
    assert exited.value.code == 2
    assert "such as 30d" in capsys.readouterr().err


def test_the_total_row_adds_the_overhead_to_the_teams_dollars() -> None:
    months = [TeamMonth(team="a", month="2026-04", jobs=1, gpu_hours=1.0, dollars=2.0, spot_savings=0.5)]
    overhead = [GroupOverhead(group="g", month="2026-04", dollars=1.0)]
    assert cost_rows(months, overhead, with_overhead=True)[-1] == ("total", "", "1", "1.0", "$3.00", "$0.50")
    assert cost_rows(months, overhead, with_overhead=False)[-1][4] == "$2.00"
