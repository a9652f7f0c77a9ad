"""The local runtime's queues play the ones the stacks deploy: names, visibility, redrive, sender."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squall.core import resources
from squall.local import aws, runtime
from squall.local.lambda_events import sqs_event
from squall.local.queues import DEFAULT_SENDER_ID, SENDER_ATTRIBUTE, MemoryQueue, MessageTooLong
from stacks import constants

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_the_local_resources_carry_the_names_and_sizes_the_stacks_give_them() -> None:
    prefix = "squall"
    assert aws.JOBS_QUEUE == constants.jobs_queue_name(prefix) == "squall-jobs"
    assert constants.dead_letter_queue_name(aws.JOBS_QUEUE) == aws.DEAD_LETTER_QUEUE
    assert aws.DRAIN_QUEUE == constants.drain_queue_name(prefix) == "squall-drain"
    assert constants.table_name(prefix) == aws.TABLE
    assert aws.MAX_RECEIVE_COUNT == constants.JOBS_MAX_RECEIVE_COUNT == 5
    assert runtime.DRAIN_MAX_RECEIVE_COUNT == constants.DRAIN_MAX_RECEIVE_COUNT
    # six times the consumer's timeout, as the stack sets them
    assert timedelta(seconds=6 * constants.FUNCTIONS["drain"].timeout_seconds) == runtime.DRAIN_VISIBILITY_TIMEOUT
    assert MemoryQueue().visibility_timeout == timedelta(seconds=6 * constants.FUNCTIONS["submit"].timeout_seconds)
    assert runtime.DRAIN_QUEUE_ARN.endswith(":squall-drain")


def test_a_message_received_and_not_deleted_stays_hidden_for_the_visibility_timeout() -> None:
    queue = MemoryQueue()
    queue.send("a", at=T0)
    (first,) = queue.receive(10, at=T0)
    assert queue.receive(10, at=T0 + timedelta(seconds=359)) == []
    assert queue.depth(at=T0 + timedelta(seconds=359)).visible == 0
    assert queue.next_visible_at() == T0 + resources.JOBS_VISIBILITY_TIMEOUT
    (again,) = queue.receive(10, at=T0 + resources.JOBS_VISIBILITY_TIMEOUT)
    assert again["MessageId"] == first["MessageId"] and again["Attributes"]["ApproximateReceiveCount"] == "2"
    queue.delete([again["ReceiptHandle"]])
    assert queue.next_visible_at() is None


def test_a_message_received_the_stacks_maximum_times_goes_to_the_dead_letters() -> None:
    queue = MemoryQueue()
    queue.send("poison", at=T0)
    at = T0
    for receive in range(1, resources.JOBS_MAX_RECEIVE_COUNT + 1):
        (message,) = queue.receive(10, at=at)
        assert message["Attributes"]["ApproximateReceiveCount"] == str(receive)
        at += resources.JOBS_VISIBILITY_TIMEOUT
    assert queue.dead_letters() == []
    assert queue.receive(10, at=at) == []
    assert [m["Body"] for m in queue.dead_letters()] == ["poison"]


def test_the_sender_reaches_the_function_as_sqs_reports_it() -> None:
    queue = MemoryQueue()
    queue.send("mine", at=T0, sender="AROAEXAMPLEROLEID0001:alice")
    queue.send("anyone", at=T0)
    event = sqs_event(queue.receive(10, at=T0), queue_arn=queue.arn, region="us-west-2")
    senders = {r["body"]: r["attributes"]["SenderId"] for r in event["Records"]}
    assert senders == {"mine": "AROAEXAMPLEROLEID0001:alice", "anyone": DEFAULT_SENDER_ID}
    assert all(SENDER_ATTRIBUTE not in r["messageAttributes"] for r in event["Records"])


def test_the_memory_queue_refuses_a_body_longer_than_sqs_takes_counted_in_bytes() -> None:
    queue = MemoryQueue()
    largest = "x" * constants.SQS_MAX_MESSAGE_BYTES
    queue.send(largest, at=T0)
    # one character fewer, but "é" is two bytes of UTF-8: SQS counts bytes
    with pytest.raises(MessageTooLong, match=f"shorter than {constants.SQS_MAX_MESSAGE_BYTES} bytes"):
        queue.send("é" + "x" * (constants.SQS_MAX_MESSAGE_BYTES - 1), at=T0)
    assert [len(m["Body"]) for m in queue.receive(10, at=T0)] == [constants.SQS_MAX_MESSAGE_BYTES]
