"""`squall demo` end to end: moto server, the real handlers, the simulated cluster and fleet."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from squall.local.demo import DemoResult, run_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoResult, str]:
    out = io.StringIO()
    result = run_demo(out=out, dashboard_dir=tmp_path_factory.mktemp("dashboard"))
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


def test_demo_burst_spills_from_the_us_west_2_cluster_into_the_us_east_1_cluster(
    demo: tuple[DemoResult, str],
) -> None:
    result, text = demo
    summary = result.summary
    placed = {job.id: job.cluster for job in result.jobs if job.state != "REJECTED"}
    assert len(placed) == 8 and all(job.state == "SUCCEEDED" for job in result.jobs if job.id in placed)
    # every job was placed in one of the two clusters, and jobs landed in both
    assert set(placed.values()) == {"gpu-west", "gpu-east"}, placed
    assert sum(1 for c in placed.values() if c == "gpu-east") >= 3, (
        "most of the burst ran in us-east-1's cluster"
    )
    # each job's objects were in exactly one cluster
    assert summary["invariants"]["jobsInTwoClusters"] == 0
    assert list(summary["clusters"]) == ["gpu-west", "gpu-east"]
    assert all(summary["clusters"][c]["peakGpusBusy"] > 0 for c in ("gpu-west", "gpu-east"))
    # and the story says so, per cluster
    count = {c: sum(1 for p in placed.values() if p == c) for c in ("gpu-west", "gpu-east")}
    west, east = summary["clusters"]["gpu-west"], summary["clusters"]["gpu-east"]
    assert (
        f"gpu-west (us-west-2): {count['gpu-west']} jobs, at most {west['peakNodes']} nodes and "
        f"{west['peakGpusBusy']} GPUs busy" in text
    )
    assert (
        f"gpu-east (us-east-1): {count['gpu-east']} jobs, at most {east['peakNodes']} nodes and "
        f"{east['peakGpusBusy']} GPUs busy" in text
    )
    assert "the burst spilled from gpu-west (us-west-2) into gpu-east (us-east-1)" in text


def test_demo_progress_view_names_jobs_nodes_and_errors(demo: tuple[DemoResult, str]) -> None:
    text = demo[1]
    assert "gan-dist-1" in text and "SUCCEEDED (Completed)" in text
    assert "[cluster]" in text and "us-east-1" in text and "no nodes" in text
    assert "team: team 'marketing' is not configured" in text
    assert json.loads(text.strip().splitlines()[-1]) == demo[0].summary


def test_demo_summary_has_the_simulators_keys_and_invariants_hold(demo: tuple[DemoResult, str]) -> None:
    summary = demo[0].summary
    assert summary["invariants"] == {
        "lostJobs": 0,
        "duplicateKubernetesJobs": 0,
        "busyNodesTerminated": 0,
        "hooksLeftOpen": 0,
        "jobsInTwoClusters": 0,
    }
    assert set(summary["queueWaitSeconds"]) == {"p50", "p90", "p99", "max", "byTeam"}
    assert summary["gpuHours"]["busy"] > 0 and summary["cost"] > 0
    assert summary["drains"] >= summary["scaleDowns"] and summary["hooksCompleted"] > 0


def test_demo_renders_the_dashboard_and_creates_it_on_the_endpoint(demo: tuple[DemoResult, str]) -> None:
    result, text = demo
    files = result.dashboard
    assert files is not None
    assert files.png.read_bytes()[:4] == b"\x89PNG" and "<svg" in files.html.read_text()
    assert files.created is not None and files.created.endswith(":dashboard/squall")
    assert f"dashboard: {files.png} and {files.html}" in text


def test_the_squall_command_ends_with_one_json_summary(tmp_path: Path) -> None:
    # the memory backend tells the same story without the endpoint, and quickly
    completed = subprocess.run(
        [sys.executable, "-m", "squall.cli", "demo", "--json", "--backend", "memory"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,  # the dashboard goes to out/dashboard/ under the working directory
    )
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "out" / "dashboard" / "squall.png").exists()
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, "--json prints the summary alone"
    summary = json.loads(lines[0])
    assert summary["jobs"]["SUCCEEDED"] == 8
    assert set(summary["clusters"]) == {"gpu-west", "gpu-east"}
