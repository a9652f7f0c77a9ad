"""The jobs queue as the local runtime uses it: moto's SQS, or a list for big replays.

Both hand out messages in `receive_message`'s shape (MessageId, ReceiptHandle, Body,
Attributes) and move a message to the dead-letter list after it was received
`max_receive_count` times without being deleted, as SQS redrive does.

Both also say how deep the queue is (`depth`), for the SQS metrics the dashboard
graphs. SQS stamps a message with the wall-clock time it was sent; the local
runtime's clock is virtual, so each adapter keeps the virtual time it was given at
`send` to tell the age of the oldest message.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# SQS leaves a message received this many times (or more) out of
# ApproximateAgeOfOldestMessage: it is moved to the back of the queue, redrive or not.
AGE_RECEIVE_LIMIT = 3


@dataclass(frozen=True)
class QueueDepth:
    """What CloudWatch's SQS metrics say about a queue and its dead-letter queue."""

    visible: int  # ApproximateNumberOfMessagesVisible
    oldest_sent_at: datetime | None  # for ApproximateAgeOfOldestMessage; None: nothing counts
    dead_letters: int  # the dead-letter queue's ApproximateNumberOfMessagesVisible


class LocalQueue(Protocol):
    arn: str

    def send(self, body: str, *, at: datetime) -> str: ...

    def receive(self, max_messages: int) -> list[dict[str, Any]]: ...

    def delete(self, receipt_handles: list[str]) -> None: ...

    def dead_letters(self) -> list[dict[str, Any]]: ...

    def depth(self) -> QueueDepth: ...


class SqsQueue:
    """A queue on the local endpoint (moto), with its redrive policy doing the dead-lettering."""

    def __init__(self, sqs: Any, *, url: str, dead_letter_url: str) -> None:
        self._sqs = sqs
        self._url = url
        self._dlq = dead_letter_url
        self.arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        # message id -> virtual time sent, for messages not deleted and received fewer
        # than AGE_RECEIVE_LIMIT times; receipt handle -> message id, to follow deletes
        self._sent_at: dict[str, datetime] = {}
        self._handles: dict[str, str] = {}

    def send(self, body: str, *, at: datetime) -> str:
        message_id = str(self._sqs.send_message(QueueUrl=self._url, MessageBody=body)["MessageId"])
        self._sent_at[message_id] = at
        return message_id

    def receive(self, max_messages: int) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(
            QueueUrl=self._url, MaxNumberOfMessages=max_messages, AttributeNames=["All"], WaitTimeSeconds=0
        )
        messages = list(response.get("Messages", []))
        for message in messages:
            message_id = message["MessageId"]
            self._handles[message["ReceiptHandle"]] = message_id
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
            if (message_id := self._handles.pop(handle, None)) is not None:
                self._sent_at.pop(message_id, None)

    def dead_letters(self) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(QueueUrl=self._dlq, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return list(response.get("Messages", []))

    def depth(self) -> QueueDepth:
        return QueueDepth(
            visible=self._visible(self._url),
            oldest_sent_at=min(self._sent_at.values(), default=None),
            dead_letters=self._visible(self._dlq),
        )

    def _visible(self, url: str) -> int:
        attributes = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


@dataclass
class _Message:
    message_id: str
    body: str
    sent_at: datetime
    receives: int = 0


@dataclass
class MemoryQueue:
    """A FIFO list with SQS's receive/delete/redrive semantics and no network."""

    arn: str = "arn:aws:sqs:us-west-2:123456789012:squall-jobs"
    max_receive_count: int = 3
    _visible: deque[_Message] = field(default_factory=deque)
    _in_flight: dict[str, _Message] = field(default_factory=dict)
    _dead: list[_Message] = field(default_factory=list)

    def send(self, body: str, *, at: datetime) -> str:
        message = _Message(message_id=str(uuid.uuid4()), body=body, sent_at=at)
        self._visible.append(message)
        return message.message_id

    def receive(self, max_messages: int) -> list[dict[str, Any]]:
        # What was received and not deleted becomes visible again (visibility timeout 0);
        # redrive moves it to the dead letters when it is received once too often.
        for handle, message in list(self._in_flight.items()):
            del self._in_flight[handle]
            if message.receives >= self.max_receive_count:
                self._dead.append(message)
            else:
                self._visible.append(message)
        batch: list[dict[str, Any]] = []
        while self._visible and len(batch) < max_messages:
            message = self._visible.popleft()
            message.receives += 1
            handle = f"{message.message_id}#{message.receives}"
            self._in_flight[handle] = message
            batch.append(
                {
                    "MessageId": message.message_id,
                    "ReceiptHandle": handle,
                    "Body": message.body,
                    "Attributes": {"ApproximateReceiveCount": str(message.receives)},
                }
            )
        return batch

    def delete(self, receipt_handles: list[str]) -> None:
        for handle in receipt_handles:
            self._in_flight.pop(handle, None)

    def dead_letters(self) -> list[dict[str, Any]]:
        return [{"MessageId": m.message_id, "Body": m.body} for m in self._dead]

    def depth(self) -> QueueDepth:
        # A message received and not deleted is visible again at once; SQS moves it to
        # the dead-letter queue only when it is next received, and so does this queue.
        waiting = [*self._visible, *self._in_flight.values()]
        return QueueDepth(
            visible=len(waiting),
            oldest_sent_at=min(
                (m.sent_at for m in waiting if m.receives < AGE_RECEIVE_LIMIT), default=None
            ),
            dead_letters=len(self._dead),
        )
