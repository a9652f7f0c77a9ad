"""Schedule -> reconcile every active job, and every live model service, with the cluster."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from squall.handlers.observability import logger, metrics, traced
from squall.runtime import services


@logger.inject_lambda_context
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = services(metrics).reconciler.run()
    serving = report.serving.as_dict() if report.serving is not None else None
    logger.info(
        "reconciled",
        transitions=dict(report.transitions),
        retries=report.retries,
        requeued=len(report.recreated),
        cleaned=len(report.cleaned),
        errors=len(report.errors),
        unreachable_clusters=report.unreachable_clusters,
        serving=serving,
    )
    return {
        "transitions": dict(report.transitions),
        "retries": report.retries,
        # jobs put back in the queue (their objects went missing after admission created them)
        "requeued": report.recreated,
        "cleaned": report.cleaned,
        "errors": report.errors,
        "unreachableClusters": report.unreachable_clusters,
        **({"serving": serving} if serving is not None else {}),
    }
