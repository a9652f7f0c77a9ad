"""The `squall` command: offline validation and rendering, and the job commands on the local endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from squall.cli import main
from squall.local.runtime import LocalRuntime

GOOD = """
name: gan-cifar10
team: research
image: registry.example.com/squall/tf-trainer:1.0
resources: {cpu: "8", memory: 60Gi, gpu: 1}
replicas:
  chief: 1
  worker: {count: 2}
  ps: {count: 1, resources: {cpu: "4", memory: 16Gi, gpu: 0}}
"""

BAD = """
name: Bad_Name
team: research
image: registry.example.com/squall/tf-trainer:1.0
resources: {gpu: many}
colour: blue
"""


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    monkeypatch.delenv("SQUALL_TEAMS", raising=False)
    monkeypatch.delenv("SQUALL_ALLOWED_REGISTRIES", raising=False)
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(BAD)
    (tmp_path / "good.json").write_text(json.dumps(yaml.safe_load(GOOD)))
    return tmp_path


def test_validate_accepts_yaml_and_json(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "good.yaml"]) == 0
    assert main(["validate", "good.json"]) == 0
    assert "valid (4 replicas, 3 GPUs)" in capsys.readouterr().out


def test_validate_lists_every_error_with_its_field_and_exits_2(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "bad.yaml"]) == 2
    err = capsys.readouterr().err
    assert "3 errors" in err
    assert "name: name must be a DNS-1123 label" in err
    assert "resources.gpu:" in err
    assert "colour: unknown field" in err


def test_validate_reports_unreadable_files(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "missing.yaml"]) == 2
    (files / "broken.yaml").write_text("name: [unclosed")
    assert main(["validate", "broken.yaml"]) == 2
    err = capsys.readouterr().err
    assert "missing.yaml" in err and "not valid YAML or JSON" in err


def test_render_prints_manifests_with_tf_config(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "good.yaml", "--id", "gan-1", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in listing["items"]]
    assert ("Job", "gan-1-chief-0") in kinds and ("Service", "gan-1-ps-0") in kinds
    chief = next(o for o in listing["items"] if o["metadata"]["name"] == "gan-1-chief-0" and o["kind"] == "Job")
    env = {e["name"]: e["value"] for e in chief["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}
    assert main(["render", "good.yaml"]) == 0
    assert len(list(yaml.safe_load_all(capsys.readouterr().out))) == 8


@pytest.fixture
def local(files: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    with LocalRuntime.start() as runtime:
        monkeypatch.setenv("SQUALL_TABLE_NAME", runtime.resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", runtime.resources.jobs_queue_url)
        runtime.cluster.add_node(
            name="gpu-0",
            allocatable={"cpu": "64", "memory": "488Gi", "nvidia.com/gpu": "8", "pods": "58"},
            labels={"topology.kubernetes.io/region": "us-west-2"},
            taints=[],
            provider_id="aws:///us-west-2a/i-0000000000000001",
        )
        yield runtime


def test_submit_status_list_describe_cancel_against_the_local_endpoint(
    local: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", "good.yaml", "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["jobId"]
    local.run(until=lambda rt: rt.store.get(job_id) is not None, step=timedelta(seconds=5), limit=timedelta(minutes=1))

    assert main(["status", job_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "QUEUED"
    assert main(["list", "--status", "QUEUED"]) == 0
    assert job_id in capsys.readouterr().out

    assert main(["cancel", job_id]) == 0
    local.run(until=lambda rt: rt.store.get(job_id).status.value == "CANCELLED", limit=timedelta(minutes=1))  # type: ignore[union-attr]
    assert main(["describe", job_id]) == 0
    history = capsys.readouterr().out
    assert "QUEUED     Submitted" in history and "CANCELLED  CancelRequested" in history


def test_job_commands_say_what_is_missing(files: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SQUALL_TABLE_NAME", raising=False)
    assert main(["status", "x"]) == 2
    assert "SQUALL_TABLE_NAME is not set" in capsys.readouterr().err


def test_status_of_an_unknown_job_exits_1(local: LocalRuntime, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "nope"]) == 1
    assert "no job nope" in capsys.readouterr().err


PLANNER_DATA = Path(__file__).parent.parent / "unit" / "planner" / "data"
GROUPS_YAML = """
nodeGroups:
  - name: p3-usw2
    region: us-west-2
    instanceType: p3.2xlarge
    allocatable: {cpu: 7800m, memory: 55Gi, nvidia.com/gpu: 1, pods: 58}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
    priority: 10
    maxSize: 16
    desired: 0
    instances: []
"""


def test_plan_runs_the_planner_offline_on_kubectl_output(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "groups.yaml").write_text(GROUPS_YAML)
    code = main(
        [
            "plan",
            "--nodes", str(PLANNER_DATA / "nodes.json"),
            "--pods", str(PLANNER_DATA / "pods.json"),
            "--groups", "groups.yaml",
            "--now", "2026-01-05T09:00:00+00:00",
            "--json",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) >= {"scaleUp", "uncordon", "scaleDown", "unschedulable"}
    # the pending pod in this kubectl output fits the node Squall cordoned: uncordon, launch nothing
    assert result["uncordon"] == ["ip-10-0-1-77.us-west-2.compute.internal"]
    assert result["scaleUp"] == [] and result["scaleDown"] == []


def test_plan_names_the_field_of_a_bad_group(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "groups.yaml").write_text(GROUPS_YAML.replace("cpu: 7800m", "cpu: lots"))
    code = main(["plan", "--nodes", str(PLANNER_DATA / "nodes.json"), "--pods", str(PLANNER_DATA / "pods.json"),
                 "--groups", "groups.yaml", "--now", "2026-01-05T09:00:00Z"])
    assert code == 2
    assert "nodeGroups[0].allocatable.cpu" in capsys.readouterr().err
