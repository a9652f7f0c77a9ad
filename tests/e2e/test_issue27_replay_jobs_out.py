"""`squall simulate` of a trace with declared limits: jobs-out's estimate and cost columns, the summary's new keys."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.cli import main
from tests.groups import gpu_group

GROUP = gpu_group("g5-usw2", "g5.12xlarge", max_size=1, priority=10, minSize=0, pricePerHour=5.67)
# Four GPUs in all: "long" holds them all, the two after it wait for it.
TRACE = (
    "submit_s,team,gpus,replicas,run_s,max_runtime_s\n"
    "0,research,4,1,1800,3600\n"
    "60,vision,4,1,600,\n"
    "120,research,2,1,7200,900\n"
)


def replay(tmp_path: Path, *extra: str) -> tuple[int, str, list[dict[str, str]]]:
    (tmp_path / "trace.csv").write_text(TRACE)
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"nodeGroups": [GROUP], "policy": {"idleThreshold": "PT5M"}}))
    out = tmp_path / "jobs.csv"
    code = main(
        ["simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups), "--jobs-out", str(out),
         *extra]
    )  # fmt: skip
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return code, str(out), rows


@pytest.mark.timeout(120)
def test_a_replay_reports_estimates_and_costs_per_job_and_in_its_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a trace whose last job declares a limit below its run time
    code, _, rows = replay(tmp_path, "--json")
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    # then the jobs file has the new columns, after the old ones
    assert list(rows[0])[-4:] == ["cluster", "starts_by_s", "likely_start_s", "cost"]
    by_id = {r["id"]: r for r in rows}
    # the declared limit holds: the job that would run 2 hours dies at its 15 minutes
    assert (by_id["research-000004"]["state"], by_id["research-000004"]["reason"]) == (
        "FAILED",
        "DeadlineExceeded",
    )
    assert (by_id["research-000002"]["state"], by_id["vision-000003"]["state"]) == ("SUCCEEDED", "SUCCEEDED")
    assert code == 0  # a job failing at its limit is the trace's doing, not a broken invariant
    assert summary["invariants"] == dict.fromkeys(summary["invariants"], 0)
    # an estimate, where a job has one, is a time after its submission; a cost is dollars
    for row in rows:
        for column in ("starts_by_s", "likely_start_s"):
            assert row[column] == "" or float(row[column]) >= float(row["submitted_s"])
        assert row["cost"] == "" or float(row["cost"]) >= 0
    # and the summary has p99 waits, the estimates and the costs beside its old keys
    assert set(summary["queueWaitSeconds"]) == {"p50", "p90", "p99", "max", "byTeam"}
    assert set(summary["estimates"]) == {"startedByStartsBy", "judged", "likelyStartMedianError"}
    costs = summary["costs"]
    assert costs["fleet"] == summary["cost"] > 0
    priced = sum(float(r["cost"]) for r in rows if r["cost"])
    assert costs["jobs"] == pytest.approx(priced, abs=0.01)
    assert costs["jobs"] + costs["overhead"] == pytest.approx(costs["fleet"], abs=0.01)


@pytest.mark.timeout(120)
def test_the_printed_summary_says_waits_estimates_and_costs_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay(tmp_path)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.startswith("queue wait: p50 ") and ", p99 " in line for line in lines), out
    assert any(line.startswith("estimates: ") for line in lines), out
    (costs,) = [line for line in lines if line.startswith("costs: jobs $")]
    assert " + overhead $" in costs and " = fleet $" in costs


@pytest.mark.timeout(120)
def test_first_estimates_are_held_against_the_simulated_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given the trace: every job waits (for the node to boot, then for room on it)
    replay(tmp_path, "--json")
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in csv.DictReader((tmp_path / "jobs.csv").open(newline=""))}
    # then each got a first startsBy while it waited, and the job that waited longest started by it
    assert all(r["starts_by_s"] and r["likely_start_s"] for r in rows.values()), rows
    waited = rows["vision-000003"]
    assert float(waited["started_s"]) - float(waited["submitted_s"]) > 1800  # behind the first job's run
    assert float(waited["started_s"]) <= float(waited["starts_by_s"])
    # and the summary judges the same jobs the rows show: one priority, so every one that started
    on_time = [float(r["started_s"]) <= float(r["starts_by_s"]) for r in rows.values() if r["started_s"]]
    assert summary["estimates"]["judged"] == len(on_time) == 3
    assert summary["estimates"]["startedByStartsBy"] == round(sum(on_time) / len(on_time), 4)
