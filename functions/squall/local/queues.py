"""The jobs queue as the local runtime uses it: moto's SQS, or a list for big replays.

Both hand out messages in `receive_message`'s shape (MessageId, ReceiptHandle, Body,
Attributes) and move a message to the dead-letter list after it was received
`max_receive_count` times without being deleted, as SQS redrive does.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol


class LocalQueue(Protocol):
    arn: str

    def send(self, body: str) -> str: ...

    def receive(self, max_messages: int) -> list[dict[str, Any]]: ...

    def delete(self, receipt_handles: list[str]) -> None: ...

    def dead_letters(self) -> list[dict[str, Any]]: ...


class SqsQueue:
    """A queue on the local endpoint (moto), with its redrive policy doing the dead-lettering."""

    def __init__(self, sqs: Any, *, url: str, dead_letter_url: str) -> None:
        self._sqs = sqs
        self._url = url
        self._dlq = dead_letter_url
        self.arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]

    def send(self, body: str) -> str:
        return str(self._sqs.send_message(QueueUrl=self._url, MessageBody=body)["MessageId"])

    def receive(self, max_messages: int) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(
            QueueUrl=self._url, MaxNumberOfMessages=max_messages, AttributeNames=["All"], WaitTimeSeconds=0
        )
        return list(response.get("Messages", []))

    def delete(self, receipt_handles: list[str]) -> None:
        for start in range(0, len(receipt_handles), 10):
            batch = receipt_handles[start : start + 10]
            self._sqs.delete_message_batch(
                QueueUrl=self._url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(batch)]
            )

    def dead_letters(self) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(QueueUrl=self._dlq, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return list(response.get("Messages", []))


@dataclass
class _Message:
    message_id: str
    body: str
    receives: int = 0


@dataclass
class MemoryQueue:
    """A FIFO list with SQS's receive/delete/redrive semantics and no network."""

    arn: str = "arn:aws:sqs:us-west-2:123456789012:squall-jobs"
    max_receive_count: int = 3
    _visible: deque[_Message] = field(default_factory=deque)
    _in_flight: dict[str, _Message] = field(default_factory=dict)
    _dead: list[_Message] = field(default_factory=list)

    def send(self, body: str) -> str:
        message = _Message(message_id=str(uuid.uuid4()), body=body)
        self._visible.append(message)
        return message.message_id

    def receive(self, max_messages: int) -> list[dict[str, Any]]:
        # What was received and not deleted becomes visible again (visibility timeout 0).
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
