"""Reading the queue of 100,000 queued jobs from the job table's queue index.

N queued jobs, each item exactly as the store's create writes it (intake's record, its
queue shape and first event). Timed: `DynamoJobStore.queue()`, the scale check's read
of its queue (a paged Query of the sparse queue index and its INCLUDE projection).
The baseline, measured in the same run on the same jobs: reading their whole records
through the status index (`list_by_status(QUEUED)`), as admission would without the
queue index. Printed: both times, the ratio, the projected entry's average size, and
how many 1 MB pages and read units DynamoDB would serve for each.

Two stores answer:
- moto (`--jobs`, 2,000 by default), written with BatchWriteItem. Moto answers each
  page by passing over every item of the table, sorting the index and serialising
  slowly, and counts whole items (not projected ones) against its 1 MB page: its time
  grows with the square of the queue and says little of DynamoDB's, so its default is
  small; it checks the real semantics (order, projection, pages) end to end.
- DynamoDB's pages on the wire (`--wire-jobs`, 100,000 by default): a real boto3
  client whose Query requests are answered, before they are sent, with the pages
  DynamoDB would send (1 MB of projected items each, LastEvaluatedKey, the same JSON),
  so botocore's parsing, the paginator and the store's decoding all run as in the
  function. What it leaves out is the network: one round trip per page printed.

Times are wall and this process's CPU seconds (on a shared machine, CPU says more).
Also timed at both sizes: `replica_jobs` of every entry (what admission parses), the
first time and again (cached per entry, as a warm scale function reads it).

The jobs: four teams, 80% single-node jobs of 1-8 GPUs, 20% distributed (a chief, 2-7
workers, 0-2 parameter servers), priorities 0-100, one submission a second.

Run: .venv/bin/python benchmarks/bench_queue_read.py [--jobs 2000] [--wire-jobs 100000]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import resource
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import boto3
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from squall.adapters.aws.job_store import DynamoJobStore, creation_values, item_size, to_item
from squall.core.jobs import JobStatus, new_job
from squall.core.queue import (
    QUEUE_INDEX,
    QUEUE_INDEX_ATTRIBUTES,
    QUEUE_INDEX_PARTITION_KEY,
    QUEUE_INDEX_SORT_KEY,
    queue_key,
    queue_shape,
    replica_jobs,
)
from squall.core.spec import JobSpec, parse_spec
from squall.core.spec.parse import recorded
from squall.local.aws import create_table

T = TypeVar("T")
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
TEAMS = ("research", "vision", "speech", "ranking")
REGISTRY = "registry.example.com/squall"
PAGE_BYTES = 1024 * 1024  # DynamoDB's most per Query page
# DynamoDB counts this much more for each item of a global secondary index.
INDEX_ITEM_OVERHEAD = 100
STATUS_INDEX = "status-index"


def specs() -> list[JobSpec]:
    """A few kinds of job, as researchers submit them (ids and names vary per job)."""
    bodies: list[dict[str, Any]] = []
    for gpus in (1, 2, 4, 8):
        bodies.append({"resources": {"cpu": str(4 * gpus), "memory": f"{30 * gpus}Gi", "gpu": gpus}})
    for workers, ps in ((2, 0), (3, 1), (7, 2), (4, 2)):
        replicas: dict[str, Any] = {"chief": 1, "worker": workers}
        if ps:
            replicas["ps"] = {"count": ps, "resources": {"cpu": "4", "memory": "16Gi", "gpu": 0}}
        bodies.append(
            {
                "resources": {"cpu": "8", "memory": "60Gi", "gpu": 1},
                "replicas": replicas,
                "placement": {"regions": ["us-west-2", "us-east-1"], "spot": "never"},
            }
        )
    base = {
        "name": "train",
        "team": "research",
        "image": f"{REGISTRY}/tf-trainer:2.16",
        "command": ["python", "-m", "trainer"],
        "args": ["--epochs", "20", "--batch-size", "256"],
        "env": {"DATASET": "s3://datasets/imagenet/train"},
        "outputUri": "s3://squall-artifacts/outputs/",
        "checkpointUri": "s3://squall-artifacts/checkpoints/",
    }
    return [parse_spec(base | body, teams=TEAMS, registries=[REGISTRY]) for body in bodies]


def job_values(count: int, *, seed: int = 26) -> list[dict[str, Any]]:
    """`count` queued jobs' items as plain values, as DynamoJobStore.create writes them."""
    rng = random.Random(seed)
    kinds = specs()
    shapes = [
        queue_shape(s, job_id="shape", namespace="team") for s in kinds
    ]  # independent of id and namespace
    values = []
    for i in range(count):
        kind = rng.randrange(4) if rng.random() < 0.8 else 4 + rng.randrange(4)
        team = rng.choice(TEAMS)
        spec = kinds[kind].model_copy(
            update={"team": team, "name": f"train-{i}", "priority": rng.randint(0, 100)}
        )
        job, event = new_job(
            job_id=f"{spec.name}-{i:06x}",
            name=spec.name,
            team=team,
            namespace=f"team-{team}",
            at=T0 + timedelta(seconds=i),
            spec=recorded(spec),
            message_id=f"m-{i:08d}",
            gpus=spec.total_gpus(),
            replicas=len(spec.replica_list()),
            max_retries=spec.retries,
            submitted_by="AROAEXAMPLEID:researcher",
            priority=spec.priority,
            queue_shape=shapes[kind],
        )
        assert queue_key(job) is not None
        values.append(creation_values(job, event))
    return values


