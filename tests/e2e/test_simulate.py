"""`squall simulate`: a job history replayed against node groups, as a capacity-planning tool."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.local.scenario import Simulation, compile_scenario
from squall.local.trace import load_configuration, parse_trace, trace_plan
from tests.e2e.helpers_cli import run_squall
from tests.groups import gpu_group

GROUP = gpu_group("g5-usw2", "g5.12xlarge", max_size=8, priority=10, minSize=0, pricePerHour=5.67)


def trace_text(jobs: int = 40, *, seed: int = 1) -> str:
    """Two bursts of single- and multi-GPU jobs over an hour and a half."""
    rng = random.Random(seed)
    lines = ["submit_s,team,gpus,replicas,run_s,queue"]
    for number in range(jobs):
        burst = 0 if number < jobs // 2 else 3600
        gpus, replicas = rng.choice([(1, 1), (1, 1), (2, 1), (4, 1), (4, 2)])
        lines.append(f"{burst + rng.uniform(0, 600):.0f},{rng.choice(['research', 'vision'])},{gpus},{replicas},"
                     f"{rng.uniform(300, 1500):.0f},default")  # fmt: skip
    return "\n".join(lines) + "\n"


def groups_file(path: Path, *, max_size: int = 8, idle: str = "PT10M") -> Path:
    path.write_text(
        yaml.safe_dump({"nodeGroups": [GROUP | {"maxSize": max_size}], "policy": {"idleThreshold": idle}})
    )
    return path


def replay(tmp_path: Path, *, max_size: int = 8, idle: str = "PT10M") -> dict[str, Any]:
    config = load_configuration(
        groups_file(tmp_path / f"g-{max_size}-{idle}.yaml", max_size=max_size, idle=idle)
    )
    plan = trace_plan(parse_trace(trace_text()), config)
    result = Simulation(plan, backend="memory", pace=False, lists="checked").run()
    assert result.ok, result.summary
    return result.summary


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return replay(tmp_path_factory.mktemp("baseline"))


def test_every_job_of_the_trace_runs_and_nothing_is_broken(baseline: dict[str, Any]) -> None:
    assert baseline["jobs"] == {"SUCCEEDED": 40}
    assert baseline["invariants"] == {
        "lostJobs": 0,
        "duplicateKubernetesJobs": 0,
        "busyNodesTerminated": 0,
        "hooksLeftOpen": 0,
        "jobsInTwoClusters": 0,
    }
    assert 0 < baseline["peakNodes"]["us-west-2"] <= 8
    assert baseline["scaleUps"] > 0 and baseline["scaleDowns"] > 0
    assert baseline["gpuHours"]["busy"] > 0 and baseline["cost"] > 0


def test_smaller_groups_make_jobs_wait_longer(tmp_path: Path, baseline: dict[str, Any]) -> None:
    small = replay(tmp_path, max_size=2)
    assert small["peakNodes"]["us-west-2"] <= 2
    assert small["queueWaitSeconds"]["p90"] > baseline["queueWaitSeconds"]["p90"]
    assert small["queueWaitSeconds"]["max"] > baseline["queueWaitSeconds"]["max"]


def test_a_longer_idle_threshold_keeps_nodes_and_costs_more(tmp_path: Path, baseline: dict[str, Any]) -> None:
    patient = replay(tmp_path, idle="PT60M")
    assert patient["gpuHours"]["idle"] > baseline["gpuHours"]["idle"]
    assert patient["cost"] > baseline["cost"]
    assert patient["gpuHours"]["busy"] == pytest.approx(baseline["gpuHours"]["busy"], rel=0.05), (
        "the same work"
    )


def test_a_node_idle_for_less_than_the_threshold_is_kept_for_the_next_job() -> None:
    # given a node that ran one job for 30 minutes, and the next job 3 minutes after it ended
    spec = {
        "name": "a",
        "team": "research",
        "image": "registry.example.com/squall/t:1",
        "resources": {"gpu": 1},
    }
    plan = compile_scenario(
        {
            "name": "idle",
            "nodeGroups": [GROUP],
            "policy": {"idleThreshold": "PT10M"},
            "arrivals": [
                {"at": 0, "spec": spec | {"id": "first"}, "runTime": "30m"},
                {"at": "36m", "spec": spec | {"id": "second"}, "runTime": "5m"},
            ],
        }
    )
    # when it runs
    result = Simulation(plan, backend="memory", pace=False).run()
    # then the idle node (3 minutes < 10) took the second job: one node launched, never a second
    assert result.ok
    assert result.summary["scaleUps"] == 1


def test_simulate_prints_the_summary_as_its_last_line(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text(trace_text(12))
    groups = groups_file(tmp_path / "groups.yaml")
    completed = run_squall("simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups), "--json")
    assert completed.returncode == 0, completed.stderr
    (line,) = completed.stdout.strip().splitlines()
    summary = json.loads(line)
    assert summary["jobs"] == {"SUCCEEDED": 12} and not any(summary["invariants"].values())


def test_simulate_without_groups_uses_cdk_json_and_names_bad_rows(tmp_path: Path) -> None:
    (tmp_path / "cdk.json").write_text((Path(__file__).parents[2] / "cdk.json").read_text())
    (tmp_path / "trace.csv").write_text(
        "submit_s,team,gpus,replicas,run_s\n0,research,1,1,60\n5,research,two,1,60\n"
    )
    completed = run_squall("simulate", "--trace", "trace.csv", timeout=120, cwd=tmp_path)
    assert completed.returncode == 2
    assert "trace.csv: 1 error" in completed.stderr
    assert "line 3, column gpus: expected a whole number 0..16, got 'two'" in completed.stderr


def test_simulate_takes_the_max_runtime_limit_from_the_groups_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from squall.cli import main

    # given a trace with a job of two days, and groups whose policy allows one
    (tmp_path / "trace.csv").write_text("submit_s,team,gpus,replicas,run_s\n0,research,1,1,172800\n")
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"nodeGroups": [GROUP], "policy": {"maxRuntimeLimit": "P1D"}}))
    # when it is replayed
    code = main(["simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups), "--json"])
    # then the row is refused, naming the configured limit
    assert code == 2
    err = capsys.readouterr().err
    assert "line 2, column run_s: expected a positive number and at most 86400 (the policy's maxRuntimeLimit, 1d)" in err


def test_simulate_refuses_a_groups_file_that_is_no_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from squall.cli import main

    (tmp_path / "trace.csv").write_text("submit_s,team,gpus,replicas,run_s\n0,research,1,1,60\n")
    groups = tmp_path / "groups.yaml"
    groups.write_bytes(b"nodeGroups:\n  - name: caf\xe9\n")
    assert main(["simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups)]) == 2
    assert "line 2, column 14: not UTF-8 text" in capsys.readouterr().err
