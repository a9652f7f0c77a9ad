"""A run that changed nothing, as a warm process remembers it: what it saw, and until when.

The scale check and the reconcile run each keep one between runs: a later run that
reads the same before `until` (the earliest time rule or grace the last one waited
out) would decide the same again, and ends after its reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Quiet:
    seen: tuple[object, ...]
    until: datetime | None  # None: nothing is waited out; only a change to what is seen counts

    def holds(self, seen: tuple[object, ...], now: datetime) -> bool:
        return seen == self.seen and (self.until is None or now < self.until)
