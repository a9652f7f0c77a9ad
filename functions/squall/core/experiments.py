"""A sweep's trials judged by its objective: ranked, the best named, the hopeless stopped early.

Pure: jobs in, decisions out. A trial's value is its objective metric's best point for
the goal (core/metrics.py MetricSeries.best). Ranking puts the trials that reported the
objective first, best first; then the others, in trial order. The best trial is the
first ranked one that did not fail or get cancelled (a running trial can be the best so
far; once the sweep is over, it is a finished one). Median stopping (Katib's and
Optuna's median rule): a running trial whose value at its latest step is worse than
the median of the finished trials' values at that step stops there.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from squall.core.costs import cost_so_far
from squall.core.jobs import Job, JobStatus
from squall.core.metrics import Goal, MetricSeries
from squall.core.spec import EarlyStopping, Objective, load_spec

HOUR_SECONDS = 3600.0
# A trial that failed or was cancelled is ranked by what it reported, but never named the best.
_NEVER_BEST = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.REJECTED)


@dataclass(frozen=True)
class TrialResult:
    id: str
    status: JobStatus
    reason: str
    parameters: dict[str, Any]
    value: float | None  # the objective's best point for the goal; None: not reported (or no objective)
    step: int | None  # the step of that point
    run_seconds: float | None  # from its first start to its end (or now); None: never started
    gpu_hours: float | None
    cost: float | None  # dollars: final once it ended, so far while it runs; None: not known


@dataclass(frozen=True)
class SweepResults:
    sweep_id: str
    objective_metric: str | None
    goal: Goal | None
    trials: tuple[TrialResult, ...]  # best first, those that did not report the objective last
    best: TrialResult | None
    unreported: bool  # an objective, and no trial has reported it (yet)


@dataclass(frozen=True)
class StopDecision:
    """Why a running trial stops early: its value at `step` against the finished trials' median there."""

    metric: str
    step: int
    value: float
    median: float
    compared: int  # finished trials that had a value at that step

    def message(self) -> str:
        return (
            f"{self.metric} was {self.value:.6g} at step {self.step}, worse than the median "
            f"{self.median:.6g} of {self.compared} finished trials at that step"
        )


def sweep_objective(parent: Job) -> Objective | None:
    """The sweep's objective from its recorded spec (SpecError when the record does not load)."""
    sweep = load_spec(parent.spec).sweep
    return sweep.objective if sweep is not None else None


def trial_parameters(trial: Job) -> dict[str, Any]:
    """A trial's values as its record keeps them ({} while a tpe trial waits for its slot)."""
    values = trial.spec.get("trialParameters")
    return dict(values) if isinstance(values, Mapping) else {}


def objective_series(trial: Job, objective: Objective) -> MetricSeries | None:
    return trial.metrics.get(objective.metric) if trial.metrics is not None else None


def trial_result(trial: Job, objective: Objective | None, *, now: datetime) -> TrialResult:
    series = objective_series(trial, objective) if objective is not None else None
    point = series.best(objective.goal) if series is not None and objective is not None else None
    run_seconds: float | None = None
    if trial.started_at is not None:
        run_seconds = max(0.0, ((trial.finished_at or now) - trial.started_at).total_seconds())
    return TrialResult(
        id=trial.id,
        status=trial.status,
        reason=trial.reason,
        parameters=trial_parameters(trial),
        value=None if point is None else point.value,
        step=None if point is None else point.step,
        run_seconds=run_seconds,
        gpu_hours=None if run_seconds is None else trial.gpus * run_seconds / HOUR_SECONDS,
        cost=cost_so_far(trial, now=now, run_start=trial.started_at),
    )


def rank(results: Sequence[TrialResult], goal: Goal | None) -> list[TrialResult]:
    """Reported trials best first (equal values: the earlier step, then the earlier trial), then the rest in trial order."""
    sign = -1.0 if goal == "maximize" else 1.0
    reported = sorted(
        (r for r in results if r.value is not None),
        key=lambda r: (sign * (r.value or 0.0), r.step or 0, r.id),
    )
    return [*reported, *sorted((r for r in results if r.value is None), key=lambda r: r.id)]


def rank_trials(parent: Job, trials: Sequence[Job], *, now: datetime) -> SweepResults:
    """The sweep's trials ranked by its objective, and its best trial (SpecError: a parent
    record whose spec does not load)."""
    return results_of(parent.id, trials, objective=sweep_objective(parent), now=now)


def results_of(
    sweep_id: str, trials: Sequence[Job], *, objective: Objective | None, now: datetime
) -> SweepResults:
    """rank_trials for a caller that has the sweep's objective at hand."""
    goal = objective.goal if objective is not None else None
    ranked = rank([trial_result(t, objective, now=now) for t in trials], goal)
    best = next((r for r in ranked if r.value is not None and r.status not in _NEVER_BEST), None)
    return SweepResults(
        sweep_id=sweep_id,
        objective_metric=objective.metric if objective is not None else None,
        goal=goal,
        trials=tuple(ranked),
        best=best,
        unreported=objective is not None and all(r.value is None for r in ranked),
    )


def worse(value: float, than: float, goal: Goal) -> bool:
    return value < than if goal == "maximize" else value > than


def median_stop(
    running: MetricSeries | None,
    finished: Sequence[MetricSeries | None],
    *,
    objective: Objective,
    rule: EarlyStopping,
) -> StopDecision | None:
    """Whether a running trial stops now (median rule); None: it goes on.

    At the trial's latest step s (at least minSteps), the finished trials that have a value
    at s (their latest point at or before s) must number at least minTrials; the trial
    stops when its value at s is worse than their median.
    """
    if running is None or running.last.step < rule.min_steps:
        return None
    step = running.last.step
    value = running.value_at(step)
    if value is None:
        return None
    others = [v for v in (s.value_at(step) for s in finished if s is not None) if v is not None]
    if len(others) < rule.min_trials:
        return None
    median = statistics.median(others)
    if not worse(value, median, objective.goal):
        return None
    return StopDecision(metric=objective.metric, step=step, value=value, median=median, compared=len(others))
