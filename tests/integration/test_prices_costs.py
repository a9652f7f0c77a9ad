"""A job's cost is at its group's refreshed price when the group takes its prices from EC2, and at
the configured one when it does not: the scale check refreshes, reconcile costs the job with
what it kept, and the fleet's overhead is counted at the same price (the local runtime, whose
PriceBook a test may set)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.local.prices import InMemoryPriceRecords, LocalPriceBook
from squall.local.runtime import LocalRuntime
from tests.e2e.helpers_runtime import P3_USW2, gan_job, is_done

pytestmark = pytest.mark.timeout(180)

CONFIGURED = 12.24
FROM_EC2 = 9.18
RUN_FOR = timedelta(hours=1)


def _finished_job(price_from: str | None) -> tuple[Any, LocalRuntime]:
    group = {**P3_USW2, "pricePerHour": CONFIGURED}
    if price_from is not None:
        group["priceFrom"] = price_from
    with LocalRuntime.start(backend="memory", node_groups=[group]) as local:
        # given EC2 lists p3.8xlarge in us-west-2 at another price than the configured one
        book = local.services.price_book
        assert isinstance(book, LocalPriceBook)
        assert book.on_demand == {("us-west-2", "p3.8xlarge"): CONFIGURED}  # the configured, by default
        book.on_demand[("us-west-2", "p3.8xlarge")] = FROM_EC2
        # when a job of the whole node (4 of 4 GPUs) runs for an hour
        local.cluster.set_behaviour("gan-1", run_for=RUN_FOR)
        local.send(gan_job("gan-1"))
        local.run(until=is_done, step=timedelta(seconds=30), limit=timedelta(hours=3))
        job = local.store.get("gan-1")
        return job, local


def _hours(job: Any) -> float:
    assert job.started_at is not None and job.finished_at is not None
    hours: float = (job.finished_at - job.started_at).total_seconds() / 3600
    assert hours == pytest.approx(RUN_FOR.total_seconds() / 3600, abs=1 / 60)
    return hours


def test_a_job_is_costed_at_the_refreshed_price_when_its_group_takes_prices_from_ec2() -> None:
    job, local = _finished_job("ec2")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.cost == pytest.approx(FROM_EC2 * _hours(job), rel=1e-6)
    # the scale check asked the price book, and kept what it said
    book = local.services.price_book
    assert isinstance(book, LocalPriceBook) and ("on-demand", "us-west-2", "p3.8xlarge") in book.calls
    records = local.services.price_records
    assert isinstance(records, InMemoryPriceRecords) and records.snapshot is not None
    assert records.snapshot.on_demand == {("us-west-2", "p3.8xlarge"): FROM_EC2}


@pytest.mark.parametrize("price_from", [None, "config"])
def test_a_job_is_costed_at_the_configured_price_otherwise(price_from: str | None) -> None:
    job, local = _finished_job(price_from)
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.cost == pytest.approx(CONFIGURED * _hours(job), rel=1e-6)
    book = local.services.price_book
    assert isinstance(book, LocalPriceBook) and book.calls == []


@pytest.mark.parametrize(("price_from", "held"), [("ec2", True), ("config", False)])
def test_admission_holds_a_job_to_its_budget_at_the_price_the_scale_check_refreshed(
    price_from: str, held: bool
) -> None:
    # given a $400 monthly budget, and a whole-node job that may run 24 h (its default maxRuntime):
    # $293.76 at the configured $12.24 an hour, $480 at the $20 EC2 lists now
    group = {**P3_USW2, "pricePerHour": CONFIGURED, "priceFrom": price_from}
    with LocalRuntime.start(backend="memory", node_groups=[group], budgets={"research": 400.0}) as local:
        book = local.services.price_book
        assert isinstance(book, LocalPriceBook)
        book.on_demand[("us-west-2", "p3.8xlarge")] = 20.0
        # when it is submitted and the scale check runs
        local.send(gan_job("gan-1"))
        local.run(
            until=lambda rt: (j := rt.store.get("gan-1")) is not None
            and (j.reason == "BudgetExceeded" or j.status is JobStatus.RUNNING),
            step=timedelta(seconds=30),
            limit=timedelta(minutes=30),
        )
        job = local.store.get("gan-1")
    # then admission prices its worst case as the refreshed group says: held, or running
    assert job is not None
    if held:
        assert (job.status, job.reason) == (JobStatus.QUEUED, "BudgetExceeded")
    else:
        assert job.status is JobStatus.RUNNING
