"""Reconcile records a job's cost: its rate when it starts, what it cost when it ends, and adds
that to its team's month in the ledger once (the job store and ledger on moto, the simulated cluster)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.adapters.aws.cost_ledger import DynamoCostLedger
from squall.core.costs import charge, month_key
from squall.core.jobs import JobStatus
from squall.planner import GroupInstance, NodeGroup, Resources
from squall.services.costs import JobCosting, TeamSpend
from tests.integration.conftest import World
from tests.integration.test_reconcile import reasons, submit

GIB = 1024**3


def spot_group(**fields: Any) -> NodeGroup:
    """The group of World's GPU nodes (joined by instance id): 4 GPUs at $4/h spot, $12/h on demand."""
    values: dict[str, Any] = {
        "name": "p3-spot",
        "region": "us-west-2",
        "instance_type": "p3.8xlarge",
        "allocatable": Resources(cpu=32_000, memory=244 * GIB, gpu=4, pods=58),
        "max_size": 4,
        "price_per_hour": 4.0,
        "spot": True,
        "on_demand_price_per_hour": 12.0,
        "instances": tuple(
            GroupInstance(
                instance_id=f"i-2{i:016d}",
                lifecycle_state="InService",
                launch_time=datetime(2026, 1, 1, tzinfo=UTC),
            )
            for i in range(3)
        ),
    }
    values.update(fields)
    return NodeGroup(**values)


@pytest.fixture
def ledger(jobs_table: Any) -> DynamoCostLedger:
    return DynamoCostLedger(jobs_table, "jobs")


def count_costs(world: World, ledger: DynamoCostLedger, groups: list[NodeGroup]) -> None:
    world.reconciler.costs = JobCosting(
        groups=groups, ledger=ledger, history=world.store, metrics=world.metrics
    )


def test_a_finished_job_carries_its_cost_and_its_team_month_counts_it_once(
    world: World, ledger: DynamoCostLedger
) -> None:
    # given a 1-GPU job on a 4-GPU spot node: $1/h, saving $2/h, for 30 minutes
    count_costs(world, ledger, [spot_group()])
    world.add_gpu_nodes(1)
    submit(world, "paid-1")
    world.cluster.set_behaviour("paid-1", run_for=timedelta(minutes=30))
    world.run(minutes=2)
    running = world.store.get("paid-1")
    assert running is not None and running.status is JobStatus.RUNNING
    assert (running.cost_rate, running.cost, running.spot_savings) == (1.0, 0.0, 0.0)
    # when it ends
    world.run(minutes=31)
    # then its record says what it cost and saved, and its team's month counts it once
    job = world.store.get("paid-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.started_at is not None and job.finished_at is not None
    hours = (job.finished_at - job.started_at).total_seconds() / 3600
    assert hours == pytest.approx(0.5, abs=1 / 60)
    assert job.cost == pytest.approx(1.0 * hours) and job.spot_savings == pytest.approx(2.0 * hours)
    assert job.cost_rate is None
    (row,) = ledger.team_months(since=job.finished_at)
    assert (row.team, row.month, row.jobs) == ("research", month_key(job.finished_at), 1)
    assert row.dollars == pytest.approx(job.cost, abs=1e-6) and row.gpu_hours == pytest.approx(hours)
    assert world.metrics.total("JobCost") == pytest.approx(job.cost)
    # and more runs, or the same end offered again, add nothing
    world.run(minutes=2)
    again = charge(job, run_start=job.started_at)
    assert again is not None and ledger.add_job(again) is False
    assert ledger.team_months(since=job.finished_at)[0].jobs == 1


def test_a_job_on_a_node_of_no_configured_group_ends_with_no_cost_and_says_why(
    world: World, ledger: DynamoCostLedger, caplog: pytest.LogCaptureFixture
) -> None:
    # (a local runtime run earlier in this process sets Squall's loggers to WARNING)
    caplog.set_level(logging.INFO, logger="squall.squall.services.costs")
    count_costs(world, ledger, [spot_group(instances=(), instance_type="g5.xlarge")])
    world.add_gpu_nodes(1)
    submit(world, "free-1")
    world.cluster.set_behaviour("free-1", run_for=timedelta(minutes=5))
    world.run(minutes=8)
    job = world.store.get("free-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert (job.cost, job.cost_rate, job.spot_savings) == (None, None, None)
    assert ledger.team_months(since=job.submitted_at) == []
    why = [getattr(r, "why", "") for r in caplog.records if r.getMessage() == "job cost unknown"]
    assert why and all("matches no configured node group" in text for text in why)


def test_a_run_lost_with_its_node_keeps_its_cost_and_time_and_the_next_run_adds_to_them(
    world: World, ledger: DynamoCostLedger
) -> None:
    count_costs(world, ledger, [spot_group()])
    world.add_gpu_nodes(2)
    submit(world, "gone-1", retries=1)
    world.cluster.set_behaviour("gone-1", run_for=timedelta(minutes=20))
    world.run(minutes=11)
    first = world.store.get("gone-1")
    assert first is not None and first.status is JobStatus.RUNNING and first.started_at is not None
    # its objects deleted behind Squall's back: back in the queue, the run's cost kept
    world.cluster.delete_job_objects(namespace="team-research", job_id="gone-1")
    world.run(minutes=1)
    requeued = world.store.get("gone-1")
    assert requeued is not None and "NodeLost:retry 1/1" in reasons(world, "gone-1")
    assert requeued.cost_rate is None
    assert requeued.ran_seconds == pytest.approx(11 * 60, abs=60)
    assert requeued.cost == pytest.approx(requeued.ran_seconds / 3600, abs=1e-5)
    world.run(minutes=30)
    job = world.store.get("gone-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.finished_at is not None
    last_start = max(e.at for e in world.store.events("gone-1") if e.status is JobStatus.RUNNING)
    last_run = (job.finished_at - last_start).total_seconds()
    assert last_run == pytest.approx(20 * 60, abs=60)
    assert job.cost == pytest.approx((requeued.ran_seconds + last_run) / 3600, abs=1e-5)
    (row,) = ledger.team_months(since=job.finished_at)
    assert row.gpu_hours == pytest.approx((requeued.ran_seconds + last_run) / 3600, abs=1e-5)


def test_team_spend_this_month_counts_finished_and_running_jobs(
    world: World, ledger: DynamoCostLedger
) -> None:
    count_costs(world, ledger, [spot_group()])
    world.add_gpu_nodes(2)
    submit(world, "done-1")
    submit(world, "long-1", resources={"gpu": 2})
    world.cluster.set_behaviour("done-1", run_for=timedelta(minutes=10))
    world.cluster.set_behaviour("long-1", run_for=timedelta(hours=10))
    world.run(minutes=20)
    done, long = world.store.get("done-1"), world.store.get("long-1")
    assert done is not None and done.cost is not None and long is not None and long.started_at is not None
    now = world.clock.now()
    spend = TeamSpend(ledger=ledger, store=world.store).month_to_date(now=now)
    running_so_far = 2.0 * (now - long.started_at).total_seconds() / 3600  # 2 GPUs of 4 at $4/h
    assert spend == {"research": pytest.approx(done.cost + running_so_far)}
