"""Schedule, scale-check requests and launch-unsuccessful events -> one scale check."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from squall.handlers.observability import logger, metrics, traced
from squall.runtime import services


def trigger_of(event: dict[str, Any]) -> str:
    """What asked for this check, for the decision record."""
    detail_type = str(event.get("detail-type", ""))
    detail = event.get("detail") or {}
    if detail_type == "Scheduled Event":
        return "schedule"
    if detail_type == "Scale Check Requested":
        return f"requested:{detail.get('reason', '')}"
    if detail_type == "EC2 Instance Launch Unsuccessful":
        return f"launch-unsuccessful:{detail.get('AutoScalingGroupName', '')}"
    return f"other:{detail_type or 'unknown'}"


def asked_for(event: dict[str, Any]) -> list[str] | None:
    """The jobs a scale-check request names; None for other triggers or when it names only some."""
    if event.get("detail-type") != "Scale Check Requested":
        return None
    detail = event.get("detail") or {}
    job_ids = detail.get("jobIds")
    if not isinstance(job_ids, list) or not job_ids or detail.get("jobCount") != len(job_ids):
        return None
    if not all(isinstance(job_id, str) for job_id in job_ids):
        return None
    return job_ids


@logger.inject_lambda_context
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    result = services(metrics).scaler.check(trigger=trigger_of(event), asked_for=asked_for(event))
    return {
        "acted": result.acted,
        "plan": result.plan,
        "done": result.done,
        "skipped": result.skipped,
        "errors": result.errors,
        "fallbacks": result.fallbacks,
    }
