"""Events in exactly the shape AWS hands them to Lambda, for the local runtime.

The local runtime feeds the same handlers Lambda runs; these builders produce the
event documents the SQS event source mapping and EventBridge would deliver, the
context object Lambda passes, the functions' names, and the kill that ends an
invocation half way.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from squall.local.aws import ACCOUNT

FUNCTION_PREFIX = "squall"
HANDLERS = ("submit", "scale", "reconcile", "lifecycle", "drain")


def function_name(handler: str) -> str:
    """The Lambda function running a handler, as the local deployment names it."""
    return f"{FUNCTION_PREFIX}-{handler}"


class InvocationKilled(BaseException):
    """A function invocation killed half way, as a Lambda timeout or out-of-memory kills it.

    A BaseException on purpose: the functions catch `Exception` to fail one message
    or one job at a time, and a killed process gives them no chance to do that.
    """


def sqs_event(messages: Sequence[Mapping[str, Any]], *, queue_arn: str, region: str) -> dict[str, Any]:
    """An SQS batch event from `receive_message` results (with Attributes=All).

    ``attributes.SenderId`` is who sent the message, as SQS reports it (the local
    queues put the sender a local send named there); message attributes keep the
    event source mapping's shape (stringValue, dataType).
    """
    records = []
    for message in messages:
        attributes = dict(message.get("Attributes") or {})
        records.append(
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": {
                    "ApproximateReceiveCount": attributes.get("ApproximateReceiveCount", "1"),
                    "SentTimestamp": attributes.get("SentTimestamp", "0"),
                    "SenderId": attributes.get("SenderId", ACCOUNT),
                    "ApproximateFirstReceiveTimestamp": attributes.get(
                        "ApproximateFirstReceiveTimestamp", "0"
                    ),
                },
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": value.get("DataType", "String"),
                    }
                    for name, value in (message.get("MessageAttributes") or {}).items()
                },
                "md5OfBody": message.get("MD5OfBody") or hashlib.md5(message["Body"].encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
        )
    return {"Records": records}


def eventbridge_event(
    *,
    source: str,
    detail_type: str,
    detail: Mapping[str, Any],
    at: datetime,
    region: str,
    resources: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "version": "0",
        "id": _new_id(),
        "detail-type": detail_type,
        "source": source,
        "account": ACCOUNT,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": list(resources),
        "detail": dict(detail),
    }


_IDS = random.Random()


def _new_id() -> str:
    """A version-4 UUID for an event or request id; unique, not secret (no system call per event)."""
    h = f"{_IDS.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


_VARIANT = "89ab"  # RFC 4122's variant bits: the 17th hex digit is one of these


def scheduled_event(*, rule: str, at: datetime, region: str) -> dict[str, Any]:
    return eventbridge_event(
        source="aws.events",
        detail_type="Scheduled Event",
        detail={},
        at=at,
        region=region,
        resources=[f"arn:aws:events:{region}:{ACCOUNT}:rule/{rule}"],
    )


@dataclass
class LocalContext:
    """The parts of Lambda's context object that powertools reads."""

    function_name: str
    timeout_ms: int = 60_000  # the function's timeout: an invocation here takes no virtual time
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: _new_id())
    region: str = "us-west-2"
    # The same for every local invocation: the unpublished version, one log stream.
    function_version: ClassVar[str] = "$LATEST"
    log_stream_name: ClassVar[str] = "local"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{ACCOUNT}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms
