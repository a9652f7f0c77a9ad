"""SIGTERM as a flag the training loop reads between steps.

Kubernetes sends SIGTERM when it evicts a pod (a drain before Squall terminates a
node, a spot reclaim) and SIGKILL after the grace period. The handler only records
the request: TensorFlow must not be re-entered from a signal handler, and a step
half applied cannot be checkpointed. The loop checks the flag after every step,
saves, and exits with a retryable code well within the grace period.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class PreemptionWatcher:
    """Context manager: while active, SIGTERM sets ``requested`` instead of killing."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._previous: Any = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        self._event.set()

    def __enter__(self) -> PreemptionWatcher:
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        signal.signal(signal.SIGTERM, self._previous)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Nothing else here, logging included: the handler runs between two
        # bytecodes of whatever the main thread was doing, locks held or not.
        self._event.set()
