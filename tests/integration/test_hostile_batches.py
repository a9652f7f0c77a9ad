"""One SQS batch of hostile bodies through the submit handler: each ends on its own, the others unaffected."""

from __future__ import annotations

import json
from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.handlers import submit
from squall.local.runtime import LocalScaleRequests
from tests.integration.conftest import IMAGE, World

VALID = {"name": "train", "team": "research", "image": IMAGE}
BODIES = {
    "valid": json.dumps(VALID),
    "byte-order-mark": "\ufeff" + json.dumps(VALID | {"name": "bom"}),
    "repeated-key": json.dumps(VALID)[:-1] + ', "priority": 1, "priority": 99}',
    "nul": json.dumps(VALID | {"env": {"A": "x\x00y"}}),
    "over-a-mebibyte": json.dumps(VALID | {"args": ["x" * 1_100_000]}),
    "not-json": "{this is not json",
    "int-past-pythons-limit": json.dumps(VALID)[:-1] + ', "priority": ' + "9" * 5_000 + "}",
}


def record(name: str, body: str) -> dict[str, Any]:
    return {
        "messageId": f"m-{name}",
        "receiptHandle": "handle",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SenderId": "AIDAEXAMPLE"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-west-2:123456789012:squall-jobs",
        "awsRegion": "us-west-2",
    }


@pytest.mark.timeout(60)
def test_each_hostile_body_ends_on_its_own_and_only_non_json_comes_back(
    world: World, installed: LocalScaleRequests, lambda_context: Any
) -> None:
    # given one batch of every kind
    event = {"Records": [record(name, body) for name, body in BODIES.items()]}
    # when
    response = submit.handler(event, lambda_context)
    # then only the bodies that are not JSON come back, to be retried and dead-lettered
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    assert failed == {"m-not-json", "m-int-past-pythons-limit"}
    ended = {job.message_id: job for job in world.store.list_all()}
    assert {m for m, job in ended.items() if job.status is JobStatus.QUEUED} == {
        "m-valid",
        "m-byte-order-mark",
    }
    assert {m for m, job in ended.items() if job.status is JobStatus.REJECTED} == {
        "m-repeated-key",
        "m-nul",
        "m-over-a-mebibyte",
    }
    assert [e["field"] for e in ended["m-repeated-key"].errors] == ["priority"]
    assert [e["field"] for e in ended["m-nul"].errors] == ["env.A"]
