"""The trainer reports each checkpoint it saves to Squall: a small file beside the checkpoints,
uploaded after them, saying when and at which step (what preemption reads to lose the least work)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from trainer import exits
from trainer.report import write_report
from trainer.storage import REPORT_FILE, S3Location, S3Mirror

from tests.worker.harness import checkpoint_steps, named, run_main, tiny_args
from tests.worker.test_storage import BUCKET, RecordingClient


def test_the_report_says_when_and_which_checkpoint(tmp_path: Path) -> None:
    at = datetime(2026, 5, 1, 12, 34, 56, 789000, tzinfo=UTC)
    path = write_report(tmp_path / "checkpoints", step=1200, checkpoint="ckpt-1200", reason="periodic", at=at)
    assert path.name == REPORT_FILE == "squall-checkpoint.json"
    assert json.loads(path.read_text()) == {
        "step": 1200,
        "savedAt": "2026-05-01T12:34:56Z",
        "checkpoint": "ckpt-1200",
        "reason": "periodic",
    }
    assert [p.name for p in path.parent.iterdir()] == [REPORT_FILE], "no partial file left behind"


def test_the_report_is_uploaded_after_the_checkpoint_and_its_index(s3: Any, tmp_path: Path) -> None:
    client = RecordingClient(s3)
    local = tmp_path / "ckpt"
    model_dir = S3Mirror(location=S3Location(BUCKET, "run/checkpoints"), local=local, client=client)
    local.mkdir()
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001", "checkpoint"):
        (local / name).write_text(name)
    write_report(local, step=1, checkpoint="ckpt-1", reason="periodic")
    model_dir.push()
    assert client.uploaded == [
        "run/checkpoints/ckpt-1.data-00000-of-00001",
        "run/checkpoints/ckpt-1.index",
        "run/checkpoints/checkpoint",
        f"run/checkpoints/{REPORT_FILE}",
    ]


@pytest.mark.slow
def test_a_training_run_reports_its_latest_checkpoint_in_s3(s3: Any, tmp_path: Path) -> None:
    environ = {"SQUALL_JOB_ID": "job-1", "SQUALL_CHECKPOINT_URI": "s3://squall/ckpt"}
    before = datetime.now(UTC).replace(microsecond=0)
    run = run_main(
        ["--work-dir", str(tmp_path), *tiny_args(steps=4, checkpoint_every=2, log_every=1)], environ
    )
    assert run.code == exits.OK, run.stdout
    body = s3.get_object(Bucket="squall", Key=f"ckpt/job-1/checkpoints/{REPORT_FILE}")["Body"].read()
    report = json.loads(body)
    saved = [e["step"] for e in named(run.events, "checkpoint saved")]
    assert report["step"] == saved[-1] == 4 and report["checkpoint"] == "ckpt-4"
    saved_at = datetime.strptime(report["savedAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= saved_at <= datetime.now(UTC) + timedelta(seconds=1)
    assert checkpoint_steps(tmp_path / "model" / "checkpoints")[-1] == 4
