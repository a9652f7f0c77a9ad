"""Submit path cost against the local AWS endpoint, as a ratio to bare DynamoDB writes.

N specs go through the submit handler in SQS batches of 10 (record the job and its
event in one transaction, create the Kubernetes Job in the simulated cluster,
request one scale check per batch); the baseline is N bare `put_item` calls to the
same moto server in the same run. Goal: the submit path costs at most 3x.

    python benchmarks/bench_submit.py [N]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid

from squall.handlers import submit
from squall.jobs import JobStatus
from squall.local.lambda_events import LocalContext, sqs_event
from squall.local.runtime import LocalRuntime

SPEC = {
    "name": "bench",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
}


def batches(n: int) -> list[dict]:
    messages = [
        {"MessageId": str(uuid.uuid4()), "ReceiptHandle": "rh", "Body": json.dumps(SPEC), "Attributes": {}}
        for _ in range(n)
    ]
    return [
        sqs_event(
            messages[i : i + 10],
            queue_arn="arn:aws:sqs:us-west-2:123456789012:squall-jobs",
            region="us-west-2",
        )
        for i in range(0, n, 10)
    ]


def main(n: int = 1000, rounds: int = 3) -> float:
    submit_times, put_times = [], []
    with LocalRuntime.start() as local:
        dynamodb = local.store._client  # the same client the handler's store uses
        table = local.resources.table_name
        submit.handler(batches(10)[0], LocalContext(function_name="warm-up"))
        for round_number in range(rounds):
            events = batches(n)
            started = time.perf_counter()
            for event in events:
                response = submit.handler(event, LocalContext(function_name="squall-submit"))
                assert not response["batchItemFailures"], response
            submit_times.append(time.perf_counter() - started)

            started = time.perf_counter()
            for i in range(n):
                dynamodb.put_item(
                    TableName=table,
                    Item={
                        "pk": {"S": f"BARE#{round_number}-{i}"},
                        "sk": {"S": "META"},
                        "spec": {"S": json.dumps(SPEC)},
                    },
                )
            put_times.append(time.perf_counter() - started)
        jobs = len(local.store.list_by_status(JobStatus.QUEUED, limit=10**6))
    submit_s, put_s = statistics.median(submit_times), statistics.median(put_times)
    ratio = submit_s / put_s
    print(f"submit path: {n} specs in batches of 10: median {submit_s:.2f} s ({n / submit_s:.0f} jobs/s)")
    print(f"baseline:    {n} bare put_item calls:      median {put_s:.2f} s ({n / put_s:.0f} writes/s)")
    print(f"jobs recorded: {jobs} (expected {n * rounds + 10})")
    print(f"ratio submit/bare = {ratio:.2f}x (goal <= 3x)")
    return ratio


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
