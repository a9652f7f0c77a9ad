"""SnapStart: every function resumes from a snapshot of a published version, and every
trigger invokes that version (through the ``live`` alias), never $LATEST."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from stacks import constants

from .helpers import logical_id, resources
from .scenario import Synthesis

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template(full: Synthesis) -> Template:
    return full.template(full.stacks.control_plane)


@pytest.fixture(scope="module")
def raw(template: Template) -> dict[str, Any]:
    return dict(template.to_json())


@pytest.fixture(scope="module")
def plane(full: Synthesis) -> Any:
    return full.stacks.control_plane.functions


def test_every_function_takes_snapshots_of_its_published_versions(raw: dict[str, Any], plane: Any) -> None:
    for handler, function in plane.by_handler.items():
        properties = raw["Resources"][logical_id(function)]["Properties"]
        assert properties["SnapStart"] == {"ApplyOn": "PublishedVersions"}, handler
        assert properties["Runtime"] == f"python{constants.PYTHON_VERSION}"


def test_each_function_has_a_live_alias_on_its_current_version(raw: dict[str, Any], plane: Any) -> None:
    versions = resources(raw, "AWS::Lambda::Version")
    aliases = resources(raw, "AWS::Lambda::Alias")
    assert len(aliases) == len(constants.FUNCTIONS) == len(plane.live)
    for handler, function in plane.by_handler.items():
        alias = raw["Resources"][logical_id(plane.live[handler])]
        assert alias["Properties"]["Name"] == constants.LIVE_ALIAS
        assert alias["Properties"]["FunctionName"] == {"Ref": logical_id(function)}
        version_id = alias["Properties"]["FunctionVersion"]["Fn::GetAtt"][0]
        assert versions[version_id]["Properties"]["FunctionName"] == {"Ref": logical_id(function)}
        # A replaced version is deleted: no outdated snapshot stays cached.
        assert versions[version_id]["DeletionPolicy"] == "Delete"


def invoked_alias(name: Any) -> str | None:
    """The alias's logical id when `name` names one: its ARN, its name, or its function's name and qualifier."""
    if isinstance(name, dict) and set(name) == {"Ref"}:
        return str(name["Ref"])
    if isinstance(name, dict) and "Fn::Select" in name:  # the alias's name, the ARN's last field
        index, split = name["Fn::Select"]
        arn = split["Fn::Split"][1]
        return str(arn["Ref"]) if index == 7 and set(arn) == {"Ref"} else None
    if isinstance(name, dict) and "Fn::Join" in name:  # <function name of the alias ARN>:<alias>
        _, (select, qualifier) = name["Fn::Join"]
        index, split = select["Fn::Select"]
        arn = split["Fn::Split"][1]
        if index == 6 and qualifier == f":{constants.LIVE_ALIAS}" and set(arn) == {"Ref"}:
            return str(arn["Ref"])
    return None


def test_every_trigger_invokes_the_alias_not_latest(raw: dict[str, Any], plane: Any) -> None:
    aliases = {logical_id(alias) for alias in plane.live.values()}
    functions = {logical_id(fn) for fn in plane.by_handler.values()}
    mappings = [
        m["Properties"]["FunctionName"] for m in resources(raw, "AWS::Lambda::EventSourceMapping").values()
    ]
    targets = [
        t["Arn"]
        for rule in resources(raw, "AWS::Events::Rule").values()
        for t in rule["Properties"]["Targets"]
    ]
    # the two queues' event sources, and every rule whose target is one of the functions
    lambda_targets = [
        t for t in targets if invoked_alias(t) in aliases or str(t.get("Fn::GetAtt", [""])[0]) in functions
    ]
    invoked = mappings + lambda_targets
    assert (
        len(mappings) == 2 and len(lambda_targets) == 5
    )  # schedules (2), scale requests, launch failures, lifecycle
    assert all(invoked_alias(name) in aliases for name in invoked), invoked
    # EventBridge may invoke the alias (the permission names it, qualified).
    permissions = resources(raw, "AWS::Lambda::Permission").values()
    events = [p["Properties"] for p in permissions if p["Properties"]["Principal"] == "events.amazonaws.com"]
    assert events and all(invoked_alias(p["FunctionName"]) in aliases for p in events)


def test_asynchronous_invocations_of_the_alias_keep_their_limits(
    raw: dict[str, Any], plane: Any, full: Synthesis
) -> None:
    # EventBridge invokes the alias asynchronously: its event age, retries and the
    # lifecycle function's failure destination are the alias's own settings.
    configs = {
        (config["FunctionName"]["Ref"], invoked_alias(config["Qualifier"])): config
        for config in (c["Properties"] for c in resources(raw, "AWS::Lambda::EventInvokeConfig").values())
    }

    def config_of(handler: str) -> dict[str, Any]:
        return configs.pop((logical_id(plane.by_handler[handler]), logical_id(plane.live[handler])))

    for handler in ("scale", "reconcile"):
        assert config_of(handler) | {"FunctionName": None, "Qualifier": None} == {
            "FunctionName": None,
            "Qualifier": None,
            "MaximumEventAgeInSeconds": 120,
            "MaximumRetryAttempts": 0,
        }
    failures = full.stacks.control_plane.lifecycle_failures
    lifecycle = config_of("lifecycle")
    assert lifecycle["MaximumEventAgeInSeconds"] == 600
    assert lifecycle["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [logical_id(failures), "Arn"]}}
    }
    # and none is left on $LATEST, which nothing invokes
    assert configs == {}
