"""Jobs queue -> intake. Partial batch response: only failed messages come back."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from squall.core.errors import SquallError
from squall.handlers.observability import logger, metrics, traced
from squall.runtime import services
from squall.services.intake import MalformedMessage

# A batch whose every record failed still answers with a partial response, so that
# each message keeps its own retry count on its way to the dead-letter queue.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@logger.inject_lambda_context
@traced
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    app = services(metrics)
    intake = app.intake

    def record_handler(record: SQSRecord) -> None:
        try:
            # SenderId: the unique id (and session) of the principal that sent the message.
            sender_id = record.attributes.get("SenderId")
            intake.handle(body=record.body, message_id=record.message_id, sender_id=sender_id)
        except MalformedMessage as exc:
            # Fails this message only; after the queue's retries it lands in the DLQ.
            logger.error("malformed message", message_id=record.message_id, error=str(exc))
            raise

    response: dict[str, Any] = process_partial_response(  # type: ignore[assignment]
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    if intake.waiting:
        try:
            app.scale_requests.request_scale_check(reason="jobs submitted", job_ids=intake.waiting)
        except SquallError as exc:
            # The schedule runs a scale check within a minute anyway: not worth a redelivery.
            logger.warning("scale check request failed", error=str(exc))
    return response
