"""`squall logs` against the local endpoint: the job's lines, its replicas, --since, and its errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from squall.core.jobs import JobStatus
from tests.outputs_helpers import START, LocalAws, local_aws, move, put_lines, record_job, squall, stream_name

JOB = "gan-1a2b3c4d"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LocalAws]:
    with local_aws(monkeypatch, tmp_path) as local:
        job = record_job(local.store, JOB)
        job = move(local.store, job, JobStatus.RUNNING, "Started", at=START)
        move(local.store, job, JobStatus.SUCCEEDED, "Completed", at=START + timedelta(minutes=30))
        put_lines(local.logs, stream_name(f"{JOB}-chief-0-xk2q9"), [(START, "chief starts")])
        put_lines(
            local.logs,
            stream_name(f"{JOB}-worker-0-b4n7z"),
            [(START + timedelta(seconds=1), "worker starts")],
        )
        recent = datetime.now(UTC) - timedelta(minutes=2)
        put_lines(local.logs, stream_name(f"{JOB}-chief-0-xk2q9"), [(recent, "chief, lately")])
        yield local


@pytest.mark.timeout(120)
def test_logs_prints_every_replica_by_time(aws: LocalAws, capsys: pytest.CaptureFixture[str]) -> None:
    assert squall("logs", JOB) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[chief-0] chief starts",
        "[worker-0] worker starts",
        "[chief-0] chief, lately",
    ]
    assert squall("logs", JOB, "--replica", "worker-0") == 0
    assert capsys.readouterr().out.splitlines() == ["[worker-0] worker starts"]
    assert squall("logs", JOB, "--since", "10m") == 0
    assert capsys.readouterr().out.splitlines() == ["[chief-0] chief, lately"]


@pytest.mark.timeout(120)
def test_follow_of_a_finished_job_drains_and_ends(aws: LocalAws, capsys: pytest.CaptureFixture[str]) -> None:
    assert squall("logs", JOB, "--follow", "--since", "2h") == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


@pytest.mark.timeout(120)
def test_logs_errors_say_what_is_wrong(
    aws: LocalAws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert squall("logs", "nope") == 1
    assert "no job nope" in capsys.readouterr().err
    assert squall("logs", JOB, "--since", "yesterday") == 2
    assert "--since: expected a duration" in capsys.readouterr().err
    assert squall("logs", JOB, "--replica", "worker-9") == 2
    assert "its replicas: chief-0, worker-0, worker-1" in capsys.readouterr().err
    monkeypatch.setenv("SQUALL_CLUSTER_NAME", "elsewhere")
    assert squall("logs", JOB) == 1
    err = capsys.readouterr().err
    assert "/aws/containerinsights/elsewhere/application" in err and "no such log group" in err
    monkeypatch.delenv("SQUALL_TABLE_NAME")
    assert squall("logs", JOB) == 2
    assert "SQUALL_TABLE_NAME is not set" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_a_job_without_streams_yet_says_so(aws: LocalAws, capsys: pytest.CaptureFixture[str]) -> None:
    # placed in the cluster (admission created its pods), nothing shipped yet
    record_job(aws.store, "fresh-00000001", cluster="squall", region="us-west-2")
    assert squall("logs", "fresh-00000001") == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no log streams of job fresh-00000001" in captured.err
    # still in the queue: no cluster has its pods yet
    record_job(aws.store, "queued-00000001")
    assert squall("logs", "queued-00000001") == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "not placed in a cluster yet, so it has no logs yet" in captured.err


@pytest.mark.timeout(120)
def test_logs_read_the_jobs_cluster_group_in_that_clusters_region(
    aws: LocalAws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given two clusters, and a group of gpu-east's name in both regions (only us-east-1's is gpu-east's)
    from squall.core.logstreams import log_group
    from squall.local.aws import client

    monkeypatch.setenv(
        "SQUALL_CLUSTERS",
        json.dumps(
            [{"name": "gpu-west", "region": "us-west-2"}, {"name": "gpu-east", "region": "us-east-1"}]
        ),
    )
    group, job_id = log_group("gpu-east"), "east-00000001"
    for region in ("us-east-1", "us-west-2"):
        logs = client("logs", aws.endpoint, region=region)
        logs.create_log_group(logGroupName=group)
        put_lines(logs, stream_name(f"{job_id}-chief-0-xk2q9"), [(START, f"from {region}")], group=group)
    job = record_job(aws.store, job_id, cluster="gpu-east", region="us-east-1")
    move(aws.store, job, JobStatus.RUNNING, "Started", at=START)

    # when
    assert squall("logs", job_id, "--replica", "chief-0") == 0

    # then
    assert capsys.readouterr().out.splitlines() == ["[chief-0] from us-east-1"]
