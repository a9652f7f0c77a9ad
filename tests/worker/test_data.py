"""Training data: the shipped digits, .npz files, TFRecord shards, sharding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from trainer.data import SHIPPED, DataError, open_source


def test_shipped_digits_are_mnist_shaped_and_scaled_for_tanh(tmp_path: Path) -> None:
    source = open_source(None, image_size=28, staging=tmp_path)

    assert source.name == SHIPPED
    assert source.array is not None
    assert source.array.shape == (1797, 28, 28, 1)
    assert source.array.dtype == np.float32
    assert source.array.min() == pytest.approx(-1.0)
    assert source.array.max() == pytest.approx(1.0, abs=0.05)


def test_npz_of_uint8_images_is_resized_and_scaled(tmp_path: Path) -> None:
    images = np.zeros((5, 14, 14), np.uint8)
    images[:, :7] = 255
    np.savez(tmp_path / "train.npz", x_train=images)

    source = open_source(str(tmp_path / "train.npz"), image_size=28, staging=tmp_path / "s")

    assert source.array is not None
    assert source.array.shape == (5, 28, 28, 1)
    assert source.array[0, 0, 0, 0] == pytest.approx(1.0)  # white top half
    assert source.array[0, -1, 0, 0] == pytest.approx(-1.0)  # black bottom half


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"labels": np.zeros(3)}, r"no image array; expected one of \('x', 'images', 'x_train'\), found \['labels'\]"),
        ({"x": np.zeros((3, 8, 8, 3), np.uint8)}, r"must be grayscale images .* got \(3, 8, 8, 3\)"),
        ({"x": np.full((3, 8, 8), 2.0, np.float32)}, r"float images must be in \[0, 1\], got \[2, 2\]"),
    ],
)  # fmt: skip
def test_unusable_npz_is_rejected_with_the_reason(
    tmp_path: Path, arrays: dict[str, np.ndarray], message: str
) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)

    with pytest.raises(DataError, match=message):
        open_source(str(tmp_path / "bad.npz"), image_size=28, staging=tmp_path / "s")


def test_unsupported_format_and_missing_data_are_errors(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("1,2,3\n")

    with pytest.raises(DataError, match="unsupported format"):
        open_source(str(tmp_path / "data.csv"), image_size=28, staging=tmp_path / "s")
    with pytest.raises(Exception, match="data not found"):
        open_source(str(tmp_path / "nope.npz"), image_size=28, staging=tmp_path / "s")


def write_tfrecord(path: Path, values: list[int]) -> None:
    """One 8x8 PNG per value, every pixel that value."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for value in values:
            png = tf.io.encode_png(tf.fill((8, 8, 1), tf.constant(value, tf.uint8))).numpy()
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
                )
            )
            writer.write(example.SerializeToString())


def test_tfrecord_directory_streams_decoded_images(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    write_tfrecord(shards / "part-0.tfrecord", [0, 255])
    write_tfrecord(shards / "part-1.tfrecord", [255, 0])

    source = open_source(str(shards), image_size=28, staging=tmp_path / "s")
    batch = next(iter(source.dataset(batch_size=4, seed=0)))

    assert len(source.files) == 2
    assert batch.shape == (4, 28, 28, 1)
    assert sorted(np.unique(batch.numpy()).tolist()) == [-1.0, 1.0]
    assert source.sample(3, seed=0).shape == (3, 28, 28, 1)


def test_each_worker_reads_its_own_shard(tmp_path: Path) -> None:
    source = open_source(None, image_size=28, staging=tmp_path)
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2
        )
        # One epoch's worth of batches of one image each: every example of the shard.
        batches = source.dataset(batch_size=1, seed=0, input_context=context).take(1797 // 2)
        seen.append({batch.numpy().tobytes() for batch in batches})

    assert len(seen[0]) > 800 and len(seen[1]) > 800
    assert not seen[0] & seen[1]
