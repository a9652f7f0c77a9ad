"""`squall demo` end to end: moto server, the real handlers, the simulated cluster and fleet."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from squall.local.demo import DemoResult, run_demo


@pytest.fixture(scope="module")
def demo() -> tuple[DemoResult, str]:
    out = io.StringIO()
    result = run_demo(out=out)
    return result, out.getvalue()


def test_demo_runs_every_job_to_its_end(demo: tuple[DemoResult, str]) -> None:
    result, _ = demo
    summary = result.summary
    assert result.ok
    # three single-GPU jobs and five distributed ones; the duplicates made none
    assert summary["jobs"] == {"REJECTED": 1, "SUCCEEDED": 8}
    assert summary["kubernetesJobs"] >= 3 + 5 * 13
    assert summary["deadLetters"] == 1, "the body that is not JSON ends in the dead-letter queue"
    assert summary["duplicatesIgnored"] == 1 and summary["redeliveries"] == 1


def test_demo_bursts_falls_back_and_scales_to_zero(demo: tuple[DemoResult, str]) -> None:
    summary = demo[0].summary
    # us-west-2 runs out after four GPU nodes and the rest spills to us-east-1
    assert summary["peakNodes"]["us-west-2"] > 0 and summary["peakNodes"]["us-east-1"] > 4
    assert summary["fallbacks"] >= 1
    assert summary["scaleUps"] > 0 and summary["scaleDowns"] > 0
    assert summary["nodesAtEnd"] == 0, "scaled back to zero"


def test_demo_progress_view_names_jobs_nodes_and_errors(demo: tuple[DemoResult, str]) -> None:
    text = demo[1]
    assert "gan-dist-1" in text and "SUCCEEDED (Completed)" in text
    assert "[cluster]" in text and "us-east-1" in text and "no nodes" in text
    assert "team: team 'marketing' is not configured" in text
    assert json.loads(text.strip().splitlines()[-1]) == demo[0].summary


def test_the_squall_command_ends_with_one_json_summary() -> None:
    # the memory backend tells the same story without the endpoint, and quickly
    completed = subprocess.run(
        [sys.executable, "-m", "squall.cli", "demo", "--json", "--backend", "memory"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, "--json prints the summary alone"
    assert json.loads(lines[0])["jobs"]["SUCCEEDED"] == 8
