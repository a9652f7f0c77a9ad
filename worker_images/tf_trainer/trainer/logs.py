"""JSON-lines logs on stdout: one event per line, fields not prose.

stdout carries only these lines, the ``squall-metric`` lines Squall reads a job's
metrics from, and the final ``metric=`` line, so a log shipper (or a test) can parse
it; TensorFlow's own C++ logging stays on stderr.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Mapping
from typing import Any

_FIELDS = "fields"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        event.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str)


class Logger:
    """``log.info("checkpoint saved", step=200)``: an event name and its fields."""

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def info(self, event: str, **fields: Any) -> None:
        self._logger.info(event, extra={_FIELDS: fields})

    def warning(self, event: str, **fields: Any) -> None:
        self._logger.warning(event, extra={_FIELDS: fields})

    def error(self, event: str, *, exc_info: bool = False, **fields: Any) -> None:
        self._logger.error(event, exc_info=exc_info, extra={_FIELDS: fields})


def get_logger(name: str) -> Logger:
    return Logger(name)


class _StdoutHandler(logging.Handler):
    """Writes to whatever sys.stdout is at the time (test runners swap it), and
    flushes every line, so a reader sees each event as it happens."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stdout.write(self.format(record) + "\n")
            sys.stdout.flush()
        except Exception:
            self.handleError(record)


def configure() -> None:
    """Route the trainer's loggers to stdout as JSON; idempotent."""
    root = logging.getLogger("trainer")
    if any(isinstance(h, _StdoutHandler) for h in root.handlers):
        return
    handler = _StdoutHandler()
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False


def emit_metric(name: str, value: float) -> None:
    """The line a sweep reads: exactly ``metric=<name> value=<v>``."""
    print(f"metric={name} value={value:.6g}", flush=True)


# What Squall looks for in a job's log streams: ``squall-metric name=value ... step=N``.
METRIC_PREFIX = "squall-metric"


def report_metrics(values: Mapping[str, float], *, step: int) -> None:
    """One ``squall-metric`` line, flushed at once: how a job reports metrics to Squall
    (a sweep's objective, early stopping, ``squall sweep``). A non-finite value is left
    out: Squall would ignore it, and the trainer stops on a non-finite loss anyway."""
    pairs = " ".join(f"{name}={value:.6g}" for name, value in values.items() if math.isfinite(value))
    if pairs:
        print(f"{METRIC_PREFIX} {pairs} step={step}", flush=True)
