"""Intake against DynamoDB (moto) and the simulated cluster: nothing lost, nothing twice."""

from __future__ import annotations

import json
from typing import Any

import pytest

from squall.core.errors import ConflictError, PermanentError, RetryableError
from squall.core.jobs import JobStatus, Reason
from squall.services.intake import Intake, IntakeOutcome, MalformedMessage
from tests.integration.conftest import IMAGE, World


def spec(**overrides: Any) -> str:
    return json.dumps(
        {"name": "train", "team": "research", "image": IMAGE, "resources": {"gpu": 1}} | overrides
    )


def queued(world: World) -> list[str]:
    """The job ids in the queue index, waiting for admission."""
    return [entry.job_id for entry in world.store.queue()]


def test_a_spec_is_recorded_queued_in_the_queue_index_with_no_objects(world: World) -> None:
    result = world.intake.handle(body=spec(id="t-1"), message_id="m-1")
    assert (result.outcome, result.job_id) == (IntakeOutcome.CREATED, "t-1")
    job = world.store.get("t-1")
    assert job is not None and job.status is JobStatus.QUEUED and job.gpus == 1
    assert job.cluster is None and job.queue_shape, "its record is its queue entry"
    assert queued(world) == ["t-1"]
    assert world.cluster.list_jobs() == [], "a queued job has no Kubernetes objects anywhere"
    assert world.intake.waiting == ["t-1"]


def test_admission_creates_the_objects_in_the_cluster_and_records_where(world: World) -> None:
    world.intake.handle(body=spec(id="t-1"), message_id="m-1")
    world.add_gpu_nodes(1)
    world.admit()
    job = world.store.get("t-1")
    assert job is not None and (job.cluster, job.region, job.objects_created) == ("local", "us-west-2", True)
    assert [j["metadata"]["name"] for j in world.cluster.list_jobs(job_id="t-1")] == ["t-1-worker-0"]
    created = world.cluster.list_jobs(job_id="t-1")[0]
    assert created["spec"]["suspend"] is False
    assert queued(world) == [] and world.store.queue(placed=True) == []
    assert [e.reason for e in world.store.events("t-1")] == [
        "Submitted",
        "Placed:us-west-2",
        "Admitted:us-west-2",
    ]


def test_a_duplicate_delivery_of_one_message_makes_one_job(world: World) -> None:
    first = world.intake.handle(body=spec(), message_id="m-1")
    again = world.new_intake().handle(body=spec(), message_id="m-1")
    assert again.outcome is IntakeOutcome.REDELIVERED and again.job_id == first.job_id
    assert len(world.store.list_by_status(JobStatus.QUEUED)) == 1
    assert queued(world) == [first.job_id]
    assert len(world.store.events(first.job_id)) == 1


def test_two_messages_with_the_same_client_id_make_one_job(world: World) -> None:
    world.intake.handle(body=spec(id="mine", args=["--first"]), message_id="m-1")
    second = world.intake.handle(body=spec(id="mine", args=["--second"]), message_id="m-2")
    assert second.outcome is IntakeOutcome.DUPLICATE
    job = world.store.get("mine")
    assert job is not None and job.spec["args"] == ["--first"] and job.message_id == "m-1"
    assert world.metrics.total("JobsDuplicate") == 1


