"""A scenario whose teams name their submitters: who sends a job decides whether it runs.

The scenario hands its team -> submitters mapping to the local runtime and each
arrival's sender to the jobs queue, which reports it as the SenderId; the submit
function accepts a spec only from a submitter of its team (a team without submitters
takes nobody's once another team names its own).
"""

from __future__ import annotations

from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.local.runtime import LocalRuntime
from squall.local.scenario import Simulation, SimulationResult, compile_scenario
from tests.groups import gpu_group

GROUP = gpu_group("p3-usw2", "p3.2xlarge", max_size=4)
SPEC = {
    "name": "resnet",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"gpu": 1},
}
SCENARIO: dict[str, Any] = {
    "name": "senders",
    "nodeGroups": [GROUP],
    "teams": {
        "research": {"namespace": "team-research", "submitters": ["AROAEXAMPLERESEARCH"]},
        "vision": "team-vision",
    },
    "defaultRunTime": "2m",
    "arrivals": [
        {"at": 0, "spec": SPEC | {"id": "by-research"}, "sender": "AROAEXAMPLERESEARCH:alice"},
        {
            "at": 0,
            "spec": SPEC | {"id": "by-stranger"},
            "sender": "AROAEXAMPLESTRANGER:mallory",
            "expect": "rejected",
        },
        {"at": 0, "spec": SPEC | {"id": "anonymous"}, "expect": "rejected"},
        {
            "at": "1m",
            "spec": SPEC | {"id": "other-team", "team": "vision"},
            "sender": "AROAEXAMPLERESEARCH:alice",
            "expect": "rejected",
        },
    ],
}


@pytest.fixture(scope="module")
def outcome() -> tuple[SimulationResult, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        seen["jobs"] = {job.id: job for job in local.jobs()}

    result = Simulation(compile_scenario(SCENARIO), backend="memory", pace=False).run(after=after)
    return result, seen["jobs"]


@pytest.mark.timeout(300)
def test_a_submitter_of_the_team_gets_its_job_run(outcome: tuple[SimulationResult, dict[str, Any]]) -> None:
    result, jobs = outcome
    assert result.ok, result.summary
    assert jobs["by-research"].status is JobStatus.SUCCEEDED
    assert jobs["by-research"].submitted_by == "AROAEXAMPLERESEARCH:alice"
    # a team without submitters takes nobody's, research's submitter's neither
    assert "other-team" not in jobs


@pytest.mark.timeout(300)
def test_anyone_else_is_refused_with_the_reason(outcome: tuple[SimulationResult, dict[str, Any]]) -> None:
    _, jobs = outcome
    rejected = [job for job in jobs.values() if job.status is JobStatus.REJECTED]
    assert len(rejected) == 3
    messages = sorted(error["message"] for job in rejected for error in job.errors)
    assert any("AROAEXAMPLESTRANGER may not submit for team 'research'" in m for m in messages), messages
    # without a sender, the queue reports the runtime's own principal, which is no submitter either
    assert sum("may not submit for team 'research'" in m for m in messages) == 2, messages
    assert any("AROAEXAMPLERESEARCH may not submit for team 'vision'" in m for m in messages), messages
    assert "AROAEXAMPLESTRANGER:mallory" in {job.submitted_by for job in rejected}
