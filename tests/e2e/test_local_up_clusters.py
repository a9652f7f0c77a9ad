"""`squall local up --groups FILE` with a groups file of two clusters: it serves both.

As in test_local_up.py, each test starts its own server in a temporary state directory
on a free port at 30x and always stops it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from squall.cli import main
from squall.local import control
from tests.e2e.test_local_up import SPEED, Local, free_port, parse_exports
from tests.e2e.waiting import until

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/squall/tf-trainer:1.0"
P3 = {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58}
GPU_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def two_clusters(*, west_max: int = 1) -> dict[str, Any]:
    """gpu-west (us-west-2, preferred) may have `west_max` 4-GPU nodes; gpu-east (us-east-1) two."""
    return {
        "clusters": [{"name": "gpu-west", "region": "us-west-2"}, {"name": "gpu-east", "region": "us-east-1"}],
        "nodeGroups": [
            {"name": "p3-usw2", "cluster": "gpu-west", "region": "us-west-2", "asgName": "squall-p3-usw2",
             "instanceType": "p3.8xlarge", "allocatable": P3, "taints": GPU_TAINTS, "priority": 10,
             "minSize": 0, "maxSize": west_max, "pricePerHour": 12.24},
            {"name": "p3-use1", "cluster": "gpu-east", "region": "us-east-1", "asgName": "squall-p3-use1",
             "instanceType": "p3.8xlarge", "allocatable": P3, "taints": GPU_TAINTS, "priority": 20,
             "minSize": 0, "maxSize": 2, "pricePerHour": 12.24},
        ],
    }  # fmt: skip


@pytest.fixture
def local_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Local]:
    # Each `up` has credentials of its own; boto3's default session keeps the first it read.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    local = Local(tmp_path / "state", free_port())
    try:
        yield local
    finally:
        control.down(state_dir=local.state_dir, timeout=20)


def job_file(path: Path, name: str, *, until_exists: Path | None = None) -> Path:
    """A job of one 4-GPU pod of the worker image, run for real: it prints `real <id>` and, given
    `until_exists`, holds its node until that file exists."""
    wait = (
        f"while not pathlib.Path({str(until_exists)!r}).exists(): time.sleep(0.2)\n" if until_exists else ""
    )
    program = f"import os, pathlib, time\n{wait}print('real', os.environ['SQUALL_JOB_ID'])\n"
    path.write_text(
        json.dumps(
            {
                "name": name,
                "team": "research",
                "image": IMAGE,
                "command": ["python", "-c", program],
                "resources": {"cpu": "1", "memory": "1Gi", "gpu": 4},
            }
        )
    )
    return path


@pytest.mark.timeout(300)
def test_a_job_that_the_first_cluster_has_no_room_for_runs_in_the_second(
    local_dir: Local, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    groups = tmp_path / "two-clusters.json"
    groups.write_text(json.dumps(two_clusters(west_max=1)))
    code = main(["local", "up", *local_dir.args(), "--port", str(local_dir.port), "--speed", SPEED,
                 "--groups", str(groups)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "clusters gpu-west (us-west-2), gpu-east (us-east-1)" in captured.err
    env = parse_exports(captured.out)
    # the one local log group's cluster: every real pod's output goes there (server.cli_environment)
    assert env["SQUALL_CLUSTER_NAME"] == "squall" and "SQUALL_CLUSTERS" not in env
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SQUALL_CLUSTERS", raising=False)

    def record(job: str) -> dict[str, Any]:
        assert main(["status", job, "--json"]) in (0, 1)
        out = capsys.readouterr().out
        return dict(json.loads(out)) if out else {}

    # The first job takes gpu-west's one node, and holds it until released.
    release = tmp_path / "release"
    assert (
        main(["submit", str(job_file(tmp_path / "first.json", "first", until_exists=release)), "--json"]) == 0
    )
    first = json.loads(capsys.readouterr().out)["jobId"]
    assert until(lambda: record(first).get("status") == "RUNNING", seconds=120)
    assert record(first)["cluster"] == "gpu-west"
    # gpu-west can grow no further: the second job lands in gpu-east and runs there.
    assert main(["submit", str(job_file(tmp_path / "second.json", "second")), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["jobId"]
    assert until(lambda: record(second).get("status") in ("SUCCEEDED", "FAILED"), seconds=120)
    shown = record(second)
    assert (shown["status"], shown["cluster"], shown["region"]) == ("SUCCEEDED", "gpu-east", "us-east-1")
    release.write_text("")
    assert until(lambda: record(first).get("status") in ("SUCCEEDED", "FAILED"), seconds=60)
    assert record(first)["status"] == "SUCCEEDED"

    # squall logs reads the one local group for a job of either cluster
    assert main(["logs", second]) == 0
    assert f"real {second}" in capsys.readouterr().out

    # squall local status says the clusters, each with its own nodes
    assert main(["local", "status", *local_dir.args(), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [(c["name"], c["region"]) for c in status["clusters"]] == [
        ("gpu-west", "us-west-2"),
        ("gpu-east", "us-east-1"),
    ]
    assert status["groups"] == str(groups.absolute())
    assert main(["local", "status", *local_dir.args()]) == 0
    said = capsys.readouterr().out
    assert "clusters: gpu-west (us-west-2): " in said and "; gpu-east (us-east-1): " in said

    assert main(["local", "down", *local_dir.args()]) == 0
    assert "stopped" in capsys.readouterr().err
    assert not (local_dir.state_dir / "local.json").exists()
    assert main(["local", "status", *local_dir.args()]) == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # a group naming no cluster when there are two
        (
            json.dumps(
                two_clusters()
                | {
                    "nodeGroups": [
                        {k: v for k, v in g.items() if k != "cluster"} for g in two_clusters()["nodeGroups"]
                    ]
                }
            ),
            "nodeGroups[0].cluster: required when there is more than one cluster",
        ),
        # a cluster that is not listed
        (
            json.dumps(two_clusters() | {"clusters": [{"name": "gpu-west", "region": "us-west-2"}]}),
            "nodeGroups[1].cluster:",
        ),
        ("{not json", "line 1"),
    ],
)
def test_a_groups_file_that_cannot_be_served_starts_nothing(
    local_dir: Local, capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, expected: str
) -> None:
    groups = tmp_path / "bad-groups.json"
    groups.write_text(content)
    code = main(["local", "up", *local_dir.args(), "--port", str(local_dir.port), "--groups", str(groups)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(groups) in err and expected in err, err
    assert not (local_dir.state_dir / "local.json").exists()
    assert not (local_dir.state_dir / "server.log").exists(), "no server was started"


def test_a_missing_groups_file_starts_nothing(
    local_dir: Local, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere.yaml"
    assert (
        main(["local", "up", *local_dir.args(), "--port", str(local_dir.port), "--groups", str(missing)]) == 2
    )
    assert f"{missing} does not exist" in capsys.readouterr().err
    assert not (local_dir.state_dir / "local.json").exists()


def test_the_server_serves_the_files_clusters_capacity_policy_and_teams(tmp_path: Path) -> None:
    from datetime import timedelta

    from squall.local.server import BOOT_TIME, served

    groups = tmp_path / "groups.json"
    document = two_clusters(west_max=3) | {
        "regions": {"us-west-2": {"capacity": {"p3.8xlarge": 2}, "bootTime": "4m"}},
        "policy": {"idleThreshold": "PT7M"},
        "teams": {"research": {"namespace": "team-research", "gpuQuota": 8}, "vision": "team-vision"},
    }
    groups.write_text(json.dumps(document))
    serving = served(groups)
    assert [(c.name, c.region) for c in serving.clusters] == [
        ("gpu-west", "us-west-2"),
        ("gpu-east", "us-east-1"),
    ]
    assert [g["cluster"] for g in serving.node_groups] == ["gpu-west", "gpu-east"]
    # the file's instances per type; unlimited where it says nothing; nodes boot in seconds here
    assert serving.capacity["us-west-2"].instances == {"p3.8xlarge": 2}
    assert serving.capacity["us-east-1"].instances == {}
    assert {c.boot_time for c in serving.capacity.values()} == {BOOT_TIME}
    assert serving.policy.idle_threshold == timedelta(minutes=7)
    assert serving.teams == {"research": "team-research", "vision": "team-vision"}
    assert serving.quotas is not None and serving.quotas["research"].quota == 8
    # without a file: the demo's groups, in one cluster
    default = served(None)
    assert default.clusters == [] and default.teams is None and default.policy is None
    assert {g["region"] for g in default.node_groups} == {"us-west-2", "us-east-1"}
