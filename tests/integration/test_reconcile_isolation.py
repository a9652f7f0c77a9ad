"""One job that reconcile cannot handle fails alone: the others are reconciled all the same."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from squall.core.errors import RetryableError
from squall.core.jobs import JobStatus, Reason, note
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


def poison(world: World, job_id: str, spec: dict[str, Any], **changes: Any) -> None:
    """Replace a stored job's spec with one that no longer validates (an older release, a hand edit)."""
    job = world.store.get(job_id)
    assert job is not None
    noted, event = note(job, reason="Edited", at=world.clock.now())
    world.store.save(dataclasses.replace(noted, spec=spec, reason=job.reason, **changes), event)


def from_before_the_queue(world: World, job_id: str, spec: dict[str, Any]) -> None:
    """A queued record written before jobs had a queue shape (its objects then made at submit),
    with a spec that no longer validates: its objects gone, reconcile needs the spec to queue it."""
    poison(world, job_id, spec, queue_shape="")


def healthy(world: World, *job_ids: str) -> None:
    for job_id in job_ids:
        submit(world, job_id)
        world.cluster.set_behaviour(job_id, run_for=timedelta(minutes=2))


def test_a_poisoned_sweep_trial_fails_alone_and_the_others_succeed(world: World) -> None:
    # given healthy jobs next to a sweep whose waiting trial's stored spec no longer loads
    world.add_gpu_nodes(2)
    healthy(world, "ok-1", "ok-2")
    submit(world, "sw", sweep={"parameters": {"lr": [1, 2, 3]}, "maxTrials": 3, "parallelism": 1})
    for trial in ("sw-t000", "sw-t001", "sw-t002"):
        world.cluster.set_behaviour(trial, run_for=timedelta(minutes=1))
    poison(world, "sw-t001", {"name": "train", "team": "research", "image": IMAGE, "args": ["x"] * 300})
    # when reconcile runs every minute
    world.run(minutes=12)
    # then the healthy jobs finished, the poisoned trial failed with the reason, the sweep went on
    assert world.store.get("ok-1").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
    assert world.store.get("ok-2").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
    poisoned = world.store.get("sw-t001")
    assert poisoned is not None and poisoned.status is JobStatus.FAILED
    assert poisoned.reason == Reason.INVALID_STORED_SPEC
    assert "args" in world.store.events("sw-t001")[-1].message
    assert world.store.get("sw-t002").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
    parent = world.store.get("sw")
    assert parent is not None and parent.status is JobStatus.SUCCEEDED
    assert world.store.events("sw")[-1].message == "2/3 trials succeeded"
    assert world.metrics.total("JobErrors") == 1


def test_a_job_that_must_go_back_in_the_queue_from_a_poisoned_spec_fails_alone(world: World) -> None:
    world.add_gpu_nodes(2)
    healthy(world, "ok-1")
    submit(world, "gone")
    from_before_the_queue(world, "gone", {"name": "Not A Label", "team": "research", "image": IMAGE})
    world.run(minutes=5)
    gone = world.store.get("gone")
    assert gone is not None and gone.status is JobStatus.FAILED and gone.reason == Reason.INVALID_STORED_SPEC
    assert world.store.get("ok-1").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]


def test_a_sweep_whose_own_spec_no_longer_loads_fails_with_its_waiting_trials(world: World) -> None:
    world.add_gpu_nodes(2)
    healthy(world, "ok-1")
    submit(world, "sw", sweep={"parameters": {"lr": [1, 2, 3]}, "maxTrials": 3, "parallelism": 1})
    world.cluster.set_behaviour("sw-t000", run_for=timedelta(minutes=30))
    poison(world, "sw", {"name": "train", "team": "research", "image": "no such image!"})
    world.run(minutes=4)
    assert world.store.get("sw").status is JobStatus.FAILED  # type: ignore[union-attr]
    assert {world.store.get(t).status for t in ("sw-t001", "sw-t002")} == {JobStatus.FAILED}  # type: ignore[union-attr]
    assert world.store.get("sw-t000").status is JobStatus.RUNNING, "a started trial runs on"  # type: ignore[union-attr]
    assert world.store.get("ok-1").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]


def test_an_unexpected_exception_on_one_job_fails_that_job_only(world: World) -> None:
    world.add_gpu_nodes(2)
    healthy(world, "ok-1", "ok-2")
    submit(world, "odd", retries=1)
    world.cluster.set_behaviour("odd", run_for=timedelta(minutes=30))
    world.run(minutes=1)
    assert world.store.get("odd").status is JobStatus.RUNNING  # type: ignore[union-attr]
    original = world.cluster.delete_job_objects
    original(namespace="team-research", job_id="odd")  # its objects gone: reconcile deletes what is left

    def delete_job_objects(*, namespace: str, job_id: str) -> int:
        if job_id == "odd":
            raise RuntimeError("an adapter bug")
        return original(namespace=namespace, job_id=job_id)

    world.cluster.delete_job_objects = delete_job_objects  # type: ignore[method-assign]
    report = world.reconciler.run()  # inside the create grace: nothing to do yet
    world.run(minutes=5)
    odd = world.store.get("odd")
    assert odd is not None and odd.status is JobStatus.FAILED and odd.reason == "ReconcileError:RuntimeError"
    assert "an adapter bug" in world.store.events("odd")[-1].message
    assert {world.store.get(j).status for j in ("ok-1", "ok-2")} == {JobStatus.SUCCEEDED}  # type: ignore[union-attr]
    assert report.errors == []


def test_the_platform_being_down_for_one_job_leaves_it_for_the_next_run(world: World) -> None:
    world.add_gpu_nodes(2)
    healthy(world, "ok-1")
    submit(world, "later", retries=1)
    world.cluster.set_behaviour("later", run_for=timedelta(minutes=2))
    world.run(minutes=1)
    world.cluster.delete_job_objects(namespace="team-research", job_id="later")
    world.clock.advance(timedelta(minutes=2))
    world.cluster.fail_calls("delete_job_objects", RetryableError("503 from the API server"))
    report = world.reconciler.run()
    assert any("later" in e and "503" in e for e in report.errors)
    later = world.store.get("later")
    assert later is not None and later.status is JobStatus.RUNNING and later.cluster == "local"
    world.run(minutes=5)
    assert world.store.get("later").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
    assert world.metrics.total("JobErrors") == 0


@pytest.mark.parametrize("spec", [{}, {"name": 5}, {"sweep": "x"}, {"name": "train", "team": "research"}])
def test_the_reconcile_handler_never_fails_for_one_poisoned_job(world: World, spec: dict[str, Any]) -> None:
    world.add_gpu_nodes(1)
    healthy(world, "ok-1")
    submit(world, "bad")
    from_before_the_queue(world, "bad", spec or {"x": 1})
    world.run(minutes=4)
    assert world.store.get("bad").status is JobStatus.FAILED  # type: ignore[union-attr]
    assert world.store.get("ok-1").status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
