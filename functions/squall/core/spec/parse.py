"""Parsing queue bodies and recorded specs, and what one message may cost.

A sweep is expanded in time proportional to its trials, not its grid; a recorded
spec (the job's and each trial's) has a size limit well inside DynamoDB's item
limit; and every recorded spec is loaded back with the same rules before it is
accepted, so reconcile can always read what intake wrote.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

from squall.core.spec.bounds import Issue, SpecError, shape_issues, validation_issues
from squall.core.spec.commands import ServeCommand, UnserveCommand
from squall.core.spec.limits import (
    DEFAULT_MAX_RUNTIME_LIMIT,
    ISSUES_CONSIDERED,
    MAX_BODY_VALUES,
    MAX_RECORDED_SPEC_BYTES,
)
from squall.core.spec.model import CancelCommand, JobSpec
from squall.core.spec.sweep import expand_sweep


def _validate(model: type[BaseModel], data: Any, context: dict[str, Any]) -> Any:
    shape, too_large = shape_issues(data, refuse_nul=not context.get("stored"))
    if too_large:
        raise SpecError(shape)
    try:
        parsed = model.model_validate(data, context=context)
    except ValidationError as exc:
        named = {issue.field for issue in shape}  # pydantic's own words for the same text add nothing
        found = [i for i in validation_issues(exc) if i.field not in named]
        raise SpecError(shape + found, more=max(0, exc.error_count() - ISSUES_CONSIDERED)) from exc
    except RecursionError as exc:
        raise SpecError([*shape, Issue("(body)", "is nested too deeply")]) from exc
    except Exception as exc:
        # A bug in a check must not become a traceback for the sender.
        raise SpecError([*shape, Issue("(body)", f"could not be validated ({type(exc).__name__})")]) from exc
    if shape:
        raise SpecError(shape)
    return parsed


def decode_body(body: str) -> tuple[Any, list[Issue]]:
    """A queue body's JSON, and an issue for each key it gives twice in one object.

    A leading byte order mark is dropped, as every other reader of documents drops it.
    A repeated key is an issue, not a silent "last one wins": which value counts is
    not JSON's to say, and a body that means one thing to its sender and another to
    Squall must not run. Raises what json.loads raises for text that is not JSON.
    """
    repeated: dict[int, list[str]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            seen: set[str] = set()
            twice = repeated.setdefault(id(obj), [])
            for key, _ in items:
                if key in seen:
                    twice.append(key)
                seen.add(key)
        return obj

    data = json.loads(body.removeprefix("\ufeff"), object_pairs_hook=pairs)
    if not repeated:
        return data, []
    return data, [
        Issue(path, "is given more than once in one object; a JSON key must be unique")
        for path in _key_paths(data, repeated)
    ]


def _key_paths(data: Any, keys: Mapping[int, list[str]]) -> list[str]:
    """The field paths of `keys` (object id -> its keys) in `data`, walked without recursion.

    Past MAX_BODY_VALUES values, a key not found yet is named alone.
    """
    found: list[str] = []
    left = dict(keys)
    stack: list[tuple[Any, str]] = [(data, "")]
    for _ in range(MAX_BODY_VALUES):
        if not stack or not left:
            break
        node, path = stack.pop()
        if isinstance(node, dict):
            for key in left.pop(id(node), []):
                found.append(f"{path}.{key}" if path else key)
            stack.extend((value, f"{path}.{key}" if path else key) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, f"{path}[{index}]") for index, value in enumerate(node))
    found.extend(key for rest in left.values() for key in rest)
    return found


def parse_spec(
    data: Any,
    *,
    teams: Collection[str],
    registries: Collection[str],
    max_runtime_limit: timedelta = DEFAULT_MAX_RUNTIME_LIMIT,
) -> JobSpec:
    """Validate a job spec against the configured teams and registries.

    Raises SpecError listing its problems (never only the first), bounded.
    Beyond the fields, the spec as recorded and every trial of its sweep must load
    back with `load_spec`, the rules reconcile reads them with.
    """
    if not isinstance(data, Mapping):
        raise SpecError([Issue(field="(body)", message="a job spec must be a JSON object")])
    for reserved in ("parentId", "parent_id", "trialParameters", "trial_parameters"):
        if reserved in data:
            raise SpecError([Issue(field=reserved, message="is set by Squall for sweep trials only")])
    spec: JobSpec = _validate(
        JobSpec,
        data,
        {"teams": teams, "registries": registries, "max_runtime_limit": max_runtime_limit},
    )
    # The id a message would get has the same length and form as this stand-in.
    check_recorded(spec, job_id=spec.id or f"{spec.name}-{'0' * 8}")
    return spec


Command = CancelCommand | ServeCommand | UnserveCommand
# A body with "action" is a command, validated by the model its action names.
COMMANDS: dict[str, type[CancelCommand] | type[ServeCommand] | type[UnserveCommand]] = {
    "cancel": CancelCommand,
    "serve": ServeCommand,
    "unserve": UnserveCommand,
}


def parse_message(
    data: Any,
    *,
    teams: Collection[str],
    registries: Collection[str],
    max_runtime_limit: timedelta = DEFAULT_MAX_RUNTIME_LIMIT,
) -> JobSpec | Command:
    """A queue message body (already decoded JSON): a job spec or a command."""
    if isinstance(data, Mapping) and "action" in data:
        return parse_command(data)
    return parse_spec(data, teams=teams, registries=registries, max_runtime_limit=max_runtime_limit)


def parse_command(data: Mapping[str, Any]) -> Command:
    """A command body: its ``action`` names the model it is validated by. Raises SpecError."""
    action = data.get("action")
    model = COMMANDS.get(action) if isinstance(action, str) else None
    if model is None:
        got = repr(action[:80]) if isinstance(action, str) else f"a {type(action).__name__}"
        allowed = ", ".join(repr(name) for name in COMMANDS)
        raise SpecError([Issue("action", f"must be one of {allowed}; got {got}")])
    command: Command = _validate(model, data, {})
    return command


def recorded(spec: JobSpec) -> dict[str, Any]:
    """The spec as the job record keeps it (JSON-ready, by alias, without unset options)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


