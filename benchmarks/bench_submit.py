"""Submit path cost against the local AWS endpoint, as a ratio to bare DynamoDB writes.

N specs go through the submit handler in SQS batches of 10 (parse and validate,
record the job with its first event in one conditional put, create the Kubernetes
Job in the simulated cluster, request one scale check per batch). The baseline is
N bare `put_item` calls to the same moto server in the same run, each phase from
an empty table. Goal: at most 3x.

    python benchmarks/bench_submit.py [N]
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from squall.core.jobs import JobStatus
from squall.handlers import submit
from squall.local.lambda_events import LocalContext, sqs_event
from squall.local.runtime import LocalRuntime

SPEC = {
    "name": "bench",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
}
QUEUE_ARN = "arn:aws:sqs:us-west-2:123456789012:squall-jobs"


def batches(n: int) -> list[dict[str, Any]]:
    messages = [
        {"MessageId": str(uuid.uuid4()), "ReceiptHandle": "rh", "Body": json.dumps(SPEC), "Attributes": {}}
        for _ in range(n)
    ]
    return [sqs_event(messages[i : i + 10], queue_arn=QUEUE_ARN, region="us-west-2") for i in range(0, n, 10)]


def timed(phase: Callable[[], None]) -> float:
    started = time.perf_counter()
    phase()
    return time.perf_counter() - started


def empty_table(local: LocalRuntime) -> None:
    dynamodb = local.store._client
    table = local.resources.table_name
    paginator = dynamodb.get_paginator("scan")
    for page in paginator.paginate(TableName=table, ProjectionExpression="pk, sk"):
        for item in page["Items"]:
            dynamodb.delete_item(TableName=table, Key=item)


def main(n: int = 1000) -> float:
    with LocalRuntime.start() as local:
        dynamodb = local.store._client  # the client the handler's store uses
        table = local.resources.table_name
        submit.handler(batches(10)[0], LocalContext(function_name="warm-up"))
        empty_table(local)

        events = batches(n)

        def submit_all() -> None:
            for event in events:
                response = submit.handler(event, LocalContext(function_name="squall-submit"))
                assert not response["batchItemFailures"], response

        submit_s = timed(submit_all)
        recorded = len(local.store.list_by_status(JobStatus.QUEUED, limit=10**6))
        empty_table(local)

        def put_all() -> None:
            for i in range(n):
                dynamodb.put_item(
                    TableName=table,
                    Item={"pk": {"S": f"BARE#{i}"}, "sk": {"S": "META"}, "spec": {"S": json.dumps(SPEC)}},
                )

        put_s = timed(put_all)
    ratio = submit_s / put_s
    print(f"submit path: {n} specs in batches of 10: {submit_s:.2f} s ({n / submit_s:.0f} jobs/s), {recorded} recorded")
    print(f"baseline:    {n} bare put_item calls:      {put_s:.2f} s ({n / put_s:.0f} writes/s)")
    print(f"ratio submit/bare put_item = {ratio:.2f}x (goal <= 3x: {'met' if ratio <= 3 else 'NOT met'})")
    return ratio


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
