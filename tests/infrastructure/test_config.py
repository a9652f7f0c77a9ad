"""cdk.json settings: documented, defaulted, and checked with clear errors."""

from __future__ import annotations

import copy
import json
import re
from datetime import timedelta
from typing import Any

import pytest

from stacks.config import CDK_JSON, SETTINGS, ConfigError, SquallConfig, load_cdk_json_context, setting_keys
from stacks.lifecycle import HookSettings


@pytest.fixture
def context() -> dict[str, Any]:
    return copy.deepcopy(load_cdk_json_context())


def test_cdk_json_documents_every_setting_and_nothing_else(context: dict[str, Any]) -> None:
    documented = set(context["//"]) - {"about"}
    assert documented == set(SETTINGS)
    # cluster, the one-cluster form of clusters, is documented and accepted, not set
    assert set(setting_keys(context)) == set(SETTINGS) - {"cluster"}
    assert all(len(text.split()) >= 5 for text in context["//"].values())


def test_cdk_json_runs_the_app_from_the_project_environment() -> None:
    assert json.loads(CDK_JSON.read_text())["app"] == ".venv/bin/python app.py"


def test_defaults_describe_a_deployable_squall(context: dict[str, Any]) -> None:
    config = SquallConfig.from_context(context)
    assert config.prefix == "squall"
    assert config.home_region == "us-west-2"
    assert config.remote_regions == ("us-east-1",)
    assert [g.asg_name for g in config.groups_in("us-east-1")] == ["squall-p3-use1"]
    assert config.creates_groups is False
    assert config.cluster_access == "accessEntry"
    assert config.vpc is None
    assert config.policy_settings.provision_timeout.total_seconds() == 600


def test_every_problem_is_reported_at_once_with_its_setting(context: dict[str, Any]) -> None:
    # given a context with several mistakes
    context["nodegroups"] = []  # a typo of nodeGroups
    context["homeRegion"] = "Oregon"
    context["nodeGroups"][0]["region"] = "eu-west-1"
    context["nodeGroups"][1]["maxSize"] = 0
    context["capacity"]["us-east-1"] = {"createGroups": True}
    context["policy"]["provisionTimeout"] = "soon"
    context["clusterAccess"] = "kubeconfig"
    # when it is read
    with pytest.raises(ConfigError) as caught:
        SquallConfig.from_context(context)
    # then each mistake is named by its path
    text = str(caught.value)
    for path in (
        "nodegroups: unknown setting",
        "homeRegion:",
        "nodeGroups[0].region: eu-west-1 is not one of regions",
        "nodeGroups[1]: needs 0 <= minSize <= maxSize",
        "capacity.us-east-1.subnetIds: required",
        "capacity.us-east-1.securityGroupIds: required",
        "clusters[0].certificateAuthority: required",
        "policy.provisionTimeout",
        "clusterAccess: one of accessEntry, awsAuth",
    ):
        assert path in text


def test_ids_and_types_are_checked(context: dict[str, Any]) -> None:
    context["vpc"] = {"vpcId": "my-vpc", "subnetIds": ["subnet-12"]}
    context["dryRun"] = "yes"
    context["nodeGroups"][0]["minSize"] = True
    with pytest.raises(ConfigError) as caught:
        SquallConfig.from_context(context)
    problems = caught.value.problems
    assert 'vpc.vpcId[0]: "my-vpc" is not a vpc id' in problems
    assert 'vpc.subnetIds[0]: "subnet-12" is not a subnet id' in problems
    assert 'dryRun: expected true or false, got "yes"' in problems
    assert "nodeGroups[0].minSize: expected a whole number, got true" in problems


def test_a_cluster_must_be_in_one_of_the_regions(context: dict[str, Any]) -> None:
    context["clusters"][0]["region"] = "us-east-1"
    assert [c.region for c in SquallConfig.from_context(context).clusters] == ["us-east-1"]
    context["clusters"][0]["region"] = "eu-west-1"
    with pytest.raises(ConfigError, match=re.escape("clusters[0].region: eu-west-1 is not one of regions")):
        SquallConfig.from_context(context)


