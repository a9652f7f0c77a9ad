"""The squall-jobs functions see the team namespaces only: what their namespaced RBAC allows."""

from __future__ import annotations

from datetime import timedelta

from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.ports import Cluster
from squall.runtime import NamespacedCluster


def job(namespace: str, job_id: str) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{job_id}-worker-0",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "squall", "squall.io/job-id": job_id},
        },
        "spec": {
            "template": {
                "metadata": {"labels": {"squall.io/job-id": job_id}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x:1"}]},
            }
        },
    }


def test_lists_across_the_cluster_become_lists_per_team_namespace() -> None:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=5))
    for namespace, job_id in (("team-a", "a1"), ("team-b", "b1"), ("kube-system", "other")):
        cluster.create(job(namespace, job_id))
    cluster.advance()
    scoped: Cluster = NamespacedCluster(cluster, ["team-a", "team-b", "team-a"])
    # every list the jobs functions make stays in their namespaces, one call per namespace
    assert sorted(j["metadata"]["namespace"] for j in scoped.list_jobs()) == ["team-a", "team-b"]
    assert {p["metadata"]["namespace"] for p in scoped.list_pods()} <= {"team-a", "team-b"}
    assert [j["metadata"]["name"] for j in scoped.list_jobs(namespace="team-b")] == ["b1-worker-0"]
    assert scoped.list_jobs(namespace="kube-system") == [], "not a team namespace: not readable"
    assert [j["metadata"]["name"] for j in scoped.list_jobs(job_id="a1")] == ["a1-worker-0"]
    # and everything else is the cluster's own
    assert scoped.delete_job_objects(namespace="team-a", job_id="a1") >= 1
    assert [j["metadata"]["namespace"] for j in scoped.list_jobs()] == ["team-b"]
