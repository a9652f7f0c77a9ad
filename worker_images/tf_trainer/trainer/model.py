"""A DCGAN for small grayscale images, with minibatch discrimination.

A plain GAN discriminator judges each sample alone, so a generator that maps all
noise to one convincing image is never penalised for it: it "collapses". Minibatch
discrimination (Salimans et al., "Improved Techniques for Training GANs", 2016,
section 3.2) gives the discriminator, for every sample, features measuring how close
it is to the other samples of its batch. A collapsed batch of generated images is
then trivially told apart from a diverse real batch, and the generator's gradient
pushes it to spread out.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import layers, ops


@keras.saving.register_keras_serializable(package="trainer")
class MinibatchDiscrimination(layers.Layer):
    """Appends, to each sample's features, how many of its batch mates resemble it.

    Input f of shape (n, A). A learnt tensor T (A, B, C) projects each sample to B
    rows of length C: M_i = f_i T. For each kernel b the closeness of samples i and
    j is c_b(i, j) = exp(-||M_i,b - M_j,b||_1), and the output is
    o(i)_b = sum over j != i of c_b(i, j), concatenated to f: shape (n, A + B).

    The paper sums over all j; leaving out j = i (always exp(0) = 1) changes
    nothing the discriminator can learn and makes the feature read directly as
    "near-duplicates in this batch": 0 for a diverse batch, n - 1 for a batch of
    identical samples.
    """

    def __init__(self, num_kernels: int = 32, kernel_dim: int = 8, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_kernels = num_kernels
        self.kernel_dim = kernel_dim

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        if len(input_shape) != 2 or input_shape[-1] is None:
            raise ValueError(f"MinibatchDiscrimination needs (batch, features) input, got {input_shape}")
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_shape[-1], self.num_kernels * self.kernel_dim),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )

    def call(self, inputs: Any) -> Any:
        rows = ops.reshape(ops.matmul(inputs, self.kernel), (-1, self.num_kernels, self.kernel_dim))
        # (n, 1, B, C) - (1, n, B, C): every pair of samples, every kernel.
        distances = ops.sum(ops.abs(rows[:, None] - rows[None, :]), axis=-1)  # (n, n, B)
        closeness = ops.sum(ops.exp(-distances), axis=1) - 1.0  # drop j == i
        return ops.concatenate([inputs, closeness], axis=-1)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return (input_shape[0], input_shape[-1] + self.num_kernels)  # type: ignore[operator]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_kernels": self.num_kernels, "kernel_dim": self.kernel_dim}


def build_generator(*, latent_dim: int, width: int, image_size: int) -> keras.Model:
    """Noise (latent_dim,) -> image (size, size, 1) in [-1, 1]: size/4 -> size/2 -> size."""
    seed = image_size // 4
    return keras.Sequential(
        [
            keras.Input((latent_dim,)),
            # No biases before batch norm: its shift makes them redundant.
            layers.Dense(seed * seed * width * 4, use_bias=False),
            layers.BatchNormalization(),
            layers.LeakyReLU(0.2),
            layers.Reshape((seed, seed, width * 4)),
            layers.Conv2DTranspose(width * 2, 5, strides=1, padding="same", use_bias=False),
            layers.BatchNormalization(),
            layers.LeakyReLU(0.2),
            layers.Conv2DTranspose(width, 5, strides=2, padding="same", use_bias=False),
            layers.BatchNormalization(),
            layers.LeakyReLU(0.2),
            layers.Conv2DTranspose(1, 5, strides=2, padding="same", activation="tanh"),
        ],
        name="generator",
    )


def build_discriminator(*, width: int, image_size: int, md_kernels: int, md_dim: int) -> keras.Model:
    """Image -> one logit (real vs generated), judging the sample within its batch."""
    return keras.Sequential(
        [
            keras.Input((image_size, image_size, 1)),
            layers.Conv2D(width, 5, strides=2, padding="same"),
            layers.LeakyReLU(0.2),
            layers.Dropout(0.3),
            layers.Conv2D(width * 2, 5, strides=2, padding="same"),
            layers.LeakyReLU(0.2),
            layers.Dropout(0.3),
            layers.Flatten(),
            MinibatchDiscrimination(md_kernels, md_dim, name="minibatch_discrimination"),
            layers.Dense(1),
        ],
        name="discriminator",
    )
