"""DynamoJobStore against moto: conditional writes keep jobs single and events whole."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from squall.adapters.aws.job_store import DynamoJobStore
from squall.core.errors import ConflictError, DuplicateJobError, PermanentError, RetryableError
from squall.core.jobs import JobStatus, Reason, new_job, note, transition
from squall.local.aws import create_table
from squall.local.memory import InMemoryJobStore

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest) -> Any:
    """The DynamoDB adapter, and the in-memory store that replays use: one contract."""
    if request.param == "memory":
        return InMemoryJobStore()
    return DynamoJobStore(request.getfixturevalue("jobs_table"), "jobs")


def queued(job_id: str = "j-1", at: datetime = T0, **fields: Any):
    return new_job(job_id=job_id, name="j", team="research", namespace="team-research", at=at, **fields)


def test_create_then_read_back_everything(store: Any) -> None:
    job, event = queued(
        spec={"name": "j", "resources": {"gpu": 1}}, gpus=1, replicas=1, max_retries=2, message_id="m-1"
    )
    store.create(job, event)
    assert store.get("j-1") == job
    assert store.events("j-1") == [event]


def test_a_second_create_with_the_same_id_fails_and_changes_nothing(store: Any) -> None:
    job, event = queued(message_id="m-1")
    store.create(job, event)
    other, other_event = queued(message_id="m-2", at=T0 + timedelta(minutes=1))
    with pytest.raises(DuplicateJobError):
        store.create(other, other_event)
    assert store.get("j-1") == job and len(store.events("j-1")) == 1


def test_a_stale_update_loses_and_keeps_the_winner_and_its_event(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    winner = transition(job, to=JobStatus.RUNNING, reason=Reason.STARTED, at=T0 + timedelta(minutes=1))
    loser = transition(
        job, to=JobStatus.CANCELLED, reason=Reason.CANCEL_REQUESTED, at=T0 + timedelta(minutes=1)
    )
    store.save(*winner)
    with pytest.raises(ConflictError):
        store.save(*loser)
    assert store.get("j-1").status is JobStatus.RUNNING
    assert [e.reason for e in store.events("j-1")] == [Reason.SUBMITTED, Reason.STARTED]


def test_events_come_back_in_order_across_many_notes(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    for i in range(12):
        job, event = note(job, reason=f"ScalingUp:g{i}", at=T0 + timedelta(seconds=i))
        store.save(job, event)
    assert [e.version for e in store.events("j-1")] == list(range(1, 14))


def test_list_all_returns_every_job(store: Any) -> None:
    for i in range(3):
        store.create(*queued(f"j-{i}"))
    assert sorted(j.id for j in store.list_all()) == ["j-0", "j-1", "j-2"]


def test_status_index_lists_oldest_first(store: Any) -> None:
    for i in (3, 1, 2):
        store.create(*queued(f"j-{i}", at=T0 + timedelta(minutes=i)))
    running, event = transition(store.get("j-2"), to=JobStatus.RUNNING, reason="Started", at=T0)
    store.save(running, event)
    assert [j.id for j in store.list_by_status(JobStatus.QUEUED)] == ["j-1", "j-3"]
    assert [j.id for j in store.list_by_status(JobStatus.RUNNING)] == ["j-2"]


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ProvisionedThroughputExceededException", 400, RetryableError),
        ("ThrottlingException", 400, RetryableError),
        ("InternalServerError", 500, RetryableError),
        ("ValidationException", 400, PermanentError),
        ("ResourceNotFoundException", 400, PermanentError),
    ],
)
def test_dynamodb_errors_become_squall_errors(
    code: str, status: int, expected: type[Exception], aws_credentials: None
) -> None:
    client = boto3.client("dynamodb", region_name="us-west-2")
    store = DynamoJobStore(client, "jobs")
    with Stubber(client) as stub:
        stub.add_client_error("get_item", service_error_code=code, http_status_code=status)
        stub.add_client_error("put_item", service_error_code=code, http_status_code=status)
        with pytest.raises(expected) as caught:
            store.get("j-1")
        assert caught.value.__cause__ is not None
        with pytest.raises(expected):
            store.create(*queued())


def test_the_sender_of_a_job_round_trips(store: Any) -> None:
    job, event = queued(submitted_by="AROAEXAMPLEID:alice")
    store.create(job, event)
    assert store.get("j-1").submitted_by == "AROAEXAMPLEID:alice"
    assert store.list_by_status(JobStatus.QUEUED)[0].submitted_by == "AROAEXAMPLEID:alice"


def test_an_item_over_dynamodbs_limit_is_refused_with_the_same_error_by_both_stores(store: Any) -> None:
    from squall.core.errors import ItemTooLargeError

    # given a job whose record would be over 400 KB, and one whose update would be
    big, big_event = queued("big", spec={"env": {"BLOB": "x" * 420_000}})
    small, small_event = queued("small", spec={"name": "j"})
    # when / then: the create is refused, and nothing is stored
    with pytest.raises(ItemTooLargeError):
        store.create(big, big_event)
    assert store.get("big") is None
    store.create(small, small_event)
    grown, grown_event = note(small, reason="x", at=T0 + timedelta(minutes=1))
    with pytest.raises(ItemTooLargeError):
        store.save(replace(grown, spec={"env": {"BLOB": "\u00e9" * 210_000}}), grown_event)  # 420 KB in UTF-8
    assert store.get("small") == small and len(store.events("small")) == 1


def test_an_item_just_inside_the_limit_is_stored_by_both(aws_credentials: None) -> None:
    from squall.adapters.aws.job_store import MAX_ITEM_BYTES, creation_values, item_size

    job, event = queued(spec={"x": ""})
    padding = MAX_ITEM_BYTES - item_size(creation_values(job, event)) - 8
    job, event = queued(spec={"x": "y" * padding})
    assert MAX_ITEM_BYTES - 16 < item_size(creation_values(job, event)) <= MAX_ITEM_BYTES
    InMemoryJobStore().create(job, event)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_table(client, "jobs")
        DynamoJobStore(client, "jobs").create(job, event)


def test_dynamodbs_item_size_answers_are_translated() -> None:
    from botocore.exceptions import ClientError

    from squall.adapters.aws.job_store import translate
    from squall.core.errors import ItemTooLargeError

    put = ClientError(
        {
            "Error": {
                "Code": "ValidationException",
                "Message": "Item size has exceeded the maximum allowed size",
            }
        },
        "PutItem",
    )
    transaction = ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
            "CancellationReasons": [
                {
                    "Code": "ValidationError",
                    "Message": "Item size to update has exceeded the maximum allowed size",
                },
                {"Code": "None"},
            ],
        },
        "TransactWriteItems",
    )
    other = ClientError(
        {"Error": {"Code": "ValidationException", "Message": "One or more parameter values"}}, "PutItem"
    )
    assert isinstance(translate("put", put), ItemTooLargeError)
    assert isinstance(translate("save", transaction), ItemTooLargeError)
    assert type(translate("put", other)) is PermanentError


# ---- paging: boto3's paginators, read no further than the bound -------------------------


def _paged_client(
    operation: str, pages: list[list[dict[str, Any]]]
) -> tuple[Any, Stubber, list[dict[str, Any]]]:
    """A DynamoDB client answering ``operation`` with these pages, recording each request."""
    client = boto3.client(
        "dynamodb", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    requests: list[dict[str, Any]] = []
    client.meta.events.register(
        f"provide-client-params.dynamodb.{operation.title()}",
        lambda params, **_: requests.append(dict(params)),
    )
    stub = Stubber(client)
    for number, items in enumerate(pages):
        page: dict[str, Any] = {"Items": items, "Count": len(items), "ScannedCount": len(items)}
        if number < len(pages) - 1:
            page["LastEvaluatedKey"] = {"pk": {"S": f"page-{number}"}, "sk": {"S": "META"}}
        stub.add_response(operation, page)
    return client, stub, requests


def _job_items(*ids: str) -> list[dict[str, Any]]:
    from squall.adapters.aws.job_store import job_to_item

    return [job_to_item(queued(job_id)[0]) for job_id in ids]


def test_a_list_follows_pages_and_stops_requesting_at_its_limit() -> None:
    client, stub, requests = _paged_client(
        "query", [_job_items("j-1", "j-2"), _job_items("j-3", "j-4"), _job_items("j-5", "j-6")]
    )
    with stub:
        jobs = DynamoJobStore(client, "jobs").list_by_status(JobStatus.QUEUED, limit=3)
    assert [job.id for job in jobs] == ["j-1", "j-2", "j-3"]
    # the third page is never asked for; the second starts where the first ended
    assert len(requests) == 2
    assert "ExclusiveStartKey" not in requests[0]
    assert requests[1]["ExclusiveStartKey"] == {"pk": {"S": "page-0"}, "sk": {"S": "META"}}


def test_a_scan_reads_every_page_up_to_its_limit() -> None:
    client, stub, requests = _paged_client("scan", [_job_items("j-1"), [], _job_items("j-2", "j-3")])
    with stub:
        assert [job.id for job in DynamoJobStore(client, "jobs").list_all()] == ["j-1", "j-2", "j-3"]
    assert len(requests) == 3
    client, stub, requests = _paged_client("scan", [_job_items("j-1", "j-2"), _job_items("j-3")])
    with stub:
        assert [job.id for job in DynamoJobStore(client, "jobs").list_all(limit=2)] == ["j-1", "j-2"]
        assert DynamoJobStore(client, "jobs").list_all(limit=0) == []
    assert len(requests) == 1


def test_group_health_is_read_from_every_page() -> None:
    from squall.adapters.aws.scale_state import DynamoScaleState

    def health(group: str, failures: int) -> dict[str, Any]:
        return {"pk": {"S": "HEALTH"}, "sk": {"S": group}, "consecutiveFailures": {"N": str(failures)}}

    client, stub, requests = _paged_client("query", [[health("a", 1)], [health("b", 2)]])
    with stub:
        loaded = DynamoScaleState(client, "jobs").load_health()
    assert {group: h.consecutive_failures for group, h in loaded.items()} == {"a": 1, "b": 2}
    assert len(requests) == 2
