"""The jobs queue as the local runtime uses it: moto's SQS, or a list for big replays.

Both hand out messages in `receive_message`'s shape (MessageId, ReceiptHandle, Body,
Attributes) and move a message to the dead-letter list after it was received
`max_receive_count` times without being deleted, as SQS redrive does.

Both keep the queue's visibility timeout on the virtual clock, as the stack sets
it (squall/resources.py): a message received and not deleted stays hidden for that
long, then is visible again. moto counts visibility in wall-clock time, so its
queue is created with a visibility timeout that never runs out, and the adapter
makes a message visible again (ChangeMessageVisibility 0) when its virtual time
comes.

The sender: SQS stamps each message with its sender's unique id (the SenderId
attribute, `AROA...:session` for a role). A local send may name one; moto cannot
be told who sent, so the sender travels in a message attribute that the adapter,
playing SQS, turns back into `Attributes.SenderId` and removes on receipt. The
functions never see that attribute.

Both also say how deep the queue is (`depth`), for the SQS metrics the dashboard
graphs. SQS stamps a message with the wall-clock time it was sent; the local
runtime's clock is virtual, so each adapter keeps the virtual time it was given at
`send` to tell the age of the oldest message.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from squall.core.resources import JOBS_MAX_RECEIVE_COUNT, JOBS_VISIBILITY_TIMEOUT, SQS_MAX_MESSAGE_BYTES

# SQS leaves a message received this many times (or more) out of
# ApproximateAgeOfOldestMessage: it is moved to the back of the queue, redrive or not.
AGE_RECEIVE_LIMIT = 3
# The message attribute that carries a local send's sender through moto.
SENDER_ATTRIBUTE = "squall-local-sender-id"
# Who sent a message when the sender is not named: moto's own default principal.
DEFAULT_SENDER_ID = "AIDAIT2UOQQY3AUEKVGXU"
# moto's visibility timeout is wall-clock time: this long never runs out in a run.
MOTO_VISIBILITY_TIMEOUT_SECONDS = 43200  # SQS's maximum, twelve hours


@dataclass(frozen=True)
class QueueDepth:
    """What CloudWatch's SQS metrics say about a queue and its dead-letter queue."""

    visible: int  # ApproximateNumberOfMessagesVisible
    oldest_sent_at: datetime | None  # for ApproximateAgeOfOldestMessage; None: nothing counts
    dead_letters: int  # the dead-letter queue's ApproximateNumberOfMessagesVisible


class LocalQueue(Protocol):
    arn: str

    def send(self, body: str, *, at: datetime, sender: str | None = None) -> str: ...

    def receive(self, max_messages: int, *, at: datetime) -> list[dict[str, Any]]: ...

    def delete(self, receipt_handles: list[str]) -> None: ...

    def dead_letters(self) -> list[dict[str, Any]]: ...

    def depth(self, *, at: datetime) -> QueueDepth: ...

    def next_visible_at(self) -> datetime | None:
        """When a message received and not deleted is visible again; None if none is."""
        ...


class MessageTooLong(ValueError):
    """SQS refuses a body longer than the queue's MaximumMessageSize (InvalidParameterValue)."""


def check_body_size(body: str) -> None:
    """SQS's rule, in bytes of UTF-8 as SQS counts them, for the queues that have no SQS behind them."""
    size = len(body.encode("utf-8", "surrogatepass"))
    if size > SQS_MAX_MESSAGE_BYTES:
        raise MessageTooLong(
            f"One or more parameters are invalid. Reason: Message must be shorter than "
            f"{SQS_MAX_MESSAGE_BYTES} bytes (got {size})."
        )


