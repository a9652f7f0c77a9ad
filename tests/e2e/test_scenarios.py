"""The shipped scenarios end to end on the memory backend, their invariants asserted.

Each runs the real handlers against the simulated cloud and cluster through
`Simulation`, as `squall local run --scenario FILE` does. The moto path is covered
by the demo (tests/e2e/test_demo.py), which tells the burst story on moto.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.local.live import PlainLiveView, RichLiveView, make_view
from squall.local.runtime import LocalRuntime
from squall.local.scenario import Simulation, SimulationResult, load_scenario
from tests.e2e.helpers_cli import run_squall

SCENARIOS = Path(__file__).parents[2] / "scenarios"


@dataclass
class Run:
    result: SimulationResult
    history: dict[str, list[str]]  # job id -> reasons of its events, in order
    lambda_errors: dict[str, float]  # function -> its AWS/Lambda Errors, summed
    lifecycle: list[dict[str, Any]]  # the lifecycle function's answers
    causes: list[str]  # Auto Scaling's termination causes

    @property
    def summary(self) -> dict[str, Any]:
        return self.result.summary


def run(name: str) -> Run:
    seen: dict[str, Any] = {}

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        seen["history"] = {job.id: [str(e.reason) for e in local.events(job.id)] for job in local.jobs()}
        errors: dict[str, float] = {}
        for point in local.metrics.points:
            if point.name == "Errors" and point.value:
                function = point.dimensions["FunctionName"].removeprefix("squall-")
                errors[function] = errors.get(function, 0) + point.value
        seen["lambda_errors"] = errors
        seen["lifecycle"] = list(local.lifecycle_results)
        seen["causes"] = [a.cause for a in local.fleet.failures if a.cause] if local.fleet is not None else []

    # "checked": every node, pod and Job handed out again is compared with a fresh copy,
    # so these runs also prove that sharing list objects changes nothing.
    result = Simulation(
        load_scenario(SCENARIOS / f"{name}.yaml"), backend="memory", pace=False, lists="checked"
    ).run(after=after)
    return Run(result=result, **seen)


def assert_invariants_hold(summary: dict[str, Any], *, faults_kill_functions: bool = False) -> None:
    if not faults_kill_functions:
        # The local runtime counts a handler that raises as a Lambda error, as Lambda
        # does: a bug in Squall's code would show here, not as a failed test.
        assert summary["functionErrors"] == {}
    assert summary["invariants"] == {
        "lostJobs": 0,
        "duplicateKubernetesJobs": 0,
        "busyNodesTerminated": 0,
        "hooksLeftOpen": 0,
        "jobsInTwoClusters": 0,
    }
    assert summary["finished"], "the run reached its end condition before its time limit"


@pytest.fixture(scope="module")
def scenario() -> Callable[[str], Run]:
    """run(name), each shipped scenario run at most once in this module."""
    return functools.cache(run)


def test_burst_spills_to_the_second_region_and_scales_back_to_zero(scenario: Callable[[str], Run]) -> None:
    burst = scenario("burst")
    summary = burst.summary
    assert_invariants_hold(summary)
    assert summary["jobs"] == {"REJECTED": 1, "SUCCEEDED": 8}
    # us-west-2 has room for four p3.8xlarge (plus a CPU node); the rest lands in us-east-1
    assert summary["peakNodes"]["us-west-2"] <= 5 < summary["peakNodes"]["us-east-1"]
    assert summary["fallbacks"] >= 1
    assert any(
        reason.startswith("GangReleased") or reason == "Started" for reason in burst.history["gan-dist-1"]
    )
    # every node Squall removed went through its terminate hook and was drained first
    assert summary["scaleDowns"] > 0 and summary["drains"] >= summary["scaleDowns"]
    assert summary["hooksCompleted"] >= summary["drains"]


def test_burst_accounts_gpu_hours_and_cost(scenario: Callable[[str], Run]) -> None:
    burst = scenario("burst")
    summary = burst.summary
    # 5 jobs x 12 GPUs x 20 min + 3 single-GPU jobs x 4 min of work; a gang's workers
    # that started a little after its chief stop with it, so a little less
    work = 5 * 12 * 20 / 60 + 3 * 4 / 60
    assert 0.9 * work <= summary["gpuHours"]["busy"] <= work
    assert summary["gpuHours"]["idle"] > 0, "booted nodes wait for pods, idle nodes for the threshold"
    # a p3.8xlarge costs 12.24 an hour: the busy GPU-hours alone (4 GPUs a node) cost this much
    assert summary["cost"] >= summary["gpuHours"]["busy"] / 4 * 12.24
    waits = summary["queueWaitSeconds"]
    assert 0 < waits["p50"] <= waits["p90"] <= waits["max"] < 15 * 60


def test_spot_reclaim_retries_the_lost_jobs_and_finishes(scenario: Callable[[str], Run]) -> None:
    spot = scenario("spot-reclaim")
    summary = spot.summary
    assert_invariants_hold(summary)
    assert summary["jobs"] == {"SUCCEEDED": 6}
    lost = sorted(
        job for job, reasons in spot.history.items() if any(r.startswith("NodeLost:retry") for r in reasons)
    )
    assert len(lost) == 2, "the two reclaimed nodes each ran one 4-GPU job"
    for job in lost:
        assert spot.history[job][-1] == "Completed"
        assert spot.history[job].count("Started") == 2, "started again after the reclaim"
    assert any("spot reclaim: g5-usw2-spot-" in note for note in spot.result.notes)
    # the reclaimed instances went through the terminate hook too (two-minute notice)
    assert summary["drains"] >= summary["scaleDowns"] + 2


def test_region_outage_moves_the_work_and_comes_back(scenario: Callable[[str], Run]) -> None:
    outage = scenario("region-outage")
    summary = outage.summary
    assert_invariants_hold(summary)
    assert summary["jobs"] == {"SUCCEEDED": 8}
    for number in range(1, 5):
        reasons = outage.history[f"vit-{number}"]
        assert any(r.startswith("NodeLost") for r in reasons) and reasons[-1] == "Completed"
    assert summary["fallbacks"] >= 1
    assert summary["peakNodes"]["us-east-1"] > 0 and summary["peakNodes"]["us-west-2"] > 0
    assert any("us-west-2 can run 10 p3.8xlarge" in note for note in outage.result.notes)


def test_throttling_and_a_killed_admission_lose_and_double_nothing(scenario: Callable[[str], Run]) -> None:
    throttling = scenario("throttling")
    summary = throttling.summary
    assert_invariants_hold(summary, faults_kill_functions=True)
    assert summary["jobs"] == {"SUCCEEDED": 15}
    errors = summary["functionErrors"]
    # admission creates the objects: the killed invocation is a scale check's
    assert errors["scale"] >= 4, "Auto Scaling throttled three calls, and one check was killed"
    assert "submit" not in errors, "the submit function creates no objects"
    # a throttled list leaves the cluster unread for one reconcile run, which does not fail for it
    assert "reconcile" not in errors
    assert any(
        "the scale function was killed half way (killed at create)" in n for n in throttling.result.notes
    )
    # every job ran once: one Start, and no retries
    assert all(reasons.count("Started") == 1 for reasons in throttling.history.values())
    # the runtime recorded each failed invocation once, in Lambda's own Errors metric
    assert throttling.lambda_errors == errors


def test_an_instance_lost_without_notice_retries_its_job_and_every_invariant_holds(
    scenario: Callable[[str], Run],
) -> None:
    lost = scenario("instance-lost")
    summary = lost.summary
    assert_invariants_hold(summary)
    assert summary["jobs"] == {"SUCCEEDED": 4}
    assert sum("instance lost without notice: g5-usw2-" in note for note in lost.result.notes) == 1
    # the job on the lost node lost its pod with it and ran again, within its retries
    (job,) = [job for job, reasons in lost.history.items() if any(r.startswith("NodeLost") for r in reasons)]
    assert lost.history[job] == [
        "Submitted", "Queued", "Placed:us-west-2", "Admitted:us-west-2", "Started", "NodeLost:retry 1/2", "Started",
        "Completed",
    ]  # fmt: skip
    # no drain had the chance to note the job before its node went (as a spot reclaim's does)
    assert not any(r.startswith("NodeLost:") and "retry" not in r for r in lost.history[job])
    # Auto Scaling's health check took the instance out of service; the terminate hook
    # ran after the fact and Squall answered it with nothing left to drain
    assert sum("EC2 health check indicating it has been terminated or stopped" in c for c in lost.causes) == 1
    (answered,) = [r for r in lost.lifecycle if r["kind"] == "terminate" and r["drainOutcome"] == "no-node"]
    assert answered["result"] == "CONTINUE"
    # the group replaced the instance: four scale-ups, yet five instances drained or answered
    assert summary["scaleUps"] == 4 and summary["drains"] == 5
    assert summary["functionErrors"] == {}


def test_local_run_prints_the_summary_as_its_last_line() -> None:
    completed = run_squall(
        "local", "run", "--scenario", str(SCENARIOS / "spot-reclaim.yaml"), "--backend", "memory", "--json"
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert set(summary) >= {
        "jobs", "queueWaitSeconds", "gpuHours", "cost", "peakNodes", "scaleUps", "fallbacks",
        "scaleDowns", "drains", "hooksCompleted", "invariants",
    }  # fmt: skip
    assert summary["jobs"] == {"SUCCEEDED": 6}


def test_local_run_refuses_a_broken_scenario_naming_the_field(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: b\nnodeGroups: []\narrivals: [{at: soon, body: x, expect: deadLetter}]\n")
    completed = run_squall("local", "run", "--scenario", str(broken), timeout=120)
    assert completed.returncode == 2
    assert "arrivals[0].at: must be a duration" in completed.stderr


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_view_on_a_terminal_and_plain_lines_elsewhere() -> None:
    assert isinstance(make_view(io.StringIO(), title="t", follow_jobs=True), PlainLiveView)
    screen = FakeTerminal()
    view = make_view(screen, title="spot-reclaim", follow_jobs=True)
    assert isinstance(view, RichLiveView)
    view.console.width = 140
    result = Simulation(
        load_scenario(SCENARIOS / "spot-reclaim.yaml"), backend="memory", view=view, pace=False
    ).run()
    assert result.ok
    drawn = screen.getvalue()
    for part in (
        "Jobs by state",
        "Nodes per region",
        "Queue (",
        "pending GPUs",
        "us-west-2",
        "SUCCEEDED",
        "spot reclaim",
    ):
        assert part in drawn, part


def test_plain_lines_follow_jobs_nodes_and_events() -> None:
    out = io.StringIO()
    view = PlainLiveView(out=out, follow_jobs=True, status_every=timedelta(minutes=10))
    Simulation(load_scenario(SCENARIOS / "spot-reclaim.yaml"), backend="memory", view=view, pace=False).run()
    text = out.getvalue()
    assert "bert-1                   RUNNING (Started)" in text
    assert "[cluster]                us-west-2 1 nodes/4 GPUs" in text
    assert "[event]                  spot reclaim: g5-usw2-spot-" in text
    assert "[status]                 jobs " in text and "| pending GPUs " in text
    assert text.rstrip().endswith("jobs SUCCEEDED 6; no nodes")
