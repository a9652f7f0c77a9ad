"""ScaleState.latest_decision: the newest scale-check decision, read back cheaply (DynamoDB on moto, and memory)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from squall.adapters.aws.scale_state import DynamoScaleState
from squall.core.errors import RetryableError
from squall.local.memory import InMemoryScaleState

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class CountingClient:
    """A boto3 client that records which operations were sent, to bound what a read costs."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return method(*args, **kwargs)

        return call


@pytest.fixture
def dynamo(jobs_table: Any) -> tuple[DynamoScaleState, CountingClient]:
    counting = CountingClient(jobs_table)
    return DynamoScaleState(counting, "jobs"), counting


@pytest.fixture(params=["dynamodb", "memory"])
def state(request: pytest.FixtureRequest) -> Any:
    """Both ScaleStates: one contract."""
    if request.param == "memory":
        return InMemoryScaleState()
    return DynamoScaleState(request.getfixturevalue("jobs_table"), "jobs")


def record(state: Any, at: datetime, n: int, **plan: Any) -> str:
    decision_id: str = state.record_decision(
        at=at, trigger=f"schedule {n}", dry_run=False, plan={"n": n, **plan}, acted={"scaledUp": [n]}
    )
    return decision_id


def read_after_each_minute(
    dynamo: tuple[DynamoScaleState, CountingClient], count: int, *, now: datetime
) -> tuple[dict[str, Any] | None, list[tuple[str, dict[str, Any]]]]:
    """Records `count` decisions a minute apart from T0, numbered from 0, then reads the newest at
    `now`: it, and the calls that read sent."""
    state, client = dynamo
    for n in range(count):
        record(state, T0 + timedelta(minutes=n), n)
    client.calls.clear()
    return state.latest_decision(now=now), client.calls


def test_no_decision_yet_is_none(state: Any) -> None:
    assert state.latest_decision(now=T0) is None


def test_the_newest_decision_comes_back_as_it_was_recorded(state: Any) -> None:
    # given three checks a minute apart, the last with an admission
    admission = {"admitted": [], "waiting": [{"job": "j-1", "position": 1}], "waitingTotal": 1, "inUse": {}}
    record(state, T0, 1)
    record(state, T0 + timedelta(minutes=1), 2)
    newest = record(state, T0 + timedelta(minutes=2), 3, admission=admission)
    # when
    latest = state.latest_decision(now=T0 + timedelta(minutes=2, seconds=30))
    # then
    assert latest is not None
    assert latest["id"] == newest
    assert latest["at"] == (T0 + timedelta(minutes=2)).isoformat()
    assert (latest["trigger"], latest["dryRun"]) == ("schedule 3", False)
    assert latest["plan"] == {"n": 3, "admission": admission}
    assert latest["acted"] == {"scaledUp": [3]}


def test_just_after_midnight_yesterdays_last_decision_is_found(state: Any) -> None:
    record(state, datetime(2026, 1, 5, 23, 58, tzinfo=UTC), 1)
    record(state, datetime(2026, 1, 5, 23, 59, 30, tzinfo=UTC), 2)
    latest = state.latest_decision(now=datetime(2026, 1, 6, 0, 0, 10, tzinfo=UTC))
    assert latest is not None and latest["plan"]["n"] == 2


def test_a_reader_whose_clock_is_days_off_still_finds_the_newest(state: Any) -> None:
    # given decisions on the local runtime's virtual day, read on a wall clock months later (or before)
    record(state, T0, 1)
    record(state, T0 + timedelta(days=1, minutes=5), 2)
    for now in (T0 + timedelta(days=300), T0 - timedelta(days=30)):
        latest = state.latest_decision(now=now)
        assert latest is not None and latest["plan"]["n"] == 2