def load_spec(data: Any) -> JobSpec:
    """A recorded spec (a job's or a sweep trial's), with the rules it was accepted by.

    Operator policy (teams, registries, maxRuntimeLimit) was checked at intake and
    may have changed since: it is not applied again. Raises SpecError.
    """
    if not isinstance(data, Mapping):
        raise SpecError([Issue(field="(body)", message="a recorded job spec must be an object")])
    spec: JobSpec = _validate(JobSpec, data, {"stored": True})
    return spec


def check_recorded(spec: JobSpec, *, job_id: str) -> None:
    """Raise SpecError unless the spec and each of its trials records within bounds and loads back."""
    issues: list[Issue] = []
    records: list[tuple[str | None, JobSpec]] = [(None, spec), *expand_sweep(spec, job_id=job_id)]
    for number, (trial_id, record) in enumerate(records):
        what = "the job spec" if trial_id is None else f"trial {number} ({trial_id})"
        where = "(body)" if trial_id is None else "sweep"
        text = json.dumps(recorded(record), separators=(",", ":"))
        if len(text) > MAX_RECORDED_SPEC_BYTES:
            issues.append(
                Issue(where, f"{what} takes {len(text)} bytes as recorded; at most {MAX_RECORDED_SPEC_BYTES}")
            )
            break
        try:
            load_spec(json.loads(text))
        except SpecError as exc:
            issues.extend(
                Issue(where, f"{what} would be invalid: {i.field}: {i.message}") for i in exc.issues
            )
            break
    if issues:
        raise SpecError(issues)


def derive_job_id(spec: JobSpec, *, message_id: str) -> str:
    """The client's id, else the name plus a stable hash of the delivery's message id.

    SQS redelivers a message with the same message id, so a duplicate delivery
    maps to the same job and is recognised as a duplicate, not created twice.
    """
    if spec.id:
        return spec.id
    digest = hashlib.sha256(message_id.encode()).hexdigest()[:8]
    return f"{spec.name}-{digest}"
