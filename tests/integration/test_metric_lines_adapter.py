"""The metric lines' CloudWatch adapter on moto: a job's containers' streams, filtered, read page by page.

Events are written as the local runtime's log shipper writes them (local/processes.py: the
agent's JSON with the line under "log") and as plain text; the cursor resumes where a read
stopped, never reads an event twice and never skips one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from squall.adapters.aws.metric_lines import (
    FILTER_PATTERN,
    CloudWatchMetricLines,
    container_streams,
    event_lines,
)
from squall.core.errors import NotFoundError, RetryableError
from squall.core.jobs import new_job
from squall.core.logstreams import ContainerStream, log_group
from squall.core.metrics import merge

CLUSTER = "gpu-west"
GROUP = log_group(CLUSTER)
JOB = "train-1a2b"
NAMESPACE = "team-research"
ID_A = "a" * 64
ID_B = "b" * 64
ID_OLD = "c" * 64


class PodLister:
    """The one call the adapter makes of a cluster: the job's pods (the rest is no business here)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.asked: list[tuple[str | None, str | None]] = []

    def list_pods(
        self, *, namespace: str | None = None, job_id: str | None = None, node_name: str | None = None
    ) -> list[dict[str, Any]]:
        self.asked.append((namespace, job_id))
        return self.pods


def pod(name: str, node: str | None, *containers: tuple[str, str | None, str | None]) -> dict[str, Any]:
    """A pod with (container, id, last run's id) statuses; an id None: the status names none."""
    statuses = []
    for container, current, last in containers:
        status: dict[str, Any] = {"name": container, "ready": True}
        if current is not None:
            status["containerID"] = f"containerd://{current}"
        if last is not None:
            status["lastState"] = {"terminated": {"exitCode": 1, "containerID": f"containerd://{last}"}}
        statuses.append(status)
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"squall.io/job-id": JOB}},
        "spec": {"nodeName": node} if node else {},
        "status": {"containerStatuses": statuses},
    }


def stream(pod_name: str, container_id: str, *, host: str = "ip-10-0-1-5.ec2.internal") -> str:
    return ContainerStream(
        host=host, pod=pod_name, namespace=NAMESPACE, container="trainer", container_id=container_id
    ).name


def agent_message(text: str, name: str) -> str:
    """An event as local/processes.py ships a line (the log agent's envelope)."""
    return json.dumps(
        {
            "log": text,
            "stream": "stdout",
            "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "kubernetes": {"pod_name": name, "namespace_name": NAMESPACE, "container_name": "trainer"},
        },
        ensure_ascii=False,
    )


@pytest.fixture
def logs(aws_credentials: None) -> Any:
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("logs", region_name="us-west-2")
        client.create_log_group(logGroupName=GROUP)
        yield client


def put(logs: Any, name: str, messages: Sequence[str], *, at: int) -> None:
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=GROUP, logStreamName=name)
    events = [{"timestamp": at + i, "message": m} for i, m in enumerate(messages)]
    logs.put_log_events(logGroupName=GROUP, logStreamName=name, logEvents=events)


def now_ms() -> int:
    return int(time.time() * 1000) - 60_000


def job(cluster: str | None = CLUSTER) -> Any:
    record, _ = new_job(job_id=JOB, name="train", team="research", namespace=NAMESPACE, at=datetime.now(UTC))
    return dataclasses.replace(record, cluster=cluster)


def reader(logs: Any, pods: list[dict[str, Any]]) -> CloudWatchMetricLines:
    return CloudWatchMetricLines(clusters={CLUSTER: PodLister(pods)}, logs_client=lambda _cluster: logs)  # type: ignore[dict-item]


