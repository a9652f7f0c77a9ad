"""Reconcile leaves out the jobs it left as they were, until their inputs or a grace say otherwise.

A job that a run observed and did nothing for is not observed again while its record
version, its Jobs and its pods are those of that run and no grace it waits out is over
(services/reconcile.py `_Settled`). These runs go on with other jobs' records changing
every minute, so that no run is quiet as a whole (`ReconcileMemory.quiet`).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from squall.core.jobs import Job, JobStatus, Reason, transition
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.services.intake import update_job
from squall.services.reconcile import IMAGE_PULL_GRACE, ReconcileMemory, Reconciler
from squall.services.versioned import CREATE_GRACE
from tests.integration.conftest import IMAGE, World
from tests.integration.test_reconcile_clusters import place

NAMESPACE = "team-research"


@dataclass
class EditedLists:
    """The simulated cluster, with some Jobs and pods listed as edited (by name): each edit is one
    new dict, listed again as that same dict (as a lister hands out an unchanged object)."""

    inner: SimulatedCluster
    edits: dict[str, dict[str, Any]] = field(default_factory=dict)

    def list_jobs(self, **kwargs: Any) -> list[dict[str, Any]]:
        return [self.edits.get(obj["metadata"]["name"], obj) for obj in self.inner.list_jobs(**kwargs)]

    def list_pods(self, **kwargs: Any) -> list[dict[str, Any]]:
        return [self.edits.get(obj["metadata"]["name"], obj) for obj in self.inner.list_pods(**kwargs)]

    def edit(self, obj: dict[str, Any], **fields: Any) -> None:
        """List `obj` from now on with `fields` (a new status, say), at a new resourceVersion."""
        metadata = obj["metadata"] | {"resourceVersion": f"{obj['metadata']['resourceVersion']}-edited"}
        self.edits[metadata["name"]] = obj | fields | {"metadata": metadata}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class Rig:
    world: World
    listed: EditedLists
    observed: Counter[str] = field(default_factory=Counter)  # the runs that looked at each job

    def submit(self, job_id: str, **overrides: Any) -> None:
        body = {"name": "t", "id": job_id, "team": "research", "image": IMAGE, "resources": {"gpu": 1}}
        self.world.intake.handle(body=json.dumps(body | overrides), message_id=f"m-{job_id}")

    def start(self, job_id: str) -> None:
        """Let the job run, as admission does: its objects made, its record placed."""
        admit(self.world, job_id)

    def minute(self, *, churn: bool = True, step: timedelta = timedelta(minutes=1)) -> None:
        """A minute (or `step`) on, then a reconcile run; `churn`: a new job comes first, so the
        run is not quiet as a whole."""
        if churn:
            self.submit(f"filler-{self.world.clock.now():%H%M%S}")
        last = self.world.reconciler.memory.quiet
        self.world.clock.advance(step)
        self.world.cluster.advance()
        self.world.reconciler.run()
        if churn:
            assert self.world.reconciler.memory.quiet is not last, "a run that read something new"

    def job(self, job_id: str) -> Job:
        job = self.world.store.get(job_id)
        assert job is not None
        return job


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Rig:
    world = World.over(InMemoryJobStore(), run_for=timedelta(hours=3))
    world.add_gpu_nodes(1)
    listed = EditedLists(world.cluster)
    world.reconciler.clusters = {"local": listed}  # type: ignore[dict-item]
    made = Rig(world, listed)
    real = Reconciler._job

    def counted(self: Reconciler, job: Job, **kwargs: Any) -> Any:
        made.observed[job.id] += 1
        return real(self, job, **kwargs)

    monkeypatch.setattr(Reconciler, "_job", counted)
    return made


def admit(world: World, job_id: str) -> None:
    """Place a queued job in the world's one cluster and make its objects there (admission's part)."""
    job = world.store.get(job_id)
    assert job is not None
    place(world.store, world.cluster, job, cluster_name="local", region="us-west-2", at=world.clock.now())


def running(rig: Rig, job_id: str) -> None:
    """Submit and start a job, and reconcile until a run has observed it RUNNING and left it so."""
    rig.submit(job_id)
    rig.start(job_id)
    rig.minute()
    assert rig.job(job_id).status is JobStatus.RUNNING
    rig.minute()  # the record's new version is observed once more, and left as it is


def test_a_settled_job_is_not_observed_while_nothing_of_it_changes(rig: Rig) -> None:
    running(rig, "a")
    before = rig.observed["a"]
    for _ in range(5):
        rig.minute()
    assert rig.observed["a"] == before, "its record, Jobs and pods are the last run's: not observed"
    assert rig.job("a").status is JobStatus.RUNNING


def test_a_settled_job_whose_pod_changed_is_observed_and_transitions(rig: Rig) -> None:
    # given a running job that the last runs left as it was
    running(rig, "a")
    rig.minute()
    before = rig.observed["a"]
    # when its pod alone changes (its container cannot pull its image any more)
    (pod,) = rig.world.cluster.list_pods(job_id="a")
    waiting = {"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
    rig.listed.edit(pod, status=pod["status"] | {"containerStatuses": [waiting]})
    rig.minute()
    # then the next run observes it and records what the pod says
    assert rig.observed["a"] == before + 1
    job = rig.job("a")
    assert job.status is JobStatus.QUEUED and job.reason == Reason.IMAGE_PULL_BACK_OFF


def test_a_settled_job_whose_replica_job_changed_is_observed_and_transitions(rig: Rig) -> None:
    # given a running job that the last runs left as it was
    running(rig, "a")
    rig.minute()
    before = rig.observed["a"]
    # when its replica Job alone changes (Kubernetes gave up on it)
    (k8s_job,) = rig.world.cluster.list_jobs(job_id="a")
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "gave up"}
    rig.listed.edit(k8s_job, status={"failed": 1, "conditions": [failed]})
    rig.minute()
    # then the next run observes it and fails the job
    assert rig.observed["a"] == before + 1
    job = rig.job("a")
    assert job.status is JobStatus.FAILED and job.reason == Reason.BACKOFF_LIMIT_EXCEEDED


def test_a_job_waiting_out_the_image_pull_grace_fails_when_it_ends_though_nothing_else_changed(
    rig: Rig,
) -> None:
    # given a job whose image cannot be pulled, recorded so, its pod unchanged since
    rig.world.cluster.set_behaviour("img", image_error=True)
    rig.submit("img")
    rig.start("img")
    rig.minute()
    recorded = rig.job("img")
    assert recorded.reason == Reason.IMAGE_PULL_BACK_OFF
    rig.minute()
    before = rig.observed["img"]
    # when minutes pass up to the grace's end, the first with another job coming, the rest
    # quiet as a whole (they hold until the earliest grace that the runs before waited out)
    churn = True
    while rig.world.clock.now() + timedelta(minutes=1) < recorded.updated_at + IMAGE_PULL_GRACE:
        rig.minute(churn=churn)
        churn = False
        assert rig.job("img").status is JobStatus.QUEUED
    assert rig.observed["img"] == before, "nothing of it changed and its grace is not over"
    rig.minute(churn=False)
    # then the run at the grace's end observes it again, and fails it
    assert rig.world.clock.now() >= recorded.updated_at + IMAGE_PULL_GRACE
    job = rig.job("img")
    assert job.status is JobStatus.FAILED and job.reason == Reason.IMAGE_PULL_BACK_OFF


def test_a_job_whose_objects_went_missing_goes_back_in_the_queue_when_the_create_grace_ends(
    rig: Rig,
) -> None:
    rig.submit("lost")
    rig.start("lost")
    rig.world.cluster.delete_job_objects(namespace=NAMESPACE, job_id="lost")
    placed = rig.job("lost").updated_at
    step = CREATE_GRACE / 4  # runs more often than the grace is long
    while rig.world.clock.now() + step < placed + CREATE_GRACE:
        rig.minute(step=step)
        assert rig.job("lost").cluster == "local"
    assert rig.observed["lost"] == 1, "observed once, then left to wait out the grace"
    rig.minute(step=step)
    job = rig.job("lost")
    assert job.reason == Reason.OBJECTS_MISSING and job.cluster is None and not job.objects_created


def test_a_settled_job_whose_record_changed_is_observed_again(rig: Rig) -> None:
    # given a running job that the last runs left as it was
    running(rig, "a")
    rig.minute()
    before = rig.observed["a"]
    # when its record alone changes (another writer took it back to QUEUED)
    now = rig.world.clock.now()
    update_job(
        rig.world.store,
        rig.job("a"),
        lambda current: transition(current, to=JobStatus.QUEUED, reason="Edited", at=now),
    )
    rig.minute()
    # then it is observed again, and recorded as its pod says
    assert rig.observed["a"] == before + 1
    assert rig.job("a").status is JobStatus.RUNNING


def _history(seed: int, *, forget: bool) -> list[tuple[Any, ...]]:
    """Every job's events after random minutes; `forget`: each run starts with an empty memory."""
    rng = random.Random(seed)
    world = World.over(InMemoryJobStore(), run_for=timedelta(minutes=4))
    world.add_gpu_nodes(3)
    cluster = world.cluster
    ids: list[str] = []
    for minute in range(40):
        for _ in range(rng.randint(0, 2)):
            job_id = f"j{len(ids):03d}"
            ids.append(job_id)
            cluster.set_behaviour(
                job_id,
                run_for=timedelta(minutes=rng.randint(1, 8)),
                exit_code=rng.choice([0, 0, 0, 1]),
                image_error=rng.random() < 0.15,
            )
            body = {"name": "t", "id": job_id, "team": "research", "image": IMAGE, "resources": {"gpu": 1}}
            world.intake.handle(
                body=json.dumps(body | {"retries": rng.randint(0, 2)}), message_id=f"m-{job_id}"
            )
        for job_id in rng.sample(ids, k=min(len(ids), 2)):
            roll = rng.random()
            if roll < 0.4:
                job = world.store.get(job_id)
                if job is not None and job.status is JobStatus.QUEUED and job.cluster is None:
                    admit(world, job_id)
            elif roll < 0.5:
                cluster.delete_job_objects(namespace=NAMESPACE, job_id=job_id)
        if minute % 13 == 12:
            cluster.remove_node(f"gpu-us-west-2-{minute // 13}", reason="spot reclaim")
        world.clock.advance(timedelta(minutes=1))
        cluster.advance()
        if forget:
            world.reconciler.memory = ReconcileMemory()
        world.reconciler.run()
    return [
        (e.job_id, e.version, e.at, e.status, e.previous, e.reason, e.message)
        for job_id in ids
        for e in world.store.events(job_id)
    ]


@pytest.mark.parametrize("seed", range(4))
def test_a_memory_kept_between_runs_decides_as_runs_that_forget(seed: int) -> None:
    kept = _history(seed, forget=False)
    assert kept == _history(seed, forget=True)
    assert {event[5] for event in kept} >= {Reason.STARTED, Reason.COMPLETED}
