"""Who may submit for a team, on the local runtime: the sender SQS reports decides, not the body."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.local.runtime import LocalRuntime

IMAGE = "registry.example.com/squall/tf-trainer:1.0"
TRAINER = "AROAEXAMPLEROLEID0001"  # the research team's submitter role (its unique id)
INTRUDER = "AROAEXAMPLEROLEID0002"  # another role in the account
ZERO = timedelta(0)


def job(job_id: str, team: str = "research") -> dict[str, Any]:
    return {"name": "gan", "id": job_id, "team": team, "image": IMAGE, "resources": {"cpu": "1", "memory": "1Gi"}}


@pytest.mark.parametrize("backend", ["memory", "moto"])
def test_a_teams_submitters_may_submit_and_cancel_and_no_one_else(backend: str) -> None:
    with LocalRuntime.start(backend=backend, submitters={"research": [TRAINER]}) as local:
        # given jobs for the research team from its submitter (a session of its role)
        # and from another role, and for vision, a team that names no submitters
        local.send(job("mine"), sender=f"{TRAINER}:alice")
        intruding = local.send(job("theirs"), sender=f"{INTRUDER}:mallory")
        local.send(job("closed", team="vision"), sender=f"{INTRUDER}:mallory")
        local.send(job("borrowed", team="vision"), sender=f"{TRAINER}:alice")
        # when the submit function takes them
        local.step(ZERO)
        # then the submitter's job is queued, and who sent it is kept
        mine = local.store.get("mine")
        assert mine is not None and mine.status is JobStatus.QUEUED
        assert mine.submitted_by == f"{TRAINER}:alice"
        # the other sender's job for research is refused, with the reason, and not retried
        assert local.store.get("theirs") is None, "a refused job does not take the id it asked for"
        (theirs,) = [j for j in local.jobs() if j.message_id == intruding]
        assert theirs.status is JobStatus.REJECTED and theirs.submitted_by == f"{INTRUDER}:mallory"
        (event,) = [e for e in local.events(theirs.id) if e.status is JobStatus.REJECTED]
        assert INTRUDER in event.message and "research" in event.message
        assert local.dead_letters() == [] and local.queue.next_visible_at() is None
        assert local.cluster.list_jobs(job_id="theirs") == []
        # a team with no submitters takes nobody's once research names its own, research's
        # submitter's neither: it would run in team-vision with vision's role
        assert local.store.get("closed") is None and local.store.get("borrowed") is None
        assert local.cluster.list_jobs(job_id="borrowed") == []
        assert {j.submitted_by for j in local.jobs() if j.team == "vision"} == {
            f"{INTRUDER}:mallory",
            f"{TRAINER}:alice",
        }
        assert all(j.status is JobStatus.REJECTED for j in local.jobs() if j.team == "vision")
        # and a cancel of the submitter's job from the other sender changes nothing
        local.send({"action": "cancel", "id": "mine"}, sender=f"{INTRUDER}:mallory")
        local.step(ZERO)
        assert local.store.get("mine").status is JobStatus.QUEUED  # type: ignore[union-attr]
        local.send({"action": "cancel", "id": "mine"}, sender=f"{TRAINER}:alice")
        local.step(ZERO)
        assert local.store.get("mine").status is JobStatus.CANCELLED  # type: ignore[union-attr]
