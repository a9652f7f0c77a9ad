"""Reading a job's state from its Kubernetes objects (pure)."""

from __future__ import annotations

from typing import Any

from squall.core.jobs import JobStatus, Reason
from squall.core.kubestatus import observe


def k8s_job(kind: str, index: int, *, condition: str | None = None, reason: str = "", failed: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {"failed": failed}
    if condition:
        status["conditions"] = [{"type": condition, "status": "True", "reason": reason, "message": "m"}]
    return {
        "metadata": {
            "name": f"j-{kind}-{index}",
            "labels": {"squall.io/job-id": "j", "squall.io/replica-type": kind, "squall.io/replica-index": str(index)},
        },
        "status": status,
    }


def pod(phase: str, *, waiting: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if waiting:
        status["containerStatuses"] = [{"state": {"waiting": {"reason": waiting}}}]
    return {"metadata": {"name": "p", "labels": {"squall.io/job-id": "j"}}, "status": status}


def test_no_objects_means_missing() -> None:
    assert observe(expected_replicas=1, k8s_jobs=[], pods=[]).status is None


def test_chief_completion_is_success_even_with_workers_running() -> None:
    seen = observe(
        expected_replicas=2,
        k8s_jobs=[k8s_job("chief", 0, condition="Complete"), k8s_job("worker", 0)],
        pods=[pod("Running")],
    )
    assert seen.status is JobStatus.SUCCEEDED


def test_worker_zero_decides_without_a_chief() -> None:
    jobs = [k8s_job("worker", 0), k8s_job("worker", 1, condition="Complete")]
    assert observe(expected_replicas=2, k8s_jobs=jobs, pods=[pod("Running")]).status is not JobStatus.SUCCEEDED
    jobs = [k8s_job("worker", 0, condition="Complete"), k8s_job("worker", 1)]
    assert observe(expected_replicas=2, k8s_jobs=jobs, pods=[]).status is JobStatus.SUCCEEDED


def test_failures_carry_their_reason() -> None:
    app = observe(expected_replicas=1, k8s_jobs=[k8s_job("worker", 0, condition="Failed", reason="PodFailurePolicy")], pods=[])
    assert (app.status, app.reason) == (JobStatus.FAILED, Reason.APPLICATION_ERROR)
    deadline = observe(expected_replicas=1, k8s_jobs=[k8s_job("worker", 0, condition="Failed", reason="DeadlineExceeded")], pods=[])
    assert deadline.reason == "DeadlineExceeded"
    lost = observe(
        expected_replicas=1,
        k8s_jobs=[k8s_job("worker", 0, condition="Failed", reason="BackoffLimitExceeded", failed=3)],
        pods=[],
    )
    assert (lost.reason, lost.retries_used) == (Reason.RETRIES_EXHAUSTED, 2), "3 pods failed, 2 re-runs"


def test_running_needs_every_replica() -> None:
    jobs = [k8s_job("chief", 0), k8s_job("worker", 0)]
    assert observe(expected_replicas=2, k8s_jobs=jobs, pods=[pod("Running"), pod("Pending")]).status is JobStatus.QUEUED
    assert observe(expected_replicas=2, k8s_jobs=jobs, pods=[pod("Running"), pod("Running")]).status is JobStatus.RUNNING


def test_image_pull_errors_are_named() -> None:
    seen = observe(expected_replicas=1, k8s_jobs=[k8s_job("worker", 0)], pods=[pod("Pending", waiting="ImagePullBackOff")])
    assert (seen.status, seen.reason) == (JobStatus.QUEUED, Reason.IMAGE_PULL_BACK_OFF)


def test_retries_are_counted_from_failed_pods() -> None:
    seen = observe(expected_replicas=1, k8s_jobs=[k8s_job("worker", 0, failed=1)], pods=[pod("Pending")])
    assert (seen.status, seen.retries_used) == (JobStatus.QUEUED, 1)


def test_one_node_lost_under_two_replicas_is_one_retry() -> None:
    jobs = [k8s_job("worker", 0, failed=1), k8s_job("worker", 1, failed=1)]
    seen = observe(expected_replicas=2, k8s_jobs=jobs, pods=[pod("Pending"), pod("Pending")])
    assert seen.retries_used == 1


def test_missing_replica_jobs_are_reported() -> None:
    seen = observe(expected_replicas=3, k8s_jobs=[k8s_job("worker", 0)], pods=[pod("Running")])
    assert seen.reason == Reason.OBJECTS_MISSING