def test_lines_from_the_agent_s_json_and_plain_text_of_the_job_s_containers_only(logs: Any) -> None:
    # given a job's pod whose container restarted once (two streams), and another job's stream
    start = now_ms()
    pods = [pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, ID_OLD))]
    put(
        logs,
        stream("train-1a2b-worker-0", ID_OLD),
        [agent_message("squall-metric train/loss=0.9 step=1\n", "w0"), "epoch 1 done"],
        at=start,
    )
    put(
        logs,
        stream("train-1a2b-worker-0", ID_A),
        ["squall-metric train/loss=0.5 step=2", agent_message("no metric here\n", "w0")],
        at=start + 10,
    )
    put(logs, stream("other-9f9f-worker-0", ID_B), ["squall-metric train/loss=123"], at=start + 5)
    # when its lines are read
    page = reader(logs, pods).read(job(), cursor=None, limit=100)
    # then only its own metric lines come, the envelope unwrapped
    assert sorted(page.lines) == [
        "squall-metric train/loss=0.5 step=2",
        "squall-metric train/loss=0.9 step=1",
    ]
    assert page.cursor is not None
    loss = merge(None, page.lines, cursor=page.cursor).get("train/loss")
    assert loss is not None and loss.min.value == 0.5


def test_reading_goes_on_from_the_cursor_page_by_page_without_repeats_or_gaps(logs: Any) -> None:
    start = now_ms()
    pods = [
        pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, None)),
        pod("train-1a2b-worker-1", "ip-10-0-1-6.ec2.internal", ("trainer", ID_B, None)),
    ]
    put(
        logs,
        stream("train-1a2b-worker-0", ID_A),
        [f"squall-metric a={i} step={i}" for i in range(7)],
        at=start,
    )
    put(
        logs,
        stream("train-1a2b-worker-1", ID_B, host="ip-10-0-1-6.ec2.internal"),
        [agent_message(f"squall-metric b={i} step={i}\n", "w1") for i in range(5)],
        at=start,
    )
    metric_lines = reader(logs, pods)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = metric_lines.read(job(), cursor=cursor, limit=3)
        assert len(page.lines) <= 3
        seen += page.lines
        cursor = page.cursor
    assert sorted(seen) == sorted(
        [f"squall-metric a={i} step={i}" for i in range(7)]
        + [f"squall-metric b={i} step={i}" for i in range(5)]
    )
    # new lines later are read from where it stopped, once
    put(logs, stream("train-1a2b-worker-0", ID_A), ["squall-metric a=99 step=99"], at=start + 1000)
    page = metric_lines.read(job(), cursor=cursor, limit=3)
    assert page.lines == ("squall-metric a=99 step=99",)
    assert metric_lines.read(job(), cursor=page.cursor, limit=3).lines == ()


def test_events_at_the_cursor_s_millisecond_that_were_read_are_not_read_again(logs: Any) -> None:
    start = now_ms()
    name = stream("train-1a2b-worker-0", ID_A)
    pods = [pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, None))]
    logs.create_log_stream(logGroupName=GROUP, logStreamName=name)
    logs.put_log_events(
        logGroupName=GROUP,
        logStreamName=name,
        logEvents=[
            {"timestamp": start, "message": "squall-metric x=1"},
            {"timestamp": start, "message": "squall-metric x=2"},
        ],
    )
    metric_lines = reader(logs, pods)
    first = metric_lines.read(job(), cursor=None, limit=100)
    assert len(first.lines) == 2
    logs.put_log_events(
        logGroupName=GROUP,
        logStreamName=name,
        logEvents=[{"timestamp": start, "message": "squall-metric x=3"}],
    )
    assert metric_lines.read(job(), cursor=first.cursor, limit=100).lines == ("squall-metric x=3",)


def test_pods_without_container_ids_are_found_by_their_streams_prefix(logs: Any) -> None:
    # the local runtime's real pods: their statuses name no container id
    start = now_ms()
    pods = [pod("train-1a2b-worker-0", "localhost", ("trainer", None, None))]
    put(
        logs,
        stream("train-1a2b-worker-0", ID_A, host="localhost"),
        [agent_message("squall-metric s=1\n", "w0")],
        at=start,
    )
    put(logs, stream("train-1a2b-worker-01", ID_B, host="localhost"), ["squall-metric s=999"], at=start)
    page = reader(logs, pods).read(job(), cursor=None, limit=10)
    assert page.lines == ("squall-metric s=1",)


