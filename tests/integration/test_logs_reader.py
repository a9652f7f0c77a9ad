"""squall logs' reader: a job's streams in the log agent's layout, read from CloudWatch Logs on moto."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from squall.adapters.aws.job_store import DynamoJobStore
from squall.adapters.aws.logs import CloudWatchLogReader, LogAccessDenied
from squall.cli.follow.logs import FollowSettings, LogFollower, print_logs, replica_names
from squall.core.errors import NotFoundError, RetryableError
from squall.core.jobs import Job, JobStatus
from tests.outputs_helpers import GROUP, START, SteppingClock, move, put_lines, record_job, stream_name

JOB = "gan-1a2b3c4d"


@pytest.fixture
def aws(jobs_table: Any) -> tuple[Any, DynamoJobStore]:
    logs = boto3.client("logs", region_name="us-west-2")
    logs.create_log_group(logGroupName=GROUP)
    return logs, DynamoJobStore(jobs_table, "jobs")


@pytest.fixture
def recorded(aws: tuple[Any, DynamoJobStore]) -> tuple[Any, DynamoJobStore]:
    """The logs and the job store, with JOB recorded."""
    logs, store = aws
    record_job(store, JOB)
    return logs, store


def follower(logs: Any, store: DynamoJobStore, job_id: str = JOB, **fields: Any) -> LogFollower:
    job = store.get(job_id)
    assert job is not None
    return LogFollower(
        source=CloudWatchLogReader(logs, GROUP),
        job_id=job.id,
        namespace=job.namespace,
        replicas=replica_names(job),
        **fields,
    )


def read(logs: Any, store: DynamoJobStore, **fields: Any) -> list[str]:
    out = io.StringIO()
    print_logs(follower(logs, store, **fields), out=out)
    return out.getvalue().splitlines()


def at(seconds: float) -> Any:
    return START + timedelta(seconds=seconds)


def running_with_one_line(logs: Any, store: DynamoJobStore) -> tuple[dict[str, Job], str]:
    """JOB running, its chief's stream holding "line 1": the job (in a dict a test's clock steps
    update) and the chief's stream."""
    job = move(store, record_job(store, JOB), JobStatus.RUNNING, "Started", at=at(0))
    chief = stream_name(f"{JOB}-chief-0-xk2q9")
    put_lines(logs, chief, [(at(0), "line 1")])
    return {"job": job}, chief


@pytest.mark.timeout(120)
def test_every_page_of_every_stream_is_read_past_a_group_of_many_streams(
    recorded: tuple[Any, DynamoJobStore],
) -> None:
    # given: 25,000 lines in the chief's stream (three GetLogEvents pages), and the job's
    # streams behind 130 other streams in name order (three DescribeLogStreams pages)
    logs, store = recorded
    for i in range(130):
        put_lines(logs, stream_name(f"other-{i:03d}-chief-0-bcdfg", host="aa-node"), [(at(0), "other")])
    lines = [(at(i / 100), f"step {i}") for i in range(25_000)]
    put_lines(logs, stream_name(f"{JOB}-chief-0-xk2q9", host="zz-node"), lines)

    # when
    printed = read(logs, store)

    # then
    assert len(printed) == 25_000
    assert printed[0] == "[chief-0] step 0" and printed[-1] == "[chief-0] step 24999"
    assert printed == [f"[chief-0] step {i}" for i in range(25_000)]


def test_replicas_interleave_by_time_and_a_restarted_container_reads_as_the_same_replica(
    recorded: tuple[Any, DynamoJobStore],
) -> None:
    logs, store = recorded
    put_lines(
        logs,
        stream_name(f"{JOB}-chief-0-xk2q9", container_id="aaaa"),
        [(at(0), "chief up"), (at(4), "chief crashed")],
    )
    # the kubelet restarted the container: a new container id, a new stream, the same pod
    put_lines(logs, stream_name(f"{JOB}-chief-0-xk2q9", container_id="bbbb"), [(at(6), "chief again")])
    put_lines(
        logs, stream_name(f"{JOB}-worker-0-b4n7z", host="ip-10-0-2-9"), [(at(1), "w0 up"), (at(5), "w0 step")]
    )
    put_lines(logs, stream_name(f"{JOB}-worker-1-m8v2c"), [(at(2), "w1 up")])

    assert read(logs, store) == [
        "[chief-0] chief up",
        "[worker-0] w0 up",
        "[worker-1] w1 up",
        "[chief-0] chief crashed",
        "[worker-0] w0 step",
        "[chief-0] chief again",
    ]
    assert read(logs, store, replica="worker-0") == ["[worker-0] w0 up", "[worker-0] w0 step"]


def test_other_teams_and_look_alike_jobs_are_never_read(recorded: tuple[Any, DynamoJobStore]) -> None:
    logs, store = recorded
    put_lines(logs, stream_name(f"{JOB}-chief-0-xk2q9"), [(at(0), "ours")])
    # the same pod name in another team's namespace
    put_lines(logs, stream_name(f"{JOB}-chief-0-xk2q9", namespace="team-vision"), [(at(1), "theirs")])
    # a job whose id starts with ours and one of its replicas
    put_lines(logs, stream_name(f"{JOB}-chief-0-worker-0-bcdfg"), [(at(2), "a look-alike job")])
    # another container of our pod (a sidecar), and a stream of some other layout
    sidecar = stream_name(f"{JOB}-chief-0-xk2q9").replace("_trainer-", "_istio-proxy-")
    put_lines(logs, sidecar, [(at(3), "sidecar")])
    put_lines(logs, "kube-proxy-ip-10-0-1-7", [(at(4), "not a container stream")])

    assert read(logs, store) == ["[chief-0] ours"]


