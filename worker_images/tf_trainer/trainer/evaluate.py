"""The number a sweep ranks trials by.

FID needs an Inception network, i.e. weights downloaded at run time, which this
image must not do. Instead: the Fréchet distance between Gaussians fitted to real
and generated images, in the space of the images themselves reduced to 8x8 (the
resolution of the shipped digits, so upscaling adds nothing). It is crude as a
measure of quality, but it is deterministic, free, comparable across trials of one
dataset and, like FID, it punishes mode collapse: a collapsed generator has almost
no covariance and lands far from the real data. Lower is better.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from scipy import linalg

METRIC = "frechet_distance_8x8"
FEATURE_SIZE = 8
# What the trainer reports to Squall at each evaluation (squall-metric lines). The
# distance itself (lower is better), and eval/score = 1 / (1 + distance), the same
# ranking as a number in (0, 1] where higher is better, for a sweep's
# `objective: {metric: eval/score, goal: maximize}`.
DISTANCE_NAME = f"eval/{METRIC}"
SCORE_NAME = "eval/score"


def reported(distance: float) -> dict[str, float]:
    """The eval/ metrics of one evaluation."""
    return {DISTANCE_NAME: distance, SCORE_NAME: 1.0 / (1.0 + distance)}


def features(images: np.ndarray) -> np.ndarray:
    """(N, H, W, 1) in [-1, 1] -> (N, 64), area-averaged to 8x8."""
    small = tf.image.resize(images, (FEATURE_SIZE, FEATURE_SIZE), method="area")
    return np.asarray(small, dtype=np.float64).reshape(len(images), -1)


def frechet_distance(real: np.ndarray, generated: np.ndarray) -> float:
    a, b = features(real), features(generated)
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # sqrtm of a product of two PSD matrices is real in theory; numerically it can
    # pick up tiny imaginary parts or fail on singular inputs (a collapsed
    # generator), hence the jitter and taking the real part.
    jitter = np.eye(len(cov_a)) * 1e-6
    root = linalg.sqrtm((cov_a + jitter) @ (cov_b + jitter))
    root = np.real(root)
    return float(np.sum((mu_a - mu_b) ** 2) + np.trace(cov_a + cov_b - 2.0 * root))
