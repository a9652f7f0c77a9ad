"""Issue 27's configuration: team budgets, backfill, preemption, node groups' boot time and on-demand
price, and a scenario arrival's checkpoints, read once (planner/inputs.py) for every reader."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.core.settings import SETTINGS_FILE_VARIABLE, PolicySettings, PreemptionSettings, Settings
from squall.local.scenario import ScenarioError, compile_scenario
from squall.planner.inputs import (
    InputError,
    read_budgets,
    read_node_groups,
    read_policy,
    read_teams,
    team_budgets,
)
from squall.planner.preemption import PreemptionPolicy
from tests.groups import gpu_group

GROUP = gpu_group("p3-usw2", "p3.2xlarge", max_size=4, pricePerHour=3.06)
SPEC = {
    "name": "resnet",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"gpu": 1},
}


def input_errors(read: Any, value: object) -> list[str]:
    with pytest.raises(InputError) as raised:
        read(value)
    return raised.value.errors


# ---- budgets ------------------------------------------------------------------------------------


def test_a_teams_monthly_budget_is_read_as_dollars_and_only_teams_with_one_have_it() -> None:
    teams = read_teams(
        {
            "research": {"namespace": "team-research", "budget": {"monthly": 20000}},
            "vision": {"namespace": "team-vision", "gpuQuota": 8},
            "nlp": "team-nlp",
        }
    )
    assert teams["research"].monthly_budget == 20000.0
    assert team_budgets(teams) == {"research": 20000.0}


def test_budget_problems_name_the_team_and_the_field() -> None:
    assert input_errors(
        read_teams,
        {
            "a": {"namespace": "team-a", "budget": {"monthly": 0}},
            "b": {"namespace": "team-b", "budget": 500},
            "c": {"namespace": "team-c", "budget": {"weekly": 5}},
            "d": {"namespace": "team-d", "budget": {"monthly": True}},
        },
    ) == [
        "teams.a.budget.monthly: expected dollars a month, more than 0 and at most 1,000,000,000,000, got 0",
        "teams.b.budget: expected an object {monthly: dollars}, got a number",
        "teams.c.budget.weekly: unknown field (allowed: monthly)",
        "teams.c.budget.monthly: required (dollars a month, more than 0)",
        "teams.d.budget.monthly: expected dollars a month, more than 0 and at most 1,000,000,000,000, got true",
    ]


def test_the_settings_budgets_are_read_with_the_same_rule() -> None:
    assert read_budgets({"research": 20000, "vision": 1.5}) == {"research": 20000.0, "vision": 1.5}
    assert input_errors(read_budgets, {"research": -1, "": 5}) == [
        "budgets.research: expected dollars a month, more than 0 and at most 1,000,000,000,000, got -1",
        "budgets: team names must be non-empty strings, got ''",
    ]


def test_budgets_reach_the_functions_settings_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SQUALL_BUDGETS", "SQUALL_POLICY", "LAMBDA_TASK_ROOT"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "scale.json"
    path.write_text(json.dumps({"table_name": "jobs", "budgets": {"research": 20000}}))
    monkeypatch.setenv(SETTINGS_FILE_VARIABLE, str(path))
    assert Settings().budgets == {"research": 20000.0}
    path.write_text(json.dumps({"table_name": "jobs", "budgets": {"research": "lots"}}))
    with pytest.raises(ValueError, match=r"budgets\.research: expected dollars a month"):
        Settings()


# ---- policy: backfill and preemption ------------------------------------------------------------


def test_backfill_is_on_and_preemption_off_unless_the_policy_says_otherwise() -> None:
    policy = PolicySettings()
    assert policy.backfill is True and policy.planner_policy().backfill is True
    assert policy.aged_after == policy.planner_policy().aged_after == timedelta(days=5)
    assert policy.preemption == PreemptionSettings(
        enabled=False, min_priority_gap=30, grace=timedelta(seconds=120)
    )


def test_the_policy_turns_backfill_off_and_preemption_on_as_cdk_json_writes_them() -> None:
    policy = PolicySettings.model_validate(
        {
            "backfill": False,
            "agedAfter": "P2D",
            "preemption": {"enabled": True, "minPriorityGap": 50, "graceSeconds": 300},
        }
    )
    assert policy.planner_policy().backfill is False
    assert policy.planner_policy().aged_after == timedelta(days=2)
    assert policy.preemption == PreemptionSettings(
        enabled=True, min_priority_gap=50, grace=timedelta(minutes=5)
    )
    # and the planner's preemption policy, which the Preempter reads
    assert policy.preemption.planner_policy() == PreemptionPolicy(
        enabled=True, min_priority_gap=50, grace=timedelta(minutes=5)
    )
    assert PolicySettings().preemption.planner_policy() == PreemptionPolicy()
    # what the model holds reads back as itself (a settings file written from it, a copy)
    assert PolicySettings.model_validate(policy.model_dump()) == policy
    assert PolicySettings(preemption=policy.preemption) == PolicySettings.model_validate(
        {"preemption": {"enabled": True, "minPriorityGap": 50, "graceSeconds": 300}}
    )


def test_backfill_and_preemption_problems_are_named_by_field() -> None:
    assert input_errors(
        read_policy,
        {
            "backfill": "no",
            "agedAfter": 0,
            "preemption": {"enabled": 1, "minPriorityGap": 101, "graceSeconds": 3601, "victims": 2},
        },
    ) == [
        "policy.backfill: expected true or false, got 'no'",
        "policy.agedAfter: must be positive, got 0",
        "policy.preemption.enabled: expected true or false, got 1",
        "policy.preemption.minPriorityGap: expected a whole number from 1 to 100, got 101",
        "policy.preemption.graceSeconds: expected a number of seconds from 0 to 3600, got 3601",
        "policy.preemption.victims: unknown field (allowed: enabled, minPriorityGap, graceSeconds)",
    ]
    assert input_errors(read_policy, {"preemption": True}) == [
        "policy.preemption: expected an object with enabled, minPriorityGap, graceSeconds, got a boolean"
    ]
    assert input_errors(read_policy, {"preemption": {"minPriorityGap": 0, "graceSeconds": -1}}) == [
        "policy.preemption.minPriorityGap: expected a whole number from 1 to 100, got 0",
        "policy.preemption.graceSeconds: expected a number of seconds from 0 to 3600, got -1",
    ]


# ---- node groups: boot time and on-demand price -------------------------------------------------


def test_a_groups_boot_time_and_on_demand_price_are_read_in_every_form() -> None:
    (plain, spot, iso), _ = read_node_groups(
        [
            GROUP,
            GROUP
            | {
                "name": "spot",
                "asgName": "spot",
                "spot": True,
                "pricePerHour": 1.2,
                "onDemandPricePerHour": 3.06,
                "bootTime": "7m",
            },
            GROUP | {"name": "iso", "asgName": "iso", "bootTime": "PT90S"},
        ]
    )
    assert (plain.boot_time, plain.on_demand_price_per_hour) == (timedelta(minutes=5), None)
    assert (spot.boot_time, spot.on_demand_price_per_hour) == (timedelta(minutes=7), 3.06)
    assert iso.boot_time == timedelta(seconds=90)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"bootTime": "soon"}, "nodeGroups[0].bootTime: must be a duration such as 90s"),
        ({"bootTime": "2d"}, "nodeGroups[0].bootTime: must be at most a day, got '2d'"),
        ({"onDemandPricePerHour": -1}, "nodeGroups[0].onDemandPricePerHour: expected a non-negative number"),
    ],
)
def test_a_bad_boot_time_or_on_demand_price_is_named(change: dict[str, Any], error: str) -> None:
    with pytest.raises(InputError) as raised:
        read_node_groups([GROUP | change])
    assert any(e.startswith(error) for e in raised.value.errors), raised.value.errors


# ---- scenarios ----------------------------------------------------------------------------------


def scenario(**changes: Any) -> dict[str, Any]:
    return {"name": "t", "nodeGroups": [GROUP], "arrivals": [{"at": 0, "spec": SPEC}]} | changes


def test_a_scenario_carries_its_teams_budgets_and_its_arrivals_checkpoints() -> None:
    plan = compile_scenario(
        scenario(
            teams={
                "research": {"namespace": "team-research", "budget": {"monthly": 100}},
                "vision": "team-vision",
            },
            policy={"backfill": False, "preemption": {"enabled": True}},
            arrivals=[
                {"at": 0, "spec": SPEC, "checkpointEvery": "10m"},
                {"at": 0, "spec": SPEC},
            ],
        )
    )
    assert plan.budgets == {"research": 100.0}
    assert [s.checkpoint_every for s in plan.submissions] == [timedelta(minutes=10), None]
    assert plan.policy.backfill is False and plan.policy.preemption.enabled is True


def test_a_scenarios_bad_budget_or_checkpoint_interval_is_named() -> None:
    with pytest.raises(ScenarioError) as raised:
        compile_scenario(
            scenario(
                teams={"research": {"namespace": "team-research", "budget": {"monthly": -5}}},
                arrivals=[{"at": 0, "spec": SPEC, "checkpointEvery": 0}],
            )
        )
    assert raised.value.errors == [
        "arrivals[0].checkpointEvery: must be positive (leave it out for a job that never checkpoints)"
    ]
    with pytest.raises(ScenarioError) as raised:
        compile_scenario(
            scenario(teams={"research": {"namespace": "team-research", "budget": {"monthly": -5}}})
        )
    assert raised.value.errors[0] == (
        "teams.research.budget.monthly: expected dollars a month, more than 0 and at most 1,000,000,000,000, "
        "got -5"
    )
