"""Logger, Metrics and Tracer for every handler, built once.

Every function logs, emits metrics and traces as the one service Squall is, so the
handlers share these rather than each building its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer

from squall.core.telemetry import NAMESPACE, SERVICE

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)

_Handler = TypeVar("_Handler", bound=Callable[..., object])


def traced(handler: _Handler) -> _Handler:
    """The handler in an X-Ray subsegment where tracing is on (in Lambda, unless
    POWERTOOLS_TRACE_DISABLED); as it is elsewhere, where a disabled tracer would only
    make and drop a dummy subsegment on every call (the local runtime, the replays)."""
    return handler if tracer.disabled else tracer.capture_lambda_handler(handler)  # type: ignore[return-value]
