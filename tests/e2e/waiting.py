"""Waiting on the wall clock for something a running runtime does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(what: Callable[[], Any], *, seconds: float = 90.0) -> Any:
    """What `what` gives once it gives something (asked every half second); fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := what():
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {seconds} s")
