"""Preemption reads running jobs' checkpoint reports from S3: the scale function's grant.

With ``policy.preemption.enabled`` the scale function lists and reads
``<checkpointUri>/<job id>/checkpoints/squall-checkpoint.json`` (services/preemption.py
ReportedCheckpoints). A job writes only under ``teams/<team>/`` of the artifacts bucket and
``artifacts.buckets``, so that file name there is all it may list and read; with preemption
off (the default, and the ``full`` synthesis) it has no S3 statement at all
(tests/infrastructure/test_serving_stack.py: only the submit function touches S3).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from squall.services.preemption import CHECKPOINT_REPORT
from stacks import constants
from stacks.functions import CHECKPOINT_REPORT_FILE

from .helpers import as_list, function_statements, logical_id
from .scenario import DATA_BUCKET, Synthesis, full_context

REPORTS = "teams/*/checkpoints/squall-checkpoint.json"


@pytest.fixture(scope="module")
def preempting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesis]:
    """The ``full`` settings with preemption switched on, synthesised with cdk-nag's checks."""
    from app import create_app

    context = copy.deepcopy(full_context())
    context["policy"] = {
        **context["policy"],
        "preemption": {**context["policy"]["preemption"], "enabled": True},
    }
    outdir = tmp_path_factory.mktemp("cdk-preempting")
    app, stacks = create_app(context={**context, "aws:cdk:bundling-stacks": []}, outdir=str(outdir))
    app.synth()
    yield Synthesis(app=app, stacks=stacks, outdir=outdir)


@pytest.fixture(scope="module")
def template(preempting: Synthesis) -> Template:
    return preempting.template(preempting.stacks.control_plane)


def test_the_stacks_grant_the_key_the_scale_function_reads() -> None:
    assert CHECKPOINT_REPORT_FILE == CHECKPOINT_REPORT


def test_the_scale_function_may_list_and_read_checkpoint_reports_under_team_prefixes_only(
    preempting: Synthesis, template: Template
) -> None:
    scale = preempting.stacks.control_plane.functions.by_handler[constants.SCALE]
    artifacts = Match.object_like({"Fn::ImportValue": Match.string_like_regexp("ArtifactsBucket")})
    data_bucket = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{DATA_BUCKET}"]]}
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": logical_id(scale.role)}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Effect": "Allow",
                            "Action": "s3:ListBucket",
                            "Resource": [artifacts, data_bucket],
                            "Condition": {"StringLike": {"s3:prefix": [REPORTS]}},
                        },
                        {
                            "Effect": "Allow",
                            "Action": "s3:GetObject",
                            "Resource": [
                                {"Fn::Join": ["", [artifacts, f"/{REPORTS}"]]},
                                {
                                    "Fn::Join": [
                                        "",
                                        ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{DATA_BUCKET}/{REPORTS}"],
                                    ]
                                },
                            ],
                        },
                    ]
                )
            },
        },
    )
    # and nothing else of S3: no other action, no other key, no statement without its scope
    statements = function_statements(template.to_json(), scale)
    s3 = [s for s in statements if any(a.startswith("s3:") for a in as_list(s["Action"]))]
    assert sorted(a for s in s3 for a in as_list(s["Action"])) == ["s3:GetObject", "s3:ListBucket"]


def test_no_other_function_reads_checkpoint_reports(preempting: Synthesis, template: Template) -> None:
    functions = preempting.stacks.control_plane.functions.by_handler
    for handler, function in functions.items():
        if handler == constants.SCALE:
            continue
        for statement in function_statements(template.to_json(), function):
            assert "s3:ListBucket" not in as_list(statement["Action"]), handler
            assert REPORTS not in str(statement.get("Resource")), handler


def test_cdk_nag_finds_nothing_unsuppressed_with_preemption_on(preempting: Synthesis) -> None:
    for stack in preempting.stacks.all():
        annotations = Annotations.from_stack(stack)
        errors = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
        warnings = annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
        failures = annotations.find_error("*", Match.string_like_regexp("CdkNagValidationFailure.*"))
        assert [e.entry.data for e in errors + warnings + failures] == [], stack.stack_name


def test_the_report_wildcard_is_suppressed_on_the_scale_role_for_it_alone(
    preempting: Synthesis, template: Template
) -> None:
    resources: dict[str, Any] = template.to_json()["Resources"]
    by_handler = preempting.stacks.control_plane.functions.by_handler
    scale_rules = resources[logical_id(by_handler[constants.SCALE].role)]["Metadata"]["cdk_nag"]
    (rule,) = [r for r in scale_rules["rules_to_suppress"] if "checkpoint reports" in r["reason"]]
    assert rule["id"] == "AwsSolutions-IAM5"
    (applies,) = rule["applies_to"]
    pattern = applies["regex"].strip("/")
    assert re.search(pattern, f"Resource::<ArtifactsBucket.Arn>/{REPORTS}")
    for broader in ("Resource::<ArtifactsBucket.Arn>/teams/*", "Resource::<ArtifactsBucket.Arn>/*"):
        assert not re.search(pattern, broader)
    # the other roles read no report, so carry no such suppression
    for handler, function in by_handler.items():
        if handler != constants.SCALE:
            rules = resources[logical_id(function.role)]["Metadata"]["cdk_nag"]["rules_to_suppress"]
            assert not [r for r in rules if "checkpoint reports" in r["reason"]], handler


def test_cfn_lint_reports_no_errors_with_preemption_on(preempting: Synthesis) -> None:
    from cfnlint.api import ManualArgs, lint

    path = preempting.outdir / f"{preempting.stacks.control_plane.stack_name}.template.json"
    matches = lint(path.read_text(), config=ManualArgs(regions=[preempting.stacks.control_plane.region]))
    assert [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")] == []
