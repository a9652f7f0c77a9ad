"""Metric lines from the local runtime's real pods: what a pod prints reaches its log stream in the
agent's layout on the endpoint, and the CloudWatch adapter finds and reads it there."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from squall.adapters.aws.metric_lines import CloudWatchMetricLines
from squall.core.jobs import new_job
from squall.core.metrics import merge
from squall.local.aws import LOG_GROUP
from tests.integration.test_local_processes import NS, Harness, py
from tests.local_pod_processes import local_processes


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    with local_processes(tmp_path / "pods") as processes:
        yield Harness(processes)


@pytest.mark.timeout(120)
def test_a_real_pod_s_printed_metrics_are_read_from_the_endpoint(harness: Harness) -> None:
    harness.submit(
        "metrics",
        command=py(
            "import sys; print('starting');"
            "print('squall-metric train/loss=0.5 step=1', flush=True);"
            "print('squall-metric eval/score=0.9 eval/loss=nan step=2', file=sys.stderr)"
        ),
    )
    assert harness.until(lambda: harness.job_condition("metrics")) == "Complete"
    job, _ = new_job(job_id="metrics", name="tiny", team="research", namespace=NS, at=datetime.now(UTC))
    job = dataclasses.replace(job, cluster="local")
    reader = CloudWatchMetricLines(
        clusters={"local": harness.cluster},
        logs_client=lambda _cluster: harness.logs,
        log_group_of=lambda _cluster: LOG_GROUP,
    )
    page = harness.until(
        lambda: (p := reader.read(job, cursor=None, limit=10)).lines and len(p.lines) == 2 and p
    )
    metrics = merge(None, page.lines, cursor=page.cursor)
    assert metrics.get("train/loss").last.value == 0.5  # type: ignore[union-attr]
    assert metrics.get("eval/score").last.step == 2 and metrics.ignored == 1  # type: ignore[union-attr]
    assert reader.read(job, cursor=page.cursor, limit=10).lines == ()
