"""squall logs' pure parts: which replica a pod is, --since, --replica, the lines of an event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squall.cli.follow.logs import (
    LogsError,
    check_replica,
    format_event,
    message_lines,
    parse_since,
    pod_replicas,
    select_streams,
)
from squall.core.job_outputs import LogEvent, LogStreamInfo
from squall.core.logstreams import ContainerStream

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
REPLICAS = ("chief-0", "worker-0", "worker-1", "worker-10")


def test_a_pod_is_the_replica_its_generated_name_says() -> None:
    assert pod_replicas("gan-1-chief-0-xk2q9", job_id="gan-1", replicas=REPLICAS) == ("chief-0",)
    assert pod_replicas("gan-1-worker-10-xk2q9", job_id="gan-1", replicas=REPLICAS) == ("worker-10",)
    # not a generated suffix, another job's replica, a longer job id
    assert pod_replicas("gan-1-chief-0", job_id="gan-1", replicas=REPLICAS) == ()
    assert pod_replicas("gan-1-chief-0-worker-0-xk2q9", job_id="gan-1", replicas=REPLICAS) == ()
    assert pod_replicas("gan-12-chief-0-xk2q9", job_id="gan-1", replicas=REPLICAS) == ()
    # without a spec to read, a name that was not cut still says which replica it is
    assert pod_replicas("gan-1-worker-3-xk2q9", job_id="gan-1", replicas=()) == ("worker-3",)
    assert pod_replicas("gan-1-chief-0-worker-0-xk2q9", job_id="gan-1", replicas=()) == ()


def test_a_name_cut_at_58_characters_is_matched_as_kubernetes_cut_it() -> None:
    job_id = "t" * 45 + "-0001"  # a sweep trial's id at its longest (50)
    chief = (f"{job_id}-chief-0-")[:58] + "b4n7z"
    assert pod_replicas(chief, job_id=job_id, replicas=("chief-0", "worker-0", "worker-1")) == ("chief-0",)
    # the workers' prefixes are cut to the same 58 characters: the pod may be either
    worker = (f"{job_id}-worker-1-")[:58] + "b4n7z"
    assert pod_replicas(worker, job_id=job_id, replicas=("chief-0", "worker-0", "worker-1")) == (
        "worker-0",
        "worker-1",
    )
    stream = ContainerStream(
        host="h", pod=worker, namespace="ns", container="trainer", container_id="ab"
    ).name
    [chosen] = select_streams(
        [LogStreamInfo(stream)], job_id=job_id, namespace="ns", replicas=("chief-0", "worker-0", "worker-1")
    )
    assert chosen.label == worker  # labelled by its pod, not by a guess


def test_since_takes_durations_and_times_with_a_timezone() -> None:
    assert parse_since("10m", now=NOW) == NOW - timedelta(minutes=10)
    assert parse_since("2h", now=NOW) == NOW - timedelta(hours=2)
    assert parse_since("90s", now=NOW) == NOW - timedelta(seconds=90)
    assert parse_since("3d", now=NOW) == NOW - timedelta(days=3)
    assert parse_since("2026-01-05T08:00:00Z", now=NOW) == NOW - timedelta(hours=1)
    assert parse_since("2026-01-05T10:00:00+02:00", now=NOW) == NOW - timedelta(hours=1)
    for bad, why in (
        ("10 minutes", "expected a duration"),
        ("2026-01-05T08:00:00", "timezone"),
        ("99999d", "at most"),
    ):
        with pytest.raises(LogsError, match=why):
            parse_since(bad, now=NOW)


def test_replica_must_be_one_of_the_jobs() -> None:
    assert check_replica("worker-1", job_id="j", replicas=REPLICAS) == "worker-1"
    with pytest.raises(LogsError, match="no replica worker-7; its replicas: chief-0, worker-0"):
        check_replica("worker-7", job_id="j", replicas=REPLICAS)
    with pytest.raises(LogsError, match="expected a replica such as chief-0"):
        check_replica("chief", job_id="j", replicas=REPLICAS)


def test_event_lines_carry_the_replica_and_optionally_the_time() -> None:
    event = LogEvent(timestamp_ms=int(NOW.timestamp() * 1000), message='{"log":"a\\nb\\n","stream":"stderr"}')
    assert format_event(event, label="chief-0", timestamps=False) == ["[chief-0] a", "[chief-0] b"]
    assert (
        format_event(event, label="chief-0", timestamps=True)[0] == "2026-01-05 09:00:00.000 UTC [chief-0] a"
    )
    # not the agent's envelope: the message as it is
    assert message_lines('{"msg": "structured"}') == ['{"msg": "structured"}']
    assert message_lines("{not json") == ["{not json"]
    assert message_lines("crlf\r\n") == ["crlf"]
