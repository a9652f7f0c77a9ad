"""The clock the follow loops wait on: real time in the CLI, virtual time in tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from squall.core.errors import RetryableError

if TYPE_CHECKING:  # for annotations only: ports.py imports pydantic, which `squall plan` does without
    from squall.ports import FollowClock

T = TypeVar("T")


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))


def patient(
    step: Callable[[], T],
    *,
    clock: FollowClock,
    wait: float,
    attempts: int = 10,
    on_warning: Callable[[str], None] = lambda text: None,
) -> T:
    """`step()`, tried again after `wait` seconds while it fails retryably (throttled, say), `attempts` times at most.

    A follow loop runs for hours: one throttled read must not end it.
    """
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except RetryableError as exc:
            if attempt == attempts:
                raise
            on_warning(f"{exc}; trying again in {wait:g} s ({attempt} of {attempts - 1})")
            clock.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
