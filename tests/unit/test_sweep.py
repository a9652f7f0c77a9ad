"""Sweeps: trials are drawn from the grid without building it, never more than maxTrials."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.core.spec import (
    MAX_SWEEP_PARAMETERS,
    MAX_SWEEP_VALUES,
    SpecError,
    expand_sweep,
    grid_point,
    parse_spec,
)
from tests.properties import examples

TEAMS = ["research"]
REGISTRIES = ["registry.example.com/squall"]


def spec(sweep: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {
        "name": "tune",
        "team": "research",
        "image": "registry.example.com/squall/tf-trainer:1.0",
        "sweep": sweep,
    } | overrides


def huge_sweep(strategy: str) -> dict[str, Any]:
    # 20^10 = 1.024e13 combinations in a body of about a kilobyte
    return {
        "parameters": {f"p{i}": list(range(20)) for i in range(MAX_SWEEP_PARAMETERS)},
        "strategy": strategy,
        "maxTrials": 10,
        "parallelism": 2,
        "seed": 11,
    }


@pytest.mark.timeout(20)
@pytest.mark.parametrize("strategy", ["grid", "random"])
def test_a_sweep_of_ten_trillion_combinations_expands_to_its_max_trials(strategy: str) -> None:
    parsed = parse_spec(spec(huge_sweep(strategy)), teams=TEAMS, registries=REGISTRIES)
    assert parsed.sweep is not None and parsed.sweep.combinations() == 20**10

    trials = expand_sweep(parsed, job_id="tune-1")

    assert [trial_id for trial_id, _ in trials] == [f"tune-1-t{n:03d}" for n in range(10)]
    points = [tuple(t.trial_parameters.values()) for _, t in trials]  # type: ignore[union-attr]
    assert len(set(points)) == 10
    if strategy == "grid":
        # itertools.product order: the last parameter varies fastest
        assert points[:3] == [(0,) * 10, (0,) * 9 + (1,), (0,) * 9 + (2,)]
    assert expand_sweep(parsed, job_id="tune-1") == trials, "deterministic for a spec"


@pytest.mark.timeout(20)
def test_the_largest_grid_allowed_is_sampled_without_overflow() -> None:
    # 100^10 = 1e20 points: more than a range's length can be
    sweep = {
        "parameters": {f"p{i}": list(range(MAX_SWEEP_VALUES)) for i in range(MAX_SWEEP_PARAMETERS)},
        "strategy": "random",
        "maxTrials": 100,
        "parallelism": 1,
    }
    trials = expand_sweep(parse_spec(spec(sweep), teams=TEAMS, registries=REGISTRIES), job_id="big")
    assert len(trials) == 100
    assert len({tuple(t.trial_parameters.values()) for _, t in trials}) == 100  # type: ignore[union-attr]


def test_random_picks_stay_those_the_materialised_grid_gave() -> None:
    # the same seed draws the same trials as before the grid stopped being built
    values = {"lr": [0.1, 0.01, 0.001, 0.0001], "batch": [16, 32, 64], "opt": ["adam", "sgd"]}
    sweep = {"parameters": values, "strategy": "random", "maxTrials": 5, "parallelism": 1, "seed": 7}
    trials = expand_sweep(parse_spec(spec(sweep), teams=TEAMS, registries=REGISTRIES), job_id="j")
    grid = list(itertools.product(*values.values()))
    picked = sorted(random.Random(7).sample(range(len(grid)), 5))
    assert [tuple(t.trial_parameters.values()) for _, t in trials] == [grid[i] for i in picked]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("sweep", "field", "words"),
    [
        ({"parameters": {f"p{i}": [1] for i in range(MAX_SWEEP_PARAMETERS + 1)}}, "sweep.parameters", "at most 10"),
        ({"parameters": {"lr": list(range(MAX_SWEEP_VALUES + 1))}}, "sweep.parameters.lr", "at most 100"),
        ({"parameters": {"lr": []}}, "sweep.parameters.lr", "at least 1"),
        ({"parameters": {}}, "sweep.parameters", "at least 1"),
    ],
)
def test_sweep_sizes_are_bounded_with_field_errors(sweep: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec(sweep), teams=TEAMS, registries=REGISTRIES)
    found = {i.field: i.message for i in caught.value.issues}
    assert words in found[field], found


def test_grid_points_decode_in_product_order() -> None:
    columns = [[1, 2, 3], ["a", "b"], [True, False]]
    assert [grid_point(columns, i) for i in range(12)] == list(itertools.product(*columns))


sweep_values = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(alphabet="abcxyz-_.", max_size=8),
    st.booleans(),
)
sweeps = st.fixed_dictionaries(
    {
        "parameters": st.dictionaries(
            st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True),
            st.lists(sweep_values, min_size=1, max_size=MAX_SWEEP_VALUES),
            min_size=1,
            max_size=MAX_SWEEP_PARAMETERS,
        ),
        "strategy": st.sampled_from(["grid", "random"]),
        "maxTrials": st.integers(1, 100),
        "seed": st.integers(0, 2**32),
    }
)


@settings(max_examples=examples(300), deadline=None)
@given(sweep=sweeps)
def test_no_valid_spec_expands_to_more_trials_than_max_trials(sweep: dict[str, Any]) -> None:
    sweep["parallelism"] = 1
    try:
        parsed = parse_spec(spec(sweep), teams=TEAMS, registries=REGISTRIES)
    except SpecError:
        return  # e.g. parameter names that collide as SQUALL_PARAM_<NAME>
    assert parsed.sweep is not None
    trials = expand_sweep(parsed, job_id="p")
    assert len(trials) == min(parsed.sweep.max_trials, parsed.sweep.combinations()) <= sweep["maxTrials"]
    assert len({trial_id for trial_id, _ in trials}) == len(trials)
    columns = list(parsed.sweep.parameters.values())
    for _, trial in trials:
        assert trial.trial_parameters is not None
        assert all(v in column for v, column in zip(trial.trial_parameters.values(), columns, strict=True))
