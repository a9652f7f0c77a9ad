"""scenarios/preemption.yaml end to end: a long low-priority run is preempted for an urgent job,
goes back to the queue and resumes from its latest checkpoint (the simulated trainer's), so
its run time in all is its work and what it lost since that checkpoint, not a start over.

The real functions on the simulated cluster and fleet, as `squall local run --scenario` runs it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.core.jobs import Job, JobStatus
from squall.local.runtime import LocalRuntime
from squall.local.scenario import Simulation, SimulationResult, load_scenario

pytestmark = pytest.mark.timeout(120)

SCENARIO = Path(__file__).parents[2] / "scenarios" / "preemption.yaml"
WORK = timedelta(hours=5)  # pretrain's runTime
EVERY = timedelta(minutes=30)  # its checkpointEvery
URGENT_AT = timedelta(hours=2)


@pytest.fixture(scope="module")
def outcome() -> tuple[SimulationResult, dict[str, Job], dict[str, list[tuple[str, str]]]]:
    seen: dict[str, Any] = {}

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        seen["jobs"] = {job.id: job for job in local.jobs()}
        seen["history"] = {
            job.id: [(str(e.reason), e.message) for e in local.events(job.id)] for job in local.jobs()
        }

    plan = load_scenario(SCENARIO)
    result = Simulation(plan, backend="memory", pace=False, lists="checked").run(after=after)
    return result, seen["jobs"], seen["history"]


def test_the_run_ends_with_every_job_done_and_its_invariants_holding(
    outcome: tuple[SimulationResult, dict[str, Job], dict[str, list[tuple[str, str]]]],
) -> None:
    result, jobs, _ = outcome
    assert result.ok, (result.checks, result.notes)
    assert result.summary["functionErrors"] == {}
    assert {job_id: job.status for job_id, job in jobs.items()} == {
        "pretrain": JobStatus.SUCCEEDED,
        "urgent-eval": JobStatus.SUCCEEDED,
    }


def test_the_long_run_is_preempted_for_the_urgent_job_and_resumes_from_its_checkpoint(
    outcome: tuple[SimulationResult, dict[str, Job], dict[str, list[tuple[str, str]]]],
) -> None:
    result, jobs, history = outcome
    start = load_scenario(SCENARIO).start
    pretrain, urgent = jobs["pretrain"], jobs["urgent-eval"]
    reasons = [reason for reason, _ in history["pretrain"]]
    # it was preempted once, by the urgent job, and no retry was used for it
    assert reasons.count("Preempted:by urgent-eval") == 1, reasons
    assert pretrain.retries_used == 0
    preempted = next(message for reason, message in history["pretrain"] if reason.startswith("Preempted"))
    assert "back in the queue at the head of its priority" in preempted
    # the urgent job started soon after it arrived, and finished before the long run did
    assert urgent.started_at is not None and urgent.finished_at is not None
    assert urgent.started_at - (start + URGENT_AT) < timedelta(minutes=10)
    assert pretrain.finished_at is not None and pretrain.started_at is not None
    assert urgent.finished_at <= pretrain.started_at, "the long run resumed once the urgent job was done"
    # its first run is kept in ran_seconds; its last run did only what its checkpoints had not saved
    first_run = timedelta(seconds=pretrain.ran_seconds)
    assert URGENT_AT - timedelta(hours=1) < first_run < URGENT_AT + timedelta(minutes=10)
    saved = (first_run // EVERY) * EVERY
    last_run = pretrain.finished_at - pretrain.started_at
    assert abs(last_run - (WORK - saved)) <= timedelta(minutes=1), (first_run, saved, last_run)
    assert last_run < WORK - timedelta(hours=1), "it did not start over"
    assert first_run + last_run < WORK + EVERY, "at most one checkpoint interval of work done twice"
    assert result.summary["invariants"]["lostJobs"] == 0