def test_hook_timeouts_follow_the_policy(context: dict[str, Any]) -> None:
    context["policy"]["provisionTimeout"] = "PT15M"
    context["policy"]["drainStepDelay"] = "PT2M"
    hooks = HookSettings.from_config(SquallConfig.from_context(context))
    assert hooks.launch_timeout_seconds == 900
    assert hooks.terminate_heartbeat_seconds == 480
    context["policy"]["provisionTimeout"] = "PT3H"
    with pytest.raises(ValueError, match="30-7200"):
        HookSettings.from_config(SquallConfig.from_context(context))


def test_a_team_is_a_namespace_or_an_object_with_its_submitters(context: dict[str, Any]) -> None:
    role = "arn:aws:iam::123456789012:role/research/trainer"
    context["teams"] = {
        "research": {
            "namespace": "team-research",
            "submitters": [role, "AROAEXAMPLEROLEID0001"],
            "gpuQuota": 64,
            "weight": 2,
        },
        "vision": "team-vision",
    }
    config = SquallConfig.from_context(context)
    assert config.teams == {"research": "team-research", "vision": "team-vision"}
    research = config.team_configs["research"]
    assert research.submitters == (role, "AROAEXAMPLEROLEID0001")
    assert (research.submitter_arns, research.submitter_ids) == ((role,), ("AROAEXAMPLEROLEID0001",))
    assert (research.gpu_quota, research.weight) == (64, 2.0)
    assert config.team_configs["vision"].submitters == ()
    assert config.submitters == {"research": (role, "AROAEXAMPLEROLEID0001")}
    # and the scale function's settings carry the quota and weight to admission
    from squall.core.settings import Settings
    from squall.planner.admission import TeamShare
    from stacks.functions import function_settings

    scale = function_settings(config, "scale")
    assert scale["quotas"] == {"research": {"gpuQuota": 64, "weight": 2.0}}
    assert "quotas" not in function_settings(config, "submit")
    settings = Settings(table_name="t", teams=scale["teams"], quotas=scale["quotas"])
    assert settings.team_shares() == {"research": TeamShare(quota=64, weight=2.0), "vision": TeamShare()}


def test_a_teams_monthly_budget_reaches_the_scale_functions_settings(context: dict[str, Any]) -> None:
    from squall.core.settings import Settings
    from stacks.functions import function_settings

    context["teams"] = {
        "research": {"namespace": "team-research", "budget": {"monthly": 20000}},
        "vision": "team-vision",
    }
    config = SquallConfig.from_context(context)
    assert config.team_configs["research"].monthly_budget == 20000.0
    scale = function_settings(config, "scale")
    assert scale["budgets"] == {"research": 20000.0}
    assert "budgets" not in function_settings(config, "submit")
    assert Settings(table_name="t", budgets=scale["budgets"]).budgets == {"research": 20000.0}
    context["teams"] = {"research": {"namespace": "team-research", "budget": {"monthly": 0}}}
    with pytest.raises(ConfigError, match=r"teams\.research\.budget\.monthly: expected dollars a month"):
        SquallConfig.from_context(context)


def test_team_mistakes_are_named_by_their_field(context: dict[str, Any]) -> None:
    context["teams"] = {
        "research": {
            "namespace": "team-research",
            "submitter": ["x"],
            "submitters": ["arn:aws:iam::123:role/short", 7],
        },
        "vision": {"namespace": "Team_Vision", "gpuQuota": -1, "weight": 0},
        "nlp": {"submitters": []},
        "ops": ["team-ops"],
        "ml": {
            "namespace": "team-ml",
            "submitters": ["arn:aws:sts::123456789012:assumed-role/a/b"],
            "weight": True,
        },
    }
    with pytest.raises(ConfigError) as caught:
        SquallConfig.from_context(context)
    problems = "\n".join(caught.value.problems)
    # the messages of the one team reader (squall/planner/inputs.py), which cdk synth,
    # the CLI and scenarios share
    for expected in (
        "teams.research.submitter: unknown field (allowed: namespace, submitters, gpuQuota, weight, budget)",
        "teams.research.submitters[0]: 'arn:aws:iam::123:role/short' is not an IAM role or user ARN",
        "teams.research.submitters[1]: 7 is not an IAM role or user ARN",
        "teams.vision.namespace: 'Team_Vision' is not a Kubernetes namespace",
        "teams.vision.gpuQuota: expected a whole number of GPUs, at least 0, got -1",
        "teams.vision.weight: expected a positive number, got 0",
        "teams.nlp.namespace: required",
        "teams.nlp.submitters: expected a non-empty list of IAM role ARNs",
        "teams.ops: expected a namespace or an object with namespace, submitters, gpuQuota, weight, budget",
        "teams.ml.submitters[0]:",
        "teams.ml.weight: expected a positive number, got true",
    ):
        assert expected in problems


