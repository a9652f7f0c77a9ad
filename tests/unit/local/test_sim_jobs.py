"""SimulatedCluster's pods and Job controller: running, finishing, failing, retries, deadlines, TTLs."""

from __future__ import annotations

from datetime import timedelta

from squall.core.jobs import JobStatus, Reason

from .sim import (
    CPU_NODE,
    condition,
    has_condition,
    job_manifest,
    k8s_job,
    make_cluster,
    node_of,
    observed,
    one_node_cluster,
    only_pod,
    squall_objects,
)

# ---- running, finishing, failing --------------------------------------------------------


def test_a_pod_runs_for_its_behaviour_and_the_job_completes() -> None:
    # given
    cluster, clock = one_node_cluster()
    cluster.set_behaviour("j1", run_for=timedelta(minutes=5))
    cluster.create(job_manifest("j1"))
    started = cluster.advance()
    assert started.started == 1
    pod = only_pod(cluster, "j1")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == "2026-01-05T09:00:00Z"
    assert cluster.next_event_time() == clock.now() + timedelta(minutes=5)

    # when not quite yet, then exactly on time
    clock.advance(timedelta(minutes=4, seconds=59))
    assert cluster.advance().finished == 0
    clock.advance(timedelta(seconds=1))
    summary = cluster.advance()

    # then
    assert summary.finished == 1 and summary.jobs_finished == 1
    pod = only_pod(cluster, "j1")
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["finishedAt"] == "2026-01-05T09:05:00Z"
    job = k8s_job(cluster, "j1")
    assert job["status"]["succeeded"] == 1 and "active" not in job["status"]
    assert has_condition(job, "Complete", status="True")
    assert cluster.next_event_time() is None


def test_a_late_advance_finishes_pods_at_their_own_time() -> None:
    cluster, clock = one_node_cluster(default_run_for=timedelta(seconds=30))
    cluster.create(job_manifest("j1"))
    cluster.advance()

    clock.advance(timedelta(hours=1))
    cluster.advance()

    terminated = only_pod(cluster, "j1")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["finishedAt"] == "2026-01-05T09:00:30Z"


def test_an_application_error_fails_the_job_through_the_pod_failure_policy() -> None:
    # given Squall's own Job manifest and a trainer that exits 1
    cluster, clock = one_node_cluster()
    cluster.set_behaviour("bad-1", run_for=timedelta(seconds=10), exit_code=1)
    for manifest in squall_objects("bad-1"):
        cluster.create(manifest)
    cluster.advance()

    # when
    clock.advance(timedelta(seconds=10))
    cluster.advance()

    # then
    job = k8s_job(cluster, "bad-1")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "PodFailurePolicy"
    assert "exit code 1" in failed["message"]
    assert job["status"]["failed"] == 1
    pod = only_pod(cluster, "bad-1")  # an application failure keeps its pod for the logs
    assert pod["status"]["phase"] == "Failed"
    seen = observed(cluster, "bad-1")
    assert (seen.status, seen.reason) == (JobStatus.FAILED, Reason.APPLICATION_ERROR)


def test_a_lost_node_fails_its_pods_with_disruption_target_and_the_job_retries() -> None:
    # given a running pod
    cluster, clock = one_node_cluster(default_run_for=timedelta(minutes=10))
    cluster.create(job_manifest("j1", backoff_limit=2))
    cluster.advance()
    lost_pod = only_pod(cluster, "j1")["metadata"]["name"]

    # when its node goes
    assert cluster.remove_node("n1", reason="spot reclaim") == 1

    # then the pod failed as PodGC fails it, and the Job counted it
    events = [e for e in cluster.events if e.name == lost_pod and e.reason == "DeletionByPodGC"]
    assert len(events) == 1
    job = k8s_job(cluster, "j1")
    assert job["status"]["failed"] == 1 and condition(job, "Failed") is None
    assert cluster.list_pods(job_id="j1") == []  # PodGC deleted it; the replacement comes after back-off
    assert cluster.next_event_time() == clock.now() + timedelta(seconds=10)

    # when the back-off passed and capacity is back
    clock.advance(timedelta(seconds=10))
    cluster.add_node(name="n2", allocatable=CPU_NODE)
    cluster.advance()

    # then a replacement runs and later succeeds
    replacement = only_pod(cluster, "j1")
    assert replacement["metadata"]["name"] != lost_pod
    assert replacement["spec"]["nodeName"] == "n2" and replacement["status"]["phase"] == "Running"
    clock.advance(timedelta(minutes=10))
    cluster.advance()
    seen = observed(cluster, "j1")
    assert (seen.status, seen.retries_used) == (JobStatus.SUCCEEDED, 1)


