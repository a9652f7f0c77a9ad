"""From cdk.json to the submit function: who may submit for a team that names no submitters.

The ``full`` app names submitters for research and none for vision, as docs/deploy.md's
example once did; ``large`` names them for every team. The settings file the stack writes
for the submit function is read as the function reads it at cold start, and handed to its
intake as runtime.py does (with the unique ids IAM would return): a team that names no
submitters while another does takes nobody, research's submitters included; teams that all
name them each take their own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from squall.core.jobs import JobStatus, Reason
from squall.core.settings import Settings
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.services.intake import Intake, IntakeConfig, IntakeOutcome
from stacks import constants

from .helpers import logical_id
from .scenario import ACCOUNT, SUBMITTER_ID, SUBMITTER_ROLE, SUBMITTER_USER, Synthesis

pytestmark = pytest.mark.slow

# The unique ids IAM returns for the ARNs (runtime.py resolve_submitters); a unique id is itself.
ROLE_ID = "AROAEXAMPLETRAINER01"
USER_ID = "AIDAEXAMPLEALICE0001"


def submit_settings(synthesis: Synthesis, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The submit function's settings, read from the synthesised asset as at cold start."""
    staged = next(synthesis.outdir.glob(".squall-asset-squall-control-plane"))
    monkeypatch.setenv("LAMBDA_TASK_ROOT", str(staged))
    monkeypatch.setenv("SQUALL_SETTINGS_FILE", f"{constants.SETTINGS_DIR}/submit.json")
    monkeypatch.setenv("SQUALL_TABLE_NAME", "squall-jobs")
    return Settings()


def intake_of(settings: Settings, unique_ids: Mapping[str, str]) -> Intake:
    clock = VirtualClock()
    submitters = {
        team: frozenset(unique_ids.get(p, p) for p in principals)
        for team, principals in settings.submitters.items()
    }
    return Intake(
        store=InMemoryJobStore(),
        clusters={
            cluster.name: SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=1))
            for cluster in settings.clusters
        },
        clock=clock,
        metrics=RecordingMetrics(clock),
        config=IntakeConfig(
            teams=settings.teams, registries=settings.allowed_registries, submitters=submitters
        ),
    )


def spec(settings: Settings, *, job_id: str, team: str) -> str:
    image = f"{settings.allowed_registries[0]}/squall/tf-trainer:1.0"
    return json.dumps({"name": "train", "id": job_id, "team": team, "image": image, "resources": {"gpu": 1}})


def queue_deny(synthesis: Synthesis) -> dict[str, Any]:
    """The jobs queue policy's Deny: who may not send at all."""
    template = synthesis.template(synthesis.stacks.control_plane).to_json()
    jobs = logical_id(synthesis.stacks.control_plane.queues.jobs)
    (policy,) = [
        r["Properties"]["PolicyDocument"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::SQS::QueuePolicy" and r["Properties"]["Queues"] == [{"Ref": jobs}]
    ]
    (deny,) = [s for s in policy["Statement"] if s.get("Sid") == "OnlyTeamSubmittersSend"]
    return dict(deny)


def test_a_team_that_names_no_submitters_takes_nobody_when_another_team_names_some(
    full: Synthesis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given cdk.json names research's submitters and none for vision
    settings = submit_settings(full, monkeypatch)
    assert settings.teams == {"research": "team-research", "vision": "team-vision"}
    intake = intake_of(settings, {SUBMITTER_ROLE: ROLE_ID, SUBMITTER_USER: USER_ID})
    # the jobs queue lets research's submitters send, and nobody else
    deny = queue_deny(full)
    assert deny["Condition"]["ArnNotLike"] == {"aws:PrincipalArn": sorted([SUBMITTER_ROLE, SUBMITTER_USER])}
    for sender in (f"{ROLE_ID}:trainer", USER_ID, f"{SUBMITTER_ID}:ci"):
        # when one of research's submitters submits for vision
        result = intake.handle(
            body=spec(settings, job_id="v-1", team="vision"), message_id=f"m-{sender}", sender_id=sender
        )
        # then the submit function refuses it: no job runs in team-vision with vision's role
        assert result.outcome is IntakeOutcome.REJECTED, sender
        assert "team 'vision'" in result.errors[0]["message"]
        job = intake.store.get(result.job_id)
        assert job is not None and job.reason == Reason.SENDER_NOT_ALLOWED
    assert intake.store.get("v-1") is None
    assert [job for cluster in intake.clusters.values() for job in cluster.list_jobs()] == []
    # and research's submitters still submit for research
    created = intake.handle(
        body=spec(settings, job_id="r-1", team="research"), message_id="m-r", sender_id=f"{ROLE_ID}:trainer"
    )
    assert created.outcome is IntakeOutcome.CREATED
    assert intake.store.get("r-1").status is JobStatus.QUEUED  # type: ignore[union-attr]


def test_teams_that_all_name_submitters_each_take_their_own(
    large: Synthesis, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = submit_settings(large, monkeypatch)
    assert len(settings.submitters) == len(settings.teams) == 12
    ids = {f"arn:aws:iam::{ACCOUNT}:role/team-{i}-submitter": f"AROAEXAMPLETEAM{i:05d}" for i in range(12)}
    intake = intake_of(settings, ids)
    own = intake.handle(
        body=spec(settings, job_id="a-1", team="team0"), message_id="m-1", sender_id="AROAEXAMPLETEAM00000:s"
    )
    other = intake.handle(
        body=spec(settings, job_id="b-1", team="team1"), message_id="m-2", sender_id="AROAEXAMPLETEAM00000:s"
    )
    assert (own.outcome, other.outcome) == (IntakeOutcome.CREATED, IntakeOutcome.REJECTED)
    assert "it is not one of the team's submitters" in other.errors[0]["message"]
