"""The trainer accepts every example job as Squall renders it: its args, its sweep
trials' values, and the checkpoint/output URIs Squall hands it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trainer.config import parse_config

from squall.core.manifests import render
from squall.core.spec import expand_sweep, parse_spec

REPO = Path(__file__).resolve().parents[2]
CONTEXT = yaml.safe_load((REPO / "cdk.json").read_text())["context"]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_trainer_takes_the_example_as_rendered(path: Path) -> None:
    spec = parse_spec(
        yaml.safe_load(path.read_text()),
        teams=list(CONTEXT["teams"]),
        registries=CONTEXT["allowedRegistries"],
    )
    trials = expand_sweep(spec, job_id="example-1") or [("example-1", spec)]
    for trial_id, trial in trials:
        for manifest in render(trial, job_id=trial_id, namespace="team-research"):
            if manifest["kind"] != "Job":
                continue
            (container,) = manifest["spec"]["template"]["spec"]["containers"]
            environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
            config = parse_config(container["args"], environ)

            assert config.steps > 0
            if spec.checkpoint_uri:
                assert config.model_dir == f"{spec.checkpoint_uri}/{trial_id}"