def test_the_disruption_target_condition_is_what_the_policy_sees() -> None:
    # An Ignore rule on DisruptionTarget only spares the retry if the condition is set.
    cluster, _ = one_node_cluster(pod_backoff=timedelta(0))
    rules = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    cluster.create(job_manifest("j1", backoff_limit=0, rules=rules))
    cluster.advance()

    cluster.remove_node("n1")

    job = k8s_job(cluster, "j1")
    assert "failed" not in job["status"] and condition(job, "Failed") is None
    assert only_pod(cluster, "j1")["status"]["phase"] == "Pending"


def test_retries_exhausted_fail_the_job_with_backoff_limit_exceeded() -> None:
    # given a job with one retry
    cluster, _ = make_cluster(pod_backoff=timedelta(0))
    for manifest in squall_objects("flaky-1", retries=1):
        cluster.create(manifest)

    # when two nodes are lost under it in turn
    for name in ("n1", "n2"):
        cluster.add_node(name=name, allocatable=CPU_NODE)
        cluster.advance()
        assert node_of(cluster, "flaky-1") == name
        cluster.remove_node(name)

    # then
    job = k8s_job(cluster, "flaky-1")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2
    seen = observed(cluster, "flaky-1")
    # The one retry allowed was used; the pod that failed the Job last is no retry.
    assert (seen.status, seen.reason, seen.retries_used) == (JobStatus.FAILED, Reason.RETRIES_EXHAUSTED, 1)


def test_replacements_back_off_exponentially() -> None:
    cluster, clock = make_cluster()
    cluster.create(job_manifest("j1", backoff_limit=5))
    delays = []
    for number in range(3):
        cluster.add_node(name=f"n{number}", allocatable=CPU_NODE)
        cluster.advance()
        cluster.remove_node(f"n{number}")
        due = cluster.next_event_time()
        assert due is not None
        delays.append(due - clock.now())
        clock.advance_to(due)
        cluster.advance()

    assert delays == [timedelta(seconds=10), timedelta(seconds=20), timedelta(seconds=40)]


def test_active_deadline_kills_the_pod_and_fails_the_job() -> None:
    # given a job that never finds a node
    cluster, clock = make_cluster()
    cluster.create(job_manifest("slow", deadline=120))
    assert cluster.next_event_time() == clock.now() + timedelta(seconds=120)

    # when
    clock.advance(timedelta(seconds=120))
    summary = cluster.advance()

    # then
    assert summary.jobs_finished == 1
    job = k8s_job(cluster, "slow")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    assert cluster.list_pods(job_id="slow") == []
    assert observed(cluster, "slow").reason == "DeadlineExceeded"


def test_finished_jobs_go_after_their_ttl() -> None:
    cluster, clock = one_node_cluster(default_run_for=timedelta(seconds=10))
    cluster.create(job_manifest("j1", ttl=60))
    cluster.advance()
    clock.advance(timedelta(seconds=10))
    cluster.advance()
    assert cluster.next_event_time() == clock.now() + timedelta(seconds=60)

    clock.advance(timedelta(seconds=60))
    cluster.advance()

    assert cluster.list_jobs() == [] and cluster.list_pods() == []


def test_an_image_error_leaves_the_pod_pending_with_image_pull_back_off() -> None:
    # given
    cluster, _ = one_node_cluster()
    cluster.set_behaviour("img-1", image_error=True)
    for manifest in squall_objects("img-1"):
        cluster.create(manifest)

    # when
    cluster.advance()

    # then
    pod = only_pod(cluster, "img-1")
    assert pod["spec"]["nodeName"] == "n1" and pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    seen = observed(cluster, "img-1")
    assert (seen.status, seen.reason) == (JobStatus.QUEUED, Reason.IMAGE_PULL_BACK_OFF)

    # when the image becomes pullable
    cluster.set_behaviour("img-1")
    cluster.advance()

    # then
    assert only_pod(cluster, "img-1")["status"]["phase"] == "Running"
