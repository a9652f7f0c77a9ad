"""The model service store against moto's DynamoDB, and the in-memory one: one contract.

Also the S3 SavedModels adapter (HeadObject on ``<uri>/saved_model.pb``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from squall.adapters.aws.job_store import DynamoJobStore
from squall.adapters.aws.model_service_store import DynamoModelServiceStore
from squall.adapters.aws.saved_models import S3SavedModels
from squall.core.errors import (
    ConflictError,
    DuplicateServiceError,
    ItemTooLargeError,
    PermanentError,
    RetryableError,
)
from squall.core.jobs import JobStatus, new_job
from squall.core.serving import ServiceReason, ServiceStatus, new_service, transition_service
from squall.local.aws import create_table
from squall.local.model_service_store import InMemoryModelServiceStore

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest, aws_credentials: None) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemoryModelServiceStore()
        return
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_table(client, "jobs")
        yield DynamoModelServiceStore(client, "jobs")


def deploying(name: str = "mnist", at: datetime = T0, **fields: Any) -> Any:
    values: dict[str, Any] = {
        "name": name,
        "team": "research",
        "namespace": "team-research",
        "job_id": "train-1",
        "model_uri": "s3://bucket/teams/research/out/train-1",
        "model_version": 1,
        "replicas": 2,
        "gpus": 0,
        "cpu": "1",
        "memory": "2Gi",
        "at": at,
        "message_id": "m-1",
    }
    return new_service(**(values | fields))


def test_create_then_read_back_everything(store: Any) -> None:
    service, event = deploying(submitted_by="AROAEXAMPLE:alice")
    store.create(service, event)
    assert store.get("mnist") == service
    assert store.events("mnist") == [event]
    assert store.get("other") is None and store.events("other") == []


def test_every_field_round_trips(store: Any) -> None:
    service, event = deploying()
    store.create(service, event)
    ready, ready_event = transition_service(
        service,
        to=ServiceStatus.SERVING,
        reason="Ready:2/2",
        at=T0 + timedelta(minutes=2),
        message="all replicas ready",
        ready_replicas=2,
        rest_url="http://10.0.0.1:8501",
        grpc_target="10.0.0.1:8500",
        errors=({"field": "x", "message": "y"},),
    )
    store.save(ready, ready_event)
    assert store.get("mnist") == ready
    assert store.events("mnist") == [event, ready_event]


def test_a_second_create_of_the_name_fails_and_changes_nothing(store: Any) -> None:
    service, event = deploying()
    store.create(service, event)
    other, other_event = deploying(job_id="train-2", message_id="m-2", at=T0 + timedelta(minutes=1))
    with pytest.raises(DuplicateServiceError) as caught:
        store.create(other, other_event)
    assert caught.value.name == "mnist"
    assert store.get("mnist") == service and store.events("mnist") == [event]


def test_a_stale_save_loses_and_keeps_the_winner_and_its_event(store: Any) -> None:
    service, event = deploying()
    store.create(service, event)
    later = T0 + timedelta(minutes=1)
    winner = transition_service(service, to=ServiceStatus.SERVING, reason="Ready:2/2", at=later)
    loser = transition_service(
        service, to=ServiceStatus.STOPPED, reason=ServiceReason.UNSERVE_REQUESTED, at=later
    )
    store.save(*winner)
    with pytest.raises(ConflictError):
        store.save(*loser)
    assert store.get("mnist") == winner[0]
    assert [e.status for e in store.events("mnist")] == [ServiceStatus.DEPLOYING, ServiceStatus.SERVING]


def test_a_save_of_a_name_never_created_is_a_conflict(store: Any) -> None:
    service, _ = deploying()
    with pytest.raises(ConflictError):
        store.save(*transition_service(service, to=ServiceStatus.SERVING, reason="Ready:2/2", at=T0))
    assert store.get("mnist") is None and store.events("mnist") == []


def test_served_again_the_history_goes_on(store: Any) -> None:
    service, event = deploying()
    store.create(service, event)
    stopped = transition_service(
        service, to=ServiceStatus.STOPPED, reason=ServiceReason.UNSERVE_REQUESTED, at=T0
    )
    store.save(*stopped)
    again = transition_service(
        stopped[0],
        to=ServiceStatus.DEPLOYING,
        reason=ServiceReason.SERVED_AGAIN,
        at=T0 + timedelta(hours=1),
        job_id="train-2",
        message_id="m-2",
    )
    store.save(*again)
    assert store.get("mnist").job_id == "train-2"
    assert [(e.version, e.reason) for e in store.events("mnist")] == [
        (1, ServiceReason.REQUESTED),
        (2, ServiceReason.UNSERVE_REQUESTED),
        (3, ServiceReason.SERVED_AGAIN),
    ]
    assert [s.name for s in store.list_by_status(ServiceStatus.DEPLOYING)] == ["mnist"]
    assert store.list_by_status(ServiceStatus.STOPPED) == []


def test_list_by_status_oldest_first_bounded_and_moved_on_save(store: Any) -> None:
    for number, name in enumerate(["c", "a", "b"]):
        store.create(*deploying(name, at=T0 + timedelta(minutes=number)))
    assert [s.name for s in store.list_by_status(ServiceStatus.DEPLOYING)] == ["c", "a", "b"]
    assert [s.name for s in store.list_by_status(ServiceStatus.DEPLOYING, limit=2)] == ["c", "a"]
    assert store.list_by_status(ServiceStatus.DEPLOYING, limit=0) == []
    serving = transition_service(store.get("a"), to=ServiceStatus.SERVING, reason="Ready:2/2", at=T0)
    store.save(*serving)
    assert [s.name for s in store.list_by_status(ServiceStatus.DEPLOYING)] == ["c", "b"]
    assert [s.name for s in store.list_by_status(ServiceStatus.SERVING)] == ["a"]


def test_events_and_lists_follow_pages_and_a_list_stops_at_its_limit() -> None:
    from squall.adapters.aws.job_store import to_item
    from squall.adapters.aws.model_service_store import service_event_values, service_values
    from tests.integration.test_store import _paged_client

    service, first = deploying()
    second = transition_service(service, to=ServiceStatus.SERVING, reason="Ready:2/2", at=T0)[1]
    client, stub, requests = _paged_client(
        "query", [[to_item(service_event_values(first))], [], [to_item(service_event_values(second))]]
    )
    with stub:
        assert DynamoModelServiceStore(client, "jobs").events("mnist") == [first, second]
    assert len(requests) == 3 and requests[0]["ConsistentRead"] is True

    records = [
        [to_item(service_values(deploying(n)[0])) for n in pair] for pair in (("a", "b"), ("c", "d"), ("e",))
    ]
    client, stub, requests = _paged_client("query", records)
    with stub:
        listed = DynamoModelServiceStore(client, "jobs").list_by_status(ServiceStatus.DEPLOYING, limit=3)
    assert [s.name for s in listed] == ["a", "b", "c"]
    assert len(requests) == 2  # the third page is never asked for
    assert requests[0]["IndexName"] == "status-index"


def test_an_item_over_dynamodbs_limit_is_refused_and_nothing_is_written(store: Any) -> None:
    # given a record that would be over 400 KB at its creation, and a save that would make one
    big, big_event = deploying("big")
    big = replace(big, errors=({"field": "x", "message": "y" * 420_000},))
    with pytest.raises(ItemTooLargeError):
        store.create(big, big_event)
    assert store.get("big") is None and store.events("big") == []
    small, small_event = deploying("small")
    store.create(small, small_event)
    grown = transition_service(
        small, to=ServiceStatus.FAILED, reason="ModelLoadFailed", at=T0, errors=({"m": "\u00e9" * 210_000},)
    )
    with pytest.raises(ItemTooLargeError):
        store.save(*grown)
    # an event message over the limit is refused the same way
    noisy = transition_service(
        small, to=ServiceStatus.FAILED, reason="ModelLoadFailed", at=T0, message="z" * 420_000
    )
    with pytest.raises(ItemTooLargeError):
        store.save(*noisy)
    assert store.get("small") == small and store.events("small") == [small_event]


def test_services_and_jobs_share_the_table_without_seeing_each_other(aws_credentials: None) -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_table(client, "jobs")
        services, jobs = DynamoModelServiceStore(client, "jobs"), DynamoJobStore(client, "jobs")
        # a job and a service of the same name, both just submitted
        job, job_event = new_job(
            job_id="mnist", name="mnist", team="research", namespace="team-research", at=T0
        )
        jobs.create(job, job_event)
        services.create(*deploying("mnist"))
        assert jobs.get("mnist") == job and jobs.list_all() == [job]
        assert [j.id for j in jobs.list_by_status(JobStatus.QUEUED)] == ["mnist"]
        assert [s.name for s in services.list_by_status(ServiceStatus.DEPLOYING)] == ["mnist"]
        assert services.get("mnist").job_id == "train-1"


def test_dynamodb_errors_leave_as_squalls(aws_credentials: None) -> None:
    client = boto3.client("dynamodb", region_name="us-west-2")
    store = DynamoModelServiceStore(client, "jobs")
    stubber = Stubber(client)
    stubber.add_client_error(
        "get_item", service_error_code="ProvisionedThroughputExceededException", http_status_code=400
    )
    stubber.add_client_error(
        "transact_write_items", service_error_code="ResourceNotFoundException", http_status_code=400
    )
    with stubber:
        with pytest.raises(RetryableError) as retryable:
            store.get("mnist")
        with pytest.raises(PermanentError) as permanent:
            store.create(*deploying())
    assert retryable.value.__cause__ is not None and permanent.value.__cause__ is not None
    assert "create model service mnist" in str(permanent.value)


# ---- SavedModels ------------------------------------------------------------------


@pytest.fixture
def s3_client(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-west-2")
        client.create_bucket(Bucket="models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        yield client


def test_a_saved_model_is_found_by_its_saved_model_pb(s3_client: Any) -> None:
    s3_client.put_object(Bucket="models", Key="teams/research/out/train-1/saved_model.pb", Body=b"pb")
    s3_client.put_object(
        Bucket="models", Key="teams/research/out/train-2/variables/variables.index", Body=b""
    )
    saved = S3SavedModels(s3_client)
    assert saved.has_saved_model("s3://models/teams/research/out/train-1")
    assert saved.has_saved_model("s3://models/teams/research/out/train-1/")
    assert not saved.has_saved_model("s3://models/teams/research/out/train-2")
    assert not saved.has_saved_model("s3://models/teams/research/out/train-3")
    assert not saved.has_saved_model("s3://no-such-bucket/teams/research/out/train-1")


def test_a_saved_model_question_that_s3_cannot_answer_is_squalls_error(aws_credentials: None) -> None:
    client = boto3.client("s3", region_name="us-west-2")
    saved = S3SavedModels(client)
    stubber = Stubber(client)
    stubber.add_client_error("head_object", service_error_code="403", http_status_code=403)
    stubber.add_client_error("head_object", service_error_code="503", http_status_code=503)
    with stubber:
        with pytest.raises(PermanentError) as denied:
            saved.has_saved_model("s3://models/teams/research/out/train-1")
        with pytest.raises(RetryableError):
            saved.has_saved_model("s3://models/teams/research/out/train-1")
    assert "s3://models/teams/research/out/train-1/saved_model.pb" in str(denied.value)
    assert "no such object, or this role may not read it" in str(denied.value)  # both, as S3 cannot tell
    with pytest.raises(PermanentError):
        saved.has_saved_model("models/teams/research")
