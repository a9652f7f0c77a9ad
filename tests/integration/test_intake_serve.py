"""Intake's serve and unserve messages: record first, then objects; a refusal creates nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from squall.core.errors import PermanentError, RetryableError
from squall.core.jobs import JobStatus, Reason
from squall.core.serving import ServiceReason, ServiceStatus, transition_service
from squall.core.settings import ServingSettings
from squall.services.intake import IntakeOutcome
from squall.services.serving import ModelServing
from tests.integration.serving_world import ServingWorld, StandInCluster, serve, serving_world

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def world(aws_credentials: None) -> Iterator[ServingWorld]:
    yield from serving_world()


def assert_nothing_created(world: ServingWorld, name: str) -> None:
    assert world.services.get(name) is None
    assert world.services.events(name) == []
    assert world.cluster.objects == {}


def test_a_succeeded_jobs_model_is_recorded_then_its_objects_created(world: ServingWorld) -> None:
    # given a job that succeeded and exported its SavedModel
    world.finished_job("train-1")
    intake = world.intake()
    # when
    result = intake.handle(
        body='{"action": "serve", "job": "train-1", "name": "mnist", "replicas": 2, "modelVersion": 3}',
        message_id="m-1",
        sender_id="AROAEXAMPLE:alice",
    )
    # then
    assert (result.outcome, result.job_id, result.name) == (IntakeOutcome.CREATED, "train-1", "mnist")
    service = world.services.get("mnist")
    assert service is not None
    assert (service.status, service.reason, service.version) == (
        ServiceStatus.DEPLOYING,
        ServiceReason.REQUESTED,
        1,
    )
    assert (service.team, service.namespace, service.job_id) == ("research", "team-research", "train-1")
    assert service.model_uri == "s3://models/teams/research/out/train-1"
    assert (service.replicas, service.model_version, service.message_id) == (2, 3, "m-1")
    assert service.submitted_by == "AROAEXAMPLE:alice"
    assert world.cluster.of("mnist") == ["Deployment", "PodDisruptionBudget", "Service"]
    assert {ns for (_, ns, _) in world.cluster.objects} == {"team-research"}
    # a scale check is asked for once the objects are there
    assert intake.waiting == ["mnist"]


def test_the_name_defaults_to_the_job_id(world: ServingWorld) -> None:
    world.finished_job("train-1")
    assert world.handle(serve("train-1")).name == "train-1"
    assert world.services.get("train-1") is not None


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.FAILED, JobStatus.QUEUED])
def test_a_job_that_has_not_succeeded_is_refused_and_nothing_is_created(
    world: ServingWorld, status: JobStatus
) -> None:
    world.finished_job("train-1", status=status)
    result = world.handle(serve("train-1", name="mnist"))
    assert result.outcome is IntakeOutcome.REJECTED
    assert result.errors == (
        {"field": "job", "message": f"train-1 is {status}; only a SUCCEEDED job's model can be served"},
    )
    assert_nothing_created(world, "mnist")


def test_a_job_that_does_not_exist_is_refused(world: ServingWorld) -> None:
    result = world.handle(serve("train-9", name="mnist"))
    assert result.outcome is IntakeOutcome.REJECTED
    assert result.errors == ({"field": "job", "message": "no job train-9"},)
    assert_nothing_created(world, "mnist")


def test_a_missing_saved_model_is_refused_and_nothing_is_created(world: ServingWorld) -> None:
    world.finished_job("train-1", saved_model=False)
    result = world.handle(serve("train-1", name="mnist"))
    assert result.outcome is IntakeOutcome.REJECTED
    [error] = result.errors
    assert error["field"] == "job"
    assert "no SavedModel at s3://models/teams/research/out/train-1" in error["message"]
    assert_nothing_created(world, "mnist")
    # the refusal is kept for the sender, as an invalid spec's is
    rejected = world.jobs.get(result.job_id)
    assert rejected is not None and rejected.status is JobStatus.REJECTED and rejected.errors == result.errors


def test_a_saved_model_s3_will_not_show_refuses_the_request_clearly(world: ServingWorld) -> None:
    class Denied:
        def has_saved_model(self, uri: str) -> bool:
            raise PermanentError(
                f"look for a SavedModel at {uri}/saved_model.pb: AccessDenied: Access Denied"
            )

    world.serving = ModelServing(
        store=world.services,
        saved_models=Denied(),
        clusters={"local": world.cluster},
        settings=world.serving.settings,
    )
    world.finished_job("train-1")
    result = world.handle(serve("train-1", name="mnist"))
    assert result.outcome is IntakeOutcome.REJECTED
    assert (
        "cannot look for a SavedModel at s3://models/teams/research/out/train-1"
        in result.errors[0]["message"]
    )
    assert "AccessDenied" in result.errors[0]["message"]
    assert_nothing_created(world, "mnist")


def test_s3_unavailable_leaves_the_message_to_come_back(world: ServingWorld) -> None:
    class Unavailable:
        def has_saved_model(self, uri: str) -> bool:
            raise RetryableError("SlowDown")

    world.serving = ModelServing(
        store=world.services,
        saved_models=Unavailable(),
        clusters={"local": world.cluster},
        settings=world.serving.settings,
    )
    world.finished_job("train-1")
    with pytest.raises(RetryableError):
        world.handle(serve("train-1", name="mnist"))
    assert_nothing_created(world, "mnist")


def test_a_name_clash_is_refused_and_the_first_service_is_untouched(world: ServingWorld) -> None:
    world.finished_job("train-1")
    world.finished_job("train-2")
    assert world.handle(serve("train-1", name="mnist"), message_id="m-1").outcome is IntakeOutcome.CREATED
    before = world.services.get("mnist")
    objects = dict(world.cluster.objects)
    result = world.handle(serve("train-2", name="mnist"), message_id="m-2")
    assert result.outcome is IntakeOutcome.REJECTED
    assert result.errors == (
        {"field": "name", "message": "mnist is already serving job train-1 (DEPLOYING)"},
    )
    assert world.services.get("mnist") == before and len(world.services.events("mnist")) == 1
    assert world.cluster.objects == objects


def test_a_sender_the_jobs_team_does_not_list_is_refused_and_nothing_is_created(world: ServingWorld) -> None:
    world.submitters = {"research": frozenset({"AROAALLOWED"})}
    world.finished_job("train-1")
    result = world.handle(serve("train-1", name="mnist"), sender_id="AROAOTHER:mallory")
    assert result.outcome is IntakeOutcome.REJECTED
    assert result.errors[0]["field"] == "team"
    assert "AROAOTHER may not serve for team 'research'" in result.errors[0]["message"]
    assert world.jobs.get(result.job_id).reason == Reason.SENDER_NOT_ALLOWED
    assert_nothing_created(world, "mnist")
    # the team's own submitter may
    assert (
        world.handle(serve("train-1", name="mnist"), sender_id="AROAALLOWED:alice").outcome
        is IntakeOutcome.CREATED
    )


def test_serving_not_configured_refuses_the_request(world: ServingWorld) -> None:
    world.serving = ModelServing(
        store=world.services,
        saved_models=world.serving.saved_models,
        clusters={"local": world.cluster},
        settings=ServingSettings(),
    )
    world.finished_job("train-1")
    result = world.handle(serve("train-1", name="mnist"))
    assert result.outcome is IntakeOutcome.REJECTED
    assert result.errors == (
        {"field": "action", "message": "serving is not configured: set serving.image and serving.fetchImage"},
    )
    assert_nothing_created(world, "mnist")


def test_a_runtime_without_model_services_refuses_serve_and_knows_no_unserve(world: ServingWorld) -> None:
    world.finished_job("train-1")
    intake = world.intake()
    intake.serving = None
    result = intake.handle(body='{"action": "serve", "job": "train-1"}', message_id="m-1")
    assert result.outcome is IntakeOutcome.REJECTED and result.errors[0]["field"] == "action"
    assert (
        intake.handle(body='{"action": "unserve", "name": "x"}', message_id="m-2").outcome
        is IntakeOutcome.NOT_FOUND
    )


def test_a_redelivered_serve_creates_nothing_twice(world: ServingWorld) -> None:
    world.finished_job("train-1")
    first = world.handle(serve("train-1", name="mnist"), message_id="m-1")
    objects = dict(world.cluster.objects)
    again = world.handle(serve("train-1", name="mnist"), message_id="m-1")
    assert (first.outcome, again.outcome) == (IntakeOutcome.CREATED, IntakeOutcome.REDELIVERED)
    assert world.services.get("mnist").version == 1 and len(world.services.events("mnist")) == 1
    assert world.cluster.objects == objects


def test_a_redelivery_after_the_cluster_failed_half_way_finishes_the_work(world: ServingWorld) -> None:
    class Flaky(StandInCluster):
        def __init__(self) -> None:
            super().__init__()
            self.fail_next = 2

        def create(self, manifest: dict[str, Any]) -> bool:
            created = super().create(manifest)
            if manifest["kind"] == "Service" and self.fail_next:
                self.fail_next -= 1
                raise RetryableError("the API server is busy (429)")
            return created

    flaky = Flaky()
    world.cluster = flaky
    world.serving = ModelServing(
        store=world.services,
        saved_models=world.serving.saved_models,
        clusters={"local": flaky},
        settings=world.serving.settings,
    )
    world.finished_job("train-1")
    # the first delivery records the service and creates the Deployment and the Service, then fails
    with pytest.raises(RetryableError):
        world.handle(serve("train-1", name="mnist"), message_id="m-1")
    assert world.services.get("mnist").status is ServiceStatus.DEPLOYING
    assert flaky.of("mnist") == ["Deployment", "Service"]
    with pytest.raises(RetryableError):
        world.handle(serve("train-1", name="mnist"), message_id="m-1")
    # then the queue delivers it again: what was missing is made, nothing twice
    assert world.handle(serve("train-1", name="mnist"), message_id="m-1").outcome is IntakeOutcome.REDELIVERED
    assert flaky.of("mnist") == ["Deployment", "PodDisruptionBudget", "Service"]
    assert len(world.services.events("mnist")) == 1


def test_the_cluster_refusing_an_object_fails_the_service_and_removes_what_was_created(
    world: ServingWorld,
) -> None:
    world.cluster.refuse = {"PodDisruptionBudget"}
    world.finished_job("train-1")
    intake = world.intake()
    result = intake.handle(body='{"action": "serve", "job": "train-1", "name": "mnist"}', message_id="m-1")
    assert result.outcome is IntakeOutcome.FAILED
    service = world.services.get("mnist")
    assert (service.status, service.reason) == (ServiceStatus.FAILED, ServiceReason.CLUSTER_REFUSED)
    assert "admission webhook denied the PodDisruptionBudget" in world.services.events("mnist")[-1].message
    assert "create Deployment" in world.cluster.calls  # made, then deleted
    assert world.cluster.objects == {}
    assert intake.waiting == []
    # a redelivery of the refused message makes nothing again
    assert world.handle(serve("train-1", name="mnist"), message_id="m-1").outcome is IntakeOutcome.REDELIVERED
    assert world.cluster.objects == {}


def test_serve_again_after_unserve_keeps_the_history(world: ServingWorld) -> None:
    world.finished_job("train-1")
    world.finished_job("train-2")
    world.handle(serve("train-1", name="mnist"), message_id="m-1")
    stopped = world.handle(
        {"action": "unserve", "name": "mnist", "reason": "new model coming"}, message_id="m-2"
    )
    assert stopped.outcome is IntakeOutcome.STOPPED
    assert world.services.get("mnist").status is ServiceStatus.STOPPED
    assert world.cluster.objects == {}
    # when the name is served again, on another job's model
    again = world.handle(serve("train-2", name="mnist", replicas=3), message_id="m-3")
    # then its record goes on
    assert again.outcome is IntakeOutcome.CREATED
    service = world.services.get("mnist")
    assert (service.status, service.job_id, service.replicas, service.version) == (
        ServiceStatus.DEPLOYING,
        "train-2",
        3,
        3,
    )
    assert [(e.status, e.reason) for e in world.services.events("mnist")] == [
        (ServiceStatus.DEPLOYING, ServiceReason.REQUESTED),
        (ServiceStatus.STOPPED, ServiceReason.UNSERVE_REQUESTED),
        (ServiceStatus.DEPLOYING, ServiceReason.SERVED_AGAIN),
    ]
    assert world.services.events("mnist")[1].message == "new model coming"
    assert world.cluster.of("mnist") == ["Deployment", "PodDisruptionBudget", "Service"]


def test_serving_again_replaces_objects_an_unserve_left_behind(world: ServingWorld) -> None:
    world.finished_job("train-1")
    world.finished_job("train-2")
    world.handle(serve("train-1", name="mnist"), message_id="m-1")
    left = dict(world.cluster.objects)
    world.handle({"action": "unserve", "name": "mnist"}, message_id="m-2")
    world.cluster.objects.update(left)  # as if the unserve's delete had not happened
    world.handle(serve("train-2", name="mnist", replicas=3), message_id="m-3")
    [deployment] = world.cluster.list_deployments()
    assert deployment["spec"]["replicas"] == 3  # the new one, not the one left over
    assert "train-2" in str(deployment["spec"]["template"]["spec"]["initContainers"])


def test_unserve_by_another_team_or_of_no_service(world: ServingWorld) -> None:
    world.submitters = {"research": frozenset({"AROAALLOWED"})}
    world.finished_job("train-1")
    world.handle(serve("train-1", name="mnist"), sender_id="AROAALLOWED:alice")
    unknown = world.handle(
        {"action": "unserve", "name": "nothing"}, message_id="m-2", sender_id="AROAALLOWED:a"
    )
    assert unknown.outcome is IntakeOutcome.NOT_FOUND
    refused = world.handle(
        {"action": "unserve", "name": "mnist"}, message_id="m-3", sender_id="AROAOTHER:bob"
    )
    assert refused.outcome is IntakeOutcome.FORBIDDEN
    assert world.services.get("mnist").status is ServiceStatus.DEPLOYING
    assert world.cluster.of("mnist") == ["Deployment", "PodDisruptionBudget", "Service"]


def test_an_unserve_delivered_again_deletes_again_and_writes_nothing_more(world: ServingWorld) -> None:
    world.finished_job("train-1")
    world.handle(serve("train-1", name="mnist"), message_id="m-1")
    assert (
        world.handle({"action": "unserve", "name": "mnist"}, message_id="m-2").outcome
        is IntakeOutcome.STOPPED
    )
    left = dict(world.cluster.objects)
    assert left == {}
    again = world.handle({"action": "unserve", "name": "mnist"}, message_id="m-2")
    assert again.outcome is IntakeOutcome.ALREADY_FINISHED
    assert world.cluster.calls.count("delete team-research/mnist") == 2
    assert len(world.services.events("mnist")) == 2


def test_a_failed_service_can_be_unserved_and_served_again(world: ServingWorld) -> None:
    world.cluster.refuse = {"Service"}
    world.finished_job("train-1")
    assert world.handle(serve("train-1", name="mnist"), message_id="m-1").outcome is IntakeOutcome.FAILED
    world.cluster.refuse = set()
    assert world.handle(serve("train-1", name="mnist"), message_id="m-2").outcome is IntakeOutcome.CREATED
    assert [e.reason for e in world.services.events("mnist")] == [
        ServiceReason.REQUESTED,
        ServiceReason.CLUSTER_REFUSED,
        ServiceReason.SERVED_AGAIN,
    ]


def test_an_unserved_service_no_longer_shows_ready_replicas_or_endpoints(world: ServingWorld) -> None:
    world.finished_job("train-1")
    world.handle(serve("train-1", name="mnist"), message_id="m-1")
    deploying = world.services.get("mnist")
    world.services.save(
        *transition_service(
            deploying,
            to=ServiceStatus.SERVING,
            reason="Ready:1/1",
            at=world.clock.now(),
            ready_replicas=1,
            rest_url="http://lb:8501",
            grpc_target="lb:8500",
        )
    )
    # when
    world.handle({"action": "unserve", "name": "mnist"}, message_id="m-2")
    # then its objects are gone, and so is what it showed of them
    stopped = world.services.get("mnist")
    assert (stopped.status, stopped.ready_replicas, stopped.rest_url, stopped.grpc_target) == (
        ServiceStatus.STOPPED,
        0,
        None,
        None,
    )
