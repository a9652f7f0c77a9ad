"""Once one team names submitters, a team that names none takes nobody (issue 25, item 2).

The jobs queue's policy then lets only the named principals send, and a message's body
names its team: a team left open would take specs, cancels, serve and unserve requests
from every other team's submitters, and run their jobs in its namespace with its role.
Teams that all name submitters, and teams none of which does, behave as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from squall.core.jobs import JobStatus, Reason
from squall.core.serving import ServiceStatus
from squall.services.intake import Intake, IntakeOutcome
from tests.integration.conftest import IMAGE, World
from tests.integration.serving_world import BUCKET, ServingWorld, serve, serving_world

ALICE = "AROARESEARCHALICE"  # research's submitter (a role's unique id; SenderId adds ":<session>")
VICTOR = "AROAVISIONVICTOR"  # vision's own submitter, where vision names one
MALLORY = "AIDAMALLORYEXAMPLE"  # a principal no team names
RESEARCH_ONLY = {"research": frozenset({ALICE})}
VISION_OUTPUTS = f"s3://{BUCKET}/teams/vision/out"
EVERY_TEAM = {"research": frozenset({ALICE}), "vision": frozenset({VICTOR})}


def spec(**overrides: Any) -> str:
    return json.dumps(
        {"name": "train", "team": "research", "image": IMAGE, "resources": {"gpu": 1}} | overrides
    )


def submit(intake: Intake, *, job_id: str, team: str, sender: str | None) -> IntakeOutcome:
    return intake.handle(body=spec(id=job_id, team=team), message_id=f"m-{job_id}", sender_id=sender).outcome


# ---- one team names submitters, the other none ---------------------------------------------


@pytest.mark.parametrize("sender", [f"{ALICE}:alice", f"{MALLORY}:mallory", None])
def test_a_team_that_names_no_submitters_takes_no_spec_once_another_team_names_some(
    world: World, sender: str | None
) -> None:
    # given research names its submitters and vision none
    intake = world.new_intake(submitters=RESEARCH_ONLY)
    # when research's submitter (or anyone else) submits for vision
    result = intake.handle(body=spec(id="v-1", team="vision"), message_id="m-1", sender_id=sender)
    # then the spec is rejected with the reason, and nothing runs in team-vision
    assert result.outcome is IntakeOutcome.REJECTED
    (error,) = result.errors
    assert error["field"] == "team" and "'vision'" in error["message"]
    assert "names no submitters while other teams do" in error["message"]
    job = world.store.get(result.job_id)
    assert job is not None and job.status is JobStatus.REJECTED and job.reason == Reason.SENDER_NOT_ALLOWED
    assert world.store.get("v-1") is None and world.cluster.list_jobs() == []
    # while research's submitter still submits for research
    assert submit(intake, job_id="r-1", team="research", sender=f"{ALICE}:alice") is IntakeOutcome.CREATED


def test_a_job_of_a_team_that_names_no_submitters_cannot_be_cancelled_by_another_teams_submitter(
    world: World,
) -> None:
    # given a vision job queued while no team named submitters
    assert submit(world.new_intake(), job_id="v-1", team="vision", sender=MALLORY) is IntakeOutcome.CREATED
    # when research names submitters and its submitter cancels the vision job
    intake = world.new_intake(submitters=RESEARCH_ONLY)
    cancel = json.dumps({"action": "cancel", "id": "v-1"})
    refused = intake.handle(body=cancel, message_id="m-2", sender_id=f"{ALICE}:alice")
    # then the cancel is refused and the job still waits in the queue
    assert refused.outcome is IntakeOutcome.FORBIDDEN
    assert world.store.get("v-1").status is JobStatus.QUEUED  # type: ignore[union-attr]
    assert [entry.job_id for entry in world.store.queue()] == ["v-1"]


@pytest.fixture
def serving(aws_credentials: None) -> Iterator[ServingWorld]:
    yield from serving_world()


def test_a_team_that_names_no_submitters_takes_no_serve_or_unserve_from_another_teams_submitter(
    serving: ServingWorld,
) -> None:
    # given a finished vision job, and a model service of it made while no team named submitters
    for job_id in ("vision-1", "vision-2"):
        serving.finished_job(job_id, team="vision", output_uri=VISION_OUTPUTS)
    assert serving.handle(serve("vision-1", name="seg"), message_id="m-1").outcome is IntakeOutcome.CREATED
    # when research names submitters and its submitter asks to serve and unserve vision's models
    serving.submitters = dict(RESEARCH_ONLY)
    served = serving.handle(serve("vision-2", name="seg2"), message_id="m-2", sender_id=f"{ALICE}:alice")
    unserved = serving.handle(
        {"action": "unserve", "name": "seg"}, message_id="m-3", sender_id=f"{ALICE}:alice"
    )
    # then both are refused and nothing changes in team-vision
    assert served.outcome is IntakeOutcome.REJECTED
    assert "may not serve for team 'vision'" in served.errors[0]["message"]
    assert serving.services.get("seg2") is None and serving.cluster.of("seg2") == []
    assert unserved.outcome is IntakeOutcome.FORBIDDEN
    assert serving.services.get("seg").status is ServiceStatus.DEPLOYING  # type: ignore[union-attr]
    assert serving.cluster.of("seg") == ["Deployment", "PodDisruptionBudget", "Service"]


# ---- every team names submitters, or none does: as before ----------------------------------


def test_when_every_team_names_submitters_each_takes_its_own_and_no_other(world: World) -> None:
    intake = world.new_intake(submitters=EVERY_TEAM)
    assert submit(intake, job_id="r-1", team="research", sender=f"{ALICE}:a") is IntakeOutcome.CREATED
    assert submit(intake, job_id="v-1", team="vision", sender=f"{VICTOR}:v") is IntakeOutcome.CREATED
    assert submit(intake, job_id="v-2", team="vision", sender=f"{ALICE}:a") is IntakeOutcome.REJECTED
    assert submit(intake, job_id="r-2", team="research", sender=f"{VICTOR}:v") is IntakeOutcome.REJECTED
    refused = intake.handle(body=spec(id="r-3"), message_id="m-r-3", sender_id=MALLORY)
    assert "it is not one of the team's submitters" in refused.errors[0]["message"]
    assert {j.id for j in world.store.list_by_status(JobStatus.QUEUED)} == {"r-1", "v-1"}


@pytest.mark.parametrize("sender", [f"{MALLORY}:m", f"{ALICE}:a", None])
def test_when_no_team_names_submitters_every_team_takes_any_sender(world: World, sender: str | None) -> None:
    intake = world.new_intake(submitters={})
    assert submit(intake, job_id="r-1", team="research", sender=sender) is IntakeOutcome.CREATED
    assert submit(intake, job_id="v-1", team="vision", sender=sender) is IntakeOutcome.CREATED
