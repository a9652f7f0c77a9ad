"""The drain queue: the DrainQueue port, its SQS adapter, and an in-memory one.

A drain or a launch wait continues by sending itself a delayed message, never by
sleeping in a function: SQS holds the message back for DelaySeconds (at most 15
minutes) and then invokes the drain function with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from squall.lifecycle import DrainStepMessage
from squall.ports import Clock
from squall.store import translate

MAX_DELAY_SECONDS = 900  # SQS's limit on DelaySeconds


class DrainQueue(Protocol):
    def send_step(self, message: DrainStepMessage, *, delay: timedelta) -> None:
        """Deliver ``message`` to the drain function after ``delay`` (rounded up to seconds, at most 15 min)."""
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

    def send_step(self, message: DrainStepMessage, *, delay: timedelta) -> None:
        queued = QueuedStep(due_at=self.clock.now() + timedelta(seconds=delay_seconds(delay)), message=message)
        self.sent.append(queued)
        self.waiting.append(queued)

    def next_due(self) -> datetime | None:
        return min((q.due_at for q in self.waiting), default=None)

    def take_due(self) -> list[DrainStepMessage]:
        """The messages due by now, oldest first; they leave the queue."""
        now = self.clock.now()
        due = sorted((q for q in self.waiting if q.due_at <= now), key=lambda q: q.due_at)
        self.waiting = [q for q in self.waiting if q.due_at > now]
        return [q.message for q in due]
