"""TRACE.csv's optional max_runtime_s: a declared limit becomes the spec's maxRuntime, bad cells are named."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks.histories import LIMIT_STEPS, long_history
from squall.core.spec import parse_spec
from squall.local.scenario import ScenarioError
from squall.local.trace import job_spec, load_configuration, parse_trace, trace_plan
from tests.unit.test_trace import GROUPS

HEADER = "submit_s,team,gpus,replicas,run_s,max_runtime_s\n"
REGISTRY = "registry.example.com/squall"
DAY = 86_400


def errors_of(text: str, *, max_run: timedelta = timedelta(days=30)) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_trace(text, source="t.csv", max_run=max_run)
    return caught.value.errors


def test_a_declared_limit_is_the_specs_max_runtime_rounded_up_to_a_second() -> None:
    rows = parse_trace(f"{HEADER}0,research,1,1,600,7200\n5,research,1,1,600,3600.2\n")
    specs = [job_spec(r, registry=REGISTRY) for r in rows]
    assert [r.max_runtime_s for r in rows] == [7200.0, 3600.2]
    assert [s["maxRuntime"] for s in specs] == ["7200s", "3601s"]
    for spec in specs:
        parse_spec(spec, teams=["research"], registries=[REGISTRY])


def test_an_empty_cell_or_no_column_keeps_twice_the_run_at_least_an_hour() -> None:
    (empty,) = parse_trace(f"{HEADER}0,research,1,1,5400,\n")
    (absent,) = parse_trace("submit_s,team,gpus,replicas,run_s\n0,research,1,1,600\n")
    assert empty.max_runtime_s is None and absent.max_runtime_s is None
    assert job_spec(empty, registry=REGISTRY)["maxRuntime"] == "10800s"
    assert job_spec(absent, registry=REGISTRY)["maxRuntime"] == "3600s"


def test_a_limit_below_the_run_time_is_kept_the_job_dies_at_it() -> None:
    (row,) = parse_trace(f"{HEADER}0,research,1,1,7200,1800\n")
    assert job_spec(row, registry=REGISTRY)["maxRuntime"] == "1800s"


def test_bad_limits_are_named_by_line_and_column() -> None:
    text = f"{HEADER}0,research,1,1,60,soon\n0,research,1,1,60,0\n0,research,1,1,60,-5\n0,research,1,1,60,{31 * DAY}\n"
    assert errors_of(text) == [
        "line 2, column max_runtime_s: expected a number of seconds such as 30, 2.5 or 1e3, got 'soon'",
        f"line 3, column max_runtime_s: expected a positive number and at most {30 * DAY} "
        "(the policy's maxRuntimeLimit, 30d), got '0'",
        f"line 4, column max_runtime_s: expected a positive number and at most {30 * DAY} "
        "(the policy's maxRuntimeLimit, 30d), got '-5'",
        f"line 5, column max_runtime_s: expected a positive number and at most {30 * DAY} "
        f"(the policy's maxRuntimeLimit, 30d), got '{31 * DAY}'",
    ]


def test_the_limit_checked_is_the_configurations() -> None:
    assert errors_of(f"{HEADER}0,research,1,1,60,7200\n", max_run=timedelta(hours=1)) == [
        "line 2, column max_runtime_s: expected a positive number and at most 3600 "
        "(the policy's maxRuntimeLimit, 1h), got '7200'"
    ]


def test_the_plan_submits_the_declared_limit(tmp_path: Path) -> None:
    (tmp_path / "groups.yaml").write_text(GROUPS)
    config = load_configuration(tmp_path / "groups.yaml")
    rows = parse_trace(f"{HEADER}0,research,8,1,600,14400\n")
    (submission,) = trace_plan(rows, config).submissions
    assert json.loads(submission.body)["maxRuntime"] == "14400s"


# ---- the long history's declared limits ---------------------------------------------------------


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_long_history_is_unchanged_unless_limits_are_asked_for() -> None:
    plain = long_history(200, days=20)
    declared = long_history(200, days=20, declared_limits=True)
    assert plain.splitlines()[0] == "submit_s,team,gpus,replicas,run_s,priority,note"
    assert declared.splitlines()[0] == "submit_s,team,gpus,replicas,run_s,priority,max_runtime_s,note"
    # the same jobs, only the limit added
    strip = [{k: v for k, v in r.items() if k != "max_runtime_s"} for r in _rows(declared)]
    assert strip == _rows(plain)


def test_declared_limits_are_coarse_and_above_the_run_time() -> None:
    rows = _rows(long_history(500, days=40, declared_limits=True))
    for row in rows:
        limit, run = float(row["max_runtime_s"]), float(row["run_s"])
        assert limit >= run
        assert limit % 3600 == 0  # a whole number of hours (every usual step is one too)
        assert limit <= 30 * DAY
    # about half of them one of the usual steps, the rest any whole number of hours
    steps = sum(float(r["max_runtime_s"]) in LIMIT_STEPS for r in rows)
    assert 0.4 * len(rows) < steps < 0.8 * len(rows)
    # mostly well above the run (1.5x to 5x, rounded up), capped only by the 30-day limit
    assert sum(float(r["max_runtime_s"]) >= 1.5 * float(r["run_s"]) for r in rows) >= 0.95 * len(rows)
    # and parsed as a trace, each row's spec has its limit
    trace = parse_trace(long_history(50, days=10, declared_limits=True))
    assert all(r.max_runtime_s is not None for r in trace)
