"""When a job's run began and ended, read from its Kubernetes objects (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from squall.core.jobs import JobStatus
from squall.core.kubestatus import observe, parse_time

T = "2026-03-01T10:{:02d}:00Z"


def at(minute: int) -> datetime:
    return datetime(2026, 3, 1, 10, minute, tzinfo=UTC)


def labels(kind: str, index: int) -> dict[str, str]:
    return {"squall.io/job-id": "j", "squall.io/replica-type": kind, "squall.io/replica-index": str(index)}


def k8s_job(kind: str, index: int, *, started: int | None = 0, **status: Any) -> dict[str, Any]:
    if started is not None:
        status["startTime"] = T.format(started)
    return {"metadata": {"name": f"j-{kind}-{index}", "labels": labels(kind, index)}, "status": status}


def complete(minute: int) -> dict[str, Any]:
    return {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": T.format(minute)}]}


def pod(
    kind: str, index: int, *, running: int | None = None, ran: tuple[int, int] | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    phase = "Pending"
    if running is not None:
        state, phase = {"running": {"startedAt": T.format(running)}}, "Running"
    if ran is not None:
        state = {"terminated": {"exitCode": 0, "startedAt": T.format(ran[0]), "finishedAt": T.format(ran[1])}}
        phase = "Succeeded"
    return {
        "metadata": {"name": f"p-{kind}-{index}", "labels": labels(kind, index)},
        "status": {
            "phase": phase,
            "startTime": T.format(0),
            "containerStatuses": [{"name": "c", "state": state}],
        },
    }


def test_a_gang_runs_from_when_its_last_replica_started() -> None:
    seen = observe(
        expected_replicas=2,
        k8s_jobs=[k8s_job("worker", 0), k8s_job("worker", 1)],
        pods=[pod("worker", 0, running=3), pod("worker", 1, running=7)],
    )
    assert seen.status is JobStatus.RUNNING and seen.started_at == at(7)


def test_not_every_replica_started_means_no_start() -> None:
    seen = observe(
        expected_replicas=2,
        k8s_jobs=[k8s_job("worker", 0), k8s_job("worker", 1)],
        pods=[pod("worker", 0, running=3), pod("worker", 1)],
    )
    assert seen.status is JobStatus.QUEUED and seen.started_at is None


def test_a_run_that_ended_keeps_its_start_and_its_jobs_completion_time() -> None:
    seen = observe(
        expected_replicas=1,
        k8s_jobs=[k8s_job("worker", 0, **complete(9), completionTime=T.format(8))],
        pods=[pod("worker", 0, ran=(2, 8))],
    )
    assert (seen.status, seen.started_at, seen.finished_at) == (JobStatus.SUCCEEDED, at(2), at(8))


def test_without_a_completion_time_the_complete_conditions_time_is_the_end() -> None:
    seen = observe(expected_replicas=1, k8s_jobs=[k8s_job("worker", 0, **complete(9))], pods=[])
    # no pod left: the completed Job's startTime is its replica's start
    assert (seen.started_at, seen.finished_at) == (at(0), at(9))


def test_a_failure_ends_when_its_failed_condition_came() -> None:
    failed = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "PodFailurePolicy",
                "lastTransitionTime": T.format(6),
            }
        ],
        "failed": 1,
    }
    seen = observe(
        expected_replicas=1,
        k8s_jobs=[k8s_job("worker", 0, **failed)],
        pods=[pod("worker", 0, ran=(4, 6))],
    )
    assert (seen.status, seen.started_at, seen.finished_at) == (JobStatus.FAILED, at(4), at(6))


def test_a_failed_job_that_never_ran_has_no_start() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}
    seen = observe(expected_replicas=1, k8s_jobs=[k8s_job("worker", 0, **failed)], pods=[pod("worker", 0)])
    assert seen.status is JobStatus.FAILED and seen.started_at is None and seen.finished_at is None


def test_times_that_do_not_parse_say_nothing() -> None:
    assert parse_time("yesterday") is None and parse_time(17) is None and parse_time("") is None
    assert parse_time("2026-03-01T10:00:00") == at(0), "no zone: UTC, as the API server means it"
    broken = pod("worker", 0)
    broken["status"]["containerStatuses"] = [{"state": {"running": {"startedAt": "soon"}}}]
    broken["status"]["phase"] = "Running"
    seen = observe(expected_replicas=1, k8s_jobs=[k8s_job("worker", 0)], pods=[broken])
    assert seen.status is JobStatus.RUNNING and seen.started_at is None


def test_a_time_with_another_offset_is_read_in_utc() -> None:
    # it goes on the record (started_at, the Started event) beside times kept in UTC
    read = parse_time("2026-03-01T15:30:00+05:30")
    assert read == at(0) and read is not None and read.utcoffset() == UTC.utcoffset(None)
    assert read.isoformat() == "2026-03-01T10:00:00+00:00"
