"""Auto Scaling lifecycle actions (EventBridge) -> drain before terminate, wait before launch."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from squall.core.asg_events import InvalidEventError, parse_lifecycle_event
from squall.handlers.observability import logger, metrics, traced
from squall.runtime import services


@logger.inject_lambda_context
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        parsed = parse_lifecycle_event(event)
    except InvalidEventError as exc:
        # Retrying cannot fix the event; the log keeps it, with what is wrong.
        logger.error("invalid lifecycle event", error=str(exc), event=event)
        return {"outcome": "invalid", "error": str(exc)}
    return services(metrics).lifecycle.on_lifecycle_event(parsed).to_dict()
