"""Kubernetes resource quantities ("500m", "8", "60Gi", "129e6") as exact integers.

The planner works in integers only: cpu in millicores, memory in bytes, GPUs and pods
as counts. Like Kubernetes, fractional values are rounded up (a request of 0.1m cpu
takes 1m), so the planner never under-counts a request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal

from squall.planner.text import kind, shown

_DECIMAL_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_BINARY_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
# The exponent alternative comes first so that "1E3" is 1000 while "1E" is one exa.
# Digits are ASCII ones only, as Kubernetes reads a quantity: `\d` would take other
# scripts' digits (Arabic-Indic, fullwidth), which the API server refuses when the object is created.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exponent>[eE][+-]?[0-9]{1,3})|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
# Kubernetes itself cannot represent more than a signed 64-bit count of its units.
_LARGEST = Decimal(2**63 - 1)
_LONGEST_TEXT = 64
_REMEMBERED = 4096
_EXAMPLES = "a number with an optional suffix, e.g. 500m, 8, 1.5, 60Gi, 129e6"


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a Kubernetes quantity; ValueError says what was wrong."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {shown(value)}: expected {_EXAMPLES}")
    if isinstance(value, int):
        return _within_range(Decimal(value), value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"invalid quantity {shown(value)}: not a finite number")
        return _within_range(Decimal(repr(value)), value)
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {shown(value)} ({kind(value)}): expected {_EXAMPLES}")
    text = value.strip()
    if not text:
        raise ValueError(f"invalid quantity {shown(value)}: empty, expected {_EXAMPLES}")
    if len(text) > _LONGEST_TEXT:
        raise ValueError(f"invalid quantity {text[:20]!r}...: longer than {_LONGEST_TEXT} characters")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid quantity {shown(value)}: expected {_EXAMPLES}")
    number = Decimal(match["number"])
    if match["exponent"] is not None:
        number = number.scaleb(int(match["exponent"][1:]))
    elif match["suffix"] in _BINARY_SUFFIXES:
        number *= _BINARY_SUFFIXES[match["suffix"]]
    else:
        number *= _DECIMAL_SUFFIXES[match["suffix"] or ""]
    return _within_range(number, value)


def _remembered(parse: Callable[[str | int | float], int]) -> Callable[[str | int | float], int]:
    """The same parse, remembering what each text it was given came to.

    A cluster's objects write the same few quantities over and over ("8", "16Gi"),
    and parsing one takes a regular expression and Decimal arithmetic. Only texts
    are remembered (1 and True hash alike), and only so many.
    """
    known: dict[str, int] = {}

    @functools.wraps(parse)
    def remembered(value: str | int | float) -> int:
        if type(value) is not str:
            return parse(value)
        amount = known.get(value)
        if amount is None:
            amount = parse(value)
            if len(known) < _REMEMBERED:
                known[value] = amount
        return amount

    return remembered


@_remembered
def parse_cpu_millicores(value: str | int | float) -> int:
    """CPU in millicores, rounded up: "500m" -> 500, "1.5" -> 1500, 2 -> 2000."""
    return _ceil(_non_negative(parse_quantity(value), value) * 1000)


@_remembered
def parse_memory_bytes(value: str | int | float) -> int:
    """Memory (or storage) in bytes, rounded up: "60Gi", "129e6", "128974848"."""
    return _ceil(_non_negative(parse_quantity(value), value))


@_remembered
def parse_whole_count(value: str | int | float) -> int:
    """A count that must be whole, as GPUs and pods are: "8", 1, "1k"."""
    quantity = _non_negative(parse_quantity(value), value)
    if quantity != quantity.to_integral_value():
        raise ValueError(f"invalid count {shown(value)}: must be a whole number")
    return int(quantity)


def format_cpu(millicores: int) -> str:
    """Millicores as Kubernetes writes them: 4000 -> "4", 500 -> "500m"."""
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores}m"


def format_memory(size: int) -> str:
    """Bytes in the largest binary unit that divides them: 17179869184 -> "16Gi"."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_BINARY_SUFFIXES[suffix])
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def _within_range(quantity: Decimal, original: object) -> Decimal:
    if abs(quantity) > _LARGEST:
        raise ValueError(f"invalid quantity {shown(original)}: too large")
    return quantity


def _non_negative(quantity: Decimal, original: object) -> Decimal:
    if quantity < 0:
        raise ValueError(f"invalid quantity {shown(original)}: must not be negative")
    return quantity


def _ceil(quantity: Decimal) -> int:
    return int(quantity.to_integral_value(rounding=ROUND_CEILING))
