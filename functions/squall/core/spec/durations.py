"""Durations in the job spec's grammar: '6h', '1h30m', '90s', '2d', or a number of seconds."""

from __future__ import annotations

from datetime import timedelta

from squall.core.spec.limits import DURATION

MAX_DURATION_SECONDS = int(timedelta.max.total_seconds())


def parse_duration(value: str | int) -> timedelta:
    """'6h', '1h30m', '90s', '2d' or a number of seconds."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("must be a duration such as '6h', '30m' or '1h30m'")
    if isinstance(value, int):
        seconds = value
    else:
        match = DURATION.fullmatch(value)
        if not value or not match:
            raise ValueError(f"must be a duration such as '6h', '30m' or '1h30m', got {value[:40]!r}")
        days, hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if seconds <= 0:
        raise ValueError("must be positive")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError("is too long")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A duration in the spec's own grammar: 30d, 1h30m, 90s."""
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"
