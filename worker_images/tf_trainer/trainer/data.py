"""Training images: a .npz, TFRecord shards, or the dataset shipped in the image.

Every source yields float32 images in [-1, 1] (the generator ends in tanh), shaped
(size, size, 1). With no ``--data`` the trainer uses scikit-learn's 8x8 digits,
upscaled to MNIST's 28x28: it ships inside an installed package, so a run needs
no network, and it has ten modes for minibatch discrimination to keep.

Formats:
- ``.npz``: grayscale images under ``x``, ``images`` or ``x_train``, shaped
  (N, H, W) or (N, H, W, 1); integers are read as 0..255, floats as 0..1.
- TFRecord (``.tfrecord``/``.tfrecords`` file or a directory of them): one
  ``tf.train.Example`` per image with an encoded image (PNG, JPEG, ...) in the
  bytes feature ``image``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from trainer.storage import fetch

NPZ_KEYS = ("x", "images", "x_train")
TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords")
SHIPPED = "sklearn:digits"


class DataError(ValueError):
    """The data cannot be used for training; the message says why."""


@dataclass(frozen=True)
class ImageSource:
    """Where the images come from: in memory, or TFRecord files streamed from disk."""

    name: str
    image_size: int
    array: np.ndarray | None = None
    files: tuple[str, ...] = ()

    def dataset(
        self, *, batch_size: int, seed: int | None, input_context: tf.distribute.InputContext | None = None
    ) -> tf.data.Dataset:
        """An endless, shuffled stream of ``batch_size`` batches for one input pipeline.

        With an input context (multi-worker), each pipeline reads its own shard so
        workers do not train on the same examples in the same step.
        """
        pipelines = input_context.num_input_pipelines if input_context else 1
        pipeline = input_context.input_pipeline_id if input_context else 0
        if self.array is not None:
            ds = tf.data.Dataset.from_tensor_slices(self.array)
            ds = ds.shard(pipelines, pipeline) if pipelines > 1 else ds
            ds = ds.cache()
            buffer = len(self.array)
        else:
            files = tf.data.Dataset.from_tensor_slices(list(self.files))
            by_file = len(self.files) >= pipelines
            if by_file and pipelines > 1:
                files = files.shard(pipelines, pipeline)
            ds = files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
            if not by_file:
                ds = ds.shard(pipelines, pipeline)
            ds = ds.map(self._decode, num_parallel_calls=tf.data.AUTOTUNE)
            buffer = 10_000
        # Each pipeline shuffles differently, and reshuffles every epoch.
        ds = ds.shuffle(buffer, seed=None if seed is None else seed + pipeline, reshuffle_each_iteration=True)
        ds = ds.repeat()
        # Fixed batch shapes: one trace of the step, and minibatch discrimination
        # always compares the same number of samples.
        return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def sample(self, count: int, *, seed: int) -> np.ndarray:
        """Up to ``count`` real images, for the final metric."""
        if self.array is not None:
            rng = np.random.default_rng(seed)
            take = min(count, len(self.array))
            return self.array[rng.choice(len(self.array), size=take, replace=False)]
        ds = tf.data.TFRecordDataset(list(self.files)).map(self._decode).take(count)
        return np.stack(list(ds.as_numpy_iterator()))

    def _decode(self, record: tf.Tensor) -> tf.Tensor:
        features = tf.io.parse_single_example(record, {"image": tf.io.FixedLenFeature([], tf.string)})
        image = tf.io.decode_image(features["image"], channels=1, expand_animations=False)
        image = tf.image.resize(tf.cast(image, tf.float32), (self.image_size, self.image_size))
        image.set_shape((self.image_size, self.image_size, 1))
        return image / 127.5 - 1.0


def open_source(uri: str | None, *, image_size: int, staging: Path) -> ImageSource:
    if uri is None:
        return ImageSource(name=SHIPPED, image_size=image_size, array=_digits(image_size))
    path = fetch(uri, staging=staging)
    if path.is_dir():
        files = sorted(str(p) for p in path.rglob("*") if p.suffix in TFRECORD_SUFFIXES)
        if not files:
            raise DataError(f"{uri}: no {'/'.join(TFRECORD_SUFFIXES)} files in the directory")
        return ImageSource(name=uri, image_size=image_size, files=tuple(files))
    if path.suffix == ".npz":
        return ImageSource(name=uri, image_size=image_size, array=_npz(path, uri, image_size))
    if path.suffix in TFRECORD_SUFFIXES:
        return ImageSource(name=uri, image_size=image_size, files=(str(path),))
    raise DataError(f"{uri}: unsupported format; expected .npz, .tfrecord or a directory of .tfrecord")


def _digits(image_size: int) -> np.ndarray:
    from sklearn.datasets import load_digits

    images = load_digits().images.astype(np.float32) / 16.0  # 0..16 -> 0..1
    return _normalise(images[..., np.newaxis], image_size)


def _npz(path: Path, uri: str, image_size: int) -> np.ndarray:
    # allow_pickle=False: a data file must never be able to run code.
    with np.load(path, allow_pickle=False) as archive:
        key = next((k for k in NPZ_KEYS if k in archive.files), None)
        if key is None:
            raise DataError(f"{uri}: no image array; expected one of {NPZ_KEYS}, found {archive.files}")
        images = archive[key]
    if images.ndim == 3:
        images = images[..., np.newaxis]
    if images.ndim != 4 or images.shape[-1] != 1 or len(images) == 0:
        raise DataError(
            f"{uri}: {key} must be grayscale images (N, H, W) or (N, H, W, 1), got {images.shape}"
        )
    if np.issubdtype(images.dtype, np.integer):
        images = images.astype(np.float32) / 255.0
    elif np.issubdtype(images.dtype, np.floating):
        images = images.astype(np.float32)
        if images.min() < 0.0 or images.max() > 1.0:
            raise DataError(
                f"{uri}: float images must be in [0, 1], got [{images.min():.3g}, {images.max():.3g}]"
            )
    else:
        raise DataError(f"{uri}: {key} has dtype {images.dtype}; expected integers or floats")
    return _normalise(images, image_size)


def _normalise(images: np.ndarray, image_size: int) -> np.ndarray:
    """(N, H, W, 1) in [0, 1] -> (N, size, size, 1) float32 in [-1, 1]."""
    if images.shape[1:3] != (image_size, image_size):
        images = tf.image.resize(images, (image_size, image_size), method="bilinear").numpy()
    return np.clip(images * 2.0 - 1.0, -1.0, 1.0).astype(np.float32)
