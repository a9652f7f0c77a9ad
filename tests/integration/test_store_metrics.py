"""The job store's issue-28 fields against moto and in memory: one contract.

A job's metrics are written by `set_metrics` without a new version or an event, and a
versioned save (of a record read before) leaves them as stored; a sweep's best trial is
written by a save like any field.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from squall.adapters.aws.job_store import DynamoJobStore, job_from_item, job_to_item
from squall.core.jobs import JobStatus, Reason, transition
from squall.core.metrics import MAX_RECORD_BYTES, JobMetrics, merge, to_json
from squall.local.memory import InMemoryJobStore
from tests.integration.test_store import T0, queued


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryJobStore()
    return DynamoJobStore(request.getfixturevalue("jobs_table"), "jobs")


def _metrics(*lines: str, cursor: str | None = "c-1") -> JobMetrics:
    return merge(None, lines, cursor=cursor)


def test_metrics_are_written_without_a_new_version_or_event_and_read_back(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    metrics = _metrics("squall-metric train/loss=0.231 step=400", "squall-metric eval/score=0.91 step=1000")
    assert store.set_metrics("j-1", metrics) is True
    stored = store.get("j-1")
    assert stored.metrics == metrics and stored.version == 1 and len(store.events("j-1")) == 1
    assert stored.metrics.get("eval/score").last.value == 0.91


def test_metrics_of_a_job_that_does_not_exist_are_not_written(store: Any) -> None:
    assert store.set_metrics("nobody", _metrics("squall-metric a=1")) is False
    assert store.get("nobody") is None


def test_a_save_of_a_record_read_before_keeps_the_metrics_written_since(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    read_before = store.get("j-1")
    metrics = _metrics("squall-metric loss=2 step=7")
    store.set_metrics("j-1", metrics)
    running, moved = transition(read_before, to=JobStatus.RUNNING, reason=Reason.STARTED, at=T0)
    store.save(running, moved)
    assert store.get("j-1").metrics == metrics and store.get("j-1").status is JobStatus.RUNNING
    # and metrics ride along a record saved later, as read after the write
    done, ended = transition(
        store.get("j-1"), to=JobStatus.SUCCEEDED, reason=Reason.EARLY_STOPPED, at=T0 + timedelta(hours=1)
    )
    store.save(done, ended)
    assert store.get("j-1").metrics == metrics and store.get("j-1").reason == "EarlyStopped"


def test_metrics_can_be_written_on_a_finished_job(store: Any) -> None:
    job, event = queued()
    store.create(job, event)
    store.save(*transition(job, to=JobStatus.FAILED, reason=Reason.APPLICATION_ERROR, at=T0))
    assert store.set_metrics("j-1", _metrics("squall-metric a=1")) is True
    assert store.get("j-1").metrics.get("a") is not None


def test_the_best_trial_is_saved_like_any_field(store: Any) -> None:
    job, event = queued(trial_ids=("j-1-t000", "j-1-t001"))
    store.create(job, event)
    best, moved = transition(job, to=JobStatus.QUEUED, reason=Reason.SWEEP_SUBMITTED, at=T0)
    store.save(replace(best, best_trial="j-1-t001"), moved)
    assert store.get("j-1").best_trial == "j-1-t001"


def test_a_job_created_with_metrics_keeps_them(store: Any) -> None:
    metrics = _metrics("squall-metric a=1", cursor=None)
    job, event = queued(metrics=metrics, best_trial="x-t000")
    store.create(job, event)
    assert store.get("j-1") == job


def test_the_largest_metrics_record_fits_beside_the_job() -> None:
    names = [f"m{j:02d}_" + "y" * 60 for j in range(32)]
    metrics = _metrics(
        *(f"squall-metric {n}=-3.3333333333333335e-300 step={10**15 - i}" for i in range(100) for n in names),
        cursor="z" * 4096,
    )
    assert len(to_json(metrics)) <= MAX_RECORD_BYTES
    job, _ = queued(metrics=metrics)
    assert job_from_item(job_to_item(job)) == job


def test_a_stored_metrics_attribute_that_does_not_read_is_no_metrics() -> None:
    job, _ = queued()
    item = job_to_item(job)
    item["metrics"] = {"S": "{broken"}
    assert job_from_item(item).metrics == JobMetrics()
    item["metrics"] = {"N": "3"}
    assert job_from_item(item).metrics == JobMetrics()
    del item["metrics"]
    assert job_from_item(item).metrics is None
