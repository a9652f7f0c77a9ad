"""What every page reads: the SDK Client, the session's token and whether actions are allowed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from flask import current_app

if TYPE_CHECKING:
    from squall.cli.client import Client

EXTENSION = "squall"
PAGE_SIZE = 50  # rows a list page shows; a page never reads more than it shows (and one more)


@dataclass(frozen=True)
class ConsoleContext:
    client: Client
    token: str
    allow_actions: bool = False
    page_size: int = PAGE_SIZE
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


def current() -> ConsoleContext:
    """The console's context, inside a request."""
    context: ConsoleContext = current_app.extensions[EXTENSION]
    return context
