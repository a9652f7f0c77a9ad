"""Model services (issue 15), the infrastructure: the `serving` settings, the submit
function's SavedModel check, the functions' RBAC for a model service's objects, and the
researchers' read of model service records. Each permission scoped, nothing broader."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import kubernetes_validate
import pytest
from aws_cdk.assertions import Annotations, Match

from stacks import constants
from stacks.config import ConfigError, SquallConfig, load_cdk_json_context
from stacks.rbac import render_rbac
from stacks.rbac.__main__ import main as rbac_main

from .helpers import (
    CAPACITY_GRANTS,
    as_list,
    function_statements,
    logical_id,
    policy_statements,
    rbac_grants,
    resources,
)
from .scenario import DATA_BUCKET, Synthesis

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
SERVING_IMAGE = f"{REGISTRY}/tensorflow/serving:2.21.0"
WORKER_IMAGE = f"{REGISTRY}/squall/tf-trainer:1.0"
TEAMS = {"research": "team-research", "vision": "team-vision", "nlp": "team-research"}
SERVING_GRANTS = {("apps", "deployments", verb) for verb in ("get", "list", "create", "delete")} | {
    ("policy", "poddisruptionbudgets", verb) for verb in ("get", "list", "create", "delete")
}


@pytest.fixture
def context() -> dict[str, Any]:
    return copy.deepcopy(load_cdk_json_context())


def _with_serving(context: dict[str, Any], **fields: Any) -> dict[str, Any]:
    context["serving"] = {**context["serving"], **fields}
    return context


# -- settings ------------------------------------------------------------------------


def test_cdk_json_serves_a_pinned_tensorflow_serving_from_the_example_registry(
    context: dict[str, Any],
) -> None:
    config = SquallConfig.from_context(context)
    assert config.serving.image == SERVING_IMAGE
    assert config.serving.fetch_image == WORKER_IMAGE
    assert (config.serving.service_type, config.serving.load_balancer_scheme) == ("LoadBalancer", "internal")
    assert len(context["//"]["serving"].split()) >= 5


def test_tensorflow_serving_is_the_release_the_trainer_exports_with(context: dict[str, Any]) -> None:
    # A SavedModel may use ops an older TensorFlow Serving cannot load.
    dockerfile = (constants.REPO_ROOT / "worker_images" / "tf_trainer" / "Dockerfile").read_text()
    trainer = re.search(r"^FROM tensorflow/tensorflow:(\d+\.\d+\.\d+)", dockerfile, re.MULTILINE)
    assert trainer is not None
    assert context["serving"]["image"].rsplit(":", 1)[1] == trainer[1]


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("registry.example.com/tensorflow/serving:2.21.0", "must come from one of allowedRegistries"),
        # a host whose name merely starts with the allowed one
        (f"{REGISTRY}.attacker.example/tensorflow/serving:2.21.0", "must come from one of allowedRegistries"),
        (f"{REGISTRY}/tensorflow/serving:latest", "must be pinned"),
        (f"{REGISTRY}/tensorflow/serving:latest-gpu", "must be pinned"),
        (f"{REGISTRY}/tensorflow/serving", "must be pinned"),
        (f"{REGISTRY}/tensorflow/serving:2.21.0 --privileged", "is not a container image reference"),
        ("x" * 600, "is not a container image reference"),
    ],
)
def test_a_bad_serving_image_fails_synth_naming_the_key(
    context: dict[str, Any], image: str, says: str
) -> None:
    from app import create_app

    for key in ("image", "fetchImage"):
        with pytest.raises(ConfigError) as caught:
            create_app(context=_with_serving(copy.deepcopy(context), **{key: image}))
        assert [p for p in caught.value.problems if p.startswith("serving.")] == [
            next(p for p in caught.value.problems if p.startswith(f"serving.{key}: ") and says in p)
        ]


def test_serving_settings_report_every_problem_with_its_key(context: dict[str, Any]) -> None:
    context["serving"] = {
        "image": 42,
        "fetchImage": WORKER_IMAGE,
        "serviceType": "NodePort",
        "loadBalancerScheme": "public",
        "replicas": 3,
    }
    with pytest.raises(ConfigError) as caught:
        SquallConfig.from_context(context)
    problems = [p for p in caught.value.problems if p.startswith("serving.")]
    assert [p.split(":")[0] for p in problems] == [
        "serving.replicas",
        "serving.image",
        "serving.serviceType",
        "serving.loadBalancerScheme",
    ]
    assert "allowed: image, fetchImage, serviceType, loadBalancerScheme" in problems[0]
    assert "one of LoadBalancer, ClusterIP" in problems[2]
    assert "one of internal, internet-facing" in problems[3]


def test_a_digest_pins_an_image_and_empty_images_switch_serving_off(context: dict[str, Any]) -> None:
    from stacks.functions import function_settings

    digest = "sha256:" + "a" * 64
    pinned = SquallConfig.from_context(
        _with_serving(copy.deepcopy(context), image=f"{REGISTRY}/tensorflow/serving@{digest}")
    )
    assert pinned.serving.image == f"{REGISTRY}/tensorflow/serving@{digest}"
    off = SquallConfig.from_context(_with_serving(copy.deepcopy(context), image="", fetchImage=None))
    assert function_settings(off, "submit")["serving"] == {
        "image": None,
        "fetchImage": None,
        "serviceType": "LoadBalancer",
        "loadBalancerScheme": "internal",
    }
    cluster_ip = SquallConfig.from_context(_with_serving(copy.deepcopy(context), serviceType="ClusterIP"))
    assert function_settings(cluster_ip, "reconcile")["serving"]["serviceType"] == "ClusterIP"


def test_the_functions_that_create_model_services_get_serving_and_no_other(full: Synthesis) -> None:
    staged = next(full.outdir.glob(".squall-asset-squall-control-plane"))
    for handler in constants.FUNCTIONS:
        content = json.loads((staged / constants.SETTINGS_DIR / f"{handler}.json").read_text())
        if handler in (constants.SUBMIT, constants.RECONCILE):
            assert content["serving"] == {
                "image": SERVING_IMAGE,
                "fetchImage": WORKER_IMAGE,
                "serviceType": "LoadBalancer",
                "loadBalancerScheme": "internal",
            }
            # the functions check the images against the same registries
            assert content["allowed_registries"] == [REGISTRY]
        else:
            assert "serving" not in content, handler


def test_the_functions_read_serving_as_servingsettings(
    full: Synthesis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from squall.core.settings import Settings

    staged = next(full.outdir.glob(".squall-asset-squall-control-plane"))
    monkeypatch.setenv("LAMBDA_TASK_ROOT", str(staged))
    monkeypatch.setenv("SQUALL_SETTINGS_FILE", f"{constants.SETTINGS_DIR}/submit.json")
    monkeypatch.setenv("SQUALL_TABLE_NAME", "squall-jobs")
    serving = Settings().serving
    assert (serving.image, serving.fetch_image) == (SERVING_IMAGE, WORKER_IMAGE)
    assert (serving.service_type, serving.load_balancer_scheme) == ("LoadBalancer", "internal")


# -- the submit function's SavedModel check ------------------------------------------


def _s3_statements(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in statements if any(a.startswith("s3:") for a in as_list(s["Action"]))]


def test_submit_may_head_saved_models_under_team_prefixes_only(full: Synthesis) -> None:
    template = full.template(full.stacks.control_plane).to_json()
    workloads = full.template(full.stacks.workloads).to_json()
    functions = full.stacks.control_plane.functions.by_handler
    # given the submit function's S3 statements
    (statement,) = _s3_statements(function_statements(template, functions[constants.SUBMIT]))
    # then it may GetObject (what HeadObject needs), unconditionally scoped by resource only
    assert statement["Effect"] == "Allow" and as_list(statement["Action"]) == ["s3:GetObject"]
    artifacts, data = statement["Resource"]
    # the artifacts bucket, by the workloads stack's export of its ARN
    (imported, suffix) = artifacts["Fn::Join"][1]
    assert suffix == "/teams/*/saved_model.pb"
    exports = {o["Export"]["Name"]: o["Value"] for o in workloads["Outputs"].values() if "Export" in o}
    bucket_id = logical_id(full.stacks.workloads.artifacts.bucket)
    assert exports[imported["Fn::ImportValue"]] == {"Fn::GetAtt": [bucket_id, "Arn"]}
    # and each configured team bucket, the same key pattern
    assert data == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{DATA_BUCKET}/teams/*/saved_model.pb"]]
    }
    # no other function touches S3
    for handler, function in functions.items():
        if handler != constants.SUBMIT:
            assert _s3_statements(function_statements(template, function)) == [], handler


def test_the_control_plane_deploys_after_the_bucket_it_reads(full: Synthesis) -> None:
    assert full.stacks.workloads in full.stacks.control_plane.dependencies
    # and nothing of the workloads stack waits for the control plane (no cycle)
    assert full.stacks.control_plane not in full.stacks.workloads.dependencies


def test_without_team_buckets_submit_reads_the_artifacts_bucket_only(context: dict[str, Any]) -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from stacks.deployment import build

    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    stacks = build(app, SquallConfig.from_context(context))
    template = Template.from_stack(stacks.control_plane).to_json()
    (statement,) = _s3_statements(
        function_statements(template, stacks.control_plane.functions.by_handler["submit"])
    )
    (resource,) = as_list(statement["Resource"])
    assert resource["Fn::Join"][1][1] == "/teams/*/saved_model.pb"
    assert "Fn::ImportValue" in resource["Fn::Join"][1][0]


def test_the_saved_model_wildcard_is_suppressed_for_it_alone(full: Synthesis) -> None:
    template = full.template(full.stacks.control_plane).to_json()
    role_id = logical_id(full.stacks.control_plane.functions.by_handler["submit"].role)
    rules = template["Resources"][role_id]["Metadata"]["cdk_nag"]["rules_to_suppress"]
    (rule,) = [r for r in rules if "saved_model" in r["reason"]]
    assert rule["id"] == "AwsSolutions-IAM5" and len(rule["reason"].split()) >= 10
    (applies,) = rule["applies_to"]
    pattern = applies["regex"].strip("/")
    assert re.search(pattern, "Resource::<ArtifactsBucket.Arn>/teams/*/saved_model.pb")
    for broader in ("Resource::<ArtifactsBucket.Arn>/teams/*", "Resource::<ArtifactsBucket.Arn>/*"):
        assert not re.search(pattern, broader)


# -- Kubernetes RBAC -----------------------------------------------------------------


def test_model_service_objects_are_managed_in_team_namespaces_only() -> None:
    manifests = render_rbac(TEAMS)
    for manifest in manifests:
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    roles = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ClusterRole"}
    # the new verbs are in one role, the jobs functions' write role
    holding = {name for name, role in roles.items() if rbac_grants(role) & SERVING_GRANTS}
    assert holding == {"squall-jobs-write"}
    write = rbac_grants(roles["squall-jobs-write"])
    assert write >= SERVING_GRANTS
    assert ("", "services", "get") in write  # a Service's load balancer address
    # never changed in place, never cluster-wide
    for group, resource in (("apps", "deployments"), ("policy", "poddisruptionbudgets")):
        assert {v for g, r, v in write if (g, r) == (group, resource)} == {"get", "list", "create", "delete"}
    assert not any(r in ("deployments/scale", "replicasets", "pods/exec", "secrets") for _, r, _ in write)
    # bound by RoleBindings in the team namespaces to the jobs group, never cluster-wide
    bindings = [m for m in manifests if m["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    bound = [b for b in bindings if b["roleRef"]["name"] == "squall-jobs-write"]
    assert {b["kind"] for b in bound} == {"RoleBinding"}
    assert sorted(b["metadata"]["namespace"] for b in bound) == ["team-research", "team-vision"]
    assert all(b["subjects"][0]["name"] == constants.KUBERNETES_JOBS_GROUP for b in bound)
    cluster_wide = {b["roleRef"]["name"] for b in bindings if b["kind"] == "ClusterRoleBinding"}
    assert all(not (rbac_grants(roles[name]) & SERVING_GRANTS) for name in cluster_wide)
    assert rbac_grants(roles["squall-capacity"]) == CAPACITY_GRANTS
    # only the functions that create model services are in that group
    assert [h for h, g in constants.KUBERNETES_GROUPS.items() if constants.KUBERNETES_JOBS_GROUP in g] == [
        constants.SUBMIT,
        constants.RECONCILE,
    ]


def test_python_m_stacks_rbac_prints_the_serving_rules(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert rbac_main([]) == 0
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    write = next(
        d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "squall-jobs-write"
    )
    assert rbac_grants(write) >= SERVING_GRANTS
    namespaces = sorted(set(SquallConfig.from_context(load_cdk_json_context()).teams.values()))
    assert (
        sorted(
            d["metadata"]["namespace"]
            for d in documents
            if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "squall-jobs-write"
        )
        == namespaces
    )


# -- researchers ---------------------------------------------------------------------


def _researcher_statements(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        policy["Properties"]["ManagedPolicyName"]: policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in resources(template, "AWS::IAM::ManagedPolicy").values()
        if "-researcher-" in policy["Properties"].get("ManagedPolicyName", "")
    }


def _table_arn(suffix: str = "") -> dict[str, Any]:
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":dynamodb:us-west-2:",
                {"Ref": "AWS::AccountId"},
                f":table/squall-jobs{suffix}",
            ],
        ]
    }


def test_researchers_read_model_service_records_and_no_job_record(full: Synthesis) -> None:
    template = full.template(full.stacks.workloads).to_json()
    policies = _researcher_statements(template)
    assert sorted(policies) == ["squall-researcher-research-us-west-2", "squall-researcher-vision-us-west-2"]
    for name, statements in policies.items():
        dynamodb = [s for s in statements if any(a.startswith("dynamodb:") for a in as_list(s["Action"]))]
        assert {s["Sid"]: s for s in dynamodb} == {
            "ReadModelServices": {
                "Sid": "ReadModelServices",
                "Effect": "Allow",
                "Action": ["dynamodb:GetItem", "dynamodb:Query"],
                "Resource": _table_arn(),
                "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["SERVICE#*"]}},
            },
            "ListModelServices": {
                "Sid": "ListModelServices",
                "Effect": "Allow",
                "Action": "dynamodb:Query",
                "Resource": _table_arn("/index/status-index"),
                "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["SERVICE_STATUS#*"]}},
            },
        }, name


def test_no_policy_reads_the_job_table_without_a_key_condition(full: Synthesis) -> None:
    # Every statement of the workloads stack that names DynamoDB is a researcher's, keyed.
    template = full.template(full.stacks.workloads).to_json()
    found = 0
    for where, statement in policy_statements(template):
        actions = as_list(statement.get("Action", []))
        if not any(a.startswith("dynamodb:") for a in actions):
            continue
        found += 1
        assert set(actions) <= {"dynamodb:GetItem", "dynamodb:Query"}, where
        assert "dynamodb:LeadingKeys" in json.dumps(statement["Condition"]), where
    assert found == 4  # two statements for each of the two teams


# -- compliance of what changed ------------------------------------------------------


def test_cdk_nag_is_clean_on_the_stacks_that_changed(full: Synthesis) -> None:
    for stack in (full.stacks.control_plane, full.stacks.workloads):
        annotations = Annotations.from_stack(stack)
        found = annotations.find_error(
            "*", Match.string_like_regexp("AwsSolutions-.*")
        ) + annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
        assert [f.entry.data for f in found] == [], stack.stack_name


def test_cfn_lint_is_clean_on_the_stacks_that_changed(full: Synthesis) -> None:
    from cfnlint.api import ManualArgs, lint

    for name in ("squall-control-plane", "squall-workloads"):
        text = (full.outdir / f"{name}.template.json").read_text()
        errors = [f"{m.rule.id} {m.message}" for m in lint(text, config=ManualArgs(regions=["us-west-2"]))]
        assert [e for e in errors if e.startswith("E")] == [], name
