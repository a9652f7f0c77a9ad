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
    """Real time, for measuring reaction: `advance` sleeps instead of jumping."""

    def __init__(self) -> None:
        super().__init__(datetime.now(UTC))

    def now(self) -> datetime:
        return datetime.now(UTC)

    def advance(self, delta: timedelta) -> datetime:
        time.sleep(max(delta.total_seconds(), 0.0))
        return self.now()

    def advance_to(self, moment: datetime) -> datetime:
        return self.advance(moment - self.now())

    @property
    def elapsed(self) -> timedelta:
        return self.now() - self.start