def test_nothing_to_read_leaves_the_cursor_as_it_was(logs: Any) -> None:
    pending = [pod("train-1a2b-worker-0", None, ("trainer", None, None))]
    assert reader(logs, pending).read(job(), cursor="kept", limit=10).cursor == "kept"
    assert reader(logs, []).read(job(cluster=None), cursor=None, limit=10).lines == ()
    # a named stream that does not exist yet (its container printed nothing): no lines, no error
    quiet = [pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, None))]
    assert reader(logs, quiet).read(job(), cursor=None, limit=10).lines == ()


def test_a_cursor_that_does_not_read_starts_from_the_first_event(logs: Any) -> None:
    start = now_ms()
    pods = [pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, None))]
    put(logs, stream("train-1a2b-worker-0", ID_A), ["squall-metric x=1"], at=start)
    for garbage in ("{", "[]", '{"t": "x", "k": 5}', '{"t": -5}'):
        assert reader(logs, pods).read(job(), cursor=garbage, limit=10).lines == ("squall-metric x=1",)


def test_the_request_is_one_bounded_filtered_call() -> None:
    client = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    pods = [pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, None))]
    with Stubber(client) as stub:
        stub.add_response(
            "filter_log_events",
            {
                "events": [
                    {
                        "logStreamName": stream("train-1a2b-worker-0", ID_A),
                        "timestamp": 5,
                        "message": "squall-metric y=2",
                        "eventId": "e1",
                    }
                ],
                "nextToken": "tok",
            },
            {
                "logGroupName": GROUP,
                "logStreamNames": [stream("train-1a2b-worker-0", ID_A)],
                "filterPattern": FILTER_PATTERN,
                "limit": 50,
                "startTime": 0,
            },
        )
        stub.add_response(
            "filter_log_events",
            {"events": []},
            {
                "logGroupName": GROUP,
                "logStreamNames": [stream("train-1a2b-worker-0", ID_A)],
                "filterPattern": FILTER_PATTERN,
                "limit": 50,
                "startTime": 0,
                "nextToken": "tok",
            },
        )
        metric_lines = CloudWatchMetricLines(
            clusters={CLUSTER: PodLister(pods)}, logs_client=lambda _c: client
        )  # type: ignore[dict-item]
        first = metric_lines.read(job(), cursor=None, limit=50)
        assert first.lines == ("squall-metric y=2",)
        metric_lines.read(job(), cursor=first.cursor, limit=50)
        stub.assert_no_pending_responses()


def test_an_expired_token_reads_on_from_the_time_read_up_to() -> None:
    client = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    name = stream("train-1a2b-worker-0", ID_A)
    pods = [pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, None))]
    metric_lines = CloudWatchMetricLines(clusters={CLUSTER: PodLister(pods)}, logs_client=lambda _c: client)  # type: ignore[dict-item]
    with Stubber(client) as stub:
        stub.add_response(
            "filter_log_events",
            {
                "events": [
                    {"logStreamName": name, "timestamp": 7, "message": "squall-metric y=2", "eventId": "e1"}
                ],
                "nextToken": "old",
            },
        )
        stub.add_client_error(
            "filter_log_events", "InvalidParameterException", "The given nextToken is expired"
        )
        stub.add_response(
            "filter_log_events",
            {
                "events": [
                    {"logStreamName": name, "timestamp": 7, "message": "squall-metric y=2", "eventId": "e1"},
                    {"logStreamName": name, "timestamp": 9, "message": "squall-metric y=3", "eventId": "e2"},
                ]
            },
            {
                "logGroupName": GROUP,
                "logStreamNames": [name],
                "filterPattern": FILTER_PATTERN,
                "limit": 10,
                "startTime": 7,
            },
        )
        first = metric_lines.read(job(), cursor=None, limit=10)
        assert metric_lines.read(job(), cursor=first.cursor, limit=10).lines == ("squall-metric y=3",)


