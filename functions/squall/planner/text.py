"""How an error message names a value it refuses: its kind, and the value cut short.

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
