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
        "squall-workloads.template.json",
    ]
    # Not bundled (that needs pip and the network): the asset is the package's sources
    # as staged at synthesis, with every function's settings file.
    assets = json.loads((default_app.outdir / "squall-control-plane.assets.json").read_text())
    (source,) = {f["source"]["path"] for f in assets["files"].values() if f["source"]["packaging"] == "zip"}
    staged = default_app.outdir / source
    assert staged.parent == default_app.outdir and staged.name.startswith(".squall-asset-")
    assert (staged / "squall" / "handlers" / "submit.py").is_file()
    assert not (staged / "squall" / "local").exists() and not (staged / "squall" / "cli.py").exists()
    assert sorted(p.name for p in (staged / constants.SETTINGS_DIR).iterdir()) == [
        f"{handler}.json" for handler in sorted(constants.FUNCTIONS)
    ]


def test_cdk_nag_finds_nothing_unsuppressed(full: Synthesis, large: Synthesis) -> None:
    for stack in [*_stacks(full), *_stacks(large)]:
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
        "AwsSolutions-SQS3",
        "AwsSolutions-S1",
        "CdkNagValidationFailure",
    }


def _aws_solutions_rules() -> set[str]:
    """The rule ids of the installed cdk-nag's AwsSolutions pack, read from its jsii bundle."""
    import importlib.resources
    import re
    import tarfile

    bundle = next(p for p in importlib.resources.files("cdk_nag._jsii").iterdir() if p.name.endswith(".tgz"))
    with importlib.resources.as_file(bundle) as path, tarfile.open(path) as archive:
        member = archive.extractfile("package/lib/packs/aws-solutions.js")
        assert member is not None
        source = member.read().decode()
    return {f"AwsSolutions-{suffix}" for suffix in re.findall(r"ruleSuffixOverride: '([A-Z0-9]+)'", source)}


def test_every_suppression_names_a_rule_the_pack_still_has(templates: dict[str, Path]) -> None:
    rules = _aws_solutions_rules()
    assert {"AwsSolutions-IAM5", "AwsSolutions-L1", "AwsSolutions-SQS3"} <= rules and len(rules) > 100
    suppressed = {
        rule["id"]
        for path in templates.values()
        for _, rule in _suppressions(json.loads(path.read_text()))
        if rule["id"].startswith("AwsSolutions-")
    }
    # AwsSolutions-SNS2 (topic encryption) left the pack: a suppression of it guarded nothing.
    assert suppressed - rules == set()
    for path in templates.values():
        for _, rule in _suppressions(json.loads(path.read_text())):
            for applies_to in rule.get("applies_to", []):
                if isinstance(applies_to, str) and applies_to.startswith("AwsSolutions-"):
                    assert applies_to in rules, applies_to


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


def test_cfn_lint_covers_every_stack_of_every_app(templates: dict[str, Path]) -> None:
    assert sorted(name for name in templates if name.startswith("large/")) == [
        "large/squall-capacity-eu-west-1.template.json",
        "large/squall-capacity-us-east-1.template.json",
        "large/squall-capacity-us-west-2.template.json",
        "large/squall-control-plane.template.json",
        "large/squall-forwarding-eu-west-1.template.json",
        "large/squall-forwarding-us-east-1.template.json",
        "large/squall-monitoring.template.json",
        "large/squall-workloads.template.json",
    ]
    assert len([n for n in templates if n.startswith("full/")]) == 6
    assert len([n for n in templates if n.startswith("default/")]) == 6


def _region(name: str, template: dict[str, Any]) -> str:
    for region in ("us-east-1", "us-west-2", "eu-west-1"):
        if region in name:
            return region
    return "us-west-2"  # control plane and monitoring live in the home region


def test_a_real_size_deployment_fits_lambdas_environment(large: Synthesis) -> None:
    from stacks.functions import environment_size

    # given ten node groups in three regions, a real certificate and a dozen teams with submitters
    config = large.stacks.control_plane.functions._config
    assert len(config.node_groups) == 10 and len(config.group_regions) == 3
    assert len(config.clusters[0].certificate_authority) > 1400
    template = large.template(large.stacks.control_plane).to_json()
    # then every function's environment stays far below Lambda's 4 KB
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert len(functions) == len(constants.FUNCTIONS)
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        sized = {k: v if isinstance(v, str) else json.dumps(v) for k, v in variables.items()}
        assert environment_size(sized) < constants.LAMBDA_ENVIRONMENT_LIMIT_BYTES // 4, function[
            "Properties"
        ]["FunctionName"]
    # and the settings are in the asset, whole: every group, the certificate, every team's submitters
    staged = next(large.outdir.glob(".squall-asset-squall-control-plane"))
    scale = json.loads((staged / constants.SETTINGS_DIR / "scale.json").read_text())
    submit = json.loads((staged / constants.SETTINGS_DIR / "submit.json").read_text())
    assert (
        len(scale["node_groups"]) == 10
        and scale["clusters"][0]["certificate_authority"] == config.clusters[0].certificate_authority
    )
    # (submit places a model service where a group can grow for it: it reads the groups too)
    assert len(submit["submitters"]) == 12 and len(submit["node_groups"]) == 10
