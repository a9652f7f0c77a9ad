"""DynamoDrainStore on moto's DynamoDB: round trips, version conditions, TTL, errors."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from squall.adapters.aws.drain_store import DRAIN_RETENTION, DynamoDrainStore
from squall.adapters.aws.job_store import DynamoJobStore
from squall.core import drain
from squall.core.drain import DrainOutcome, DrainPolicy, DrainRecord, Kind
from squall.core.errors import ConflictError, PermanentError, RetryableError
from squall.ports import GroupRef, LifecycleAction

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def drains(jobs_table: Any) -> DynamoDrainStore:
    return DynamoDrainStore(jobs_table, "jobs")


def record(instance_id: str = "i-0a1b2c3d4e5f60718", **changes: Any) -> DrainRecord:
    action = LifecycleAction(
        ref=GroupRef(name="squall-p3-usw2", region="us-west-2"),
        hook_name="squall-terminate",
        instance_id=instance_id,
        token="87654321-4321-4321-4321-210987654321",
    )
    started = drain.start(
        action,
        kind=Kind.TERMINATE,
        group="p3-usw2",
        started_at=T0,
        policy=DrainPolicy(),
        cause_hint="warm-pool",
    )
    return dataclasses.replace(started, **changes)


def test_a_record_reads_back_as_it_was_written(drains: DynamoDrainStore) -> None:
    # given a record with every field set
    written = record(
        cause="spot-reclaim",
        node_name="gpu-1",
        cordoned=True,
        pods_left=("team-a/x", "team-a/y"),
        pods_left_count=2,
        noted_jobs=("job-a",),
        attempts=3,
        evicted=5,
        refused=2,
        heartbeats=1,
        result="CONTINUE",
        outcome=DrainOutcome.PAST_DEADLINE,
        detail="deadline passed",
        finished_at=T0 + timedelta(minutes=30),
        next_step_id="",
    )
    # when
    drains.create(written)
    # then
    assert drains.get(written.instance_id) == written
    assert drains.get("i-0000000000000000") is None


def test_an_active_record_with_empty_collections_round_trips(drains: DynamoDrainStore) -> None:
    written = record()
    drains.create(written)
    assert drains.get(written.instance_id) == written


def test_a_second_create_for_the_instance_conflicts(drains: DynamoDrainStore) -> None:
    drains.create(record())
    with pytest.raises(ConflictError):
        drains.create(record(token="another"))


def test_saves_are_conditional_on_the_version_read(drains: DynamoDrainStore) -> None:
    # given version 1 stored
    first = record()
    drains.create(first)
    # when one writer moves it to version 2
    second = dataclasses.replace(first, attempts=1, version=2)
    drains.save(second)
    # then a concurrent writer that also read version 1 loses, and nothing of it is stored
    with pytest.raises(ConflictError):
        drains.save(dataclasses.replace(first, attempts=99, version=2))
    # and a write that skips a version (out of order) loses too
    with pytest.raises(ConflictError):
        drains.save(dataclasses.replace(first, version=4))
    assert drains.get(first.instance_id) == second


def test_a_save_of_a_record_never_created_conflicts(drains: DynamoDrainStore) -> None:
    with pytest.raises(ConflictError):
        drains.save(record(version=2))


def test_the_item_carries_its_ttl_and_stays_out_of_job_listings(
    drains: DynamoDrainStore, jobs_table: Any
) -> None:
    active = record()
    finished = record(
        "i-0ffffffffffffffff", finished_at=T0 + timedelta(minutes=3), outcome=DrainOutcome.DRAINED
    )
    drains.create(active)
    drains.create(finished)

    def ttl(instance_id: str) -> int:
        item = jobs_table.get_item(
            TableName="jobs", Key={"pk": {"S": f"DRAIN#{instance_id}"}, "sk": {"S": "DRAIN"}}
        )
        assert item["Item"]["kind"] == {"S": "drain"}
        return int(item["Item"]["expiresAt"]["N"])

    assert ttl(active.instance_id) == int((active.deadline + DRAIN_RETENTION).timestamp())
    assert ttl(finished.instance_id) == int((T0 + timedelta(minutes=3) + DRAIN_RETENTION).timestamp())
    assert DynamoJobStore(jobs_table, "jobs").list_all() == []


class _Failing:
    """A DynamoDB client whose every call raises the given botocore error."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def call(**_: Any) -> Any:
            raise self.error

        return call


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutItem"
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_client_error("ProvisionedThroughputExceededException", 400), RetryableError),
        (_client_error("InternalServerError", 500), RetryableError),
        (EndpointConnectionError(endpoint_url="https://dynamodb.us-west-2.amazonaws.com"), RetryableError),
        (_client_error("ValidationException", 400), PermanentError),
    ],
)
def test_no_botocore_error_leaks_out(error: Exception, expected: type[Exception]) -> None:
    store = DynamoDrainStore(_Failing(error), "jobs")
    for call in (
        lambda: store.get("i-0a"),
        lambda: store.create(record()),
        lambda: store.save(record(version=2)),
    ):
        with pytest.raises(expected) as caught:
            call()
        assert caught.value.__cause__ is error
