"""Argument types of the `squall` command's options: bounded, with errors naming what is allowed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

_Number = TypeVar("_Number", int, float)


def whole_number(low: int, high: int, *, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: an integer from `low` to `high`."""
    return _bounded(int, low, high, what=what, show=str)


def seconds(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds from `low` to `high`."""
    return _bounded(float, low, high, what="seconds", show="{:g}".format, unit=" seconds")


def _bounded(
    convert: Callable[[str], _Number],
    low: _Number,
    high: _Number,
    *,
    what: str,
    show: Callable[[_Number], str],
    unit: str = "",
) -> Callable[[str], _Number]:
    """An argparse type: `convert`'s value of the text, from `low` to `high` (shown with `show` and `unit`)."""

    def parse(text: str) -> _Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be from {show(low)} to {show(high)}{unit}, got {show(value)}"
            )
        return value

    return parse


port = whole_number(1, 65535, what="a port number")
