"""cdk-nag, cfn-lint and the no-wildcard-actions rule, on every synthesised template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match

from stacks import constants

from .helpers import as_list, policy_statements
from .scenario import AppRun, Synthesis

pytestmark = pytest.mark.slow


def _stacks(full: Synthesis) -> list[Any]:
    return full.stacks.all()


def test_python_app_py_synthesises_every_stack_offline(default_app: AppRun) -> None:
    assert default_app.returncode == 0, default_app.output
    names = sorted(p.name for p in default_app.outdir.glob("*.template.json"))
    assert names == [
        "squall-capacity-us-east-1.template.json",
        "squall-capacity-us-west-2.template.json",
        "squall-control-plane.template.json",
        "squall-forwarding-us-east-1.template.json",
        "squall-monitoring.template.json",
    ]
    # Not bundled (that needs pip and the network): the asset is the source directory.
    assets = json.loads((default_app.outdir / "squall-control-plane.assets.json").read_text())
    sources = {f["source"]["path"] for f in assets["files"].values() if f["source"]["packaging"] == "zip"}
    assert sources == {str(constants.FUNCTIONS_DIR)}


def test_cdk_nag_finds_nothing_unsuppressed(full: Synthesis) -> None:
    for stack in _stacks(full):
        annotations = Annotations.from_stack(stack)
        errors = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
        warnings = annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
        failures = annotations.find_error("*", Match.string_like_regexp("CdkNagValidationFailure.*"))
        assert [e.entry.data for e in errors + warnings + failures] == [], stack.stack_name


def _suppressions(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (logical_id, rule)
        for logical_id, resource in template["Resources"].items()
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]


def test_every_suppression_says_why(templates: dict[str, Path]) -> None:
    seen = set()
    for name, path in templates.items():
        for logical_id, rule in _suppressions(json.loads(path.read_text())):
            seen.add(rule["id"])
            assert len(rule.get("reason", "").split()) >= 10, f"{name} {logical_id} {rule['id']}"
    # The full app exercises every suppression the stacks carry.
    assert seen == {
        "AwsSolutions-IAM4",
        "AwsSolutions-IAM5",
        "AwsSolutions-L1",
        "AwsSolutions-AS3",
        "AwsSolutions-SNS2",
        "CdkNagValidationFailure",
    }


def test_no_iam_statement_allows_wildcard_actions(templates: dict[str, Path]) -> None:
    checked = 0
    for name, path in templates.items():
        for where, statement in policy_statements(json.loads(path.read_text())):
            if statement.get("Effect") != "Allow":
                continue  # deny-all-but-TLS statements name sqs:* on purpose
            checked += 1
            assert "NotAction" not in statement, f"{name}{where}"
            for action in as_list(statement.get("Action", [])):
                assert "*" not in action, f"{name}{where}: {action}"
    assert checked > 20


def test_cfn_lint_reports_no_errors(templates: dict[str, Path]) -> None:
    from cfnlint.api import ManualArgs, lint

    problems: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    for name, path in templates.items():
        template = json.loads(path.read_text())
        region = _region(name, template)
        for match in lint(path.read_text(), config=ManualArgs(regions=[region])):
            line = f"{match.rule.id} {match.message}"
            bucket = problems if match.rule.id.startswith("E") else warnings
            bucket.setdefault(name, []).append(line)
    if warnings:
        print("cfn-lint warnings:", json.dumps(warnings, indent=1))
    assert problems == {}


def _region(name: str, template: dict[str, Any]) -> str:
    for region in ("us-east-1", "us-west-2"):
        if region in name:
            return region
    return "us-west-2"  # control plane and monitoring live in the home region
