"""How an error message names a value it refuses: its kind, and the value cut short; and how
a message counts things (`1 node`, `3 nodes`) and says what a job asks for.

In the planner (the lowest layer) because the planner's readers need it; the file
reader (core/documents.py) uses the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

SHOWN_LENGTH = 60


def kind(value: object) -> str:
    """What a reader of JSON or YAML calls a value: 'a string', 'a list', 'null', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def shown(value: object, limit: int = SHOWN_LENGTH) -> str:
    """A value as an error message shows it: its repr cut short; containers and huge integers described.

    A refused value may be a list of a million items, megabytes of text, or an integer
    too long for Python to print: the message must stay short and never fail itself.
    """
    if isinstance(value, Mapping):
        return f"an object of {len(value)} keys"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    if isinstance(value, int) and value.bit_length() > 3 * limit:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    # YAML reads an unquoted 2024-01-01 as a date (and with a time, a datetime): as written.
    text = str(value) if isinstance(value, date) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def counted(count: int, thing: str, things: str | None = None) -> str:
    """`1 node`, `3 nodes`, `0 GPUs`: a count with its noun, plural unless the count is one.

    `things` for a plural that is not the noun and an s (`1 replica Job`, `2 replica Jobs`
    need none; `1 copy`, `2 copies` do).
    """
    return f"{count} {thing if count == 1 else (things or thing + 's')}"


def amounts(*, gpus: int, cpu_millis: int, memory_bytes: int) -> str:
    """What a job asks for, in the terms it asks in: `8 GPUs`, or for a job without GPUs `4 CPUs and 16Gi of memory`."""
    if gpus:
        return counted(gpus, "GPU")
    from squall.planner.quantity import format_cpu, format_memory  # quantity imports this module

    cpus = counted(cpu_millis // 1000, "CPU") if cpu_millis % 1000 == 0 else f"{format_cpu(cpu_millis)} CPU"
    return f"{cpus} and {format_memory(memory_bytes)} of memory"
