"""The serve and unserve commands on the jobs queue: strict, bounded, every error names its field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from squall.core.spec import (
    CancelCommand,
    ServeCommand,
    SpecError,
    UnserveCommand,
    parse_message,
)

TEAMS = ["research"]
REGISTRIES = ["registry.example.com/squall"]


def parse(body: Any) -> Any:
    return parse_message(body, teams=TEAMS, registries=REGISTRIES)


def errors(body: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse(body)
    return {issue.field: issue.message for issue in caught.value.issues}


def serve(**fields: Any) -> dict[str, Any]:
    return {"action": "serve", "job": "mnist-0a1b2c3d"} | fields


def test_a_serve_command_has_the_contract_defaults() -> None:
    command = parse(serve())
    assert isinstance(command, ServeCommand)
    assert command.name == "mnist-0a1b2c3d"  # the job id, a valid name
    assert (command.model_version, command.replicas) == (1, 1)
    assert (command.resources.gpu, command.resources.cpu, command.resources.memory) == (0, "1", "2Gi")


def test_a_serve_command_takes_every_field_by_its_camel_case_name() -> None:
    command = parse(
        serve(
            name="mnist", modelVersion=7, replicas=20, resources={"gpu": 8, "cpu": "500m", "memory": "16Gi"}
        )
    )
    assert (command.name, command.model_version, command.replicas) == ("mnist", 7, 20)
    assert command.resources.cpu_millis == 500
    assert command.resources.memory_bytes == 16 * 1024**3
    assert command.resources.gpu == 8


def test_parse_message_dispatches_on_the_action() -> None:
    assert isinstance(parse({"action": "cancel", "id": "gan-1"}), CancelCommand)
    assert isinstance(parse(serve()), ServeCommand)
    unserve = parse({"action": "unserve", "name": "mnist"})
    assert isinstance(unserve, UnserveCommand)
    assert (unserve.name, unserve.reason) == ("mnist", "requested by user")


@pytest.mark.parametrize("action", ["explode", "Serve", "", None, 3, ["serve"], {"a": 1}, "x" * 100_000])
def test_an_unknown_action_names_the_field_and_the_allowed_actions(action: Any) -> None:
    found = errors({"action": action, "job": "mnist"})
    assert set(found) == {"action"}
    assert "'cancel', 'serve', 'unserve'" in found["action"]
    assert len(found["action"]) < 300


def test_a_job_id_too_long_for_a_name_asks_for_a_name() -> None:
    job = "a" * 45  # a valid job id, longer than a model service name may be
    found = errors(serve(job=job))
    assert set(found) == {"name"}
    assert "is required" in found["name"]
    assert parse(serve(job=job, name="short")).name == "short"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"nmae": "typo"}, "nmae"),
        ({"resources": {"gpus": 1}}, "resources.gpus"),
        ({"name": "Mnist"}, "name"),
        ({"name": "9lives"}, "name"),
        ({"name": "mnist-"}, "name"),
        ({"name": "a" * 41}, "name"),
        ({"name": "x" * 1_000_000}, "name"),
        ({"name": "ok\n"}, "name"),
        ({"name": 5}, "name"),
        ({"name": None}, "name"),
        ({"job": "../etc"}, "job"),
        ({"job": "j" * 1_000_000}, "job"),
        ({"job": 12}, "job"),
        ({"replicas": 21}, "replicas"),
        ({"replicas": 0}, "replicas"),
        ({"replicas": "2"}, "replicas"),
        ({"replicas": True}, "replicas"),
        ({"replicas": 2.0}, "replicas"),
        ({"replicas": 10**100}, "replicas"),
        ({"modelVersion": 0}, "modelVersion"),
        ({"modelVersion": 1_000_001}, "modelVersion"),
        ({"modelVersion": "1"}, "modelVersion"),
        ({"resources": {"gpu": 9}}, "resources.gpu"),
        ({"resources": {"gpu": -1}}, "resources.gpu"),
        ({"resources": {"cpu": "0"}}, "resources.cpu"),
        ({"resources": {"cpu": "193"}}, "resources.cpu"),
        ({"resources": {"cpu": "1" * 10_000}}, "resources.cpu"),
        ({"resources": {"memory": "3Ti"}}, "resources.memory"),
        ({"resources": {"memory": "lots"}}, "resources.memory"),
        ({"resources": {"memory": []}}, "resources.memory"),
        ({"resources": "big"}, "resources"),
    ],
)
def test_a_hostile_serve_command_names_the_field(fields: dict[str, Any], field: str) -> None:
    found = errors(serve(**fields))
    assert field in found, found
    assert all(len(message) <= 500 for message in found.values())


def test_every_problem_of_a_serve_command_is_listed_at_once() -> None:
    found = errors(serve(name="Bad", replicas=99, modelVersion=-1, resources={"gpu": 99}, extra=1))
    assert {"name", "replicas", "modelVersion", "resources.gpu", "extra"} <= set(found)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "unserve"}, "name"),
        ({"action": "unserve", "name": "Mnist"}, "name"),
        ({"action": "unserve", "name": "x" * 1_000_000}, "name"),
        ({"action": "unserve", "name": "mnist", "reason": "r" * 513}, "reason"),
        ({"action": "unserve", "name": "mnist", "reason": 5}, "reason"),
        ({"action": "unserve", "name": "mnist", "job": "mnist"}, "job"),
    ],
)
def test_a_hostile_unserve_command_names_the_field(body: dict[str, Any], field: str) -> None:
    assert field in errors(body)


def test_a_deep_or_huge_command_body_is_refused_before_validation() -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    assert [field for field in errors(serve(name=deep))] == ["name" + "[0]" * 15]
    assert "(body)" in errors(serve(resources={"cpu": list(range(20_000))}))
    assert "(body)" in errors({"action": "unserve", "name": "m", "reason": [{}] * 20_000})


def test_a_serve_command_is_frozen() -> None:
    command = parse(serve())
    with pytest.raises(ValidationError):
        command.replicas = 3
