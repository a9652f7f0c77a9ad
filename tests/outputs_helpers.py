"""Helpers for the tests of a job's outputs (squall logs, watch, tensorboard): records, streams, a clock."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from squall.core.jobs import Job, JobStatus, new_job, transition
from squall.core.logstreams import ContainerStream, log_group
from squall.core.spec import parse_spec, recorded

TEAMS = {"research": "team-research", "vision": "team-vision"}
IMAGE = "registry.example.com/squall/tf-trainer:1.0"
GROUP = log_group("squall")
# CloudWatch Logs (and moto) take events from the last 14 days only: the tests run an hour ago.
START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def spec_record(**fields: Any) -> dict[str, Any]:
    data = {
        "name": "gan",
        "team": "research",
        "image": IMAGE,
        "replicas": {"chief": 1, "worker": {"count": 2}},
    } | fields
    spec = parse_spec(data, teams=TEAMS, registries=["registry.example.com/squall"])
    return recorded(spec)


def record_job(
    store: Any,
    job_id: str,
    *,
    team: str = "research",
    at: datetime = START,
    spec: dict[str, Any] | None = None,
    **fields: Any,
) -> Job:
    job, event = new_job(
        job_id=job_id,
        name="gan",
        team=team,
        namespace=TEAMS[team],
        at=at,
        spec=spec if spec is not None else spec_record(team=team),
        replicas=3,
        gpus=0,
        **fields,
    )
    store.create(job, event)
    return job


def move(store: Any, job: Job, to: JobStatus, reason: str, *, at: datetime, message: str = "") -> Job:
    updated, event = transition(job, to=to, reason=reason, at=at, message=message)
    store.save(updated, event)
    return updated


def stream_name(
    pod: str, *, namespace: str = "team-research", host: str = "ip-10-0-1-7", container_id: str = "ab12"
) -> str:
    return ContainerStream(
        host=host, pod=pod, namespace=namespace, container="trainer", container_id=container_id
    ).name


def put_lines(logs: Any, stream: str, lines: list[tuple[datetime, str]], *, group: str = GROUP) -> None:
    """Create `stream` when missing and put `lines` (time, text) into it, in batches CloudWatch takes."""
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    events = [{"timestamp": int(at.timestamp() * 1000), "message": text} for at, text in lines]
    for start in range(0, len(events), 10_000):
        logs.put_log_events(
            logGroupName=group, logStreamName=stream, logEvents=events[start : start + 10_000]
        )


@dataclass
class SteppingClock:
    """A virtual clock for follow loops: `sleep` moves time and runs the next scripted step."""

    now_at: datetime = START
    steps: list[Callable[[], None]] = field(default_factory=list)
    slept: list[float] = field(default_factory=list)
    max_sleeps: int = 1000

    def now(self) -> datetime:
        return self.now_at

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if len(self.slept) > self.max_sleeps:
            raise AssertionError(f"the loop slept more than {self.max_sleeps} times")
        self.now_at += timedelta(seconds=seconds)
        if self.steps:
            self.steps.pop(0)()


@dataclass
class LocalAws:
    """The local endpoint (moto's server) with a jobs table and the cluster's log group."""

    endpoint: str
    store: Any
    logs: Any
    s3: Any


@contextlib.contextmanager
def local_aws(monkeypatch: Any, tmp_path: Any) -> Iterator[LocalAws]:
    from squall.adapters.aws.job_store import DynamoJobStore
    from squall.local.aws import client, create_resources, local_endpoint

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SQUALL_CLUSTER_NAME", raising=False)
    with local_endpoint() as endpoint:
        resources = create_resources(endpoint)
        monkeypatch.setenv("SQUALL_TABLE_NAME", resources.table_name)
        logs = client("logs", endpoint)
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_group(logGroupName=GROUP)  # create_resources may make it already
        yield LocalAws(
            endpoint=endpoint,
            store=DynamoJobStore(client("dynamodb", endpoint), resources.table_name),
            logs=logs,
            s3=client("s3", endpoint),
        )


def squall(*argv: str) -> int:
    """`squall ARGV` for the commands of squall/researcher_commands.py, in this process."""
    import argparse

    from squall.cli.researcher import add_researcher_commands

    root = argparse.ArgumentParser(prog="squall")
    add_researcher_commands(root.add_subparsers(dest="command", required=True))
    args = root.parse_args(list(argv))
    code: int = args.run(args)
    return code