def test_since_keeps_only_later_lines_and_the_agents_json_envelope_is_unwrapped(
    recorded: tuple[Any, DynamoJobStore],
) -> None:
    logs, store = recorded
    put_lines(
        logs,
        stream_name(f"{JOB}-chief-0-xk2q9"),
        [
            (at(0), "early"),
            (at(600), '{"log":"from the agent\\n","stream":"stdout","kubernetes":{"pod_name":"x"}}'),
            (at(601), "two\nlines"),
        ],
    )
    assert read(logs, store, since=at(300)) == [
        "[chief-0] from the agent",
        "[chief-0] two",
        "[chief-0] lines",
    ]


def test_follow_prints_new_lines_and_new_streams_until_the_job_is_final(
    aws: tuple[Any, DynamoJobStore],
) -> None:
    # given a running job with one stream
    logs, store = aws
    state, chief = running_with_one_line(logs, store)

    def finish() -> None:
        state["job"] = move(store, state["job"], JobStatus.SUCCEEDED, "Completed", at=at(10))

    clock = SteppingClock(
        now_at=at(1),
        steps=[
            lambda: put_lines(logs, chief, [(at(2), "line 2")]),
            # a worker's stream appears later: found at the next listing
            lambda: put_lines(logs, stream_name(f"{JOB}-worker-0-b4n7z"), [(at(3), "worker line")]),
            lambda: None,
            finish,
            # shipped by the agent after the job was final: still printed
            lambda: put_lines(logs, chief, [(at(11), "last words")]),
        ],
    )
    out = io.StringIO()

    # when
    count = print_logs(
        follower(logs, store),
        out=out,
        follow=True,
        store=store,
        clock=clock,
        settings=FollowSettings(poll=2.0, refresh=4.0, grace=6.0),
    )

    # then: every line once, and the loop ended on its own, on virtual time
    assert out.getvalue().splitlines() == [
        "[chief-0] line 1",
        "[chief-0] line 2",
        "[worker-0] worker line",
        "[chief-0] last words",
    ]
    assert count == 4
    assert 4 <= len(clock.slept) <= 10, clock.slept


def test_a_missing_group_and_denied_access_are_squall_errors(recorded: tuple[Any, DynamoJobStore]) -> None:
    logs, _ = recorded
    with pytest.raises(NotFoundError, match="/aws/containerinsights/other/application"):
        list(CloudWatchLogReader(logs, "/aws/containerinsights/other/application").streams())

    denied = boto3.client("logs", region_name="us-west-2")
    with Stubber(denied) as stub:
        stub.add_client_error(
            "describe_log_streams", service_error_code="AccessDeniedException", http_status_code=400
        )
        with pytest.raises(LogAccessDenied):
            list(CloudWatchLogReader(denied, GROUP).streams())
        stub.add_client_error(
            "get_log_events", service_error_code="AccessDeniedException", http_status_code=400
        )
        with pytest.raises(LogAccessDenied):
            CloudWatchLogReader(denied, GROUP).read("s", start=None, token=None)


def test_the_stream_listing_is_bounded(aws: tuple[Any, DynamoJobStore]) -> None:
    logs, _ = aws
    for i in range(60):
        put_lines(logs, f"stream-{i:02d}", [(at(0), "x")])
    reader = CloudWatchLogReader(logs, GROUP, max_streams=55)
    assert len(list(reader.streams())) == 55
    assert reader.truncated


class Throttled:
    """The reader, throttled on the given calls to `read` (counted from 1)."""

    def __init__(self, reader: CloudWatchLogReader, failing: set[int]) -> None:
        self._reader = reader
        self.group = reader.group
        self.failing = failing
        self.calls = 0

    @property
    def truncated(self) -> bool:
        return self._reader.truncated

    def streams(self) -> Any:
        return self._reader.streams()

    def read(self, stream: str, *, start: Any, token: str | None) -> Any:
        self.calls += 1
        if self.calls in self.failing:
            raise RetryableError("reading log stream: ThrottlingException: Rate exceeded")
        return self._reader.read(stream, start=start, token=token)


def test_a_throttled_read_while_following_is_tried_again_and_loses_no_line(
    aws: tuple[Any, DynamoJobStore],
) -> None:
    logs, store = aws
    state, chief = running_with_one_line(logs, store)
    clock = SteppingClock(
        now_at=at(1),
        steps=[
            lambda: put_lines(logs, chief, [(at(2), "line 2")]),
            lambda: state.update(
                job=move(store, state["job"], JobStatus.FAILED, "ApplicationError", at=at(4))
            ),
        ],
    )
    source = Throttled(CloudWatchLogReader(logs, GROUP), failing={3, 4})
    warnings: list[str] = []
    reader = follower(logs, store, on_warning=warnings.append)
    reader.source = source
    out = io.StringIO()
    print_logs(
        reader, out=out, follow=True, store=store, clock=clock, settings=FollowSettings(poll=1, grace=0)
    )
    assert out.getvalue().splitlines() == ["[chief-0] line 1", "[chief-0] line 2"]
    assert len(warnings) == 2 and "trying again in 1 s" in warnings[0]