INDEX_KEYS = {
    STATUS_INDEX: ("gsi1pk", "gsi1sk"),
    QUEUE_INDEX: (QUEUE_INDEX_PARTITION_KEY, QUEUE_INDEX_SORT_KEY),
}


def projected(values: dict[str, Any]) -> dict[str, Any]:
    """The item's queue index entry: its table and index keys and the projected attributes."""
    names = ("pk", "sk", *INDEX_KEYS[QUEUE_INDEX], *QUEUE_INDEX_ATTRIBUTES)
    return {k: values[k] for k in names if values.get(k) is not None}


class Pages:
    """Query pages of one index as DynamoDB sends them: at most 1 MB of (projected) items each."""

    def __init__(self, index: str, items: list[dict[str, Any]]) -> None:
        self.bodies: list[bytes] = []
        self.starts: dict[str, int] = {}  # ExclusiveStartKey (canonical JSON) -> page number
        keys = ("pk", "sk", *INDEX_KEYS[index])
        page: list[dict[str, Any]] = []
        size = 0
        for n, item in enumerate(items):
            page.append(to_item(item))
            size += item_size(item)
            if size >= PAGE_BYTES or n == len(items) - 1:
                answer: dict[str, Any] = {"Items": page, "Count": len(page), "ScannedCount": len(page)}
                if n < len(items) - 1:
                    last = to_item({k: item[k] for k in keys})
                    answer["LastEvaluatedKey"] = last
                    self.starts[json.dumps(last, sort_keys=True)] = len(self.bodies) + 1
                self.bodies.append(json.dumps(answer).encode())
                page, size = [], 0


class _Raw(io.BytesIO):
    def stream(self, **_: Any) -> Any:
        yield self.read()


def wire_client(pages: dict[str, Pages], served: list[str]) -> Any:
    """A boto3 DynamoDB client whose Query requests `pages` answer before they are sent."""
    client = boto3.client("dynamodb", region_name="us-west-2")

    def answer(request: Any, **_: Any) -> AWSResponse:
        body = json.loads(request.body)
        index = pages[body["IndexName"]]
        start = body.get("ExclusiveStartKey")
        number = 0 if start is None else index.starts[json.dumps(start, sort_keys=True)]
        served.append(body["IndexName"])
        headers = {"Content-Type": "application/x-amz-json-1.0"}
        return AWSResponse(request.url, 200, headers, _Raw(index.bodies[number]))

    client.meta.events.register("before-send.dynamodb.Query", answer)
    return client


def timed(read: Callable[[], T]) -> tuple[tuple[float, float], T]:
    """(wall seconds, this process's CPU seconds) of `read`, and its result."""
    started, cpu = time.perf_counter(), time.process_time()
    result = read()
    return (time.perf_counter() - started, time.process_time() - cpu), result


