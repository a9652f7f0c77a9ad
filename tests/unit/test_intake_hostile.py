"""Hostile bodies through the intake on the in-memory backend: refused, bounded, never a traceback."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest

from squall.adapters.aws.job_store import MAX_ITEM_BYTES, creation_values, item_size
from squall.core.jobs import Job, JobStatus, Reason
from squall.core.spec import MAX_ISSUE_FIELD_LENGTH, MAX_ISSUE_MESSAGE_LENGTH, MAX_ISSUES
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.services.intake import MAX_RECORDED_BODY, Intake, IntakeConfig, IntakeOutcome, MalformedMessage

TEAMS = {"research": "team-research"}
REGISTRIES = ["registry.example.com/squall"]
IMAGE = "registry.example.com/squall/tf-trainer:1.0"


@dataclass
class Rig:
    store: InMemoryJobStore
    cluster: SimulatedCluster
    intake: Intake


@pytest.fixture
def rig() -> Rig:
    clock = VirtualClock()
    store = InMemoryJobStore()
    cluster = SimulatedCluster(clock=clock)
    intake = Intake(
        store=store,
        clusters={"local": cluster},
        clock=clock,
        metrics=RecordingMetrics(clock),
        config=IntakeConfig(teams=TEAMS, registries=REGISTRIES),
    )
    return Rig(store, cluster, intake)


def body(**fields: Any) -> str:
    return json.dumps({"name": "train", "team": "research", "image": IMAGE} | fields)


def record_size(rig: Rig, job: Job) -> int:
    """The job item's size as the DynamoDB adapter writes it (the first event rides along)."""
    return item_size(creation_values(job, rig.store.events(job.id)[0]))


def assert_bounded_rejection(rig: Rig, job_id: str) -> Job:
    job = rig.store.get(job_id)
    assert job is not None and job.status is JobStatus.REJECTED
    assert 1 <= len(job.errors) <= MAX_ISSUES + 1
    for error in job.errors:
        assert len(error["field"]) <= MAX_ISSUE_FIELD_LENGTH and len(error["message"]) <= MAX_ISSUE_MESSAGE_LENGTH
    assert len(json.dumps(job.spec["body"])) <= MAX_RECORDED_BODY
    assert record_size(rig, job) <= MAX_ITEM_BYTES
    assert rig.store.queue() == [], "nothing queued"
    return job


def test_a_small_body_with_thousands_of_issues_makes_a_record_that_fits(rig: Rig) -> None:
    # given a 3.6 KB body with a problem in every value (it used to make 2,000 issues)
    hostile = json.dumps({"sweep": {"parameters": {f"p{i}": [[]] * 100 for i in range(9)}}}, separators=(",", ":"))
    assert len(hostile) < 3_700
    # when
    result = rig.intake.handle(body=hostile, message_id="m-1")
    # then it is REJECTED with at most MAX_ISSUES issues and a last "and N more"
    assert result.outcome is IntakeOutcome.REJECTED
    job = assert_bounded_rejection(rig, result.job_id)
    assert len(job.errors) == MAX_ISSUES + 1
    assert job.errors[-1]["field"] == "(body)" and job.errors[-1]["message"].startswith("and ")


@pytest.mark.parametrize(
    "hostile",
    [
        body(name="\U0001f600" * 60_000),  # escapes grow in the stored JSON
        body(team="t" * 200_000),
        body(**{"\u00e9" * 1000 + str(i): i for i in range(200)}),
        body(env={"\u4e2d" * 120: "\U0001f600" * 1000} | {f"E{i}\n": 1 for i in range(90)}),
        json.dumps({"name": "\ud800", "team": "\udfff", "image": IMAGE, "args": ["\ud83d"] * 100}),
        body(sweep={"parameters": {f"p{i}": [[{}]] * 100 for i in range(10)}}),
        '"' + "x" * 300_000 + '"',
        "[" + ",".join(["{}"] * 50_000) + "]",
    ],
    ids=["emoji-name", "long-team", "long-keys", "bad-env", "surrogates", "bad-sweep", "long-string", "long-list"],
)
def test_a_rejected_record_fits_the_item_limit_whatever_the_body(rig: Rig, hostile: str) -> None:
    result = rig.intake.handle(body=hostile, message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED
    job = assert_bounded_rejection(rig, result.job_id)
    assert job.name in ("", "train") and job.team in ("", "research")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "hostile",
    [
        body(env={f"K{i}": [[[]]] for i in range(3_000)}),
        body(sweep={"parameters": {"lr": [[1, [2]]] * 3_000}}),
        body(**{f"x{i}": {"y": [1, 2, 3]} for i in range(3_000)}),
        body(replicas={f"r{i}": {"count": "x", "resources": {"cpu": []}} for i in range(2_000)}),
    ],
    ids=["env", "sweep", "extra", "replicas"],
)
def test_a_35_kb_hostile_body_is_handled_in_bounded_memory(rig: Rig, hostile: str) -> None:
    assert 30_000 < len(hostile) < 120_000
    tracemalloc.start()
    try:
        result = rig.intake.handle(body=hostile, message_id="m-1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.outcome is IntakeOutcome.REJECTED
    assert_bounded_rejection(rig, result.job_id)
    assert peak < 50 * 1024**2, f"{peak / 1024**2:.0f} MB"


@pytest.mark.parametrize(
    "hostile",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        '{"name": "train", "priority": ' + "9" * 5_000 + "}",
        "{not json",
    ],
    ids=["deep-list", "deep-object", "int-limit", "not-json"],
)
def test_a_body_json_refuses_is_a_malformed_message(rig: Rig, hostile: str) -> None:
    with pytest.raises(MalformedMessage, match="m-1"):
        rig.intake.handle(body=hostile, message_id="m-1")
    assert rig.store.list_all() == []


