"""plan_serve: whether a serve request can be met, and how (core/serving_requests.py). Pure."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.core.jobs import Job, JobStatus
from squall.core.serving import ServiceReason, ServiceStatus, transition_service
from squall.core.serving_requests import (
    ServeAction,
    in_team_prefix,
    job_model_uri,
    model_uri,
    plan_serve,
    serve_record,
    team_prefix,
)
from squall.core.spec import ServeCommand, SpecError, parse_message
from tests.job_records import job_record
from tests.serving_records import first_record

T0 = datetime(2026, 12, 1, tzinfo=UTC)
JOB_ID = "mnist-0a1b2c3d"
OUTPUT = "s3://squall-artifacts/teams/research/outputs/"
MODEL = "s3://squall-artifacts/teams/research/outputs/mnist-0a1b2c3d"


def command(**fields: Any) -> ServeCommand:
    parsed = parse_message(
        {"action": "serve", "job": JOB_ID, "name": "mnist"} | fields, teams=[], registries=[]
    )
    assert isinstance(parsed, ServeCommand)
    return parsed


def job(**fields: Any) -> Job:
    spec = {
        "name": "mnist",
        "team": "research",
        "image": "registry.example.com/squall/tf:1",
        "outputUri": OUTPUT,
    }
    base = job_record(JOB_ID, status=JobStatus.SUCCEEDED, reason="Completed", at=T0, spec=spec)
    return dataclasses.replace(base, **fields)


class SavedModels:
    """Records what it was asked; answers True for the URIs it holds."""

    def __init__(self, *uris: str) -> None:
        self.uris = set(uris)
        self.asked: list[str] = []

    def __call__(self, uri: str) -> bool:
        self.asked.append(uri)
        return uri in self.uris


def existing(status: ServiceStatus, *, message_id: str = "m-0", job_id: str = "other-1") -> Any:
    service, _ = first_record("mnist", at=T0, job_id=job_id, message_id=message_id)
    if status is not ServiceStatus.DEPLOYING:
        service, _ = transition_service(service, to=status, reason="Test", at=T0 + timedelta(minutes=1))
    return service


def refusal(**kwargs: Any) -> tuple[str, str]:
    """The one issue plan_serve raises for the default request with `kwargs` changed."""
    arguments: dict[str, Any] = {
        "job": job(),
        "existing": None,
        "message_id": "m-1",
        "has_saved_model": SavedModels(MODEL),
    } | kwargs
    with pytest.raises(SpecError) as caught:
        plan_serve(command(), **arguments)
    assert len(caught.value.issues) == 1
    issue = caught.value.issues[0]
    return issue.field, issue.message


def test_the_model_uri_is_where_the_trainer_exports() -> None:
    assert model_uri(output_uri="s3://b/teams/t/out/", job_id="j-1") == "s3://b/teams/t/out/j-1"
    assert model_uri(output_uri="s3://b/teams/t/out", job_id="j-1") == "s3://b/teams/t/out/j-1"
    assert job_model_uri(job()) == MODEL
    assert job_model_uri(job(spec={"name": "mnist"})) is None
    assert team_prefix("research") == "teams/research/"


@pytest.mark.parametrize(
    ("uri", "inside"),
    [
        ("s3://b/teams/research/out/j-1", True),
        ("s3://b/teams/research/j-1", True),
        ("s3://b/teams/research/", False),
        ("s3://b/teams/research", False),
        ("s3://b/teams/researchers/out/j-1", False),
        ("s3://b/teams/vision/out/j-1", False),
        ("s3://b/out/teams/research/j-1", False),
        ("s3://b/j-1", False),
        ("s3://b/teams/research/../vision/j-1", False),
        ("s3://b/teams/research/./j-1", False),
        ("s3://b/teams/research//j-1", False),
        ("s3://b/Teams/research/j-1", False),
        ("s3:///teams/research/j-1", False),
        ("gs://b/teams/research/j-1", False),
    ],
)
def test_the_team_prefix_rule(uri: str, inside: bool) -> None:
    assert in_team_prefix(uri, team="research") is inside


def test_a_missing_job_is_refused() -> None:
    assert refusal(job=None) == ("job", f"no job {JOB_ID}")


@pytest.mark.parametrize("status", [s for s in JobStatus if s is not JobStatus.SUCCEEDED])
def test_a_job_that_has_not_succeeded_is_refused(status: JobStatus) -> None:
    assert refusal(job=job(status=status)) == (
        "job",
        f"{JOB_ID} is {status.value}; only a SUCCEEDED job's model can be served",
    )


def test_a_sweep_parent_is_refused() -> None:
    field, message = refusal(job=job(trial_ids=(f"{JOB_ID}-t000", f"{JOB_ID}-t001")))
    assert field == "job"
    assert "is a sweep" in message
    sweep_spec = job().spec | {"sweep": {"parameters": {"lr": [0.1]}}}
    assert "is a sweep" in refusal(job=job(spec=sweep_spec))[1]


def test_a_trial_is_served_from_its_own_export() -> None:
    trial_id = f"{JOB_ID}-t001"
    saved = SavedModels(f"{OUTPUT}{trial_id}")
    plan = plan_serve(
        command(job=trial_id),
        job=job(id=trial_id, parent_id=JOB_ID),
        existing=None,
        message_id="m",
        has_saved_model=saved,
    )
    assert plan.model_uri == f"{OUTPUT}{trial_id}"


def test_a_job_without_an_output_uri_is_refused() -> None:
    field, message = refusal(job=job(spec={"name": "mnist", "team": "research"}))
    assert field == "job"
    assert "no outputUri" in message


@pytest.mark.parametrize(
    "output", ["s3://squall-artifacts/teams/vision/out", "s3://squall-artifacts/out", "s3://squall-artifacts"]
)
def test_a_model_outside_the_team_prefix_is_refused(output: str) -> None:
    saved = SavedModels(model_uri(output_uri=output, job_id=JOB_ID))
    field, message = refusal(job=job(spec=job().spec | {"outputUri": output}), has_saved_model=saved)
    assert field == "job"
    assert "outside the team's prefix teams/research/" in message
    assert saved.asked == []  # refused before S3 is asked


def test_a_job_without_a_saved_model_is_refused() -> None:
    saved = SavedModels()
    assert refusal(has_saved_model=saved) == (
        "job",
        f"no SavedModel at {MODEL} ({MODEL}/saved_model.pb does not exist)",
    )
    assert saved.asked == [MODEL]


@pytest.mark.parametrize("status", [ServiceStatus.DEPLOYING, ServiceStatus.SERVING])
def test_a_live_name_is_a_clash(status: ServiceStatus) -> None:
    saved = SavedModels(MODEL)
    assert refusal(existing=existing(status), has_saved_model=saved) == (
        "name",
        f"mnist is already serving job other-1 ({status.value})",
    )
    assert saved.asked == []


def test_a_new_name_is_created() -> None:
    plan = plan_serve(
        command(), job=job(), existing=None, message_id="m-1", has_saved_model=SavedModels(MODEL)
    )
    assert (plan.action, plan.name, plan.job_id, plan.model_uri) == (
        ServeAction.CREATE,
        "mnist",
        JOB_ID,
        MODEL,
    )
    assert (plan.team, plan.namespace, plan.existing) == ("research", "team-research", None)
    service, event = serve_record(plan, at=T0, message_id="m-1", submitted_by="AROA:alice")
    assert (service.status, service.version, service.model_uri) == (ServiceStatus.DEPLOYING, 1, MODEL)
    assert (service.replicas, service.gpus, service.cpu, service.memory) == (1, 0, "1", "2Gi")
    assert (service.message_id, service.submitted_by, event.reason) == ("m-1", "AROA:alice", "Requested")


@pytest.mark.parametrize("status", [ServiceStatus.STOPPED, ServiceStatus.FAILED])
def test_an_ended_name_is_served_again_keeping_its_history(status: ServiceStatus) -> None:
    old = dataclasses.replace(
        existing(status),
        ready_replicas=1,
        rest_url="http://h:8501",
        grpc_target="h:8500",
        errors=({"a": "b"},),
    )
    plan = plan_serve(
        command(replicas=3, modelVersion=2),
        job=job(),
        existing=old,
        message_id="m-2",
        has_saved_model=SavedModels(MODEL),
    )
    assert plan.action is ServeAction.SERVE_AGAIN
    service, event = serve_record(plan, at=T0 + timedelta(hours=1), message_id="m-2", submitted_by=None)
    assert (service.status, service.version) == (ServiceStatus.DEPLOYING, old.version + 1)
    assert (event.previous, event.reason) == (status, ServiceReason.SERVED_AGAIN)
    assert (service.job_id, service.model_uri, service.model_version, service.replicas) == (
        JOB_ID,
        MODEL,
        2,
        3,
    )
    assert (service.ready_replicas, service.rest_url, service.grpc_target, service.errors) == (
        0,
        None,
        None,
        (),
    )
    assert (service.message_id, service.created_at) == ("m-2", old.created_at)


@pytest.mark.parametrize("status", list(ServiceStatus))
def test_the_same_message_again_is_a_redelivery(status: ServiceStatus) -> None:
    old = existing(status, message_id="m-1", job_id=JOB_ID)
    saved = SavedModels()  # even if the model went since: nothing is asked, nothing refused
    plan = plan_serve(command(), job=job(), existing=old, message_id="m-1", has_saved_model=saved)
    assert (plan.action, plan.existing, plan.model_uri) == (ServeAction.REDELIVERY, old, old.model_uri)
    assert saved.asked == []
    with pytest.raises(ValueError, match="writes no record"):
        serve_record(plan, at=T0, message_id="m-1", submitted_by=None)


def test_without_a_message_id_a_live_name_is_a_clash_even_if_ids_match() -> None:
    old = dataclasses.replace(existing(ServiceStatus.SERVING), message_id=None)
    assert refusal(existing=old, message_id=None)[0] == "name"


def test_an_ended_name_stays_with_its_team() -> None:
    other_team = dataclasses.replace(existing(ServiceStatus.STOPPED), team="vision", namespace="team-vision")
    saved = SavedModels(MODEL)
    with pytest.raises(SpecError, match="belongs to team vision") as refused:
        plan_serve(command(), job=job(), existing=other_team, message_id="m-2", has_saved_model=saved)
    assert refused.value.issues[0].field == "name"
    assert saved.asked == []
