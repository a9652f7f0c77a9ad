"""A virtual clock: the local runtime moves time itself, so hours replay in seconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

EPOCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class VirtualClock:
    def __init__(self, start: datetime = EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("the virtual clock needs a timezone-aware start")
        self._now = start
        self.start = start

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError("time does not run backwards")
        self._now += delta
        return self._now

    def advance_to(self, moment: datetime) -> datetime:
        if moment > self._now:
            self._now = moment
        return self._now

    @property
    def elapsed(self) -> timedelta:
        return self._now - self.start


class WallClock(VirtualClock):
    """Real time, for measuring reaction and for `squall local up`: `advance` sleeps instead of jumping.

    `speed`: cluster seconds per wall-clock second (1: real time; 10: ten times
    faster, from the moment the clock was made). `advance` sleeps the wall-clock
    share of the delta.
    """

    def __init__(self, *, speed: float = 1.0) -> None:
        if not speed > 0 or speed == float("inf"):
            raise ValueError(f"speed must be a positive finite number, got {speed!r}")
        super().__init__(datetime.now(UTC))
        self.speed = speed
        self._wall_start = time.monotonic()

    def now(self) -> datetime:
        if self.speed == 1.0:
            return datetime.now(UTC)
        return self.start + timedelta(seconds=(time.monotonic() - self._wall_start) * self.speed)

    def wall_seconds(self, delta: timedelta) -> float:
        """How long `delta` of this clock's time takes in wall-clock seconds."""
        return max(delta.total_seconds(), 0.0) / self.speed

    def advance(self, delta: timedelta) -> datetime:
        time.sleep(self.wall_seconds(delta))
        return self.now()

    def advance_to(self, moment: datetime) -> datetime:
        return self.advance(moment - self.now())

    @property
    def elapsed(self) -> timedelta:
        return self.now() - self.start
