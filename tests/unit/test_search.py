"""Tpe's choice (core/search.py): from the sweep and the trials before it, the same every time."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from squall.core.jobs import Job, JobStatus, Reason
from squall.core.metrics import merge
from squall.core.search import (
    Observed,
    Outcome,
    choose_parameters,
    observed_trials,
    sampler_seed,
    startup_trials,
    trial_number,
)
from squall.core.spec import Objective, Sweep

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def sweep(**fields: Any) -> Sweep:
    values: dict[str, Any] = {
        "parameters": {
            "lr": {"min": 1e-4, "max": 1.0, "log": True},
            "layers": {"min": 1, "max": 8},
            "dropout": {"min": 0.0, "max": 0.5, "step": 0.1},
            "opt": ["adam", "sgd"],
        },
        "strategy": "tpe",
        "objective": {"metric": "eval/score", "goal": "maximize"},
        "maxTrials": 40,
        "parallelism": 4,
        "seed": 3,
    }
    return Sweep.model_validate(values | fields)


def score(values: dict[str, Any]) -> float:
    """A known objective: best at lr 0.01, dropout 0.2, 4 layers, adam."""
    return (
        -abs(math.log10(values["lr"]) + 2)
        - abs(values["dropout"] - 0.2)
        - abs(values["layers"] - 4) / 4
        - (0.5 if values["opt"] == "sgd" else 0.0)
    )


def history(sw: Sweep, count: int) -> list[Observed]:
    found: list[Observed] = []
    for number in range(count):
        values = choose_parameters(sw, found, number=number)
        found.append(Observed(number, values, Outcome.COMPLETE, value=score(values)))
    return found


def test_the_same_sweep_and_history_give_the_same_parameters() -> None:
    sw = sweep()
    earlier = history(sw, 12)

    once = choose_parameters(sw, earlier, number=12)
    again = choose_parameters(sw, list(earlier), number=12)

    assert once == again


def test_the_seed_and_the_trial_number_change_the_choice() -> None:
    sw = sweep()
    earlier = history(sw, 12)
    chosen = choose_parameters(sw, earlier, number=12)
    assert choose_parameters(sweep(seed=4), earlier, number=12) != chosen
    assert choose_parameters(sw, earlier, number=13) != chosen


def test_the_history_changes_the_choice() -> None:
    sw = sweep()
    earlier = history(sw, 12)
    worse = [Observed(o.number, o.parameters, o.outcome, value=-score(dict(o.parameters))) for o in earlier]
    assert choose_parameters(sw, earlier, number=12) != choose_parameters(sw, worse, number=12)


def test_chosen_values_are_in_their_ranges_and_on_their_steps() -> None:
    sw = sweep()
    for observed in history(sw, 25):
        values = observed.parameters
        assert 1e-4 <= values["lr"] <= 1.0 and isinstance(values["lr"], float)
        assert values["layers"] in range(1, 9) and type(values["layers"]) is int
        assert values["dropout"] in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
        assert values["opt"] in ("adam", "sgd")


def test_after_its_random_start_tpe_finds_better_values_than_its_start() -> None:
    sw = sweep()
    found = history(sw, 40)
    start = startup_trials(sw)
    assert start == 10
    best_random = max(o.value or -math.inf for o in found[:start])
    assert max(o.value or -math.inf for o in found[start:]) > best_random


def test_a_small_sweep_starts_tpe_sooner() -> None:
    assert startup_trials(sweep(maxTrials=12)) == 3
    assert startup_trials(sweep(maxTrials=20, parallelism=4)) == 5


def test_seeds_are_32_bit_and_differ_by_number() -> None:
    seeds = {sampler_seed(-(2**63), n) for n in range(100)}
    assert len(seeds) == 100 and all(0 <= s < 2**32 for s in seeds)


def test_trial_numbers_come_from_the_ids() -> None:
    assert [trial_number(t) for t in ("tune-1-t000", "tune-1-t017", "a-t-t099")] == [0, 17, 99]


def trial(
    number: int,
    status: JobStatus,
    *,
    reason: str = Reason.STARTED,
    lines: tuple[str, ...] = (),
    **values: Any,
) -> Job:
    return Job(
        id=f"tune-1-t{number:03d}",
        name="tune",
        team="research",
        namespace="research",
        status=status,
        reason=reason,
        submitted_at=T0,
        updated_at=T0,
        spec={"trialParameters": values} if values else {},
        metrics=merge(None, lines, cursor=None) if lines else None,
    )


def test_what_the_sampler_learns_from_each_trial_record() -> None:
    objective = Objective(metric="eval/score", goal="maximize")
    trials = [
        trial(3, JobStatus.RUNNING, lr=0.3),
        trial(
            0,
            JobStatus.SUCCEEDED,
            reason=Reason.COMPLETED,
            lines=("squall-metric eval/score=0.5 step=9", "squall-metric eval/score=0.4 step=10"),
            lr=0.1,
        ),
        trial(
            1,
            JobStatus.SUCCEEDED,
            reason=Reason.EARLY_STOPPED,
            lines=("squall-metric eval/score=0.1 step=10",),
            lr=0.2,
        ),
        trial(2, JobStatus.FAILED, lines=("squall-metric eval/score=0.9 step=10",), lr=0.9),
        trial(4, JobStatus.SUCCEEDED, reason=Reason.COMPLETED, lr=0.4),  # no objective reported
        trial(5, JobStatus.QUEUED, reason=Reason.WAITING_FOR_TRIAL_SLOT),  # not chosen yet
    ]

    observed = observed_trials(trials, objective)

    assert observed == [
        Observed(0, {"lr": 0.1}, Outcome.COMPLETE, value=0.5),
        Observed(1, {"lr": 0.2}, Outcome.STOPPED, points={10: 0.1}),
        Observed(3, {"lr": 0.3}, Outcome.RUNNING),
    ]


def test_records_of_other_parameters_are_left_out_not_an_error() -> None:
    sw = sweep()
    odd = [
        Observed(0, {"lr": 5.0, "layers": 2, "dropout": 0.1, "opt": "adam"}, Outcome.COMPLETE, value=1.0),
        Observed(1, {"lr": 0.1}, Outcome.COMPLETE, value=1.0),
        Observed(2, {"lr": 0.1, "layers": 2, "dropout": 0.1, "opt": "rmsprop"}, Outcome.COMPLETE, value=1.0),
    ]
    assert choose_parameters(sw, odd, number=3) == choose_parameters(sw, [], number=3)


@pytest.mark.parametrize("goal", ["maximize", "minimize"])
def test_running_and_stopped_trials_are_taken_in(goal: str) -> None:
    sw = sweep(objective={"metric": "eval/score", "goal": goal})
    earlier = history(sw, 12)
    more = [
        *earlier,
        Observed(12, {"lr": 0.01, "layers": 4, "dropout": 0.2, "opt": "adam"}, Outcome.RUNNING),
        Observed(
            13, {"lr": 0.5, "layers": 8, "dropout": 0.5, "opt": "sgd"}, Outcome.STOPPED, points={10: -3.0}
        ),
    ]
    chosen = choose_parameters(sw, more, number=14)
    assert chosen == choose_parameters(sw, more, number=14)
    assert set(chosen) == {"lr", "layers", "dropout", "opt"}