def test_an_invalid_spec_is_recorded_rejected_with_every_error(world: World) -> None:
    body = json.dumps({"name": "Bad Name", "team": "nope", "image": "docker.io/x:1", "extra": 1})
    result = world.intake.handle(body=body, message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED
    job = world.store.get(result.job_id)
    assert job is not None and job.status is JobStatus.REJECTED and job.reason == Reason.INVALID_SPEC
    assert {e["field"] for e in job.errors} == {"name", "team", "image", "extra"}
    assert job.spec["body"] == body, "the rejected body is kept for the user"
    assert queued(world) == []
    # delivered again: still one record
    world.new_intake().handle(body=body, message_id="m-1")
    assert len(world.store.list_by_status(JobStatus.REJECTED)) == 1


def test_a_rejected_spec_does_not_take_the_client_id(world: World) -> None:
    world.intake.handle(body=spec(id="retry-me", resources={"gpu": -1}), message_id="m-1")
    fixed = world.intake.handle(body=spec(id="retry-me"), message_id="m-2")
    assert fixed.outcome is IntakeOutcome.CREATED


@pytest.mark.parametrize("body", ["{not json", "", "\x00\x01", "[1, 2"])
def test_a_body_that_is_not_json_is_a_malformed_message(world: World, body: str) -> None:
    with pytest.raises(MalformedMessage, match="m-1"):
        world.intake.handle(body=body, message_id="m-1")
    assert world.store.list_by_status(JobStatus.REJECTED) == []


@pytest.mark.parametrize("body", ['"just a string"', "42", "null", "[]"])
def test_json_that_is_not_an_object_is_rejected_not_lost(world: World, body: str) -> None:
    result = world.intake.handle(body=body, message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED
    assert world.store.get(result.job_id) is not None


def test_objects_that_exist_already_count_as_created(world: World) -> None:
    from squall.core.manifests import render
    from squall.core.spec import parse_spec

    parsed = parse_spec(
        json.loads(spec(id="t-1")), teams=["research"], registries=["registry.example.com/squall"]
    )
    for manifest in render(parsed, job_id="t-1", namespace="team-research", region="us-west-2"):
        world.cluster.create(manifest)  # as if an earlier admission had made them (409 now)
    world.intake.handle(body=spec(id="t-1"), message_id="m-1")
    world.add_gpu_nodes(1)
    world.admit()
    assert len(world.cluster.list_jobs()) == 1
    assert world.store.get("t-1").objects_created  # type: ignore[union-attr]


@pytest.mark.parametrize("status", [429, 500])
def test_a_transient_kubernetes_error_at_admission_leaves_it_placed_and_the_next_check_finishes_it(
    world: World, status: int
) -> None:
    world.intake.handle(body=spec(id="t-1"), message_id="m-1")
    world.add_gpu_nodes(1)
    world.cluster.fail_calls("create", RetryableError(f"create Job: {status}"))
    world.admit()
    job = world.store.get("t-1")
    assert job is not None and job.cluster == "local" and not job.objects_created
    assert [e.job_id for e in world.store.queue(placed=True)] == ["t-1"]
    assert world.cluster.list_jobs() == []
    world.admit()
    assert len(world.cluster.list_jobs(job_id="t-1")) == 1
    assert world.store.get("t-1").objects_created  # type: ignore[union-attr]
    assert [e.reason for e in world.store.events("t-1")].count("Placed:us-west-2") == 1, "placed once"


def test_a_permanent_kubernetes_refusal_at_admission_fails_the_job_with_the_reason(world: World) -> None:
    world.intake.handle(body=spec(id="t-1"), message_id="m-1")
    world.add_gpu_nodes(1)
    world.cluster.fail_calls("create", PermanentError("create Job team-research/t-1-worker-0: 403 Forbidden"))
    world.admit()
    job = world.store.get("t-1")
    assert job is not None and job.status is JobStatus.FAILED and job.reason == Reason.CLUSTER_REFUSED
    assert "403" in world.store.events("t-1")[-1].message
    assert world.cluster.list_jobs() == []


def test_a_lost_race_on_cancel_rereads_and_wins_on_the_latest_version(world: World) -> None:
    world.intake.handle(body=spec(id="t-1"), message_id="m-1")
    original_save = world.store.save
    calls = {"n": 0}

    def save_losing_once(job: Any, event: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConflictError("someone else wrote first")
        original_save(job, event)

    world.store.save = save_losing_once  # type: ignore[method-assign]
    assert world.intake.cancel(job_id="t-1", reason="user").outcome is IntakeOutcome.CANCELLED
    assert calls["n"] == 2
    assert world.store.get("t-1").status is JobStatus.CANCELLED  # type: ignore[union-attr]


def test_cancel_deletes_objects_and_records_why(world: World) -> None:
    world.intake.handle(body=spec(id="t-1"), message_id="m-1")
    world.add_gpu_nodes(1)
    world.admit()
    assert len(world.cluster.list_jobs()) == 1
    result = world.intake.handle(
        body=json.dumps({"action": "cancel", "id": "t-1", "reason": "wrong lr"}), message_id="m-2"
    )
    assert result.outcome is IntakeOutcome.CANCELLED
    assert world.cluster.list_jobs() == []
    events = world.store.events("t-1")
    assert (events[-1].status, events[-1].reason, events[-1].message) == (
        JobStatus.CANCELLED,
        Reason.CANCEL_REQUESTED,
        "wrong lr",
    )
    assert world.intake.cancel(job_id="t-1", reason="again").outcome is IntakeOutcome.ALREADY_FINISHED
    assert world.intake.cancel(job_id="nope", reason="x").outcome is IntakeOutcome.NOT_FOUND


def test_a_sweep_records_parent_and_trials_and_starts_only_parallelism(world: World) -> None:
    body = spec(id="sw", sweep={"parameters": {"lr": [0.1, 0.01, 0.001]}, "maxTrials": 3, "parallelism": 2})
    world.intake.handle(body=body, message_id="m-1")
    parent = world.store.get("sw")
    assert parent is not None and parent.trial_ids == ("sw-t000", "sw-t001", "sw-t002")
    trials = [world.store.get(t) for t in parent.trial_ids]
    assert all(t is not None and t.parent_id == "sw" for t in trials)
    assert [t.reason for t in trials if t] == [
        Reason.SUBMITTED,
        Reason.SUBMITTED,
        Reason.WAITING_FOR_TRIAL_SLOT,
    ]
    assert queued(world) == ["sw-t000", "sw-t001"], "the trials with a slot wait in the queue"
    assert world.cluster.list_jobs() == []


# ---- who may submit for a team ----------------------------------------------------

ALICE = "AROAALICEEXAMPLE"  # a role's unique id; SenderId adds ":<session>"
MALLORY = "AIDAMALLORYEXAMPLE"


def guarded(world: World) -> Intake:
    return world.new_intake(submitters={"research": frozenset({ALICE})})


def test_a_submitter_of_the_team_may_submit_and_is_recorded(world: World) -> None:
    result = guarded(world).handle(body=spec(id="t-1"), message_id="m-1", sender_id=f"{ALICE}:alice-session")
    assert result.outcome is IntakeOutcome.CREATED
    job = world.store.get("t-1")
    assert job is not None and job.submitted_by == f"{ALICE}:alice-session"


@pytest.mark.parametrize("sender", [MALLORY, f"{MALLORY}:{ALICE}", None, ""])
def test_a_sender_the_team_does_not_list_is_rejected_with_the_reason(
    world: World, sender: str | None
) -> None:
    result = guarded(world).handle(body=spec(id="t-1"), message_id="m-1", sender_id=sender)
    assert result.outcome is IntakeOutcome.REJECTED
    (error,) = result.errors
    assert error["field"] == "team" and "'research'" in error["message"]
    assert (MALLORY if sender else "(no SenderId)") in error["message"]
    job = world.store.get(result.job_id)
    assert job is not None and job.status is JobStatus.REJECTED and job.reason == Reason.SENDER_NOT_ALLOWED
    assert job.submitted_by == (sender or None)
    assert world.store.get("t-1") is None and queued(world) == []


# A team that names no submitters while another does takes nobody: test_submitters_every_team.py


def test_a_cancel_from_a_sender_the_team_does_not_list_is_refused(world: World) -> None:
    intake = guarded(world)
    intake.handle(
        body=spec(id="t-1", sweep={"parameters": {"lr": [1, 2]}}), message_id="m-1", sender_id=ALICE
    )
    cancel = json.dumps({"action": "cancel", "id": "t-1"})

    refused = intake.handle(body=cancel, message_id="m-2", sender_id=MALLORY)
    assert refused.outcome is IntakeOutcome.FORBIDDEN
    assert world.store.get("t-1").status is JobStatus.QUEUED  # type: ignore[union-attr]
    assert len(queued(world)) == 2

    done = intake.handle(body=cancel, message_id="m-3", sender_id=f"{ALICE}:later")
    assert done.outcome is IntakeOutcome.CANCELLED
    assert queued(world) == [], "cancelled trials leave the queue"
    assert {world.store.get(t).status for t in ("t-1-t000", "t-1-t001")} == {JobStatus.CANCELLED}  # type: ignore[union-attr]


def test_trials_keep_the_sender_of_their_sweep(world: World) -> None:
    guarded(world).handle(
        body=spec(id="sw", sweep={"parameters": {"lr": [1, 2]}}), message_id="m-1", sender_id=ALICE
    )
    assert {world.store.get(t).submitted_by for t in ("sw-t000", "sw-t001")} == {ALICE}  # type: ignore[union-attr]


def test_a_rejected_record_fits_dynamodb_even_for_a_body_with_thousands_of_issues(world: World) -> None:
    # 3.6 KB that used to make 2,000 issues and a 2.2 MB record that DynamoDB refused
    body = json.dumps(
        {"sweep": {"parameters": {f"p{i}": [[]] * 100 for i in range(9)}}}, separators=(",", ":")
    )
    result = world.intake.handle(body=body, message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED
    job = world.store.get(result.job_id)
    assert job is not None and len(job.errors) == 51 and job.errors[-1]["message"].startswith("and ")


def test_a_sweep_whose_trials_would_not_load_is_rejected_at_intake(world: World) -> None:
    result = world.intake.handle(
        body=spec(args=["-v"] * 256, sweep={"parameters": {"lr": [1]}}), message_id="m-1"
    )
    assert result.outcome is IntakeOutcome.REJECTED and result.errors[0]["field"] == "args"
    assert world.store.list_by_status(JobStatus.QUEUED) == []
