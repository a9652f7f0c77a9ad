"""Reconcile making a job's objects finds a name taken by someone else's object.

The object is neither adopted nor deleted (core/manifests.py `owned_alike`), and the job
or trial fails as ``ClusterRefused``, as intake fails such a job (docs/design.md): not as
a defect of reconcile's (``ReconcileError:PermanentError``, counted in JobErrors), nor
as ``ObjectsMissing``.
"""

from __future__ import annotations

from datetime import timedelta

from squall.core.jobs import JobStatus, Reason
from tests.integration.conftest import World
from tests.integration.test_reconcile import submit

NAMESPACE = "team-research"


def squat(world: World, name: str) -> None:
    """Someone else's Service under a name Squall will want."""
    metadata = {"name": name, "namespace": NAMESPACE, "labels": {"app": "someone-elses"}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": {"ports": [{"port": 80}]}}
    assert world.cluster.create(service) is True


def kept(world: World, name: str) -> bool:
    found = world.cluster.get_service(namespace=NAMESPACE, name=name)
    return found is not None and found["metadata"]["labels"] == {"app": "someone-elses"}


def test_a_trial_started_by_reconcile_whose_name_is_taken_fails_as_cluster_refused(world: World) -> None:
    # given a sweep of two distributed trials, one at a time, and trial 1's name taken
    world.add_gpu_nodes(2)
    world.cluster.set_behaviour("sw-t000", run_for=timedelta(seconds=30))
    submit(world, "sw", replicas={"worker": 2}, sweep={"parameters": {"lr": [1, 2]}, "parallelism": 1})
    squat(world, "sw-t001-worker-0")

    # when trial 0 ends and reconcile starts trial 1
    world.run(minutes=6)

    # then trial 1 failed alone, refused by the cluster; the Service is left as it was
    trial = world.store.get("sw-t001")
    assert trial is not None and (trial.status, trial.reason) == (JobStatus.FAILED, Reason.CLUSTER_REFUSED)
    assert (
        "sw-t001-worker-0 exists already and belongs to no Squall job"
        in world.store.events("sw-t001")[-1].message
    )
    assert world.metrics.total("JobErrors") == 0
    assert world.cluster.list_jobs(job_id="sw-t001") == []
    assert kept(world, "sw-t001-worker-0")


def test_a_job_whose_objects_are_made_again_under_a_taken_name_fails_as_cluster_refused(world: World) -> None:
    # given a job's objects deleted behind Squall's back, and one of their names taken since
    world.add_gpu_nodes(2)
    submit(world, "d-1", replicas={"worker": 2})
    world.cluster.delete_job_objects(namespace=NAMESPACE, job_id="d-1")
    squat(world, "d-1-worker-1")

    # when reconcile makes them again
    world.run(minutes=3)

    # then the job fails, refused by the cluster, and the Service is left as it was
    job = world.store.get("d-1")
    assert job is not None and (job.status, job.reason) == (JobStatus.FAILED, Reason.CLUSTER_REFUSED)
    assert world.cluster.list_jobs(job_id="d-1") == []
    assert kept(world, "d-1-worker-1")
