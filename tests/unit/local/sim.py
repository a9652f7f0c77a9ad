"""Helpers for the simulated cluster's tests: a cluster on a virtual clock, Job manifests, readers."""

from __future__ import annotations

from typing import Any

from squall.core.kubestatus import Observation, observe
from squall.core.manifests import render
from squall.core.spec import JobSpec
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster

NS = "team-a"
GPU_NODE = {"cpu": "8", "memory": "60Gi", "nvidia.com/gpu": "4", "pods": "58"}
CPU_NODE = {"cpu": "4", "memory": "16Gi", "pods": "58"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
# Disruptions first, as Kubernetes evaluates the rules in order.
COUNT_DISRUPTIONS_FIRST: list[dict[str, Any]] = [
    {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]},
    {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "NotIn", "values": [0]}},
]


def make_cluster(**kwargs: Any) -> tuple[SimulatedCluster, VirtualClock]:
    clock = VirtualClock()
    return SimulatedCluster(clock=clock, **kwargs), clock


def one_node_cluster(**kwargs: Any) -> tuple[SimulatedCluster, VirtualClock]:
    """A cluster with one CPU node, n1."""
    cluster, clock = make_cluster(**kwargs)
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    return cluster, clock


def job_manifest(
    name: str,
    *,
    job_id: str | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    gpu: int = 0,
    backoff_limit: int = 2,
    deadline: int | None = 3600,
    rules: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    node_affinity: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    ttl: int | None = None,
) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/managed-by": "squall",
        "squall.io/job-id": job_id or name,
        "squall.io/replica-type": "worker",
        "squall.io/replica-index": "0",
    }
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "trainer", "image": "reg.example.com/tf:1", "resources": {"requests": requests}}
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if node_affinity:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": node_affinity}]
                }
            }
        }
    if tolerations:
        pod_spec["tolerations"] = tolerations
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "podFailurePolicy": {"rules": rules if rules is not None else COUNT_DISRUPTIONS_FIRST},
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": spec,
    }


def squall_objects(job_id: str, *, admitted: bool = True, **spec: Any) -> list[dict[str, Any]]:
    """What Squall's intake creates for a job, rendered by the real manifests module.

    Intake creates the Jobs suspended; `admitted` (the default) gives them as the scale
    check's admission lets them run, for tests of what happens once they do.
    """
    body = {"name": "train", "team": "research", "image": "reg.example.com/tf:1"} | spec
    objects = render(JobSpec.model_validate(body), job_id=job_id, namespace=NS)
    return [unsuspended(obj) for obj in objects] if admitted else objects


def unsuspended(manifest: dict[str, Any]) -> dict[str, Any]:
    """A rendered Job as admission lets it run (other objects as they are)."""
    if manifest.get("kind") == "Job":
        manifest["spec"]["suspend"] = False
    return manifest


def only_pod(cluster: SimulatedCluster, job_id: str) -> dict[str, Any]:
    pods = cluster.list_pods(job_id=job_id)
    assert len(pods) == 1, pods
    return pods[0]


def node_of(cluster: SimulatedCluster, job_id: str) -> str | None:
    return only_pod(cluster, job_id)["spec"].get("nodeName")


def k8s_job(cluster: SimulatedCluster, job_id: str) -> dict[str, Any]:
    jobs = cluster.list_jobs(job_id=job_id)
    assert len(jobs) == 1
    return jobs[0]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj["status"].get("conditions") or [] if c["type"] == kind), None)


def has_condition(obj: dict[str, Any] | None, kind: str, **fields: str) -> bool:
    found = condition(obj, kind) if obj is not None else None
    return found is not None and found.items() >= fields.items()


def observed(cluster: SimulatedCluster, job_id: str, *, replicas: int = 1) -> Observation:
    return observe(
        expected_replicas=replicas,
        k8s_jobs=cluster.list_jobs(job_id=job_id),
        pods=cluster.list_pods(job_id=job_id),
    )
