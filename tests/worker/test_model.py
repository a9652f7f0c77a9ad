"""Minibatch discrimination and the DCGAN built around it."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from trainer.model import MinibatchDiscrimination, build_discriminator, build_generator

BATCH, FEATURES, KERNELS, DIM = 16, 784, 16, 8


@pytest.fixture
def layer() -> MinibatchDiscrimination:
    keras.utils.set_random_seed(0)
    layer = MinibatchDiscrimination(KERNELS, DIM)
    layer.build((None, FEATURES))
    return layer


def diverse_batch() -> np.ndarray:
    return np.random.default_rng(1).normal(size=(BATCH, FEATURES)).astype(np.float32)


def test_output_is_the_input_plus_one_feature_per_kernel(layer: MinibatchDiscrimination) -> None:
    x = diverse_batch()

    out = layer(x).numpy()

    assert out.shape == (BATCH, FEATURES + KERNELS)
    assert layer.compute_output_shape((None, FEATURES)) == (None, FEATURES + KERNELS)
    np.testing.assert_array_equal(out[:, :FEATURES], x)  # the input passes through


def test_collapsed_batch_reads_as_all_near_duplicates(layer: MinibatchDiscrimination) -> None:
    collapsed = np.repeat(diverse_batch()[:1], BATCH, axis=0)

    closeness = layer(collapsed).numpy()[:, FEATURES:]

    # Every sample has BATCH - 1 identical batch mates, in every kernel.
    np.testing.assert_allclose(closeness, BATCH - 1, rtol=1e-6)


def test_diverse_batch_reads_as_far_apart(layer: MinibatchDiscrimination) -> None:
    closeness = layer(diverse_batch()).numpy()[:, FEATURES:]

    assert closeness.min() >= 0.0
    # Far below the collapsed batch's BATCH - 1 = 15 for every sample: the
    # discriminator can tell the two apart from this feature alone.
    assert closeness.max() < 2.0
    assert closeness.mean() < 0.5


def test_closeness_grows_as_the_batch_collapses(layer: MinibatchDiscrimination) -> None:
    base = diverse_batch()
    mode = np.repeat(base[:1], BATCH, axis=0)
    means = [
        layer((1 - a) * base + a * mode).numpy()[:, FEATURES:].mean() for a in (0.0, 0.5, 0.9, 0.99, 1.0)
    ]

    assert means == sorted(means)
    assert means[-1] == pytest.approx(BATCH - 1)


def test_gradient_reaches_the_kernel_and_the_input(layer: MinibatchDiscrimination) -> None:
    x = tf.constant(diverse_batch()) * 0.05  # close enough together for non-zero closeness
    with tf.GradientTape() as tape:
        tape.watch(x)
        total = tf.reduce_sum(layer(x)[:, FEATURES:])
    grad_x, grad_kernel = tape.gradient(total, [x, layer.kernel.value])

    assert float(tf.reduce_sum(tf.abs(grad_kernel))) > 0
    assert float(tf.reduce_sum(tf.abs(grad_x))) > 0


def test_layer_config_round_trips() -> None:
    layer = MinibatchDiscrimination(num_kernels=5, kernel_dim=3, name="md")

    clone = MinibatchDiscrimination.from_config(layer.get_config())

    assert (clone.num_kernels, clone.kernel_dim, clone.name) == (5, 3, "md")


def test_rejects_unflattened_input() -> None:
    with pytest.raises(ValueError, match=r"needs \(batch, features\) input"):
        MinibatchDiscrimination().build((None, 7, 7, 64))


def test_generator_and_discriminator_shapes() -> None:
    generator = build_generator(latent_dim=8, width=4, image_size=28)
    discriminator = build_discriminator(width=4, image_size=28, md_kernels=4, md_dim=3)

    images = generator(np.zeros((3, 8), np.float32), training=False).numpy()
    logits = discriminator(images, training=False)

    assert images.shape == (3, 28, 28, 1)
    assert images.min() >= -1.0 and images.max() <= 1.0  # tanh, like the data
    assert logits.shape == (3, 1)
    assert any(isinstance(layer, MinibatchDiscrimination) for layer in discriminator.layers)
