"""The clock the follow loops wait on: real time in the CLI, virtual time in tests."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class FollowClock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC now."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` (a virtual clock moves its time instead)."""
        ...


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))
