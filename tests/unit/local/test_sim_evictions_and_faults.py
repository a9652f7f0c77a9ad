"""SimulatedCluster's evictions, fault controls, stats, and the reconcile reader over it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squall.core.errors import RetryableError
from squall.core.jobs import JobStatus, Reason
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster

from .sim import (
    COUNT_DISRUPTIONS_FIRST,
    CPU_NODE,
    GPU_NODE,
    GPU_TAINT,
    NS,
    condition,
    job_manifest,
    k8s_job,
    make_cluster,
    observed,
    one_node_cluster,
    only_pod,
    squall_objects,
)

# ---- evictions --------------------------------------------------------------------------


def running_pod_under_budget(*, max_unavailable: int) -> tuple[SimulatedCluster, VirtualClock, str]:
    """Job j1's pod running on n1, covered by a budget; the cluster, its clock and the pod's name."""
    cluster, clock = one_node_cluster()
    cluster.create(job_manifest("j1"))
    cluster.advance()
    cluster.add_pdb(NS, {"squall.io/job-id": "j1"}, max_unavailable=max_unavailable)
    return cluster, clock, only_pod(cluster, "j1")["metadata"]["name"]


def test_eviction_is_refused_while_a_disruption_budget_would_be_violated() -> None:
    cluster, _, name = running_pod_under_budget(max_unavailable=0)

    assert cluster.evict(namespace=NS, name=name) is False
    assert only_pod(cluster, "j1")["status"]["phase"] == "Running"


def test_an_evicted_pod_counts_as_a_disruption_and_is_replaced() -> None:
    # given a running pod and a budget that allows one disruption
    cluster, clock, name = running_pod_under_budget(max_unavailable=1)

    # when
    evicted = cluster.evict(namespace=NS, name=name)

    # then
    assert evicted is True
    assert [e.reason for e in cluster.events if e.name == name][-1] == "EvictionByEvictionAPI"
    assert k8s_job(cluster, "j1")["status"]["failed"] == 1
    clock.advance(timedelta(seconds=10))
    cluster.advance()
    replacement = only_pod(cluster, "j1")
    assert replacement["metadata"]["name"] != name and replacement["status"]["phase"] == "Running"
    assert cluster.evict(namespace=NS, name=name) is True  # gone already


def test_policy_rules_apply_in_order_so_fail_job_first_catches_an_evicted_container() -> None:
    # Kubernetes evaluates podFailurePolicy rules in order: an evicted trainer exits
    # 143 (SIGTERM), which a FailJob rule on exit codes NotIn [0] matches before a
    # later Count rule on DisruptionTarget gets a say.
    cluster, _ = one_node_cluster()
    fail_job_first = list(reversed(COUNT_DISRUPTIONS_FIRST))
    cluster.create(job_manifest("j1", rules=fail_job_first))
    cluster.advance()

    cluster.evict(namespace=NS, name=only_pod(cluster, "j1")["metadata"]["name"])

    failed = condition(k8s_job(cluster, "j1"), "Failed")
    assert failed is not None and failed["reason"] == "PodFailurePolicy"
    assert "exit code 143" in failed["message"]


def test_evicting_a_pod_that_is_gone_is_success() -> None:
    cluster, _ = make_cluster()

    assert cluster.evict(namespace=NS, name="nobody") is True


# ---- faults, stats, the reconcile reader ------------------------------------------------


def test_next_error_is_raised_once_by_the_next_port_call() -> None:
    cluster, _ = make_cluster()
    cluster.next_error = RetryableError("API server throttled")

    with pytest.raises(RetryableError):
        cluster.list_pods()

    assert cluster.list_pods() == []
    assert [c.method for c in cluster.calls] == ["list_pods", "list_pods"]


def test_fail_calls_fails_one_method_a_number_of_times() -> None:
    cluster, _ = make_cluster()
    cluster.fail_calls("create", RetryableError("503"), times=2)

    for _ in range(2):
        with pytest.raises(RetryableError):
            cluster.create(job_manifest("j1"))
    assert cluster.list_jobs() == []  # other methods are unaffected

    assert cluster.create(job_manifest("j1")) is True
    with pytest.raises(ValueError, match="not a Cluster port method"):
        cluster.fail_calls("craete", RetryableError("typo"))


def test_stats_count_nodes_pods_and_gpus() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="g1", allocatable=GPU_NODE, taints=GPU_TAINT)
    cluster.add_node(name="g2", allocatable=GPU_NODE, taints=GPU_TAINT, gpus_ready=False)
    cluster.add_node(name="c1", allocatable=CPU_NODE, ready=False)
    cluster.patch_node("g2", {"spec": {"unschedulable": True}})
    for job_id in ("a", "b"):
        cluster.create(squall_objects(job_id, resources={"cpu": "1", "memory": "1Gi", "gpu": 3})[0])
    cluster.advance()

    stats = cluster.stats()

    assert (
        stats.items()
        >= {
            "nodes": 3,
            "nodes_ready": 2,
            "nodes_cordoned": 1,
            "pods_running": 1,
            "pods_pending": 1,
            "pods_unscheduled": 1,
            "gpus_allocatable": 4,
            "gpus_in_use": 3,
            "jobs_created": 2,
            "jobs_active": 2,
        }.items()
    )


def test_observe_reads_the_simulated_objects_through_a_whole_distributed_job() -> None:
    # given a distributed job (chief, worker, ps) and room for it
    cluster, clock = make_cluster(default_run_for=timedelta(minutes=5))
    cluster.add_node(
        name="g1",
        allocatable=GPU_NODE,
        taints=GPU_TAINT,
        labels={"topology.kubernetes.io/region": "us-west-2"},
    )
    cluster.add_node(name="c1", allocatable=CPU_NODE, labels={"topology.kubernetes.io/region": "us-west-2"})
    replicas = {
        "chief": 1,
        "worker": 1,
        "ps": {"count": 1, "resources": {"cpu": "1", "memory": "1Gi", "gpu": 0}},
    }
    for manifest in squall_objects(
        "dist-1", replicas=replicas, resources={"cpu": "1", "memory": "1Gi", "gpu": 1}
    ):
        cluster.create(manifest)
    seen = observed(cluster, "dist-1", replicas=3)
    assert (seen.status, seen.reason) == (JobStatus.QUEUED, Reason.WAITING_FOR_CAPACITY)

    # when the pods start
    cluster.advance()

    # then
    seen = observed(cluster, "dist-1", replicas=3)
    assert (seen.status, seen.running_replicas) == (JobStatus.RUNNING, 3)
    assert {p["spec"]["nodeName"] for p in cluster.list_pods(job_id="dist-1")} == {"g1", "c1"}

    # when they finish
    clock.advance(timedelta(minutes=5))
    cluster.advance()

    # then
    seen = observed(cluster, "dist-1", replicas=3)
    assert (seen.status, seen.reason, seen.retries_used) == (JobStatus.SUCCEEDED, Reason.COMPLETED, 0)