class SqsQueue:
    """A queue on the local endpoint (moto), with its redrive policy doing the dead-lettering."""

    def __init__(
        self,
        sqs: Any,
        *,
        url: str,
        dead_letter_url: str,
        visibility_timeout: timedelta = JOBS_VISIBILITY_TIMEOUT,
    ) -> None:
        self._sqs = sqs
        self._url = url
        self._dlq = dead_letter_url
        self._visibility = visibility_timeout
        self.arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        # message id -> virtual time sent, for messages not deleted and received fewer
        # than AGE_RECEIVE_LIMIT times; receipt handle -> message id, to follow deletes
        self._sent_at: dict[str, datetime] = {}
        self._handles: dict[str, str] = {}
        # receipt handle -> virtual time its message is visible again (received, not deleted)
        self._hidden_until: dict[str, datetime] = {}

    def send(self, body: str, *, at: datetime, sender: str | None = None) -> str:
        check_body_size(body)  # moto counts characters; SQS counts bytes
        extra: dict[str, Any] = {}
        if sender:
            extra["MessageAttributes"] = {SENDER_ATTRIBUTE: {"DataType": "String", "StringValue": sender}}
        message_id = str(self._sqs.send_message(QueueUrl=self._url, MessageBody=body, **extra)["MessageId"])
        self._sent_at[message_id] = at
        return message_id

    def receive(self, max_messages: int, *, at: datetime) -> list[dict[str, Any]]:
        self._reveal(at)
        response = self._sqs.receive_message(
            QueueUrl=self._url,
            MaxNumberOfMessages=max_messages,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        )
        messages = [_as_sent(m) for m in response.get("Messages", [])]
        for message in messages:
            message_id = message["MessageId"]
            self._handles[message["ReceiptHandle"]] = message_id
            self._hidden_until[message["ReceiptHandle"]] = at + self._visibility
            if int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")) >= AGE_RECEIVE_LIMIT:
                self._sent_at.pop(message_id, None)
        return messages

    def delete(self, receipt_handles: list[str]) -> None:
        for start in range(0, len(receipt_handles), 10):
            batch = receipt_handles[start : start + 10]
            self._sqs.delete_message_batch(
                QueueUrl=self._url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(batch)]
            )
        for handle in receipt_handles:
            self._hidden_until.pop(handle, None)
            if (message_id := self._handles.pop(handle, None)) is not None:
                self._sent_at.pop(message_id, None)

    def dead_letters(self) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(
            QueueUrl=self._dlq, MaxNumberOfMessages=10, VisibilityTimeout=0, MessageAttributeNames=["All"]
        )
        return [_as_sent(m) for m in response.get("Messages", [])]

    def depth(self, *, at: datetime) -> QueueDepth:
        self._reveal(at)
        return QueueDepth(
            visible=self._visible(self._url),
            oldest_sent_at=min(self._sent_at.values(), default=None),
            dead_letters=self._visible(self._dlq),
        )

    def next_visible_at(self) -> datetime | None:
        return min(self._hidden_until.values(), default=None)

    def _reveal(self, at: datetime) -> None:
        """Messages whose visibility timeout has run out on the virtual clock are visible again."""
        due = [handle for handle, until in self._hidden_until.items() if until <= at]
        for start in range(0, len(due), 10):
            batch = due[start : start + 10]
            self._sqs.change_message_visibility_batch(
                QueueUrl=self._url,
                Entries=[{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(batch)],
            )
        for handle in due:
            del self._hidden_until[handle]
            self._handles.pop(handle, None)

    def _visible(self, url: str) -> int:
        attributes = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def _as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """A message as SQS hands it over: the sender carried in its attribute becomes SenderId."""
    attributes = dict(message.get("MessageAttributes") or {})
    carried = attributes.pop(SENDER_ATTRIBUTE, None)
    sender = carried["StringValue"] if carried else DEFAULT_SENDER_ID
    shaped = {**message, "Attributes": {**message.get("Attributes", {}), "SenderId": sender}}
    if attributes:
        shaped["MessageAttributes"] = attributes
    else:
        shaped.pop("MessageAttributes", None)
    return shaped


@dataclass
class _Message:
    message_id: str
    body: str
    sent_at: datetime
    sender: str = DEFAULT_SENDER_ID
    receives: int = 0


@dataclass
class MemoryQueue:
    """A FIFO list with SQS's receive/delete/visibility/redrive semantics and no network."""

    arn: str = "arn:aws:sqs:us-west-2:123456789012:squall-jobs"
    max_receive_count: int = JOBS_MAX_RECEIVE_COUNT
    visibility_timeout: timedelta = JOBS_VISIBILITY_TIMEOUT
    _visible: deque[_Message] = field(default_factory=deque)
    # receipt handle -> (message, when it is visible again)
    _in_flight: dict[str, tuple[_Message, datetime]] = field(default_factory=dict)
    _dead: list[_Message] = field(default_factory=list)

    def send(self, body: str, *, at: datetime, sender: str | None = None) -> str:
        check_body_size(body)
        message = _Message(message_id=str(uuid.uuid4()), body=body, sent_at=at, sender=sender or DEFAULT_SENDER_ID)
        self._visible.append(message)
        return message.message_id

    def receive(self, max_messages: int, *, at: datetime) -> list[dict[str, Any]]:
        self._reveal(at)
        batch: list[dict[str, Any]] = []
        while self._visible and len(batch) < max_messages:
            message = self._visible.popleft()
            if message.receives >= self.max_receive_count:
                # Redrive: a message received that often goes to the dead letters
                # instead of being handed over again.
                self._dead.append(message)
                continue
            message.receives += 1
            handle = f"{message.message_id}#{message.receives}"
            self._in_flight[handle] = (message, at + self.visibility_timeout)
            batch.append(
                {
                    "MessageId": message.message_id,
                    "ReceiptHandle": handle,
                    "Body": message.body,
                    "Attributes": {"ApproximateReceiveCount": str(message.receives), "SenderId": message.sender},
                }
            )
        return batch

    def delete(self, receipt_handles: list[str]) -> None:
        for handle in receipt_handles:
            self._in_flight.pop(handle, None)

    def dead_letters(self) -> list[dict[str, Any]]:
        return [{"MessageId": m.message_id, "Body": m.body} for m in self._dead]

    def depth(self, *, at: datetime) -> QueueDepth:
        self._reveal(at)
        waiting = [*self._visible, *(message for message, _ in self._in_flight.values())]
        return QueueDepth(
            visible=len(self._visible),
            oldest_sent_at=min(
                (m.sent_at for m in waiting if m.receives < AGE_RECEIVE_LIMIT), default=None
            ),
            dead_letters=len(self._dead),
        )

    def next_visible_at(self) -> datetime | None:
        return min((until for _, until in self._in_flight.values()), default=None)

    def _reveal(self, at: datetime) -> None:
        for handle, (message, until) in list(self._in_flight.items()):
            if until <= at:
                del self._in_flight[handle]
                self._visible.append(message)