def seconds(spent: tuple[float, float]) -> str:
    return f"{spent[0]:7.2f} s ({spent[1]:.2f} s of CPU)"


def measure(store: DynamoJobStore, count: int) -> dict[str, Any]:
    queue_s, entries = timed(lambda: store.queue())
    baseline_s, records = timed(lambda: store.list_by_status(JobStatus.QUEUED, limit=count))
    assert len(entries) == len(records) == count, (len(entries), len(records))
    assert [e.job_id for e in entries] == [r.id for r in records]
    before = rss_mb()
    cold_s, replicas = timed(lambda: [replica_jobs(e, qualify_cluster=True) for e in entries])
    kept = rss_mb() - before
    warm_s, _ = timed(lambda: [replica_jobs(e, qualify_cluster=True) for e in entries])
    return {
        "queue": queue_s,
        "baseline": baseline_s,
        "cold": cold_s,
        "warm": warm_s,
        "replicas": sum(len(r) for r in replicas),
        "kept": kept,
    }


def rss_mb() -> float:
    """This process's resident memory now (Linux), in MB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 1024**2


def report(title: str, count: int, times: dict[str, Any], values: list[dict[str, Any]]) -> None:
    entry_sizes = [item_size(projected(v)) for v in values]
    record_sizes = [item_size(v) for v in values]
    entry_bytes, record_bytes = sum(entry_sizes) / count, sum(record_sizes) / count
    print(f"-- {title}: {count} queued jobs")
    print(f"store.queue():                    {seconds(times['queue'])}")
    print(f"baseline list_by_status(QUEUED):  {seconds(times['baseline'])}: the same jobs' whole records")
    print(
        f"ratio queue / baseline:           {times['queue'][0] / times['baseline'][0]:7.2f} (CPU: "
        f"{times['queue'][1] / times['baseline'][1]:.2f})"
    )
    print(
        f"index entry {entry_bytes:.0f} bytes on average (largest {max(entry_sizes)}; "
        f"{entry_bytes + INDEX_ITEM_OVERHEAD:.0f} as DynamoDB counts index storage), "
        f"whole record {record_bytes:.0f} bytes"
    )
    print(
        f"DynamoDB pages: queue {math.ceil(sum(entry_sizes) / PAGE_BYTES)} "
        f"({sum(entry_sizes) / 8192:.0f} read units), baseline {math.ceil(sum(record_sizes) / PAGE_BYTES)} "
        f"({sum(record_sizes) / 8192:.0f} read units), eventually consistent"
    )
    print(
        f"replica_jobs of every entry ({times['replicas']:.0f} replicas): "
        f"{seconds(times['cold']).strip()} the first time, {seconds(times['warm']).strip()} again"
    )
    print(f"memory the ReplicaJobs (and the entries they are kept by) hold: {times['kept']:.0f} MB")


def on_moto(count: int) -> None:
    values = job_values(count)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        create_table(client, "jobs")
        items = [to_item(v) for v in values]
        for start in range(0, count, 25):
            batch = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
            client.batch_write_item(RequestItems={"jobs": batch})
        times = measure(DynamoJobStore(client, "jobs"), count)
    report("moto", count, times, values)


def on_the_wire(count: int) -> None:
    values = job_values(count)
    pages = {
        QUEUE_INDEX: Pages(QUEUE_INDEX, [projected(v) for v in values]),
        STATUS_INDEX: Pages(STATUS_INDEX, values),
    }
    served: list[str] = []
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    times = measure(DynamoJobStore(wire_client(pages, served), "jobs"), count)
    report("DynamoDB's pages on the wire (no network)", count, times, values)
    print(
        f"round trips: queue {served.count(QUEUE_INDEX)}, baseline {served.count(STATUS_INDEX)} "
        "(add one network round trip and DynamoDB's read of 1 MB for each)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2_000, help="queued jobs in moto")
    parser.add_argument("--wire-jobs", type=int, default=100_000, help="queued jobs in DynamoDB's pages")
    args = parser.parse_args()
    if args.jobs > 0:
        on_moto(args.jobs)
    if args.wire_jobs > 0:
        on_the_wire(args.wire_jobs)


if __name__ == "__main__":
    main()
