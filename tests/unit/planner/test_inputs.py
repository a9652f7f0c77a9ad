"""planner/inputs.py: the one schema of node groups, policy, durations and teams that every reader shares."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.core.settings import PolicySettings
from squall.planner import Policy
from squall.planner.admission import TeamShare
from squall.planner.inputs import (
    GroupsError,
    InputError,
    parse_duration,
    planner_policy,
    read_node_groups,
    read_policy,
    read_team_shares,
    read_teams,
    share_document,
    team_shares,
)

# cdk.json's first group, as the deployment declares it
GROUP: dict[str, Any] = json.loads((Path(__file__).parents[3] / "cdk.json").read_text())["context"][
    "nodeGroups"
][0]


def errors_of(*groups: dict[str, Any]) -> list[str]:
    with pytest.raises(GroupsError) as raised:
        read_node_groups(list(groups))
    return raised.value.errors


# ---- durations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (600, 600),
        (1.5, 1.5),
        ("90s", 90),
        ("4m", 240),
        ("1h30m", 5400),
        ("2d", 172_800),
        ("6h", 21_600),
        ("PT10M", 600),
        ("P30D", 2_592_000),
        ("P1DT2H", 93_600),
        ("PT0.5S", 0.5),
        ("00:10:00", 600),
        ("0s", 0),
        (timedelta(minutes=3), 180),
    ],
)
def test_a_duration_in_every_form_any_reader_accepted(value: Any, seconds: float) -> None:
    assert parse_duration(value) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "value", ["soon", "", "5 minutes", "P", "PT", "1h30", True, None, [], "9" * 40 + "d"]
)
def test_what_is_no_duration_is_named_with_the_forms_allowed(value: Any) -> None:
    with pytest.raises(
        ValueError, match=r"must be a duration such as 90s, 4m, 1h30m, 2d or PT10M|is too long"
    ):
        parse_duration(value)


@pytest.mark.parametrize("value", [-5, "-PT5M", -0.5])
def test_a_negative_duration_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=r"negative|must be a duration"):
        parse_duration(value)


def test_a_duration_too_long_for_python_is_an_error_not_an_overflow() -> None:
    with pytest.raises(ValueError, match="is too long"):
        parse_duration(10**30)


# ---- policy -------------------------------------------------------------------------------------


def test_the_policy_has_one_set_of_defaults_the_deployments() -> None:
    # the deployed functions' values: squall plan, scenarios and cdk synth use the same
    assert Policy().provision_timeout == timedelta(minutes=10)
    assert Policy().max_scale_down_fraction == 0.2
    assert Policy().boot_grace == timedelta(minutes=5)
    assert PolicySettings().planner_policy() == Policy() == planner_policy(read_policy(None))
    assert read_policy({}) == PolicySettings().model_dump()


def test_the_planner_policy_is_derived_from_every_planner_field() -> None:
    settings = PolicySettings.model_validate(
        {
            "provisionTimeout": "PT15M",
            "idleThreshold": "20m",
            "bootGrace": 60,
            "maxScaleDownFraction": 0.5,
            "backoffBase": "1m",
            "backoffMax": "1h",
            "failureWindow": "2h",
        }
    )
    assert settings.planner_policy() == Policy(
        provision_timeout=timedelta(minutes=15),
        idle_threshold=timedelta(minutes=20),
        boot_grace=timedelta(minutes=1),
        max_scale_down_fraction=0.5,
        backoff_base=timedelta(minutes=1),
        backoff_max=timedelta(hours=1),
        failure_window=timedelta(hours=2),
    )


def test_policy_problems_are_named_by_field_all_at_once() -> None:
    with pytest.raises(InputError) as raised:
        read_policy(
            {
                "provisionTimeout": "PT0S",
                "idleThreshold": "soon",
                "maxScaleDownFraction": 0,
                "colour": "blue",
                "//": "a comment is no setting",
            }
        )
    assert raised.value.errors == [
        "policy.provisionTimeout: must be positive, got 'PT0S'",
        "policy.idleThreshold: must be a duration such as 90s, 4m, 1h30m, 2d or PT10M (ISO 8601), "
        "or a number of seconds, got 'soon'",
        "policy.maxScaleDownFraction: expected a number greater than 0 and at most 1, got 0",
        "policy.colour: unknown field (allowed: provisionTimeout, idleThreshold, bootGrace, "
        "maxScaleDownFraction, backoffBase, backoffMax, failureWindow, drainDeadline, drainStepDelay, "
        "jobTtlAfterFinished, scaleCheckDebounce, maxRuntimeLimit, backfill, agedAfter, preemption)",
    ]
    with pytest.raises(InputError, match=r"policy\.backoffMax: must be at least backoffBase"):
        read_policy({"backoffBase": "PT10M", "backoffMax": "PT5M"})
    with pytest.raises(InputError, match="policy: expected an object, got a list"):
        read_policy([])


# ---- node groups: where cdk synth and squall plan disagreed, the deployment's rule holds ----------


def test_a_group_is_read_once_for_every_reader() -> None:
    ([group], health) = read_node_groups([GROUP])
    assert (group.name, group.asg_name, group.allocatable.gpu, group.taints[0].effect) == (
        "p3-usw2",
        "squall-p3-usw2",
        1,
        "NoSchedule",
    )
    assert health["p3-usw2"].backoff_until is None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"maxSize": 0}, "nodeGroups[0]: needs 0 <= minSize <= maxSize and maxSize >= 1, got maxSize 0"),
        ({"name": "a" * 32}, "nodeGroups[0].name: expected lower-case letters, digits and '-', at most 31"),
        ({"name": "P3_usw2"}, "nodeGroups[0].name: expected lower-case letters, digits and '-', at most 31"),
        ({"region": "Oregon"}, "nodeGroups[0].region: expected an AWS region name such as us-west-2"),
        ({"asgName": "has space"}, "nodeGroups[0].asgName: expected an Auto Scaling group name"),
        ({"instanceType": None}, "nodeGroups[0].instanceType: required"),
        ({"taints": [{"key": "nvidia.com/gpu"}]}, "nodeGroups[0].taints[0].effect: required"),
        ({"taints": [{"key": "k", "value": 1, "effect": "NoSchedule"}]}, "nodeGroups[0].taints[0].value:"),
        ({"labels": {"spot": True}}, "nodeGroups[0].labels.spot: expected a string (quote it), got true"),
        ({"minSize": True}, "nodeGroups[0].minSize: expected a whole number, got true"),
    ],
)
def test_the_stricter_rule_of_the_two_old_readers_holds(change: dict[str, Any], error: str) -> None:
    assert any(e.startswith(error) for e in errors_of(GROUP | change)), errors_of(GROUP | change)


def test_two_groups_may_not_share_a_name_or_an_auto_scaling_group() -> None:
    other = copy.deepcopy(GROUP) | {"name": "p3-usw2-b"}
    assert errors_of(GROUP, other) == [
        "nodeGroups: Auto Scaling group 'squall-p3-usw2' is in both p3-usw2 and p3-usw2-b"
    ]
    assert "nodeGroups: group name 'p3-usw2' appears twice" in errors_of(GROUP, GROUP | {"asgName": "other"})


def test_a_group_without_asg_name_is_its_own_auto_scaling_group() -> None:
    ([group], _) = read_node_groups([{k: v for k, v in GROUP.items() if k != "asgName"}])
    assert group.asg_name == "p3-usw2"


# ---- teams --------------------------------------------------------------------------------------


def test_teams_show_refused_values_as_the_file_wrote_them() -> None:
    with pytest.raises(InputError) as raised:
        read_teams({"a": {"namespace": "team-a", "weight": True, "gpuQuota": None}})
    assert raised.value.errors == ["teams.a.weight: expected a positive number, got true"]


def test_a_teams_quota_and_weight_become_its_share_in_admission() -> None:
    teams = read_teams(
        {
            "research": {"namespace": "team-research", "gpuQuota": 8, "weight": 2},
            "vision": "team-vision",
            "nlp": {"namespace": "team-nlp", "gpuQuota": 0},
            "ml": {"namespace": "team-ml", "weight": 0.5},
        }
    )
    assert team_shares(teams) == {
        "research": TeamShare(quota=8, weight=2.0),
        "vision": TeamShare(),  # no quota, weight 1
        "nlp": TeamShare(quota=0, weight=1.0),
        "ml": TeamShare(quota=None, weight=0.5),
    }


def test_the_settings_shares_are_read_with_the_teams_rules() -> None:
    assert read_team_shares({"a": {"gpuQuota": 8, "weight": 2}, "b": {}, "c": TeamShare(quota=1)}) == {
        "a": TeamShare(quota=8, weight=2.0),
        "b": TeamShare(),
        "c": TeamShare(quota=1),
    }
    assert read_team_shares({"a": share_document(TeamShare(quota=3, weight=1.5))}) == {"a": TeamShare(quota=3, weight=1.5)}
    with pytest.raises(InputError) as raised:
        read_team_shares({"a": {"gpuQuota": 1.5, "weight": -1, "namespace": "x"}, "b": 8, "": {}})
    assert raised.value.errors == [
        "quotas.a.namespace: unknown field (allowed: gpuQuota, weight)",
        "quotas.a.gpuQuota: expected a whole number of GPUs, at least 0, got 1.5",
        "quotas.a.weight: expected a positive number, got -1",
        "quotas.b: expected an object with gpuQuota, weight, got a number",
        "quotas: team names must be non-empty strings, got ''",
    ]
    with pytest.raises(InputError, match=r"quotas: expected an object of team -> \{gpuQuota, weight\}"):
        read_team_shares([8])
