"""Bodies that decode as JSON yet mean something other than what they look like, or could never run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.core.spec import SpecError, decode_body, load_spec, parse_spec
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.services.intake import Intake, IntakeConfig, IntakeOutcome

TEAMS = {"research": "team-research"}
REGISTRIES = ["registry.example.com/squall"]
IMAGE = "registry.example.com/squall/tf-trainer:1.0"
VALID = {"name": "train", "team": "research", "image": IMAGE}


@pytest.fixture
def intake() -> Intake:
    clock = VirtualClock()
    return Intake(
        store=InMemoryJobStore(),
        clusters={"local": SimulatedCluster(clock=clock)},
        clock=clock,
        metrics=RecordingMetrics(clock),
        config=IntakeConfig(teams=TEAMS, registries=REGISTRIES),
    )


def body(**fields: Any) -> str:
    return json.dumps(VALID | fields)


def rejected_fields(intake: Intake, text: str) -> list[str]:
    result = intake.handle(body=text, message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED, result
    job = intake.store.get(result.job_id)
    assert job is not None and job.status is JobStatus.REJECTED
    assert intake.store.queue() == [], "nothing queued"
    return [e["field"] for e in result.errors]


# A spec's first fields as JSON text, left open for the repeated key that follows.
OPEN = json.dumps(VALID)[:-1]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (OPEN + ', "name": "other"}', "name"),
        (OPEN + ', "priority": 1, "priority": 99}', "priority"),
        (OPEN + ', "resources": {"gpu": 1, "gpu": 8}}', "resources.gpu"),
        (OPEN + ', "replicas": {"worker": {"count": 1, "count": 64}}}', "replicas.worker.count"),
        ('{"action": "cancel", "id": "a", "id": "b"}', "id"),
    ],
    ids=["name", "priority", "nested", "replicas", "command"],
)
def test_a_key_given_twice_is_rejected_at_its_path_not_silently_the_last(
    intake: Intake, text: str, field: str
) -> None:
    assert rejected_fields(intake, text) == [field]


def test_a_repeated_key_inside_a_list_is_named_with_its_index() -> None:
    _, issues = decode_body('{"args": ["x"], "sweep": {"parameters": {"lr": [{"a": 1, "a": 2}]}}}')
    assert [i.field for i in issues] == ["sweep.parameters.lr[0].a"]


def test_a_body_with_a_byte_order_mark_is_read_as_the_document_readers_read_it(intake: Intake) -> None:
    result = intake.handle(body="\ufeff" + body(), message_id="m-1")
    assert result.outcome is IntakeOutcome.CREATED
    assert decode_body("\ufeff[1]") == ([1], [])


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"env": {"A": "x\x00y"}}, "env.A"),
        ({"args": ["--data", "a\x00b"]}, "args[1]"),
        ({"command": ["python\x00"]}, "command[0]"),
        ({"sweep": {"parameters": {"lr": ["0.1", "0.2\x00"]}}}, "sweep.parameters.lr[1]"),
    ],
    ids=["env", "args", "command", "sweep"],
)
def test_text_holding_a_nul_is_rejected_at_its_path(
    intake: Intake, fields: dict[str, Any], field: str
) -> None:
    # exec(2) takes no NUL: the container could only fail to start
    assert rejected_fields(intake, body(**fields)) == [field]


def test_other_control_characters_and_rtl_marks_in_values_are_still_taken(intake: Intake) -> None:
    result = intake.handle(body=body(env={"A": "\x1b[31mred\x07", "B": "\u202eabc"}), message_id="m-1")
    assert result.outcome is IntakeOutcome.CREATED


def test_a_stored_spec_with_a_nul_still_loads() -> None:
    # accepted before the check: reconcile must still read it
    assert load_spec(VALID | {"env": {"A": "x\x00y"}}).env == {"A": "x\x00y"}
    with pytest.raises(SpecError, match="NUL"):
        parse_spec(VALID | {"env": {"A": "x\x00y"}}, teams=TEAMS, registries=REGISTRIES)
