"""`squall tensorboard --once` against the local endpoint: the event files TensorBoard's reader sees."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.cli.follow.tensorboard import ServeError, start_tensorboard
from tests.outputs_helpers import LocalAws, local_aws, record_job, spec_record, squall

BUCKET = "squall-artifacts"
JOB = "gan-5e6f7a8b"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LocalAws]:
    with local_aws(monkeypatch, tmp_path) as local:
        with contextlib.suppress(local.s3.exceptions.BucketAlreadyOwnedByYou):
            local.s3.create_bucket(
                Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
            )
        spec = spec_record(checkpointUri=f"s3://{BUCKET}/checkpoints", outputUri=f"s3://{BUCKET}/exports")
        record_job(local.store, JOB, spec=spec)
        yield local


def write_summaries(logdir: Path, steps: range, *, writer: Any = None) -> Any:
    """The trainer's summaries (train.py): two scalars a step and a sample grid; returns the writer."""
    import numpy as np
    import tensorflow as tf

    writer = writer or tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for step in steps:
            tf.summary.scalar("loss/generator", 1.0 / (step + 1), step=step)
            tf.summary.scalar("loss/discriminator", 0.5, step=step)
        tf.summary.image("samples", np.zeros((1, 8, 8, 1), np.float32), step=steps[-1])
    writer.flush()
    return writer


def upload(local: LocalAws, root: Path, prefix: str) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        local.s3.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(root).as_posix()}")


def scalars(logdir: Path, accumulator: Any = None) -> tuple[Any, dict[str, list[tuple[int, float]]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    accumulator = accumulator or EventAccumulator(str(logdir))
    accumulator.Reload()
    found = {
        tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in accumulator.Tensors(tag)]
        for tag in accumulator.Tags()["tensors"]
        if accumulator.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
    }
    return accumulator, found


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_once_copies_event_files_that_tensorboards_reader_sees(
    aws: LocalAws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given: the trainer's layout in S3 (train.py): <checkpointUri>/<job id>/{logs,checkpoints}
    work = tmp_path / "trainer"
    writer = write_summaries(work / "logs", range(3))
    (work / "checkpoints").mkdir()
    (work / "checkpoints" / "ckpt-1.data-00000-of-00001").write_bytes(b"\0" * 1000)
    (work / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    upload(aws, work, f"checkpoints/{JOB}")
    # another job's files beside them are not this job's
    upload(aws, work, "checkpoints/gan-other00")
    dest = tmp_path / "board"

    # when
    assert squall("tensorboard", JOB, "--once", "--dir", str(dest)) == 0

    # then: the event file only, where TensorBoard finds it as a run, with its scalars and images
    copied = sorted(
        p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() and ".squall" not in p.parts
    )
    assert len(copied) == 1 and copied[0].startswith("logs/events.out.tfevents.")
    accumulator, found = scalars(dest / "logs")
    assert found["loss/generator"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert "loss/discriminator" in found
    assert accumulator.SummaryMetadata("samples").plugin_data.plugin_name == "images"
    assert ": 1 TensorBoard file\n" in capsys.readouterr().out

    # when the trainer writes on and pushes again, a second pass appends the new records
    # in place, so a reader that has the file open already sees them
    write_summaries(work / "logs", range(3, 6), writer=writer)
    upload(aws, work, f"checkpoints/{JOB}")
    assert squall("tensorboard", JOB, "--once", "--dir", str(dest)) == 0
    assert "0 copied, 1 grown" in capsys.readouterr().out
    _, found = scalars(dest / "logs", accumulator)
    assert [step for step, _ in found["loss/generator"]] == [0, 1, 2, 3, 4, 5]

    # and a third pass with nothing new copies nothing
    assert squall("tensorboard", JOB, "--once", "--dir", str(dest)) == 0
    assert "copied" not in capsys.readouterr().out

    # TensorBoard, in this process, serves the copy as one run
    url = start_tensorboard(dest, port=0, host="127.0.0.1")
    with urllib.request.urlopen(f"{url}data/runs", timeout=60) as response:
        assert json.loads(response.read()) == ["logs"]
    # and says so when its port is taken
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    with pytest.raises(ServeError, match=f"cannot serve on 127.0.0.1:{port}"):
        start_tensorboard(dest, port=port, host="127.0.0.1")


def test_once_says_when_there_is_nothing_yet_or_nowhere_to_look(
    aws: LocalAws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert squall("tensorboard", JOB, "--once", "--dir", str(tmp_path / "board")) == 0
    err = capsys.readouterr().err
    assert f"no TensorBoard files under s3://{BUCKET}/checkpoints/{JOB}/" in err
    record_job(aws.store, "plain-00000001")  # a spec without checkpointUri or outputUri
    assert squall("tensorboard", "plain-00000001", "--once") == 1
    assert "names no s3:// checkpointUri or outputUri" in capsys.readouterr().err
    assert squall("tensorboard", "nope", "--once") == 1
