"""Every error of a job spec or command names the field and says what is allowed in Squall's words.

`priority: -1` read "Input should be greater than or equal to 0", pydantic's own text.
These tests walk every field of the spec's models (nested ones too), give each value
out of its range or of the wrong kind, and read every issue that comes back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from squall.core.spec import (
    CancelCommand,
    JobSpec,
    ServeCommand,
    SpecError,
    UnserveCommand,
    parse_command,
    parse_spec,
)

# pydantic's default wording: none of it may reach a sender.
PYDANTIC_WORDS = ("Input should", "should be", "should have", "after validation", "instance of")
# Python's own words for an int too long to print.
PYTHON_WORDS = ("Exceeds the limit", "set_int_max_str_digits")
BAD_VALUES: tuple[Any, ...] = (
    -1,
    0,
    -(10**30),
    10**30,
    10**5000,
    1.5,
    True,
    "x",
    "",
    "x" * 70_000,
    [],
    ["x"] * 300,
    {},
    {"x": 1},
    None,
)
SPEC = {"name": "words", "team": "research", "image": "registry.example.com/squall/tf:1"}
SERVE = {"action": "serve", "job": "words-0a1b2c3d"}
UNSERVE = {"action": "unserve", "name": "words"}
CANCEL = {"action": "cancel", "id": "words-0a1b2c3d"}
# Set by Squall on trials only: refused before the models see them.
RESERVED = {"parentId", "trialParameters"}


def _fields(model: type[BaseModel], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every field path of a model, by the names a body uses, nested models included."""
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if alias in RESERVED:
            continue
        yield (*path, alias)
        for nested in _models(info.annotation):
            yield from _fields(nested, (*path, alias))


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        yield from _models(arg)


def _with(body: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """`body` with `value` at `path`; nested objects are made on the way (replicas: a worker)."""
    out = dict(body)
    node = out
    for key in path[:-1]:
        child = node.get(key)
        child = dict(child) if isinstance(child, dict) else {}
        if key == "replicas":
            child = {"worker": {"count": 1}}
            node[key] = child
            node = child["worker"]
            continue
        if key == "sweep":
            child.setdefault("parameters", {"lr": [0.1]})
        node[key] = child
        node = child
    node[path[-1]] = value
    return out


def _issues(check: Any, body: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        check(body)
    except SpecError as exc:
        return [(issue.field, issue.message) for issue in exc.issues]
    return []


def _spec(body: dict[str, Any]) -> None:
    parse_spec(body, teams=["research"], registries=["registry.example.com"])


CASES = [
    (JobSpec, SPEC, _spec),
    (ServeCommand, SERVE, parse_command),
    (UnserveCommand, UNSERVE, parse_command),
    (CancelCommand, CANCEL, parse_command),
]


@pytest.mark.parametrize(("model", "base", "check"), CASES, ids=[c[0].__name__ for c in CASES])
def test_every_field_error_is_in_squalls_words(
    model: type[BaseModel], base: dict[str, Any], check: Any
) -> None:
    # given the base body is valid
    assert _issues(check, base) == []
    paths = list(_fields(model))
    assert len(paths) >= (20 if model is JobSpec else 2)
    refused = 0
    for path in paths:
        for value in BAD_VALUES:
            # when one field holds a value out of its range or of the wrong kind
            for field, message in _issues(check, _with(base, path, value)):
                refused += 1
                # then every issue names a field and says what is allowed in Squall's words
                assert (field and field != "(body)") or "more issues" in message, (path, value, field)
                assert message, (path, value, field)
                assert not any(words in message for words in PYDANTIC_WORDS + PYTHON_WORDS), (
                    path,
                    field,
                    message,
                )
    assert refused > len(paths)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"priority": -1}, "priority", "must be from 0 to 100, got -1"),
        ({"priority": 101}, "priority", "must be from 0 to 100, got 101"),
        ({"retries": -1}, "retries", "must be from 0 to 10, got -1"),
        ({"resources": {"gpu": -1}}, "resources.gpu", "must be from 0 to 16, got -1"),
        ({"resources": {"gpu": "2"}}, "resources.gpu", "must be a whole number from 0 to 16"),
        ({"priority": True}, "priority", "must be a whole number from 0 to 100"),
        ({"priority": 10**5000}, "priority", "must be from 0 to 100, got a number beyond that"),
        (
            {"placement": {"spot": "sometimes"}},
            "placement.spot",
            "must be one of 'allowed', 'required' or 'never'",
        ),
        (
            {"placement": {"regions": ["us-west-2"] * 17}},
            "placement.regions",
            "must have at most 16 entries, got 17",
        ),
        ({"command": "python"}, "command", "must be a list"),
        ({"args": ["x" * 5000]}, "args[0]", "must be at most 4096 characters"),
    ],
)
def test_out_of_range_values_say_what_is_allowed(fields: dict[str, Any], field: str, message: str) -> None:
    assert _issues(_spec, {**SPEC, **fields}) == [(field, message)]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({**SERVE, "replicas": 0}, "replicas", "must be from 1 to 20, got 0"),
        ({**SERVE, "modelVersion": 0}, "modelVersion", "must be from 1 to 1000000, got 0"),
        ({**SERVE, "resources": {"gpu": -1}}, "resources.gpu", "must be from 0 to 8, got -1"),
        ({**UNSERVE, "reason": "x" * 600}, "reason", "must be at most 512 characters"),
    ],
)
def test_command_errors_say_what_is_allowed(body: dict[str, Any], field: str, message: str) -> None:
    assert _issues(parse_command, body) == [(field, message)]


def test_bounded_numbers_still_load_and_record_as_numbers() -> None:
    spec = parse_spec(
        {
            **SPEC,
            "priority": 0,
            "retries": 10,
            "resources": {"gpu": 16},
            "sweep": {"parameters": {"lr": [1]}, "seed": -(2**63)},
        },
        teams=["research"],
        registries=["registry.example.com"],
    )
    assert (spec.priority, spec.retries, spec.resources.gpu) == (0, 10, 16)
    dumped = spec.model_dump(by_alias=True, mode="json")
    assert dumped["priority"] == 0 and dumped["sweep"]["seed"] == -(2**63)
