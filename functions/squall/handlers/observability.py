"""Logger, Metrics and Tracer for every handler, built once.

Every function logs, emits metrics and traces as the one service Squall is, so the
handlers share these rather than each building its own.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

from squall.core.telemetry import NAMESPACE, SERVICE

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)
