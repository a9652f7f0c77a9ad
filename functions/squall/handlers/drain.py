"""Drain queue -> the next step of a drain or launch wait. Partial batch response."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.typing import LambdaContext

from squall.core.asg_events import DrainStepRecord
from squall.handlers.observability import logger, metrics, traced
from squall.runtime import services

# A batch whose every record failed still answers with a partial response, so that
# each message keeps its own retry count on its way to the dead-letter queue. A
# body that is not a step message fails its record only (and is dead-lettered).
processor = BatchProcessor(
    event_type=EventType.SQS, model=DrainStepRecord, raise_on_entire_batch_failure=False
)


@logger.inject_lambda_context
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    lifecycle = services(metrics).lifecycle
    # Should this invocation die half way, its messages still come back in time.
    lifecycle.lease(
        [str(record.get("receiptHandle", "")) for record in event.get("Records", [])],
        time_left=timedelta(milliseconds=context.get_remaining_time_in_millis()),
    )

    def record_handler(record: DrainStepRecord) -> None:
        # A failed step hands its receipt back to the queue to be retried soon.
        handled = lifecycle.step(record.body, receipt_handle=record.receiptHandle)
        logger.debug("drain step", message_id=record.messageId, **handled.to_dict())

    response: dict[str, Any] = process_partial_response(  # type: ignore[assignment]
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return response
