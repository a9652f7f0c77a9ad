"""A job without GPUs is described by its CPUs and memory, from the queue to its admission, on the local runtime."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from squall.cli import main
from squall.local.runtime import LocalRuntime
from tests.groups import gpu_group
from tests.job_bodies import job_body


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.timeout(180)
def test_a_cpu_job_waits_and_is_admitted_in_cpus_and_memory(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given an untainted group with no nodes yet, and a job of two workers of 4 CPUs and 16Gi, no GPU
    group = gpu_group("p3-usw2", "p3.2xlarge", max_size=2) | {"taints": []}
    with LocalRuntime.start(node_groups=[group]) as local:
        monkeypatch.setenv("SQUALL_TABLE_NAME", local.resources.table_name)
        local.send(job_body("etl", "research", gpu=0, workers=2))

        # when it waits for the nodes, then is admitted
        assert local.run(
            until=lambda rt: any(e.reason.startswith("Admitted") for e in rt.store.events("etl")),
            step=timedelta(seconds=5),
            limit=timedelta(minutes=10),
        )

        # then its record says what it asks for in the terms it asks in
        messages = [event.message for event in local.store.events("etl")]
        assert any(
            m.startswith(
                "1st in research, 1st overall; needs 8 CPUs and 32Gi of memory over 2 replicas in one region"
            )
            for m in messages
        ), messages
        assert (
            "admitted whole in us-west-2: 8 CPUs and 32Gi of memory over 2 replica Jobs (4 objects); its run time counts from now"
            in messages
        ), messages
        assert not any("GPU" in m for m in messages), messages
        assert main(["describe", "etl"]) == 0
        out = capsys.readouterr().out
        assert "team research, namespace team-research, 8 CPUs and 32Gi of memory, retries" in out
        assert "GPU" not in out
