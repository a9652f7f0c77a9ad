"""Sweep parameters as ranges, strategy tpe, an objective and early stopping in the spec."""

from __future__ import annotations

import math
from typing import Any

import pytest

from squall.core.spec import (
    ParameterRange,
    SpecError,
    expand_sweep,
    load_spec,
    parse_spec,
    recorded,
    with_parameters,
)

TEAMS = ["research"]
REGISTRIES = ["registry.example.com/squall"]
OBJECTIVE = {"metric": "eval/score", "goal": "maximize"}


def parse(sweep: dict[str, Any], **overrides: Any) -> Any:
    body = {
        "name": "tune",
        "team": "research",
        "image": "registry.example.com/squall/tf-trainer:1.0",
        "sweep": sweep,
    } | overrides
    return parse_spec(body, teams=TEAMS, registries=REGISTRIES)


def issues(sweep: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        parse(sweep)
    return [(i.field, i.message) for i in caught.value.issues]


def values(sweep: dict[str, Any], name: str = "p") -> list[Any]:
    return [t.trial_parameters[name] for _, t in expand_sweep(parse(sweep), job_id="tune-1")]


# ---- refused, saying the field and what is allowed -----------------------------


@pytest.mark.parametrize(
    ("parameter", "words"),
    [
        ({"min": 1, "max": 0}, "max (0) must be greater than min (1): the range is inverted"),
        ({"min": 2, "max": 2}, "the range is empty"),
        ({"min": 0, "max": 1, "log": True}, "log needs min greater than 0, got 0"),
        ({"min": -1.5, "max": 1.0, "log": True}, "log needs min greater than 0"),
        ({"min": 1, "max": 8, "log": True, "step": 1}, "a range takes log or step, not both"),
        ({"min": 0, "max": 8, "step": 0}, "step must be greater than 0"),
        ({"min": 0, "max": 8, "step": -2}, "step must be greater than 0"),
        ({"min": 0.0, "max": 1e9, "step": 1e-3}, "take a larger step"),
        (7, "must be a list of values or a range {min, max}"),
        ("0.1", "must be a list of values or a range {min, max}"),
    ],
)
def test_bad_ranges_are_refused_at_the_parameter(parameter: Any, words: str) -> None:
    found = issues({"parameters": {"p": parameter}, "strategy": "random"})

    assert len(found) == 1
    assert found[0][0] == "sweep.parameters.p"
    assert words in found[0][1]


@pytest.mark.parametrize(
    ("bound", "words"),
    [("x", "must be a number"), (True, "must be a number"), (1e300, "must be a finite number from")],
)
def test_a_range_bound_that_is_no_usable_number_is_refused(bound: Any, words: str) -> None:
    found = issues({"parameters": {"p": {"min": bound, "max": 2}}, "strategy": "random"})
    assert found[0][0] == "sweep.parameters.p.min" and words in found[0][1]


def test_a_number_yaml_read_as_text_says_how_to_write_it() -> None:
    found = issues({"parameters": {"p": {"min": "1e-4", "max": 0.1, "log": True}}, "strategy": "random"})
    assert found == [
        (
            "sweep.parameters.p.min",
            "must be a number, not the text '1e-4' (in YAML write 1e-4 as 1.0e-4 or 0.0001)",
        )
    ]


def test_an_unknown_range_field_is_refused() -> None:
    found = issues({"parameters": {"p": {"min": 1, "max": 2, "logarithmic": True}}, "strategy": "random"})
    assert found == [("sweep.parameters.p.logarithmic", found[0][1])] and "unknown field" in found[0][1]


def test_grid_over_a_range_of_non_whole_numbers_needs_a_step() -> None:
    found = issues({"parameters": {"lr": {"min": 0.001, "max": 0.1}}})
    assert found == [
        (
            "sweep.parameters.lr",
            "grid needs a step for a range of non-whole numbers (or strategy random or tpe, which sample it)",
        )
    ]


@pytest.mark.parametrize(
    "sweep",
    [
        {"strategy": "tpe"},
        {"earlyStopping": {"minSteps": 100}, "maxTrials": 8},
    ],
)
def test_tpe_and_early_stopping_need_an_objective(sweep: dict[str, Any]) -> None:
    found = issues({"parameters": {"p": [1, 2]}, **sweep})
    assert found[0][0] == "sweep.objective"
    assert "needs an objective: {metric: <name>, goal: maximize|minimize}" in found[0][1]


@pytest.mark.parametrize(
    ("objective", "where", "words"),
    [
        ({"metric": "eval score", "goal": "maximize"}, "sweep.objective.metric", "must be a metric name"),
        ({"metric": "eval/score", "goal": "up"}, "sweep.objective.goal", "'maximize' or 'minimize'"),
        ({"metric": "eval/score"}, "sweep.objective.goal", "is required"),
    ],
)
def test_a_bad_objective_is_refused(objective: dict[str, str], where: str, words: str) -> None:
    found = issues({"parameters": {"p": [1, 2]}, "objective": objective})
    assert found[0][0] == where and words in found[0][1]


def test_early_stopping_rules_and_bounds() -> None:
    base = {"parameters": {"p": [1, 2, 3, 4, 5, 6]}, "maxTrials": 6, "objective": OBJECTIVE}
    rule = issues({**base, "earlyStopping": {"rule": "hyperband", "minSteps": 10}})
    assert rule[0][0] == "sweep.earlyStopping.rule" and "median" in rule[0][1]
    steps = issues({**base, "earlyStopping": {"minSteps": -1}})
    assert steps[0][0] == "sweep.earlyStopping.minSteps" and "from 0 to" in steps[0][1]
    assert issues({**base, "earlyStopping": {}})[0] == ("sweep.earlyStopping.minSteps", "is required")
    too_many = issues({**base, "earlyStopping": {"minSteps": 10, "minTrials": 6}})
    assert too_many == [
        (
            "sweep.earlyStopping.minTrials",
            "must be less than maxTrials (6): else no trial could ever be stopped",
        )
    ]
    ok = parse({**base, "earlyStopping": {"minSteps": 10}}).sweep.early_stopping
    assert (ok.rule, ok.min_steps, ok.min_trials) == ("median", 10, 3)


# ---- what each strategy makes of ranges ----------------------------------------


def test_grid_over_whole_numbers_takes_every_value() -> None:
    assert values({"parameters": {"p": {"min": 2, "max": 6}}}) == [2, 3, 4, 5, 6]
    assert values({"parameters": {"p": {"min": 0, "max": 10, "step": 4}}}) == [0, 4, 8]


def test_grid_with_a_float_step_gives_the_values_as_written() -> None:
    # 0.1 * 3 is 0.30000000000000004 in floats: the values are exact to the digits given.
    assert values({"parameters": {"p": {"min": 0.0, "max": 0.5, "step": 0.1}}}) == [
        0.0,
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
    ]
    assert values({"parameters": {"p": {"min": 1, "max": 2, "step": 0.25}}}) == [1.0, 1.25, 1.5, 1.75, 2.0]


def test_grid_combines_ranges_and_lists_in_product_order_up_to_max_trials() -> None:
    sweep = {"parameters": {"a": {"min": 1, "max": 3}, "b": ["x", "y"]}, "maxTrials": 5}
    trials = expand_sweep(parse(sweep), job_id="tune-1")
    assert [t.trial_parameters for _, t in trials] == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
        {"a": 3, "b": "x"},
    ]
    assert trials[1][1].args == ["--a=1", "--b=y"]


