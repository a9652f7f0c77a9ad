"""The job specs in examples/ are what a newcomer tries first: each must pass
`squall validate` and `squall render` from the repository root as it is checked out
(cdk.json's teams and registries), and render to manifests the Kubernetes API accepts."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from squall.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
K8S_VERSION = "1.32.0"


@pytest.fixture(autouse=True)
def repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SQUALL_TEAMS", raising=False)
    monkeypatch.delenv("SQUALL_ALLOWED_REGISTRIES", raising=False)


def test_the_examples_cover_what_the_readme_promises() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "single-gpu.yaml", "distributed.yaml", "sweep.yaml", "checkpoints.yaml",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_against_the_checked_out_configuration(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(path.relative_to(REPO))]) == 0
    assert ": valid (" in capsys.readouterr().out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_renders_to_manifests_the_api_accepts(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(path.relative_to(REPO)), "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]

    assert any(item["kind"] == "Job" for item in items)
    for item in items:
        kubernetes_validate.validate(item, K8S_VERSION, strict=True)


def test_distributed_example_is_a_whole_tensorflow_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "examples/distributed.yaml", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    jobs = [i for i in items if i["kind"] == "Job"]
    configs = [
        json.loads(env["value"])
        for job in jobs
        for env in job["spec"]["template"]["spec"]["containers"][0]["env"]
        if env["name"] == "TF_CONFIG"
    ]

    assert len(jobs) == len(configs) == 6
    assert {c["task"]["type"] for c in configs} == {"chief", "worker", "ps"}
    assert {len(c["cluster"]["worker"]) for c in configs} == {4}
    assert sum(i["kind"] == "Service" for i in items) == 6


def test_sweep_example_renders_every_trial(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "examples/sweep.yaml", "--json", "--id", "gan-sweep-1"]) == 0
    jobs = [i for i in json.loads(capsys.readouterr().out)["items"] if i["kind"] == "Job"]

    assert sorted(j["metadata"]["labels"]["squall.io/job-id"] for j in jobs) == [
        f"gan-sweep-1-t{n:03d}" for n in range(6)
    ]
