"""A few real training steps, in process: checkpoints, resume, summaries, export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from trainer import exits

from tests.worker.harness import METRIC_LINE, Run, checkpoint_steps, named, run_main, tiny_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    model_dir = tmp_path_factory.mktemp("model")
    run = run_main(
        ["--model-dir", str(model_dir), *tiny_args(steps=4, checkpoint_every=2, log_every=1, image_every=2)]
    )
    return run, model_dir


def test_a_few_steps_on_the_shipped_data(first_run: tuple[Run, Path]) -> None:
    run, model_dir = first_run

    assert run.code == exits.OK, run.stdout
    assert run.steps() == [1, 2, 3, 4]
    for event in named(run.events, "step"):
        assert np.isfinite(event["d_loss"]) and np.isfinite(event["g_loss"])
    assert named(run.events, "training")[0]["data"] == "sklearn:digits"
    assert checkpoint_steps(model_dir / "checkpoints") == [2, 4]
    metric = METRIC_LINE.search(run.stdout)
    assert metric is not None and np.isfinite(float(metric.group(1)))


def test_tensorboard_has_losses_and_a_sample_grid(first_run: tuple[Run, Path]) -> None:
    _, model_dir = first_run
    tags: dict[str, set[int]] = {}
    images = []
    for path in (model_dir / "logs").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags.setdefault(value.tag, set()).add(event.step)
                if value.tag == "samples":
                    images.append(tf.make_ndarray(value.tensor))

    assert tags["loss/discriminator"] == tags["loss/generator"] == {1, 2, 3, 4}
    assert tags["samples"] == {2, 4}
    # tf.summary.image stores [width, height, encoded PNG]: one 8x8 grid of 28x28.
    width, height, png = images[0]
    assert (int(width), int(height)) == (8 * 28, 8 * 28)
    assert tf.io.decode_png(png).shape == (224, 224, 1)


def test_saved_model_loads_and_generates(first_run: tuple[Run, Path]) -> None:
    _, model_dir = first_run
    loaded = tf.saved_model.load(str(model_dir / "saved_model"))
    generate = loaded.signatures["serving_default"]
    noise = tf.random.stateless_normal((5, 8), seed=(1, 2))

    images = generate(noise=noise)["images"].numpy()

    assert images.shape == (5, 28, 28, 1)
    assert np.isfinite(images).all() and images.min() >= -1.0 and images.max() <= 1.0
    # Deterministic (inference mode), and it depends on the noise.
    np.testing.assert_array_equal(images, generate(noise=noise)["images"].numpy())
    assert not np.allclose(images[0], images[1])


def test_a_second_run_resumes_at_the_saved_step(first_run: tuple[Run, Path]) -> None:
    _, model_dir = first_run

    run = run_main(["--model-dir", str(model_dir), *tiny_args(steps=6, checkpoint_every=2, log_every=1)])

    assert run.code == exits.OK, run.stdout
    assert named(run.events, "restored")[0]["step"] == 4
    assert run.steps() == [5, 6]  # not from zero
    assert checkpoint_steps(model_dir / "checkpoints")[-1] == 6


def test_a_run_that_finds_training_complete_only_exports(tmp_path: Path) -> None:
    args = ["--model-dir", str(tmp_path), *tiny_args(steps=2, log_every=1)]
    assert run_main(args).code == exits.OK
    (tmp_path / "saved_model" / "saved_model.pb").unlink()  # as if the pod died mid-export

    run = run_main(args)

    assert run.code == exits.OK
    assert run.steps() == []
    assert (tmp_path / "saved_model" / "saved_model.pb").exists()
    assert METRIC_LINE.search(run.stdout)


def test_s3_model_dir_resumes_on_a_fresh_node(s3: Any, tmp_path: Path) -> None:
    # As Squall passes them: the job's id, checkpoint and output URIs.
    environ = {
        "SQUALL_JOB_ID": "job-1",
        "SQUALL_CHECKPOINT_URI": "s3://squall/ckpt",
        "SQUALL_OUTPUT_URI": "s3://squall/out",
    }
    first = run_main(["--work-dir", str(tmp_path / "node-a"), *tiny_args(steps=2, log_every=1)], environ)
    assert first.code == exits.OK, first.stdout

    # A re-run on another node: nothing local survives, S3 has everything.
    second = run_main(["--work-dir", str(tmp_path / "node-b"), *tiny_args(steps=3, log_every=1)], environ)

    assert second.code == exits.OK, second.stdout
    assert named(second.events, "restored")[0]["step"] == 2
    assert second.steps() == [3]
    keys = {item["Key"] for item in s3.list_objects_v2(Bucket="squall")["Contents"]}
    assert {"ckpt/job-1/checkpoints/checkpoint", "ckpt/job-1/checkpoints/ckpt-3.index"} <= keys
    assert "out/job-1/saved_model.pb" in keys
    assert any(k.startswith("ckpt/job-1/logs/events.out.tfevents") for k in keys)


def test_malformed_tf_config_fails_fast_with_the_reason(tmp_path: Path) -> None:
    run = run_main(["--model-dir", str(tmp_path)], {"TF_CONFIG": '{"cluster": {"worker": ["w0:2222"]}}'})

    assert run.code == exits.USAGE
    (error,) = named(run.events, "invalid configuration")
    assert error["error"] == "invalid TF_CONFIG: task is missing"
    assert not any(tmp_path.iterdir())  # nothing was started