def test_random_over_a_continuous_range_is_deterministic_in_bounds_and_from_the_seed() -> None:
    sweep = {"parameters": {"p": {"min": -2.0, "max": 3.0}}, "strategy": "random", "maxTrials": 50, "seed": 4}
    drawn = values(sweep)
    assert drawn == values(sweep)
    assert all(isinstance(v, float) and -2.0 <= v <= 3.0 for v in drawn)
    assert len(set(drawn)) == 50
    assert drawn != values({**sweep, "seed": 5})


def test_random_log_range_spreads_over_the_orders_of_magnitude() -> None:
    sweep = {
        "parameters": {"p": {"min": 1e-5, "max": 1.0, "log": True}},
        "strategy": "random",
        "maxTrials": 100,
    }
    drawn = values(sweep)
    decades = {math.floor(math.log10(v)) for v in drawn}
    assert all(1e-5 <= v <= 1.0 for v in drawn)
    assert decades >= {-5, -4, -3, -2, -1}  # uniform: about 90 of 100 would be above 0.1


def test_random_whole_number_log_range_gives_whole_numbers() -> None:
    sweep = {
        "parameters": {"p": {"min": 16, "max": 1024, "log": True}},
        "strategy": "random",
        "maxTrials": 30,
    }
    drawn = values(sweep)
    assert all(isinstance(v, int) and 16 <= v <= 1024 for v in drawn)


def test_random_over_countable_ranges_draws_distinct_points() -> None:
    sweep = {
        "parameters": {"a": {"min": 0, "max": 3}, "b": {"min": 0.0, "max": 0.3, "step": 0.1}},
        "strategy": "random",
        "maxTrials": 16,
        "parallelism": 4,
    }
    points = [tuple(t.trial_parameters.values()) for _, t in expand_sweep(parse(sweep), job_id="tune-1")]
    assert len(set(points)) == 16  # all 4 x 4 points, none twice


def test_tpe_trials_get_no_parameters_until_their_slot_comes() -> None:
    sweep = {
        "parameters": {"lr": {"min": 1e-4, "max": 0.1, "log": True}, "opt": ["adam", "sgd"]},
        "strategy": "tpe",
        "objective": OBJECTIVE,
        "maxTrials": 6,
    }
    spec = parse(sweep, args=["--epochs=3"])
    trials = expand_sweep(spec, job_id="tune-1")

    assert [t for t, _ in trials] == [f"tune-1-t{n:03d}" for n in range(6)]
    assert all(t.trial_parameters is None and t.args == ["--epochs=3"] for _, t in trials)
    chosen = with_parameters(trials[2][1], {"lr": 0.003, "opt": "sgd"}, args=spec.args)
    assert chosen.args == ["--epochs=3", "--lr=0.003", "--opt=sgd"]
    assert chosen.trial_parameters == {"lr": 0.003, "opt": "sgd"}


def test_a_range_sweep_records_and_loads_back_the_same() -> None:
    spec = parse(
        {
            "parameters": {
                "lr": {"min": 1e-4, "max": 0.1, "log": True},
                "b": {"min": 0, "max": 8, "step": 2},
            },
            "strategy": "tpe",
            "objective": OBJECTIVE,
            "earlyStopping": {"minSteps": 100, "minTrials": 2},
            "maxTrials": 8,
        }
    )
    again = load_spec(recorded(spec))
    assert again == spec
    assert isinstance(again.sweep.parameters["lr"], ParameterRange)
    assert recorded(spec)["sweep"]["earlyStopping"] == {"rule": "median", "minSteps": 100, "minTrials": 2}


def test_a_grid_counts_a_ranges_values_toward_max_trials() -> None:
    spec = parse({"parameters": {"p": {"min": 1, "max": 3}}, "maxTrials": 10, "parallelism": 2})
    assert len(expand_sweep(spec, job_id="tune-1")) == 3
