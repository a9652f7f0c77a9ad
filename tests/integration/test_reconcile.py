"""Reconcile against the simulated cluster: states, retries, clean-up and metrics."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from squall.core.jobs import JobStatus, Reason
from tests.integration.conftest import IMAGE, World


def submit(world: World, job_id: str, **overrides: Any) -> None:
    body = {
        "name": "train",
        "id": job_id,
        "team": "research",
        "image": IMAGE,
        "resources": {"gpu": 1},
    } | overrides
    world.new_intake().handle(body=json.dumps(body), message_id=f"m-{job_id}")


def reasons(world: World, job_id: str) -> list[str]:
    return [e.reason for e in world.store.events(job_id)]


def test_a_job_runs_succeeds_and_its_objects_are_cleaned_up(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "ok-1")
    world.cluster.set_behaviour("ok-1", run_for=timedelta(minutes=3))
    world.run(minutes=1)
    assert world.store.get("ok-1").status is JobStatus.RUNNING  # type: ignore[union-attr]
    world.run(minutes=4)
    job = world.store.get("ok-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.started_at and job.finished_at
    assert reasons(world, "ok-1") == [
        Reason.SUBMITTED,
        "Placed:us-west-2",
        "Admitted:us-west-2",
        Reason.STARTED,
        Reason.COMPLETED,
    ]
    assert world.cluster.list_jobs(job_id="ok-1") == []
    assert world.metrics.total("QueueWaitSeconds") == 60
    assert world.metrics.total("JobsSucceeded") == 1


def test_a_job_waits_while_there_is_no_capacity(world: World) -> None:
    submit(world, "wait-1")
    world.run(minutes=3)
    assert world.store.get("wait-1").status is JobStatus.QUEUED  # type: ignore[union-attr]
    # Admission says why it waits, once (not at every check).
    assert reasons(world, "wait-1") == [Reason.SUBMITTED, Reason.QUEUED]
    assert world.store.events("wait-1")[-1].message.startswith("1st in research, 1st overall; needs 1 GPU")


def test_an_application_error_fails_the_job_at_once(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "bad-1", retries=3)
    world.cluster.set_behaviour("bad-1", run_for=timedelta(minutes=1), exit_code=1)
    world.run(minutes=4)
    job = world.store.get("bad-1")
    assert job is not None and job.status is JobStatus.FAILED and job.reason == Reason.APPLICATION_ERROR
    assert job.retries_used == 0


def test_a_pod_lost_with_its_node_is_retried_and_says_so(world: World) -> None:
    world.add_gpu_nodes(2)
    submit(world, "lost-1", retries=2)
    world.cluster.set_behaviour("lost-1", run_for=timedelta(minutes=5))
    world.run(minutes=2)
    node = world.cluster.list_pods(job_id="lost-1")[0]["spec"]["nodeName"]
    world.cluster.remove_node(node, reason="spot reclaim")
    world.run(minutes=8)
    job = world.store.get("lost-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert "NodeLost:retry 1/2" in reasons(world, "lost-1")
    assert job.retries_used == 1


def test_retries_run_out(world: World) -> None:
    world.add_gpu_nodes(3)
    submit(world, "doomed", retries=1)
    world.cluster.set_behaviour("doomed", run_for=timedelta(minutes=30))
    for _ in range(2):
        world.run(minutes=2)
        node = world.cluster.list_pods(job_id="doomed")[-1]["spec"].get("nodeName")
        if node:
            world.cluster.remove_node(node, reason="spot reclaim")
    world.run(minutes=2)
    job = world.store.get("doomed")
    assert job is not None and job.status is JobStatus.FAILED and job.reason == Reason.RETRIES_EXHAUSTED


def test_a_running_job_whose_objects_were_deleted_behind_squalls_back_goes_back_in_the_queue(
    world: World,
) -> None:
    world.add_gpu_nodes(1)
    submit(world, "gone-1", retries=1)
    world.cluster.set_behaviour("gone-1", run_for=timedelta(minutes=3))
    world.run(minutes=1)
    assert world.store.get("gone-1").status is JobStatus.RUNNING  # type: ignore[union-attr]
    world.cluster.delete_job_objects(namespace="team-research", job_id="gone-1")
    world.run(minutes=2)
    assert "NodeLost:retry 1/1" in reasons(world, "gone-1")
    world.run(minutes=5)
    job = world.store.get("gone-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.retries_used == 1
    assert reasons(world, "gone-1").count("Admitted:us-west-2") == 2, "admitted again from the queue"


def test_an_image_that_cannot_be_pulled_fails_after_the_grace(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "img-1")
    world.cluster.set_behaviour("img-1", image_error=True)
    world.run(minutes=2)
    job = world.store.get("img-1")
    assert job is not None and job.status is JobStatus.QUEUED and job.reason == Reason.IMAGE_PULL_BACK_OFF
    world.run(minutes=6)
    job = world.store.get("img-1")
    assert job is not None and job.status is JobStatus.FAILED and job.reason == Reason.IMAGE_PULL_BACK_OFF


def test_a_distributed_job_runs_when_every_replica_runs(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(
        world,
        "dist-1",
        replicas={
            "chief": 1,
            "worker": {"count": 2},
            "ps": {"count": 1, "resources": {"cpu": "2", "memory": "4Gi", "gpu": 0}},
        },
    )
    world.cluster.add_node(
        name="cpu-0",
        allocatable={"cpu": "16", "memory": "64Gi", "pods": "58"},
        labels={"topology.kubernetes.io/region": "us-west-2"},
        taints=[],
        provider_id="aws:///us-west-2a/i-0cpu",
    )
    world.cluster.set_behaviour("dist-1", run_for=timedelta(minutes=3))
    world.run(minutes=1)
    assert world.store.get("dist-1").status is JobStatus.RUNNING  # type: ignore[union-attr]
    world.run(minutes=4)
    assert world.store.get("dist-1").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
    assert world.cluster.list_jobs(job_id="dist-1") == []


def test_sweep_trials_start_as_slots_free_and_the_parent_finishes_last(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "sw", sweep={"parameters": {"lr": [1, 2, 3]}, "maxTrials": 3, "parallelism": 1})
    world.cluster.set_behaviour("sw-t000", run_for=timedelta(minutes=1))
    world.cluster.set_behaviour("sw-t001", run_for=timedelta(minutes=1))
    world.cluster.set_behaviour("sw-t002", run_for=timedelta(minutes=1), exit_code=2)
    world.run(minutes=12)
    parent = world.store.get("sw")
    assert parent is not None and parent.status is JobStatus.SUCCEEDED
    assert world.store.events("sw")[-1].message == "2/3 trials succeeded"
    assert [world.store.get(t).status for t in parent.trial_ids] == [  # type: ignore[union-attr]
        JobStatus.SUCCEEDED,
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
    ]


def test_gauges_report_jobs_by_state_and_the_oldest_wait(world: World) -> None:
    submit(world, "g-1")
    world.run(minutes=2)
    states = [
        p for p in world.metrics.points if p.name == "JobsInState" and p.dimensions == {"State": "QUEUED"}
    ]
    assert states[-1].value == 1
    oldest = [p for p in world.metrics.points if p.name == "OldestQueuedJobAgeSeconds"]
    assert oldest[-1].value == 120


def test_quiet_runs_report_the_oldest_wait_as_it_grows_and_none_once_the_queue_is_empty(world: World) -> None:
    submit(world, "g-2")
    world.run(minutes=2)
    world.run(minutes=3)  # nothing changes: these runs end after their reads
    oldest = [p.value for p in world.metrics.points if p.name == "OldestQueuedJobAgeSeconds"]
    assert oldest[-1] == 300 and oldest[-2] == 240  # read again each run, not kept from the first
    world.cluster.delete_job_objects(namespace="team-research", job_id="g-2")
    job = world.store.get("g-2")
    assert job is not None
    from squall.core.jobs import transition
    from squall.services.intake import update_job

    now = world.clock.now()
    update_job(
        world.store,
        job,
        lambda current: transition(current, to=JobStatus.CANCELLED, reason="Cancelled", at=now),
    )
    world.run(minutes=3)
    oldest = [p.value for p in world.metrics.points if p.name == "OldestQueuedJobAgeSeconds"]
    assert oldest[-1] == 0 and oldest[-2] == 0
