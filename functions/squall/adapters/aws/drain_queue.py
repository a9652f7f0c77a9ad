"""The drain queue on SQS (the DrainQueue port is in squall.ports).

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
from datetime import timedelta
from typing import Any

from squall.adapters.aws.errors import translated
from squall.core.asg_events import DrainStepMessage
from squall.core.errors import RetryableError

MAX_DELAY_SECONDS = 900  # SQS's limit on DelaySeconds
MAX_BATCH = 10  # entries in one SQS batch call


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
        with translated(f"send drain step for {message.instance_id}"):
            self._client.send_message(
                QueueUrl=self._url, MessageBody=message.body(), DelaySeconds=delay_seconds(delay)
            )

    def retry_after(self, receipt_handles: Sequence[str], *, delay: timedelta) -> None:
        seconds = delay_seconds(delay)
        failed: list[str] = []
        for start in range(0, len(receipt_handles), MAX_BATCH):
            batch = receipt_handles[start : start + MAX_BATCH]
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": seconds} for i, h in enumerate(batch)]
            with translated("change the visibility of drain steps"):
                response = self._client.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)
            failed.extend(f"{f.get('Code', '')}: {f.get('Message', '')}" for f in response.get("Failed", []))
        if failed:
            raise RetryableError(f"change the visibility of drain steps: {len(failed)} failed ({failed[0]})")
