"""A scenario arrival's `objective`: what its simulated trainer reports, checked field by field."""

from __future__ import annotations

from typing import Any

import pytest

from squall.local.cluster.metrics import ParameterOptimum
from squall.local.scenario import ScenarioError, compile_scenario
from tests.groups import gpu_group

GPU_GROUP = gpu_group("p3-usw2", "p3.2xlarge", max_size=4, pricePerHour=3.06)
SPEC = {
    "name": "resnet",
    "id": "resnet",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"gpu": 1},
}


def scenario(objective: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "nodeGroups": [GPU_GROUP],
        "arrivals": [{"at": 0, "spec": SPEC, "objective": objective}],
    }


def errors_of(objective: Any) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        compile_scenario(scenario(objective))
    return caught.value.errors


def test_an_objective_reaches_the_plan_as_the_metric_lines_play_it() -> None:
    plan = compile_scenario(
        scenario(
            {
                "parameters": {"lr": {"optimum": 0.003, "log": True}, "optimizer": {"optimum": "adam"}},
                "metric": "eval/loss",
                "goal": "minimize",
                "steps": 500,
                "evalEvery": 50,
            }
        )
    )

    objective = plan.submissions[0].objective
    assert objective is not None
    assert objective.parameters == {
        "lr": ParameterOptimum(optimum=0.003, log=True),
        "optimizer": ParameterOptimum(optimum="adam"),
    }
    assert (objective.metric, objective.goal, objective.steps, objective.eval_every) == (
        "eval/loss",
        "minimize",
        500,
        50,
    )


def test_an_arrival_without_one_reports_nothing() -> None:
    document = scenario(None)
    del document["arrivals"][0]["objective"]
    assert compile_scenario(document).submissions[0].objective is None


@pytest.mark.parametrize(
    ("objective", "error"),
    [
        ({"steps": 0}, "arrivals[0].objective.steps: Input should be greater than or equal to 1"),
        ({"metric": "no spaces"}, "arrivals[0].objective.metric: String should match pattern"),
        ({"goal": "up"}, "arrivals[0].objective.goal: Input should be 'maximize' or 'minimize'"),
        ({"floor": 0.9, "best": 0.5}, "arrivals[0].objective: floor (0.9) must not be above best (0.5)"),
        (
            {"parameters": {"lr": {"optimum": 0, "log": True}}},
            "arrivals[0].objective: parameters.lr.optimum: must be a positive number with log: true",
        ),
        ({"parameters": {"lr": {"optimum": 1, "width": 0}}}, "arrivals[0].objective.parameters.lr.width"),
        ({"parameters": {"lr": {"best": 1}}}, "arrivals[0].objective.parameters.lr.optimum: Field required"),
        ({"noise": -1}, "arrivals[0].objective.noise: Input should be greater than or equal to 0"),
        ({"evalEvry": 5}, "arrivals[0].objective.evalEvry: unknown field"),
    ],
)
def test_a_bad_objective_names_its_field(objective: dict[str, Any], error: str) -> None:
    assert any(e.startswith(error) for e in errors_of(objective)), errors_of(objective)
