"""scenarios/sweep-tpe.yaml end to end: a tpe sweep whose simulated trainers report a known objective.

The real handlers run the sweep on the simulated cloud and cluster (the memory backend,
as tests/e2e/test_scenarios.py runs the shipped scenarios): each trial's pods print
squall-metric lines from the scenario's objective of the trial's parameters
(local/cluster/metrics.py), reconcile reads them every minute into the trial's record,
tpe chooses each next trial's parameters when its slot comes, median stopping stops the
trials that fall behind (SUCCEEDED, EarlyStopped, their GPU freed), and the sweep
records its best trial. What `squall sweep` prints is made by the command's own
functions from the same ranking the SDK returns (the command against the endpoint is
tests/e2e/test_sweep_local_up.py's, with real pods: on moto this simulation takes
minutes instead of seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.cli.sweeps import results_dict, sweep_lines
from squall.core.experiments import SweepResults, rank_trials
from squall.core.jobs import Job, JobStatus, Reason
from squall.local.runtime import LocalRuntime
from squall.local.scenario import Simulation, SimulationResult, load_scenario
from tests.e2e.test_scenarios import assert_invariants_hold

pytestmark = pytest.mark.timeout(300)

SCENARIO = Path(__file__).parents[2] / "scenarios" / "sweep-tpe.yaml"
SWEEP = "lr-search"
TRIALS = 16
STEPS = 1000  # of the scenario's objective: a whole trial
RUN_TIME = timedelta(hours=1)  # of a whole trial


@dataclass
class Ran:
    result: SimulationResult
    jobs: dict[str, Job]
    results: SweepResults  # as Client.sweep_results ranks them


@pytest.fixture(scope="module")
def ran() -> Ran:
    seen: dict[str, Any] = {}

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        seen["jobs"] = jobs = {job.id: job for job in local.jobs()}
        parent = jobs[SWEEP]
        trials = [jobs[tid] for tid in parent.trial_ids]
        seen["results"] = rank_trials(parent, trials, now=local.clock.now())

    result = Simulation(load_scenario(SCENARIO), backend="memory", pace=False, lists="checked").run(after=after)
    return Ran(result=result, jobs=seen["jobs"], results=seen["results"])


def trials(ran: Ran) -> list[Job]:
    return sorted((j for j in ran.jobs.values() if j.parent_id == SWEEP), key=lambda j: j.id)


def test_the_sweep_runs_every_trial_to_an_end_and_the_invariants_hold(ran: Ran) -> None:
    assert_invariants_hold(ran.result.summary)
    assert ran.result.summary["jobs"] == {"SUCCEEDED": TRIALS + 1}
    assert len(trials(ran)) == TRIALS
    # tpe chose every trial's parameters within the sweep's ranges
    for trial in trials(ran):
        values = trial.spec["trialParameters"]
        assert 0.0001 <= values["lr"] <= 0.1 and 0.0 <= values["dropout"] <= 0.5
        assert values["optimizer"] in ("adam", "sgd")


def test_every_trial_reports_its_objective_as_its_simulated_trainer_prints_it(ran: Ran) -> None:
    for trial in trials(ran):
        assert trial.metrics is not None and trial.metrics.ignored == 0, trial.id
        score, loss = trial.metrics.get("eval/score"), trial.metrics.get("train/loss")
        assert score is not None and loss is not None, trial.id
        # an evaluation every 100 steps from the first, read as the trial went
        assert [p.step for p in score.history] == list(range(100, score.last.step + 1, 100)), trial.id
        if trial.reason == Reason.COMPLETED:
            assert score.last.step == STEPS, trial.id


def test_median_stopping_stops_the_trials_that_fall_behind_and_frees_their_gpus(ran: Ran) -> None:
    stopped = [t for t in trials(ran) if t.reason == Reason.EARLY_STOPPED]

    assert stopped, "no trial was stopped early"
    for trial in stopped:
        assert trial.status is JobStatus.SUCCEEDED
        score = trial.metrics.get("eval/score") if trial.metrics is not None else None
        assert score is not None and 300 <= score.last.step < STEPS, trial.id
        assert trial.started_at is not None and trial.finished_at is not None
        assert trial.finished_at - trial.started_at < RUN_TIME, trial.id
    # the GPU-hours of the fleet's busy GPUs show the hours the stopped trials did not run
    busy = ran.result.summary["gpuHours"]["busy"]
    assert busy < TRIALS - 0.5 * len(stopped), busy


def test_the_sweep_records_its_best_trial_and_squall_sweep_ranks_them(ran: Ran) -> None:
    parent, results = ran.jobs[SWEEP], ran.results
    assert results.best is not None and not results.unreported
    assert parent.best_trial == results.best.id
    assert ran.jobs[results.best.id].reason == Reason.COMPLETED
    assert parent.reason == Reason.TRIALS_FINISHED

    # squall sweep --json: every trial, ranked best first by eval/score, the best named
    ranked = results_dict(results)
    assert ranked["best"] == parent.best_trial
    assert ranked["objective"] == {"metric": "eval/score", "goal": "maximize"}
    values = [t["value"] for t in ranked["trials"]]
    assert len(values) == TRIALS and None not in values
    assert values == sorted(values, reverse=True)
    assert [t["rank"] for t in ranked["trials"]] == list(range(1, TRIALS + 1))
    assert {t["id"] for t in ranked["trials"] if t["earlyStopped"]} == {
        t.id for t in trials(ran) if t.reason == Reason.EARLY_STOPPED
    }
    # squall sweep: the table and the best trial's line
    _, header, rows, best = sweep_lines(results)
    assert header[:4] == ["RANK", "TRIAL", "STATE", "EVAL/SCORE"]
    assert [row[1] for row in rows] == [t["id"] for t in ranked["trials"]]
    assert "EarlyStopped" in {row[2] for row in rows}
    assert best.startswith(f"best trial {parent.best_trial}: eval/score ")
