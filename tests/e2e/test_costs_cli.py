"""`squall costs` on the local endpoint: the teams' months, the overhead each team caused and
the unattributed rest, from the ledger in the jobs table, as a table and as JSON."""

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
    """A local runtime whose ledger holds March and April jobs of two teams, and April's overhead:
    some research caused, some a third team caused that finished no job, the rest unattributed."""
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
            overhead=[
                GroupOverhead(group="p3", month="2026-04", dollars=7.25),
                GroupOverhead(group="p3", month="2026-04", dollars=3.0, team="research"),
                GroupOverhead(group="g5", month="2026-04", dollars=0.5, team="research"),
                GroupOverhead(group="g5", month="2026-04", dollars=2.0, team="speech"),
            ],
        )
        yield local


@pytest.mark.timeout(120)
def test_costs_prints_each_teams_months_the_overhead_it_caused_the_unattributed_and_the_total(
    counted: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    assert costs("--since", "30d") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("costs from 2026-03 ")
    assert lines[1].split() == ["TEAM", "MONTH", "JOBS", "GPU-HOURS", "DOLLARS", "SPOT", "SAVINGS", "OVERHEAD"]
    assert [line.split() for line in lines[2:]] == [
        ["research", "2026-03", "1", "4.0", "$100.00", "$1.00", "$0.00"],
        ["research", "2026-04", "2", "8.0", "$1,244.50", "$2.00", "$3.50"],
        ["speech", "2026-04", "0", "0.0", "$0.00", "$0.00", "$2.00"],
        ["vision", "2026-04", "1", "4.0", "$20.00", "$1.00", "$0.00"],
        ["(unattributed)", "2026-04", "$7.25"],
        ["total", "4", "16.0", "$1,364.50", "$4.00", "$12.75"],
        ["jobs", "$1,364.50", "+", "overhead", "$12.75", "=", "$1,377.25"],
    ]
    # the OVERHEAD column is the last: the unattributed row's amount is under it
    unattributed = next(line for line in lines if line.startswith("(unattributed)"))
    assert unattributed.index("$7.25") == lines[1].index("OVERHEAD")


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
            "overhead": 3.5,
        }
    ]
    # the overhead research caused, by group; not the unattributed, nor what other teams caused
    assert shown["overhead"] == [
        {"group": "g5", "month": "2026-04", "team": "research", "dollars": 0.5},
        {"group": "p3", "month": "2026-04", "team": "research", "dollars": 3.0},
    ]


@pytest.mark.timeout(120)
def test_costs_of_one_team_count_the_overhead_it_caused(
    counted: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    assert costs("--team", "speech") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[2:]] == [
        ["speech", "2026-04", "0", "0.0", "$0.00", "$0.00", "$2.00"],
        ["total", "0", "0.0", "$0.00", "$0.00", "$2.00"],
        ["jobs", "$0.00", "+", "the", "overhead", "it", "caused", "$2.00", "=", "$2.00"],
    ]


def test_a_since_that_is_neither_a_duration_nor_a_date_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        costs("--since", "last week")
    assert exited.value.code == 2
    assert "such as 30d" in capsys.readouterr().err


def test_the_total_row_sums_each_column() -> None:
    months = [TeamMonth(team="a", month="2026-04", jobs=1, gpu_hours=1.0, dollars=2.0, spot_savings=0.5)]
    overhead = [
        GroupOverhead(group="g", month="2026-04", dollars=1.0),
        GroupOverhead(group="g", month="2026-04", dollars=0.25, team="a"),
    ]
    rows = cost_rows(months, overhead)
    assert rows[0] == ("a", "2026-04", "1", "1.0", "$2.00", "$0.50", "$0.25")
    assert rows[-1] == ("total", "", "1", "1.0", "$2.00", "$0.50", "$1.25")
