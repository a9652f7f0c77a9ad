"""Lifecycle hooks end to end in the local runtime: a spot reclaim and a lost instance mid-job, a node that never joins."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.core.settings import PolicySettings
from squall.local.fleet import RegionCapacity
from squall.local.runtime import LocalRuntime
from tests.e2e.helpers_runtime import GROUPS, gan_job, is_done, run_until_running


def start(backend: str, **kwargs: Any) -> Any:
    return LocalRuntime.start(
        node_groups=GROUPS,
        policy=PolicySettings.model_validate({"provisionTimeout": "PT10M", "idleThreshold": "PT5M", "bootGrace": "PT2M"}),
        backend=backend,
        **kwargs,
    )


@pytest.fixture(params=["memory", "moto"])
def local(request: pytest.FixtureRequest) -> Iterator[LocalRuntime]:
    with start(request.param) as runtime:
        yield runtime


def test_a_spot_reclaim_mid_job_drains_the_node_and_the_job_still_succeeds(local: LocalRuntime) -> None:
    assert local.fleet is not None
    _, instance = run_until_running(local, run_for=timedelta(minutes=20))
    # when EC2 reclaims the spot instance under the running job
    local.fleet.reclaim(instance)
    local.run(until=is_done, step=timedelta(seconds=10), limit=timedelta(hours=1))
    # then the job ran again elsewhere and finished, and its history says why
    job = local.store.get("gan-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.retries_used == 1
    reasons = [e.reason for e in local.store.events("gan-1")]
    assert "NodeLost:spot-reclaim" in reasons and "NodeLost:retry 1/2" in reasons
    # every hook was answered, and no busy node went without a drain
    local.run(until=lambda rt: not rt.cluster.list_nodes(), step=timedelta(seconds=30), limit=timedelta(hours=1))
    stats = local.fleet.hook_stats()
    assert stats["hooksLeftOpen"] == 0 and stats["drains"] >= 2
    assert local.fleet.terminated_busy == []


def test_an_instance_lost_without_notice_is_replaced_and_the_job_still_succeeds(local: LocalRuntime) -> None:
    assert local.fleet is not None
    node, instance = run_until_running(local, run_for=timedelta(minutes=20))
    # when the host fails: no notice, the node is gone at once
    local.fleet.lose(instance)
    assert node not in [n["metadata"]["name"] for n in local.cluster.list_nodes()]
    local.run(until=is_done, step=timedelta(seconds=10), limit=timedelta(hours=1))
    # then the job ran again on the replacement and finished; nothing drained it first
    job = local.store.get("gan-1")
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.retries_used == 1
    reasons = [e.reason for e in local.store.events("gan-1")]
    assert [r for r in reasons if r.startswith("NodeLost")] == ["NodeLost:retry 1/2"]
    # the terminate hook Auto Scaling ran after the fact was answered with nothing to drain
    (answer,) = [r for r in local.lifecycle_results if r["instanceId"] == instance and r["kind"] == "terminate"]
    assert (answer["drainOutcome"], answer["result"]) == ("no-node", "CONTINUE")
    local.run(until=lambda rt: not rt.cluster.list_nodes(), step=timedelta(seconds=30), limit=timedelta(hours=1))
    assert local.fleet.hook_stats()["hooksLeftOpen"] == 0
    assert local.fleet.terminated_busy == [], "the lost node was not Squall's doing"


def test_a_node_that_never_joins_is_abandoned_and_the_job_falls_back() -> None:
    with start("memory", capacity={"us-west-2": RegionCapacity(instances={"p3.8xlarge": 4})}) as local:
        assert local.fleet is not None
        # us-west-2 launches instances whose nodes never register (a broken AMI, say)
        local.fleet.break_joins(region="us-west-2", instance_type="p3.8xlarge", count=4)
        local.cluster.set_behaviour("gan-1", run_for=timedelta(minutes=5))
        local.send(gan_job())
        local.run(until=is_done, step=timedelta(seconds=10), limit=timedelta(hours=2))
        job = local.store.get("gan-1")
        assert job is not None and job.status is JobStatus.SUCCEEDED
        # the launch hook was answered ABANDON past the provision timeout, the group
        # backed off, and the job ran in the other region
        assert local.fleet.stats.abandoned >= 1 and local.metrics.total("LaunchesAbandoned") >= 1
        assert local.metrics.total("Fallbacks") >= 1
        health = local.backend.scale_state.load_health()["p3-usw2"]
        assert health.reason.startswith("provision timeout")
        assert local.fleet.stats.timed_out == 0, "no hook was left to expire"
