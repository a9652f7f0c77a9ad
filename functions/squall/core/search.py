"""Tpe: the next trial's parameters from the trials before it (Optuna's TPE sampler, ask and tell).

Nothing is kept between invocations: each choice builds an in-memory study from the
trial records (their parameters, and the objective's best value for a finished trial,
its reported points for one stopped early, nothing yet for one running) and asks it
once. The sampler's seed mixes the sweep's seed with the trial's number, so the same
sweep and the same history always give the same parameters. Optuna (and numpy with it)
is imported only here, only when a tpe sweep chooses: nothing else pays its import.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from squall.core.experiments import objective_series, trial_parameters
from squall.core.jobs import Job, JobStatus, Reason
from squall.core.spec import Objective, ParameterRange, Sweep, SweepValue
from squall.core.spec.limits import TRIAL_SUFFIX

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

# Random draws before TPE models the results: Optuna's 10, or a quarter of a smaller sweep
# (at least 3), so that a sweep of a dozen trials is not all random.
MAX_STARTUP_TRIALS = 10
MIN_STARTUP_TRIALS = 3


class Outcome(StrEnum):
    COMPLETE = "complete"  # finished, with the objective's value
    STOPPED = "stopped"  # stopped early: its reported points, not a final value
    RUNNING = "running"  # chosen and not finished: a point the sampler keeps away from


@dataclass(frozen=True)
class Observed:
    """One earlier trial as the sampler sees it."""

    number: int
    parameters: Mapping[str, Any]
    outcome: Outcome
    value: float | None = None
    points: Mapping[int, float] = field(default_factory=dict)


def trial_number(trial_id: str) -> int:
    """The number in a trial's id ('<sweep>-t007' is 7)."""
    found = TRIAL_SUFFIX.search(trial_id)
    return int(found.group(0)[2:]) if found else 0


def observed_trials(trials: Sequence[Job], objective: Objective) -> list[Observed]:
    """What the sampler learns from a sweep's trial records, in trial order.

    A trial that failed, was cancelled, or finished without reporting the objective teaches
    nothing; nor does one still waiting for its slot (no parameters yet).
    """
    observed = []
    for trial in sorted(trials, key=lambda t: trial_number(t.id)):
        parameters = trial_parameters(trial)
        if not parameters:
            continue
        series = objective_series(trial, objective)
        number = trial_number(trial.id)
        if (
            trial.status is JobStatus.SUCCEEDED
            and trial.reason == Reason.EARLY_STOPPED
            and series is not None
        ):
            points = {p.step: p.value for p in series.history}
            observed.append(Observed(number, parameters, Outcome.STOPPED, points=points))
        elif trial.status is JobStatus.SUCCEEDED and series is not None:
            value = series.best(objective.goal).value
            observed.append(Observed(number, parameters, Outcome.COMPLETE, value=value))
        elif trial.status in (JobStatus.QUEUED, JobStatus.RUNNING):
            observed.append(Observed(number, parameters, Outcome.RUNNING))
    return observed


def sampler_seed(seed: int, number: int) -> int:
    """The sweep's seed mixed with the trial's number, as a 32-bit seed (numpy takes no more)."""
    digest = hashlib.sha256(f"squall-tpe:{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def startup_trials(sweep: Sweep) -> int:
    return max(MIN_STARTUP_TRIALS, min(MAX_STARTUP_TRIALS, sweep.max_trials // 4))


def choose_parameters(sweep: Sweep, history: Sequence[Observed], *, number: int) -> dict[str, SweepValue]:
    """Trial `number`'s parameters, from the sweep's parameters and the trials before it."""
    import optuna  # lazily: numpy and Optuna only where a tpe sweep chooses

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    objective = sweep.objective
    assert objective is not None, "the spec refuses tpe without an objective"
    distributions = {name: _distribution(values) for name, values in sweep.parameters.items()}
    with warnings.catch_warnings():
        # multivariate and constant_liar are "experimental" in some Optuna releases.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=sampler_seed(sweep.seed, number),
            n_startup_trials=startup_trials(sweep),
            multivariate=True,
            constant_liar=True,
        )
        study = optuna.create_study(direction=objective.goal, sampler=sampler)
        for earlier in history:
            frozen = _frozen(earlier, distributions)
            if frozen is not None:
                study.add_trial(frozen)
        chosen = study.ask(fixed_distributions=distributions)
    return {name: _on_grid(values, _plain(chosen.params[name])) for name, values in sweep.parameters.items()}


def _on_grid(values: ParameterRange | Sequence[SweepValue], chosen: SweepValue) -> SweepValue:
    """A stepped range's value as the range writes it (0.3, not 0.30000000000000004)."""
    if not isinstance(values, ParameterRange) or values.step is None or values.is_int:
        return chosen
    index = round((float(chosen) - float(values.min)) / float(values.step))
    return values.value(min(max(index, 0), values.size() - 1))


def _distribution(values: ParameterRange | Sequence[SweepValue]) -> BaseDistribution:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if not isinstance(values, ParameterRange):
        return CategoricalDistribution(choices=tuple(values))
    if values.is_int:
        step = int(values.step) if values.step is not None else 1
        # Optuna wants max on the step grid: the last value the range really has.
        last = int(values.value(values.size() - 1))
        return IntDistribution(low=int(values.min), high=last, log=values.log, step=step)
    if values.step is not None:
        top = float(values.value(values.size() - 1))
        return FloatDistribution(low=float(values.min), high=top, step=float(values.step))
    return FloatDistribution(low=float(values.min), high=float(values.max), log=values.log)


def _frozen(earlier: Observed, distributions: Mapping[str, BaseDistribution]) -> Any:
    """The earlier trial as an Optuna trial; None when its parameters are not this sweep's (skipped)."""
    import optuna

    state = {
        Outcome.COMPLETE: optuna.trial.TrialState.COMPLETE,
        Outcome.STOPPED: optuna.trial.TrialState.PRUNED,
        Outcome.RUNNING: optuna.trial.TrialState.RUNNING,
    }[earlier.outcome]
    if set(earlier.parameters) != set(distributions):
        return None
    try:
        return optuna.trial.create_trial(
            state=state,
            value=earlier.value if earlier.outcome is Outcome.COMPLETE else None,
            params=dict(earlier.parameters),
            distributions=dict(distributions),
            intermediate_values=dict(earlier.points),
        )
    except (ValueError, TypeError):
        return None  # a value outside its distribution (a record from another spec): nothing learnt


def _plain(value: Any) -> SweepValue:
    """A parameter as the spec's values are: bool, int, float or str (numpy's scalars made plain)."""
    if isinstance(value, bool | int | float | str):
        return value
    item = getattr(value, "item", None)
    plain = item() if callable(item) else value
    if isinstance(plain, bool | int | float | str):
        return plain
    raise TypeError(f"Optuna chose a {type(value).__name__}: a parameter is a bool, int, float or str")
