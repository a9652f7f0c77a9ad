"""The deployment and the job the local-runtime tests play: p3.8xlarge groups in two regions, one GAN job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from squall.core.jobs import JobStatus, is_terminal
from squall.local.runtime import LocalRuntime

P3_8XLARGE = {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58}
GPU_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
P3_USW2 = {"name": "p3-usw2", "region": "us-west-2", "asgName": "squall-p3-usw2", "instanceType": "p3.8xlarge",
           "allocatable": P3_8XLARGE, "taints": GPU_TAINTS, "priority": 10, "maxSize": 4}  # fmt: skip
P3_USE1 = {"name": "p3-use1", "region": "us-east-1", "asgName": "squall-p3-use1", "instanceType": "p3.8xlarge",
           "allocatable": P3_8XLARGE, "taints": GPU_TAINTS, "priority": 20, "maxSize": 4}  # fmt: skip
GROUPS = [P3_USW2, P3_USE1]
IMAGE = "registry.example.com/squall/tf-trainer:1.0"


def gan_job(job_id: str = "gan-1") -> dict[str, Any]:
    """A one-replica job of 4 GPUs, retried twice."""
    return {"name": "gan", "id": job_id, "team": "research", "image": IMAGE,
            "resources": {"cpu": "8", "memory": "32Gi", "gpu": 4}, "retries": 2}  # fmt: skip


def is_done(local: LocalRuntime, job_id: str = "gan-1") -> bool:
    job = local.store.get(job_id)
    return job is not None and is_terminal(job.status)


def run_until_running(local: LocalRuntime, *, run_for: timedelta, job_id: str = "gan-1") -> tuple[str, str]:
    """Submits gan_job(job_id), to run for `run_for` once started, and runs until it is running on a node.

    Returns the node's name and its instance.
    """
    assert local.fleet is not None
    local.cluster.set_behaviour(job_id, run_for=run_for)
    local.send(gan_job(job_id))
    local.run(
        until=lambda rt: (j := rt.store.get(job_id)) is not None and j.status is JobStatus.RUNNING,
        step=timedelta(seconds=10),
        limit=timedelta(minutes=15),
    )
    node = str(local.cluster.list_pods(job_id=job_id)[0]["spec"]["nodeName"])
    instance = local.fleet.instance_of(node)
    assert instance is not None
    return node, instance
