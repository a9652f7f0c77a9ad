"""Reconcile sees every active job, however long the queue is."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.local.memory import InMemoryJobStore
from tests.integration.conftest import IMAGE, World
from tests.integration.test_reconcile_clusters import place


def placed(world: World, job_id: str) -> None:
    """Admit one job by hand, whatever its place in the queue: its objects made in the world's cluster."""
    job = world.store.get(job_id)
    assert job is not None
    place(world.store, world.cluster, job, cluster_name="local", region="us-west-2", at=world.clock.now())


def test_a_job_behind_a_thousand_queued_ones_is_still_seen_to_fail() -> None:
    world = World.over(InMemoryJobStore(), run_for=timedelta(minutes=3))
    for i in range(1100):
        body = {
            "name": "t",
            "id": f"j{i:04d}",
            "team": "research",
            "image": IMAGE,
            "resources": {"gpu": 1},
            "maxRuntime": "2m",
        }
        world.intake.handle(body=json.dumps(body), message_id=f"m-{i}")
        world.clock.advance(timedelta(seconds=1))
    # the newest job is admitted and runs into its deadline (no node to run on)
    placed(world, "j1099")
    world.clock.advance(timedelta(minutes=5))
    world.cluster.advance()
    world.reconciler.run()
    job = world.store.get("j1099")
    assert job is not None and job.status is JobStatus.FAILED and job.reason == "DeadlineExceeded"


def test_a_run_that_reads_what_the_last_one_read_observes_nothing_until_a_grace_is_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import squall.services.reconcile as reconcile

    calls: list[str] = []
    real = reconcile.observe

    def counted(**kwargs: Any) -> Any:
        calls.append("observe")
        return real(**kwargs)

    monkeypatch.setattr(reconcile, "observe", counted)
    world = World.over(InMemoryJobStore(), run_for=timedelta(hours=3))
    reconciler = world.reconciler
    body = {"name": "t", "id": "lost", "team": "research", "image": IMAGE, "resources": {"gpu": 1}}
    world.intake.handle(body=json.dumps(body), message_id="m-lost")
    placed(world, "lost")
    world.cluster.delete_job_objects(namespace="team-research", job_id="lost")  # its objects went missing
    reconciler.run()
    first = len(calls)
    quiet = reconciler.memory.quiet
    assert first == 1 and quiet is not None and quiet.until is not None  # waits out the create grace
    reconciler.run()
    assert len(calls) == first, "nothing changed, no grace due: nothing observed"
    # when the grace is over, the same reads are looked at again, and the job goes back in the queue
    world.clock.advance(quiet.until - world.clock.now())
    report = reconciler.run()
    assert report.recreated == ["lost"]
    gauges = [m for m in world.metrics.points if m.name == "JobsInState"]
    assert len(gauges) == 2 * 3, "the gauges go out on every run, a quiet one too"