def test_reading_the_newest_of_many_costs_one_query_of_one_item(
    dynamo: tuple[DynamoScaleState, CountingClient],
) -> None:
    # given a day of decisions, when the newest is read
    latest, calls = read_after_each_minute(dynamo, 60, now=T0 + timedelta(hours=2))
    # then: today's partition, newest first, one item; no scan
    assert latest is not None and latest["plan"]["n"] == 59
    [(operation, request)] = calls
    assert operation == "query"
    assert request["Limit"] == 1 and request["ScanIndexForward"] is False
    assert request["ExpressionAttributeValues"] == {":pk": {"S": "DECISION#2026-01-05"}}


def test_off_the_day_it_reads_two_empty_partitions_and_the_latest_key_never_a_scan(
    dynamo: tuple[DynamoScaleState, CountingClient],
) -> None:
    latest, calls = read_after_each_minute(dynamo, 5, now=T0 + timedelta(days=40))
    assert latest is not None and latest["plan"]["n"] == 4
    assert [operation for operation, _ in calls] == ["query", "query", "get_item", "get_item"]


def test_a_latest_key_whose_decision_expired_is_none(dynamo: tuple[DynamoScaleState, CountingClient]) -> None:
    # given the decision the latest key names is gone (its TTL)
    state, client = dynamo
    record(state, T0, 1)
    [item] = client.scan(
        TableName="jobs",
        FilterExpression="begins_with(pk, :d) AND pk <> :l",
        ExpressionAttributeValues={":d": {"S": "DECISION#2"}, ":l": {"S": "DECISION#LATEST"}},
    )["Items"]
    client.delete_item(TableName="jobs", Key={"pk": item["pk"], "sk": item["sk"]})
    # then
    assert state.latest_decision(now=T0 + timedelta(days=20)) is None


def test_dynamodb_errors_while_reading_become_squall_errors(aws_credentials: None) -> None:
    client = boto3.client("dynamodb", region_name="us-west-2")
    with Stubber(client) as stub:
        stub.add_client_error("query", "ProvisionedThroughputExceededException", http_status_code=400)
        with pytest.raises(RetryableError):
            DynamoScaleState(client, "jobs").latest_decision(now=T0)


def test_the_memory_decision_log_reads_back_what_dynamodb_would() -> None:
    # Kept as JSON text, as the adapter writes plan and actions: tuples come back as lists.
    state = InMemoryScaleState()
    plan = {"scaleUp": [{"group": "p3", "to": 2}], "pair": (1, 2)}
    state.record_decision(at=T0, trigger="schedule", dry_run=False, plan=plan, acted={"scaledUp": []})
    state.record_decision(at=T0 + timedelta(minutes=1), trigger="requested", dry_run=True, plan={}, acted={})
    first, second = state.decisions
    assert first == {
        "at": T0,
        "trigger": "schedule",
        "dryRun": False,
        "plan": {"scaleUp": [{"group": "p3", "to": 2}], "pair": [1, 2]},
        "acted": {"scaledUp": []},
    }
    assert state.decisions[-1] == second and state.decisions[1:] == [second] and len(state.decisions) == 2
    first["plan"]["scaleUp"].clear()  # a reader's copy: the log keeps its own
    assert state.decisions[0]["plan"]["scaleUp"] == [{"group": "p3", "to": 2}]
    assert state.latest_decision(now=T0)["dryRun"] is True  # type: ignore[index]
    state.decisions.clear()
    assert state.decisions == [] and state.latest_decision(now=T0) is None


def test_memory_keeps_the_decisions_dynamodbs_ttl_would_and_ids_go_on() -> None:
    # given a replay three weeks long, one check a day (DynamoDB keeps a decision 14 days)
    state = InMemoryScaleState()
    ids = [record(state, T0 + timedelta(days=n), n) for n in range(21)]
    # then only the last two weeks are held, oldest first, and no id is given twice
    assert [d["plan"]["n"] for d in state.decisions] == list(range(6, 21))
    assert len(set(ids)) == 21
    latest = state.latest_decision(now=T0 + timedelta(days=20))
    assert latest is not None and latest["id"] == ids[-1] and latest["plan"]["n"] == 20
