"""The sweep metric: a Fréchet distance that must punish mode collapse."""

from __future__ import annotations

import numpy as np
import pytest
from trainer.data import open_source
from trainer.evaluate import frechet_distance


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    array = open_source(None, image_size=28, staging=tmp_path_factory.mktemp("data")).array
    assert array is not None
    return np.random.default_rng(0).permutation(array)


def test_identical_sets_are_at_distance_zero(digits: np.ndarray) -> None:
    assert frechet_distance(digits[:300], digits[:300]) == pytest.approx(0.0, abs=1e-3)


def test_a_collapsed_generator_is_far_from_the_data(digits: np.ndarray) -> None:
    real, held_out = digits[:512], digits[512:1024]
    collapsed = np.repeat(digits[1500:1501], 512, axis=0)

    close = frechet_distance(real, held_out)
    far = frechet_distance(real, collapsed)

    # Two samples of the real data vs. one image repeated: the collapse is what the
    # metric must see, by a wide margin, for a sweep to rank trials sensibly.
    assert far > 20 * close
