"""A gRPC answer's tensors are bounded by their elements too, not only by their bytes."""

from __future__ import annotations

import pytest

from squall.cli.prediction import MAX_ANSWER_ELEMENTS, TensorError, decode_tensor
from tests.unit.test_predict_hostile_answers import DT_BOOL, DT_FLOAT, proto


def test_a_bool_tensor_of_sixty_million_elements_is_refused_before_it_is_built() -> None:
    # 60M one-byte elements fit the 64 MiB of bytes, but printed as JSON they are a
    # gigabyte of Python objects and text: a few bytes on the wire must not cost that.
    hostile = proto(DT_BOOL, [60_000_000], bool_val=[True])
    with pytest.raises(TensorError, match=f"more than {MAX_ANSWER_ELEMENTS} elements"):
        decode_tensor(hostile)


def test_the_elements_count_across_outputs() -> None:
    made = proto(DT_FLOAT, [1024], tensor_content=b"\0" * 4096)
    assert decode_tensor(made, elements=1024).shape == (1024,)
    with pytest.raises(TensorError, match="more than 1023 elements"):
        decode_tensor(made, elements=1023)