def test_json_nested_within_the_decoders_reach_is_rejected_not_raised(rig: Rig) -> None:
    result = rig.intake.handle(body=body(env=json.loads("[" * 500 + "]" * 500)), message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED
    assert any("nested" in e["message"] for e in assert_bounded_rejection(rig, result.job_id).errors)


@pytest.mark.parametrize("runtime", ["99999999999d", "999999999d", "9" * 30 + "s"])
def test_an_overflowing_max_runtime_is_a_field_error(rig: Rig, runtime: str) -> None:
    result = rig.intake.handle(body=body(maxRuntime=runtime), message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED
    assert [e["field"] for e in result.errors] == ["maxRuntime"]


def test_a_body_larger_than_sqs_carries_is_rejected_without_parsing(rig: Rig) -> None:
    result = rig.intake.handle(body=body(args=["x" * 1_100_000]), message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED
    assert "1 MiB" in result.errors[0]["message"]
    assert_bounded_rejection(rig, result.job_id)


def test_a_sweep_that_would_wedge_reconcile_is_rejected_at_intake(rig: Rig) -> None:
    # args at the limit plus a trial argument: the trial would not load back
    result = rig.intake.handle(body=body(args=["-v"] * 256, sweep={"parameters": {"lr": [1, 2]}}), message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED and result.errors[0]["field"] == "args"
    # a parameter value longer than an argument may be
    result = rig.intake.handle(body=body(sweep={"parameters": {"lr": ["x" * 4100]}}), message_id="m-2")
    assert result.outcome is IntakeOutcome.REJECTED and result.errors[0]["field"] == "sweep.parameters.lr[0]"
    # a lone surrogate in a value
    result = rig.intake.handle(body=body(sweep={"parameters": {"lr": ["\ud800"]}}), message_id="m-3")
    assert result.outcome is IntakeOutcome.REJECTED and result.errors[0]["field"] == "sweep.parameters.lr[0]"
    assert rig.store.list_by_status(JobStatus.QUEUED) == []


@pytest.mark.timeout(20)
def test_a_sweep_of_ten_trillion_combinations_makes_max_trials_records(rig: Rig) -> None:
    sweep = {"parameters": {f"p{i}": list(range(20)) for i in range(10)}, "maxTrials": 10, "parallelism": 2}
    result = rig.intake.handle(body=body(id="huge", sweep=sweep), message_id="m-1")
    assert result.outcome is IntakeOutcome.CREATED
    parent = rig.store.get("huge")
    assert parent is not None and len(parent.trial_ids) == 10
    assert len(rig.store.list_all()) == 11
    assert [entry.job_id for entry in rig.store.queue()] == ["huge-t000", "huge-t001"]


def test_a_client_id_shaped_like_a_trial_cannot_take_another_jobs_trial(rig: Rig) -> None:
    rig.intake.handle(body=body(id="exp", sweep={"parameters": {"lr": [1, 2]}}), message_id="m-1")
    result = rig.intake.handle(body=body(id="exp-t001", team="research"), message_id="m-2")
    assert result.outcome is IntakeOutcome.REJECTED and result.errors[0]["field"] == "id"
    trial = rig.store.get("exp-t001")
    assert trial is not None and trial.parent_id == "exp"


def test_the_rejected_reason_is_invalid_spec(rig: Rig) -> None:
    result = rig.intake.handle(body=body(name="Bad"), message_id="m-1")
    job = rig.store.get(result.job_id)
    assert job is not None and job.reason == Reason.INVALID_SPEC
