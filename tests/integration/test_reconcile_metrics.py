"""Reconcile reads running jobs' metric lines every check, and a finished job's last ones."""

from __future__ import annotations

import json
from datetime import timedelta

from squall.core.jobs import JobStatus
from squall.services.metrics import MetricsCollector
from tests.fakes.metric_lines import FakeMetricLines, unavailable
from tests.integration.conftest import IMAGE, World


def submit(world: World, job_id: str) -> None:
    body = {"name": "train", "id": job_id, "team": "research", "image": IMAGE, "resources": {"gpu": 1}}
    world.new_intake().handle(body=json.dumps(body), message_id=f"m-{job_id}")


def with_collector(world: World, **fields: int) -> FakeMetricLines:
    lines = FakeMetricLines()
    world.reconciler.collector = MetricsCollector(store=world.store, lines=lines, **fields)
    return lines


def test_reconcile_stores_a_running_job_s_metrics_check_by_check(world: World) -> None:
    world.add_gpu_nodes(1)
    lines = with_collector(world)
    submit(world, "m-1")
    world.cluster.set_behaviour("m-1", run_for=timedelta(minutes=30))
    world.run(minutes=2)
    assert world.store.get("m-1").status is JobStatus.RUNNING  # type: ignore[union-attr]
    version = world.store.get("m-1").version  # type: ignore[union-attr]
    lines.print("m-1", "squall-metric train/loss=0.9 step=100", "squall-metric eval/score=0.5 step=100")
    world.run(minutes=1)
    metrics = world.store.get("m-1").metrics  # type: ignore[union-attr]
    assert metrics is not None and metrics.get("eval/score").last.value == 0.5  # type: ignore[union-attr]
    # a quiet check (nothing changed in the cluster) still reads what came since
    lines.print("m-1", "squall-metric eval/score=0.7 step=200")
    world.run(minutes=1)
    stored = world.store.get("m-1")
    assert stored is not None and stored.metrics.get("eval/score").best("maximize").value == 0.7  # type: ignore[union-attr]
    assert stored.version == version, "metrics take no version and no event"


def test_a_finished_job_s_last_lines_are_read_before_its_objects_go(world: World) -> None:
    world.add_gpu_nodes(1)
    lines = with_collector(world, jobs_per_check=0)  # only the read at its end
    submit(world, "m-2")
    world.cluster.set_behaviour("m-2", run_for=timedelta(minutes=3))
    lines.print("m-2", "squall-metric eval/score=0.8 step=1000")
    world.run(minutes=6)
    job = world.store.get("m-2")
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert job.metrics is not None and job.metrics.get("eval/score").last.value == 0.8  # type: ignore[union-attr]
    assert world.cluster.list_jobs(job_id="m-2") == []


def test_a_job_whose_lines_cannot_be_read_is_reconciled_all_the_same(world: World) -> None:
    world.add_gpu_nodes(2)
    lines = with_collector(world)
    for job_id in ("m-3", "m-4"):
        submit(world, job_id)
        world.cluster.set_behaviour(job_id, run_for=timedelta(minutes=3))
        lines.print(job_id, "squall-metric x=1")
    world.run(minutes=2)
    lines.next_error["m-3"] = unavailable()
    lines.print("m-4", "squall-metric x=2")
    report = world.reconciler.run()
    assert report.metrics is not None and any(e.startswith("m-3:") for e in report.metrics.errors)
    assert world.store.get("m-4").metrics.get("x").last.value == 2.0  # type: ignore[union-attr]
    world.run(minutes=4)
    assert {world.store.get(j).status for j in ("m-3", "m-4")} == {JobStatus.SUCCEEDED}  # type: ignore[union-attr]
