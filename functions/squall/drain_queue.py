"""The drain queue: the DrainQueue port, its SQS adapter, and an in-memory one.

A drain or a launch wait continues by sending itself a delayed message, never by
sleeping in a function: SQS holds the message back for DelaySeconds (at most 15
minutes) and then invokes the drain function with it.

A step that fails comes back sooner than the queue's visibility timeout (six
times the drain function's timeout, longer than a terminate hook's heartbeat
timeout): the drain function makes the failed message visible again after the
step delay (ChangeMessageVisibility), so the step is retried while the hook
still waits. It also asks, before it starts, for its messages to come back a
step delay after the invocation's own timeout, which is what happens when the
invocation dies half way (a timeout, out of memory) and cannot ask anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from squall.errors import RetryableError
from squall.lifecycle import DrainStepMessage
from squall.ports import Clock
from squall.store import translate

MAX_DELAY_SECONDS = 900  # SQS's limit on DelaySeconds
MAX_BATCH = 10  # entries in one SQS batch call


class DrainQueue(Protocol):
    def send_step(self, message: DrainStepMessage, *, delay: timedelta) -> None:
        """Deliver ``message`` to the drain function after ``delay`` (rounded up to seconds, at most 15 min)."""
        ...

    def retry_after(self, receipt_handles: Sequence[str], *, delay: timedelta) -> None:
        """Deliver received messages again ``delay`` from now unless deleted first (not after the visibility timeout)."""
        ...


def delay_seconds(delay: timedelta) -> int:
    """Whole seconds, rounded up (a step must not run before its time), within SQS's bounds."""
    return min(max(math.ceil(delay.total_seconds()), 0), MAX_DELAY_SECONDS)


class SqsDrainQueue:
    def __init__(self, client: Any, *, queue_url: str) -> None:
        if not queue_url:
            raise ValueError("the drain queue needs its URL (SQUALL_DRAIN_QUEUE_URL)")
        self._client = client
        self._url = queue_url

    def send_step(self, message: DrainStepMessage, *, delay: timedelta) -> None:
        try:
            self._client.send_message(
                QueueUrl=self._url, MessageBody=message.body(), DelaySeconds=delay_seconds(delay)
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(f"send drain step for {message.instance_id}", exc) from exc

    def retry_after(self, receipt_handles: Sequence[str], *, delay: timedelta) -> None:
        seconds = delay_seconds(delay)
        failed: list[str] = []
        for start in range(0, len(receipt_handles), MAX_BATCH):
            batch = receipt_handles[start : start + MAX_BATCH]
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": seconds} for i, h in enumerate(batch)]
            try:
                response = self._client.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                raise translate("change the visibility of drain steps", exc) from exc
            failed.extend(f"{f.get('Code', '')}: {f.get('Message', '')}" for f in response.get("Failed", []))
        if failed:
            raise RetryableError(f"change the visibility of drain steps: {len(failed)} failed ({failed[0]})")


@dataclass(frozen=True, slots=True)
class QueuedStep:
    due_at: datetime
    message: DrainStepMessage


@dataclass
class InMemoryDrainQueue:
    """DrainQueue on a list, for the local runtime and tests: messages come due on the clock."""

    clock: Clock
    sent: list[QueuedStep] = field(default_factory=list)  # every message ever sent, in order
    waiting: list[QueuedStep] = field(default_factory=list)
    # receipt handle -> when the received message is visible again, as the function
    # asked (ChangeMessageVisibility); whoever plays the queue honours it
    visible_again: dict[str, datetime] = field(default_factory=dict)

    def send_step(self, message: DrainStepMessage, *, delay: timedelta) -> None:
        queued = QueuedStep(due_at=self.clock.now() + timedelta(seconds=delay_seconds(delay)), message=message)
        self.sent.append(queued)
        self.waiting.append(queued)

    def retry_after(self, receipt_handles: Sequence[str], *, delay: timedelta) -> None:
        due = self.clock.now() + timedelta(seconds=delay_seconds(delay))
        for handle in receipt_handles:
            self.visible_again[handle] = due

    def next_due(self) -> datetime | None:
        return min((q.due_at for q in self.waiting), default=None)

    def take_due(self) -> list[DrainStepMessage]:
        """The messages due by now, oldest first; they leave the queue."""
        now = self.clock.now()
        due = sorted((q for q in self.waiting if q.due_at <= now), key=lambda q: q.due_at)
        self.waiting = [q for q in self.waiting if q.due_at > now]
        return [q.message for q in due]