@pytest.mark.parametrize(
    ("code", "error"),
    [("ThrottlingException", RetryableError), ("ResourceNotFoundException", NotFoundError)],
)
def test_errors_are_squall_s(code: str, error: type[Exception]) -> None:
    client = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    pods = [pod("train-1a2b-worker-0", "ip-10-0-1-5.ec2.internal", ("trainer", ID_A, None))]
    metric_lines = CloudWatchMetricLines(clusters={CLUSTER: PodLister(pods)}, logs_client=lambda _c: client)  # type: ignore[dict-item]
    with Stubber(client) as stub:
        stub.add_client_error("filter_log_events", code, "The specified log group does not exist.")
        with pytest.raises(error):
            metric_lines.read(job(), cursor=None, limit=10)


def test_container_streams_come_from_statuses_and_skip_what_is_no_stream_name() -> None:
    pods = [
        pod("w-0", "node-a", ("trainer", ID_A, ID_OLD), ("sidecar", "not-hex!", None)),
        pod("w-1", "node-b", ("trainer", None, None)),
        {"metadata": {"name": "w-2"}, "spec": {"nodeName": "node-c"}},  # no namespace: left out
    ]
    names, unnamed = container_streams(pods)
    assert names == sorted(
        [
            ContainerStream("node-a", "w-0", NAMESPACE, "trainer", ID_A).name,
            ContainerStream("node-a", "w-0", NAMESPACE, "trainer", ID_OLD).name,
        ]
    )
    assert [p["metadata"]["name"] for p in unnamed] == ["w-1"]


def test_an_event_s_lines_are_those_with_the_prefix_and_bounded() -> None:
    assert event_lines(agent_message("a\nsquall-metric x=1\nb\n", "w")) == ["squall-metric x=1"]
    assert event_lines("squall-metric y=2") == ["squall-metric y=2"]
    assert event_lines('{"log": 5, "squall-metric": 1}') == ['{"log": 5, "squall-metric": 1}']
    huge = event_lines("squall-metric " + "x" * 100_000)
    assert len(huge) == 1 and len(huge[0]) == 1025
    assert len(event_lines("squall-metric a=1\n" * 1000)) == 64


def test_a_named_stream_that_does_not_exist_yet_is_left_out_of_the_read() -> None:
    # CloudWatch refuses the whole request when one named stream does not exist (a container
    # that printed nothing has none): the streams that exist are read.
    client = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    printed, silent = stream("train-1a2b-worker-0", ID_A), stream("train-1a2b-worker-0", ID_B)
    pods = [
        pod(
            "train-1a2b-worker-0",
            "ip-10-0-1-5.ec2.internal",
            ("trainer", ID_A, None),
            ("trainer", ID_B, None),
        )
    ]
    metric_lines = CloudWatchMetricLines(clusters={CLUSTER: PodLister(pods)}, logs_client=lambda _c: client)  # type: ignore[dict-item]
    with Stubber(client) as stub:
        stub.add_client_error(
            "filter_log_events", "ResourceNotFoundException", "The specified log stream does not exist."
        )
        stub.add_response(
            "describe_log_streams",
            {"logStreams": [{"logStreamName": printed}]},
            {
                "logGroupName": GROUP,
                "logStreamNamePrefix": "ip-10-0-1-5.ec2.internal-application.var.log.containers.train-1a2b-worker-0_team-research_",
                "limit": 50,
            },
        )
        stub.add_response(
            "filter_log_events",
            {
                "events": [
                    {"logStreamName": printed, "timestamp": 3, "message": "squall-metric z=1", "eventId": "e"}
                ]
            },
            {
                "logGroupName": GROUP,
                "logStreamNames": [printed],
                "filterPattern": FILTER_PATTERN,
                "limit": 10,
                "startTime": 0,
            },
        )
        assert metric_lines.read(job(), cursor=None, limit=10).lines == ("squall-metric z=1",)
        stub.assert_no_pending_responses()
    assert silent not in printed
