"""The job store's issue-27 fields against moto and in memory: one contract.

Start estimates are written without a new version (first ones kept), only while the job is
queued; costs and run time kept across a requeue round-trip as numbers DynamoDB takes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from squall.adapters.aws.job_store import DynamoJobStore
from squall.core.jobs import JobStatus, Reason, transition
from squall.local.memory import InMemoryJobStore
from tests.integration.test_store import T0, queued


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryJobStore()
    return DynamoJobStore(request.getfixturevalue("jobs_table"), "jobs")


def test_estimates_are_written_without_a_new_version_and_the_first_ones_are_kept(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    first = (T0 + timedelta(hours=2), T0 + timedelta(hours=1))
    assert store.set_estimates("j-1", starts_by=first[0], likely_start=first[1]) is True
    later = (T0 + timedelta(hours=3), T0 + timedelta(minutes=90))
    assert store.set_estimates("j-1", starts_by=later[0], likely_start=later[1]) is True
    stored = store.get("j-1")
    assert stored.version == job.version and len(store.events("j-1")) == 1
    assert (stored.starts_by, stored.likely_start) == later
    assert (stored.first_starts_by, stored.first_likely_start) == first


def test_estimates_are_not_written_once_the_job_left_the_queue(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    running, moved = transition(job, to=JobStatus.RUNNING, reason=Reason.STARTED, at=T0)
    store.save(running, moved)
    assert store.set_estimates("j-1", starts_by=T0, likely_start=T0) is False
    assert store.get("j-1").starts_by is None


def test_costs_and_run_time_round_trip(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    costed = replace(job, version=2, cost=12.345678901, cost_rate=3.06, spot_savings=1.5, ran_seconds=7200.25)
    store.save(costed, replace(event, version=2, reason="Started"))
    stored = store.get("j-1")
    # (DynamoDB keeps a millionth of a dollar; the memory store the float as it is)
    assert stored.cost == pytest.approx(12.345679, abs=1e-6)
    assert (stored.cost_rate, stored.spot_savings, stored.ran_seconds) == (3.06, 1.5, 7200.25)
