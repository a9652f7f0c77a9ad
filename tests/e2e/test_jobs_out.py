"""`--jobs-out FILE.csv` of `squall simulate` and `squall local run`, and the summary's per-team waits."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.cli import main
from tests.groups import gpu_group

HEADER = [
    "id",
    "team",
    "priority",
    "gpus",
    "replicas",
    "submitted_s",
    "started_s",
    "finished_s",
    "state",
    "reason",
    "cluster",
    "starts_by_s",
    "likely_start_s",
    "cost",
]
GROUP = gpu_group("g5-usw2", "g5.12xlarge", max_size=4, priority=10, minSize=0, pricePerHour=5.67)
SPEC = {"name": "t", "team": "research", "image": "registry.example.com/squall/t:1", "resources": {"gpu": 1}}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == HEADER
    return [dict(zip(HEADER, row, strict=True)) for row in rows[1:]]


def summary_of(out: str) -> dict[str, Any]:
    (line,) = out.strip().splitlines()
    summary: dict[str, Any] = json.loads(line)
    return summary


@pytest.mark.timeout(120)
def test_simulate_writes_a_row_per_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # given a trace of two teams, one distributed job and priorities on some rows
    (tmp_path / "trace.csv").write_text(
        "submit_s,team,gpus,replicas,run_s,priority\n"
        "0,research,1,1,600,90\n"
        "30,research,2,2,900,\n"
        "60,vision,4,1,300,10\n"
    )
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"nodeGroups": [GROUP], "policy": {"idleThreshold": "PT5M"}}))
    out = tmp_path / "jobs.csv"
    # when it is replayed with --jobs-out
    code = main(
        ["simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups), "--json",
         "--jobs-out", str(out)]
    )  # fmt: skip
    # then every job has its row, times from the run's start
    summary = summary_of(capsys.readouterr().out)
    assert code == 0, summary
    rows = read_csv(out)
    assert [
        (r["id"], r["team"], r["priority"], r["gpus"], r["replicas"], r["submitted_s"]) for r in rows
    ] == [
        ("research-000002", "research", "90", "1", "1", "0"),
        ("research-000003", "research", "50", "4", "2", "30"),
        ("vision-000004", "vision", "10", "4", "1", "60"),
    ]
    run_s = {"research-000002": 600, "research-000003": 900, "vision-000004": 300}
    for row in rows:
        assert (row["state"], row["reason"]) == ("SUCCEEDED", "Completed")
        submitted, started, finished = (float(row[k]) for k in ("submitted_s", "started_s", "finished_s"))
        assert submitted <= started < finished
        assert finished - started >= run_s[row["id"]] - 60  # it ran its time (seen within a minute)
    # and the summary has the new keys beside the old ones
    assert summary["gangsReleased"] == 0
    by_team = summary["queueWaitSeconds"].pop("byTeam")
    assert set(summary["queueWaitSeconds"]) == {"p50", "p90", "p99", "max"}
    assert set(by_team) == {"research", "vision"}
    waits = {r["id"]: float(r["started_s"]) - float(r["submitted_s"]) for r in rows}
    assert by_team["vision"]["max"] == pytest.approx(waits["vision-000004"], abs=0.1)
    assert by_team["research"]["max"] == pytest.approx(
        max(waits["research-000002"], waits["research-000003"]), abs=0.1
    )


@pytest.mark.timeout(120)
def test_local_run_writes_sweep_parents_trials_and_rejected_specs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "sweep.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "name": "sweep",
                "nodeGroups": [GROUP],
                "policy": {"idleThreshold": "PT5M"},
                "arrivals": [
                    {"at": 0, "spec": SPEC | {"id": "single", "priority": 70}, "runTime": "5m"},
                    {"at": "1m", "runTime": "5m",
                     "spec": SPEC | {"id": "hp", "sweep": {"parameters": {"lr": [0.1, 0.01]}}}},
                    {"at": "2m", "spec": {"name": "Bad_Name!", "team": "research"}, "expect": "rejected"},
                ],
            }
        )
    )  # fmt: skip
    out = tmp_path / "jobs.csv"
    code = main(["local", "run", "--scenario", str(scenario), "--backend", "memory", "--json",
                 "--jobs-out", str(out)])  # fmt: skip
    summary = summary_of(capsys.readouterr().out)
    assert code == 0, summary
    rows = {r["id"]: r for r in read_csv(out)}
    assert len(rows) == 5, rows
    assert (rows["single"]["priority"], rows["single"]["gpus"], rows["single"]["state"]) == (
        "70",
        "1",
        "SUCCEEDED",
    )
    # a sweep parent: one row, no GPUs of its own; its trials carry them
    parent = rows["hp"]
    assert (parent["gpus"], parent["replicas"], parent["submitted_s"]) == ("0", "0", "60")
    trials = [r for job_id, r in rows.items() if job_id.startswith("hp-t")]
    assert [(t["gpus"], t["replicas"], t["state"]) for t in trials] == [("1", "1", "SUCCEEDED")] * 2
    # the rejected spec: its record, final at once, never started
    (rejected,) = [r for r in rows.values() if r["state"] == "REJECTED"]
    assert rejected["started_s"] == "" and rejected["finished_s"] == rejected["submitted_s"] == "120"
    assert rejected["reason"].startswith("InvalidSpec")
    assert summary["jobs"] == {"REJECTED": 1, "SUCCEEDED": 4}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["missing/jobs.csv", "."])
def test_a_jobs_out_path_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    (tmp_path / "trace.csv").write_text("submit_s,team,gpus,replicas,run_s\n0,research,1,1,60\n")
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"nodeGroups": [GROUP]}))
    target = tmp_path / where
    code = main(["simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups), "--json",
                 "--jobs-out", str(target)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""  # refused before the run: no summary
    assert f"squall: --jobs-out {target}: " in captured.err
    assert ("is not an existing directory" if where != "." else "is a directory") in captured.err
