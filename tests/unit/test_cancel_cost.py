"""A running job that is cancelled gets its cost, added to its team's month once."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

from squall.core.jobs import JobStatus, note
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.cost_ledger import InMemoryCostLedger
from squall.local.memory import InMemoryJobStore
from squall.services.costs import JobCosting
from squall.services.intake import Intake, IntakeConfig


def test_a_cancelled_running_job_is_costed_from_its_rate() -> None:
    clock = VirtualClock()
    store, ledger, metrics = InMemoryJobStore(), InMemoryCostLedger(), RecordingMetrics(clock)
    cluster = SimulatedCluster(clock=clock)
    intake = Intake(
        store=store,
        clusters={"local": cluster},
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(teams={"research": "team-research"}, registries=["registry.example.com/squall"]),
        costs=JobCosting(groups=[], ledger=ledger, history=store, metrics=metrics),
    )
    body = {"name": "t", "id": "t-1", "team": "research", "image": "registry.example.com/squall/t:1"}
    intake.handle(body=json.dumps(body), message_id="m-1")
    job = store.get("t-1")
    assert job is not None
    # given: it has run for two hours at $6 an hour (as reconcile records a run's start and rate)
    running, event = note(job, reason="Started", at=clock.now())
    store.save(
        dataclasses.replace(running, status=JobStatus.RUNNING, started_at=clock.now(), cost=0.0, cost_rate=6.0),
        dataclasses.replace(event, status=JobStatus.RUNNING),
    )
    clock.advance(timedelta(hours=2))
    # when: it is cancelled
    intake.handle(body=json.dumps({"action": "cancel", "id": "t-1"}), message_id="m-2")
    # then: its record has its cost, and its team's month has it once
    cancelled = store.get("t-1")
    assert cancelled is not None and cancelled.status is JobStatus.CANCELLED
    assert cancelled.cost == 12.0 and cancelled.cost_rate is None
    assert ledger.finished_in_month(now=clock.now()) == {"research": 12.0}
