"""`squall predict` reads a model server's answer as hostile: nesting, declared shapes and sizes bounded.

The gRPC tensors are built and read with the protobuf messages alone (no TensorFlow:
this tier fails a test that imports it).
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

from squall.cli.errors import EXIT_FAILED, CommandError
from squall.cli.prediction import (
    MAX_ANSWER_BYTES,
    MAX_ANSWER_DEPTH,
    TensorError,
    decode_tensor,
    nested_deeper,
    parse_answer,
    rest_predict,
    serving_protos,
    tensor,
)

DEEP = b"[" * 100_000 + b"]" * 100_000
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e"
DT_FLOAT, DT_STRING, DT_INT64, DT_BOOL, DT_HALF, DT_COMPLEX64 = 1, 7, 9, 10, 19, 8


def proto(dtype: int, shape: list[int], **fields: Any) -> Any:
    made = serving_protos().tensor_pb2.TensorProto(dtype=dtype, **fields)
    for size in shape:
        made.tensor_shape.dim.add(size=size)
    return made


# ---- JSON nesting ----


@pytest.mark.parametrize(
    ("raw", "deeper"),
    [
        (DEEP, True),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, True),
        (b"[" * (MAX_ANSWER_DEPTH + 1) + b"]" * (MAX_ANSWER_DEPTH + 1), True),
        (b"[" * MAX_ANSWER_DEPTH + b"]" * MAX_ANSWER_DEPTH, False),
        (b'{"predictions": [[1.0, 2.0], [3.0, 4.0]]}', False),
        (b'{"outputs": ["' + b"[" * 10_000 + b'", "\\"[[["]}', False),  # brackets inside strings
        (b"".join([b"[" + b"[[]]" * 3] * 70) + b"]" * 70, True),  # deep, never two openers in a row
        (b"[" + b"[[[]]]," * 10_000 + b"]", False),  # wide and shallow
        (b"[[[", False),  # not JSON: the parser says so
        (b"", False),
    ],
)
def test_nesting_is_measured_without_parsing(raw: bytes, deeper: bool) -> None:
    assert nested_deeper(raw, MAX_ANSWER_DEPTH) is deeper


@pytest.mark.parametrize(
    ("raw", "deeper"),
    [
        (b'["\\\\"' + b"[" * 70 + b"]" * 70 + b"]", True),  # an escaped backslash ends the string
        (b'["\\"' + b"[" * 70 + b'"]', False),  # an escaped quote does not
        (b"[" * 70 + b'"' + b"\\]" * 10, True),  # an unterminated string: only its own text is left out
    ],
)
def test_escapes_are_read_as_json_reads_them(raw: bytes, deeper: bool) -> None:
    assert nested_deeper(raw, MAX_ANSWER_DEPTH) is deeper


@pytest.mark.timeout(20)
def test_an_unterminated_string_of_escaped_quotes_is_measured_in_linear_time() -> None:
    # 2 MiB: each quote inside it started a search to the end of the text (hours at 64 MiB)
    assert nested_deeper(b'"' + b'\\"' * 2**20, MAX_ANSWER_DEPTH) is False
    with pytest.raises(CommandError, match="not JSON"):
        parse_answer(b'["' + b'\\"' * 2**20, source="http://x")


def test_an_answer_nested_100k_deep_is_a_clear_error_not_a_recursion_error() -> None:
    with pytest.raises(CommandError) as raised:
        parse_answer(DEEP, source="http://x")
    assert raised.value.code == EXIT_FAILED
    assert f"nested more than {MAX_ANSWER_DEPTH} levels deep" in str(raised.value)
    with pytest.raises(CommandError, match="not JSON"):
        parse_answer(b"[[[", source="http://x")
    assert parse_answer(b'{"predictions": [[1.5]]}', source="http://x") == {"predictions": [[1.5]]}


class _Answer(io.BytesIO):
    def __enter__(self) -> _Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_rest_predict_refuses_a_deep_answer_and_escapes_the_servers_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", lambda request, timeout: _Answer(DEEP))
    with pytest.raises(CommandError, match="nested more than"):
        rest_predict("http://lb:8501", name="gan", version=None, body={"instances": [1]}, timeout=5)

    def refuse(request: Any, timeout: float) -> Any:
        body = io.BytesIO(json.dumps({"error": f"bad input{HOSTILE}\nsquall: all is well"}).encode())
        raise urllib.error.HTTPError(request.full_url, 400, "Bad Request", None, body)  # type: ignore[arg-type]

    def refuse_deeply(request: Any, timeout: float) -> Any:
        body = io.BytesIO(b"[" * 60_000)  # an error body nested past the interpreter's recursion limit
        raise urllib.error.HTTPError(request.full_url, 500, "Oops", None, body)  # type: ignore[arg-type]

    monkeypatch.setattr(urllib.request, "urlopen", refuse_deeply)
    with pytest.raises(CommandError, match=r"HTTP 500: \[\[\[\["):
        rest_predict("http://lb:8501", name="gan", version=None, body={"instances": [1]}, timeout=5)

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    with pytest.raises(CommandError) as raised:
        rest_predict("http://lb:8501", name="gan", version=None, body={"instances": [1]}, timeout=5)
    shown = str(raised.value)
    assert "HTTP 400: bad input\\x1b]0;owned\\x07" in shown
    for raw in ("\x1b", "\x07", "\x9b", "\u202e", "\n"):
        assert raw not in shown


# ---- gRPC tensors ----


def test_a_20_byte_answer_that_declares_196_mib_is_refused_before_decoding() -> None:
    hostile = proto(DT_FLOAT, [7 * 7, 2**20], float_val=[1.0])  # TensorFlow would repeat the one value
    assert len(hostile.SerializeToString()) <= 20
    with pytest.raises(TensorError, match=r"would take 205520896 bytes, more than 67108864"):
        decode_tensor(hostile)


@pytest.mark.parametrize(
    ("made", "words"),
    [
        (proto(DT_FLOAT, [2**62, 2**62, 2**62], float_val=[1.0]), "has a size over"),  # no MemoryError
        (proto(DT_FLOAT, [2**25, 2**25, 2**25], float_val=[1.0]), "more than 67108864"),
        (proto(DT_FLOAT, [1] * 33), "rank 33 is more than 32"),
        (proto(DT_FLOAT, [-1, 2]), "negative size"),
        (proto(DT_FLOAT, [4], tensor_content=b"\0" * 12), "tensor_content holds 12 bytes where shape [4]"),
        (proto(DT_FLOAT, [2], float_val=[1.0, 2.0, 3.0]), "3 values for a shape [2] of 2 elements"),
        (proto(DT_STRING, [2**22], string_val=[b"x" * 1024]), "more than"),  # one string, repeated
        (proto(DT_STRING, [1], string_val=[b"a", b"b"]), "2 strings for a shape [1]"),
        (proto(14, [1]), "its dtype is DataType 14"),  # bfloat16: no numpy dtype
    ],
)
def test_hostile_tensors_are_refused_with_what_is_wrong(made: Any, words: str) -> None:
    with pytest.raises(TensorError) as raised:
        decode_tensor(made)
    assert words in str(raised.value)


def test_the_budget_counts_every_output() -> None:
    made = proto(DT_FLOAT, [1024], tensor_content=b"\0" * 4096)
    assert decode_tensor(made, budget=4096).shape == (1024,)
    with pytest.raises(TensorError):
        decode_tensor(made, budget=4095)
    assert MAX_ANSWER_BYTES == 64 * 2**20


def test_tensors_are_built_and_read_as_tensorflow_writes_them() -> None:
    built = tensor("x", [[1, 2], [3, 4]], dtype=DT_FLOAT, shape=(-1, 2))
    assert built.dtype == DT_FLOAT and [d.size for d in built.tensor_shape.dim] == [2, 2]
    np.testing.assert_array_equal(decode_tensor(built), np.float32([[1, 2], [3, 4]]))
    text = tensor("t", ["a", {"b64": "/w=="}], dtype=DT_STRING, shape=(-1,))
    assert list(decode_tensor(text)) == [b"a", b"\xff"]
    # value fields, the last value repeated for the rest as TensorFlow does
    np.testing.assert_array_equal(
        decode_tensor(proto(DT_INT64, [2, 2], int64_val=[7, 8])), np.int64([[7, 8], [8, 8]])
    )
    np.testing.assert_array_equal(decode_tensor(proto(DT_BOOL, [3])), np.zeros(3, bool))
    half = np.float16([1.5, -2.0]).view(np.uint16).tolist()
    np.testing.assert_array_equal(decode_tensor(proto(DT_HALF, [2], half_val=half)), np.float16([1.5, -2.0]))
    pair = proto(DT_COMPLEX64, [1], scomplex_val=[1.0, -1.0])
    np.testing.assert_array_equal(decode_tensor(pair), np.complex64([1 - 1j]))
    assert decode_tensor(proto(DT_FLOAT, [2**20, 0])).shape == (2**20, 0)
    with pytest.raises(TensorError, match="has a size over"):
        decode_tensor(proto(DT_FLOAT, [2**62, 0]))


def test_a_request_tensor_is_refused_naming_the_input() -> None:
    with pytest.raises(
        CommandError, match="input 'x': shape \\(1, 3\\) does not match the signature's \\(None, 2\\)"
    ):
        tensor("x", [[1, 2, 3]], dtype=DT_FLOAT, shape=(-1, 2))
    with pytest.raises(CommandError, match="input 'x': cannot be read as float32"):
        tensor("x", [["a"]], dtype=DT_FLOAT, shape=None)
    with pytest.raises(CommandError, match="input 'x': cannot be read as string"):
        tensor("x", [1, 2], dtype=DT_STRING, shape=None)
    with pytest.raises(CommandError, match="predict --grpc cannot send"):
        tensor("x", [1.0], dtype=14, shape=None)
