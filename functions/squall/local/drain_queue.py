"""The drain queue on a list, for the local runtime and tests: messages come due on the virtual clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from squall.adapters.aws.drain_queue import delay_seconds
from squall.core.asg_events import DrainStepMessage
from squall.ports import Clock


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
