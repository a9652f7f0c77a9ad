"""The simulated cluster's start times, as Kubernetes sets them, and the run's start read from them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squall.core.jobs import JobStatus
from squall.core.kubestatus import parse_time

from .sim import NS, job_manifest, k8s_job, observed, one_node_cluster, only_pod

pytestmark = pytest.mark.timeout(20)


def test_a_container_that_started_late_keeps_its_own_start_when_it_ends() -> None:
    # given a Job whose image cannot be pulled at first: the kubelet has the pod, its container waits
    cluster, clock = one_node_cluster()
    t0 = clock.now()
    cluster.set_behaviour("j1", image_error=True)
    cluster.create(job_manifest("j1"))
    cluster.advance()
    assert parse_time(only_pod(cluster, "j1")["status"]["startTime"]) == t0
    # when the image comes 30 s later and the container runs for a minute
    cluster.set_behaviour("j1", run_for=timedelta(minutes=1))
    clock.advance(timedelta(seconds=30))
    cluster.advance()
    running = only_pod(cluster, "j1")["status"]["containerStatuses"][0]["state"]["running"]
    assert parse_time(running["startedAt"]) == t0 + timedelta(seconds=30)
    clock.advance(timedelta(minutes=2))
    cluster.advance()
    # then the terminated container says when it started, not when the kubelet took the pod
    pod = only_pod(cluster, "j1")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert parse_time(terminated["startedAt"]) == t0 + timedelta(seconds=30)
    assert parse_time(terminated["finishedAt"]) == t0 + timedelta(seconds=90)
    # and the Job's startTime is when it was started (created unsuspended), before its run
    job = k8s_job(cluster, "j1")
    assert parse_time(job["status"]["startTime"]) == t0
    seen = observed(cluster, "j1")
    assert seen.status is JobStatus.SUCCEEDED
    assert (seen.started_at, seen.finished_at) == (t0 + timedelta(seconds=30), t0 + timedelta(seconds=90))


def test_a_completed_job_whose_pod_is_gone_ran_from_its_start_time() -> None:
    cluster, clock = one_node_cluster()
    t0 = clock.now()
    cluster.create(job_manifest("j2"))
    cluster.set_behaviour("j2", run_for=timedelta(minutes=1))
    cluster.advance()
    clock.advance(timedelta(minutes=2))
    cluster.advance()
    pod = only_pod(cluster, "j2")
    cluster.delete_pod(namespace=NS, name=pod["metadata"]["name"])
    seen = observed(cluster, "j2")
    assert seen.status is JobStatus.SUCCEEDED and seen.started_at == t0
    assert seen.finished_at == t0 + timedelta(minutes=1)