def test_the_runtime_limit_is_operator_policy_with_a_thirty_day_default(context: dict[str, Any]) -> None:
    assert context["policy"]["maxRuntimeLimit"] == "P30D"
    assert "maxRuntimeLimit" in context["//"]["policy"]
    assert SquallConfig.from_context(context).policy_settings.max_runtime_limit == timedelta(days=30)
    context["policy"]["maxRuntimeLimit"] = "P60D"
    config = SquallConfig.from_context(context)
    assert config.policy_settings.max_runtime_limit == timedelta(days=60)
    # and it reaches the functions that validate job specs, as written
    from stacks.functions import function_settings

    for handler in ("submit", "reconcile"):
        assert function_settings(config, handler)["policy"]["maxRuntimeLimit"] == "P60D"
    context["policy"]["maxRuntimeLimit"] = "forever"
    with pytest.raises(ConfigError, match=r"policy\.maxRuntimeLimit"):
        SquallConfig.from_context(context)


def test_a_region_can_leave_its_hooks_to_the_platform_team(context: dict[str, Any]) -> None:
    context["capacity"]["us-east-1"] = {"manageHooks": False}
    config = SquallConfig.from_context(context)
    assert config.capacity_regions == ("us-west-2",)
    context["capacity"]["us-east-1"] = {"manageHooks": False, "createGroups": True}
    with pytest.raises(ConfigError, match="manageHooks: groups Squall creates always carry its hooks"):
        SquallConfig.from_context(context)


@pytest.mark.slow
def test_stacks_per_region_follow_the_settings(context: dict[str, Any]) -> None:
    import aws_cdk as cdk

    from stacks.deployment import build

    context["capacity"]["us-east-1"] = {"manageHooks": False}
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})  # never pip in a test
    stacks = build(app, SquallConfig.from_context(context))
    assert [s.stack_name for s in stacks.all()] == [
        "squall-control-plane",
        "squall-forwarding-us-east-1",
        "squall-capacity-us-west-2",
        "squall-monitoring",
        "squall-workloads",
    ]


def test_node_groups_are_read_by_the_reader_squall_plan_uses(context: dict[str, Any]) -> None:
    from squall.planner.inputs import GroupsError, read_node_groups

    context["nodeGroups"][0]["allocatable"]["cpu"] = "lots"
    context["nodeGroups"][1]["taints"] = [{"key": "nvidia.com/gpu"}]
    with pytest.raises(ConfigError) as caught:
        SquallConfig.from_context(context)
    with pytest.raises(GroupsError) as offline:
        read_node_groups(context["nodeGroups"])
    assert [p for p in caught.value.problems if p.startswith("nodeGroups[")] == offline.value.errors
    assert any(
        p.startswith("nodeGroups[0].allocatable.cpu: invalid quantity 'lots'") for p in offline.value.errors
    )
    assert "nodeGroups[1].taints[0].effect: required" in offline.value.errors


def test_the_policy_squall_plan_uses_is_the_deployments(context: dict[str, Any]) -> None:
    from squall.planner.inputs import planner_policy, read_policy

    config = SquallConfig.from_context(context)
    assert config.policy_settings.planner_policy() == planner_policy(read_policy(context["policy"]))
