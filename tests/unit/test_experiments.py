"""A sweep's trials judged by its objective (core/experiments.py): ranking, best trial, median stopping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.core.experiments import median_stop, rank_trials
from squall.core.jobs import Job, JobStatus, Reason
from squall.core.metrics import MetricSeries, merge
from squall.core.spec import EarlyStopping, Objective, expand_sweep, parse_spec, recorded

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TEAMS = ["research"]
REGISTRIES = ["registry.example.com/squall"]


def sweep_parent(objective: dict[str, str] | None = None, **sweep: Any) -> tuple[Job, list[tuple[str, Any]]]:
    body: dict[str, Any] = {
        "name": "tune",
        "team": "research",
        "image": "registry.example.com/squall/tf-trainer:1.0",
        "sweep": {"parameters": {"lr": [0.1, 0.01, 0.001, 0.0001]}, "maxTrials": 4, **sweep},
    }
    if objective is not None:
        body["sweep"]["objective"] = objective
    spec = parse_spec(body, teams=TEAMS, registries=REGISTRIES)
    trials = expand_sweep(spec, job_id="tune-1")
    parent = Job(
        id="tune-1",
        name="tune",
        team="research",
        namespace="research",
        status=JobStatus.RUNNING,
        reason=Reason.STARTED,
        submitted_at=NOW - timedelta(hours=2),
        updated_at=NOW,
        spec=recorded(spec),
        trial_ids=tuple(t for t, _ in trials),
    )
    return parent, trials


def trial(
    trial_id: str,
    trial_spec: Any,
    *,
    lines: tuple[str, ...] = (),
    status: JobStatus = JobStatus.SUCCEEDED,
    ran: timedelta = timedelta(hours=1),
    gpus: int = 2,
    cost: float | None = None,
) -> Job:
    started = NOW - timedelta(hours=2)
    return Job(
        id=trial_id,
        name="tune",
        team="research",
        namespace="research",
        status=status,
        reason=Reason.COMPLETED if status is JobStatus.SUCCEEDED else Reason.STARTED,
        submitted_at=started,
        updated_at=NOW,
        spec=recorded(trial_spec),
        parent_id="tune-1",
        started_at=started,
        finished_at=started + ran if status is not JobStatus.RUNNING else None,
        gpus=gpus,
        cost=cost,
        metrics=merge(None, lines, cursor=None) if lines else None,
    )


MAXIMIZE = {"metric": "eval/score", "goal": "maximize"}


def test_trials_are_ranked_by_their_best_value_for_the_goal_and_the_best_is_named() -> None:
    parent, specs = sweep_parent(MAXIMIZE)
    trials = [
        trial(specs[0][0], specs[0][1], lines=("squall-metric eval/score=0.5 step=10",)),
        # its best point counts, not its last
        trial(
            specs[1][0],
            specs[1][1],
            lines=("squall-metric eval/score=0.9 step=10", "squall-metric eval/score=0.7 step=20"),
        ),
        trial(specs[2][0], specs[2][1]),  # reported nothing
        trial(specs[3][0], specs[3][1], lines=("squall-metric eval/score=0.8 step=10",)),
    ]

    results = rank_trials(parent, trials, now=NOW)

    assert [r.id for r in results.trials] == ["tune-1-t001", "tune-1-t003", "tune-1-t000", "tune-1-t002"]
    assert results.best is not None and results.best.id == "tune-1-t001"
    assert (results.best.value, results.best.step) == (0.9, 10)
    assert results.best.parameters == {"lr": 0.01}
    assert results.trials[-1].value is None
    assert (results.objective_metric, results.goal, results.unreported) == ("eval/score", "maximize", False)


def test_minimize_ranks_the_lowest_first() -> None:
    parent, specs = sweep_parent({"metric": "eval/loss", "goal": "minimize"})
    trials = [
        trial(tid, s, lines=(f"squall-metric eval/loss={v} step=5",))
        for (tid, s), v in zip(specs, (0.4, 0.2, 0.3, 0.9), strict=True)
    ]

    results = rank_trials(parent, trials, now=NOW)

    assert [r.value for r in results.trials] == [0.2, 0.3, 0.4, 0.9]


def test_a_failed_trial_is_ranked_but_never_the_best() -> None:
    parent, specs = sweep_parent(MAXIMIZE)
    trials = [
        trial(
            specs[0][0], specs[0][1], lines=("squall-metric eval/score=0.99 step=1",), status=JobStatus.FAILED
        ),
        trial(specs[1][0], specs[1][1], lines=("squall-metric eval/score=0.5 step=1",)),
    ]

    results = rank_trials(parent, trials, now=NOW)

    assert results.trials[0].id == "tune-1-t000"
    assert results.best is not None and results.best.id == "tune-1-t001"


def test_an_objective_no_trial_reported_says_so() -> None:
    parent, specs = sweep_parent(MAXIMIZE)
    trials = [trial(tid, s, lines=("squall-metric train/loss=0.3 step=1",)) for tid, s in specs]

    results = rank_trials(parent, trials, now=NOW)

    assert results.unreported is True
    assert results.best is None
    assert [r.id for r in results.trials] == [tid for tid, _ in specs]


def test_without_an_objective_trials_keep_their_order_and_none_is_best() -> None:
    parent, specs = sweep_parent()
    trials = [trial(tid, s, lines=("squall-metric eval/score=0.3 step=1",)) for tid, s in reversed(specs)]

    results = rank_trials(parent, trials, now=NOW)

    assert [r.id for r in results.trials] == [tid for tid, _ in specs]
    assert results.best is None and results.unreported is False and results.goal is None


def test_run_time_gpu_hours_and_cost_of_each_trial() -> None:
    parent, specs = sweep_parent(MAXIMIZE)
    done = trial(specs[0][0], specs[0][1], ran=timedelta(minutes=90), gpus=4, cost=12.5)
    running = trial(specs[1][0], specs[1][1], status=JobStatus.RUNNING, gpus=1)

    by_id = {r.id: r for r in rank_trials(parent, [done, running], now=NOW).trials}

    assert by_id["tune-1-t000"].run_seconds == 5400
    assert by_id["tune-1-t000"].gpu_hours == pytest.approx(6.0)
    assert by_id["tune-1-t000"].cost == 12.5
    assert by_id["tune-1-t001"].run_seconds == 7200  # running: until now
    assert by_id["tune-1-t001"].gpu_hours == pytest.approx(2.0)


# ---- median stopping ----------------------------------------------------------


def series(*points: tuple[int, float]) -> MetricSeries:
    metrics = merge(None, [f"squall-metric m={v} step={s}" for s, v in points], cursor=None)
    found = metrics.get("m")
    assert found is not None
    return found


UP = Objective(metric="m", goal="maximize")
DOWN = Objective(metric="m", goal="minimize")
RULE = EarlyStopping(min_steps=10, min_trials=3)
FINISHED = [
    series((5, 0.4), (10, 0.6), (20, 0.8)),
    series((10, 0.5), (20, 0.7)),
    series((10, 0.7), (20, 0.9)),
]


def test_a_trial_worse_than_the_median_at_its_latest_step_stops() -> None:
    decision = median_stop(series((5, 0.1), (10, 0.4)), FINISHED, objective=UP, rule=RULE)

    assert decision is not None
    assert (decision.step, decision.value, decision.median, decision.compared) == (10, 0.4, 0.6, 3)
    assert "m was 0.4 at step 10" in decision.message() and "median 0.6" in decision.message()


def test_a_trial_at_or_better_than_the_median_goes_on() -> None:
    assert median_stop(series((10, 0.6)), FINISHED, objective=UP, rule=RULE) is None
    assert median_stop(series((10, 0.65)), FINISHED, objective=UP, rule=RULE) is None


def test_for_minimize_a_higher_value_is_worse() -> None:
    assert median_stop(series((10, 0.65)), FINISHED, objective=DOWN, rule=RULE) is not None
    assert median_stop(series((10, 0.4)), FINISHED, objective=DOWN, rule=RULE) is None


def test_no_stop_before_min_steps() -> None:
    assert median_stop(series((9, 0.0)), FINISHED, objective=UP, rule=RULE) is None


def test_no_stop_with_fewer_finished_trials_than_min_trials_at_that_step() -> None:
    assert median_stop(series((10, 0.1)), FINISHED[:2], objective=UP, rule=RULE) is None
    # Three finished trials, none with a point at or before the running trial's step 12.
    late = [series((30, 0.9)), series((30, 0.9)), series((30, 0.9))]
    assert median_stop(series((12, 0.1)), late, objective=UP, rule=RULE) is None


def test_finished_trials_without_the_metric_are_not_counted() -> None:
    assert median_stop(series((10, 0.1)), [None, *FINISHED[:2]], objective=UP, rule=RULE) is None


def test_a_trial_that_reported_nothing_goes_on() -> None:
    assert median_stop(None, FINISHED, objective=UP, rule=RULE) is None


def test_the_finished_trials_value_is_their_latest_at_or_before_the_step() -> None:
    # At step 15 the finished trials had 0.6, 0.5, 0.7 (their step-10 points): median 0.6.
    decision = median_stop(series((15, 0.55)), FINISHED, objective=UP, rule=RULE)
    assert decision is not None and decision.median == 0.6
