"""TensorFlow Serving's predict API from the command line: the request file, REST and gRPC.

`squall predict` (cli/serving.py) reads the request with `read_request` (a JSON
object with exactly one of `instances` and `inputs`, checked before anything is sent),
then sends it to the model service's endpoint: `rest_predict` POSTs it to
`/v1/models/<name>[/versions/N]:predict`; `grpc_predict` builds the tensors from the
signature's metadata (GetModelMetadata) and calls PredictionService/Predict, answering
as the REST API answers a columnar request.

An answer is the model server's to write, so it is read as hostile: at most
MAX_ANSWER_BYTES, JSON nested at most MAX_ANSWER_DEPTH deep (checked before it is
parsed), and a gRPC answer's tensors checked against their declared shape and dtype
before anything is decoded or allocated (`decode_tensor`: at most MAX_RANK dimensions
and MAX_ANSWER_BYTES in all, contents that agree with the shape). A server's error
text is shown through `printable`. Each is a CommandError (exit 1), never a traceback.

The gRPC client needs grpcio, numpy and the protobuf messages of tensorflow-serving-api,
not TensorFlow: `serving_protos` loads the messages (which live in the `tensorflow`
namespace) without running tensorflow/__init__, which takes seconds and writes its
start-up notes to stderr.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import math
import re
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from squall.cli.errors import EXIT_FAILED, CommandError
from squall.cli.text import printable

DEFAULT_SIGNATURE = "serving_default"
MAX_INPUT_BYTES = 16 * 2**20  # a predict request's file
MAX_ANSWER_BYTES = 64 * 2**20  # a predict answer read back, and what its tensors may decode to
MAX_ANSWER_DEPTH = 64  # JSON nesting of an answer (a tensor's rank is at most MAX_RANK)
MAX_RANK = 32  # dimensions of a tensor, sent or read back
# Elements of an answer's tensors in all: each becomes a Python number and its JSON text
# when printed (tens of bytes), whatever its dtype's size, so a byte budget alone would let
# a bool tensor of 60M elements through at a gigabyte and more.
MAX_ANSWER_ELEMENTS = MAX_ANSWER_BYTES // 16
REQUEST_KEYS = frozenset({"instances", "inputs", "signature_name"})


# ---- the request ----


def read_request(path: str, *, signature: str | None) -> dict[str, Any]:
    """A predict request's body from a JSON file: `instances` (rows) or `inputs` (columns), checked before sending."""
    from squall.core import documents

    source = "standard input" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with Path(path).open("rb") as file:
                raw = file.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise CommandError(f"--input {source}: cannot read it: {exc.strerror or exc}") from exc
    if len(raw) > MAX_INPUT_BYTES:
        raise CommandError(
            f"--input {source}: more than {MAX_INPUT_BYTES // 2**20} MiB; send it in smaller batches"
        )
    try:
        body = documents.parse_json(raw.decode("utf-8"), source=source)
    except UnicodeDecodeError:
        raise CommandError(f"--input {source}: not UTF-8 text") from None
    except documents.DocumentError as exc:
        raise CommandError(f"--input {exc}") from exc
    return check_request(body, source=f"--input {source}", signature=signature)


def check_request(body: Any, *, source: str, signature: str | None) -> dict[str, Any]:
    """A predict request's body checked before it is sent (`source` names it in errors); a copy,
    with `signature` as its signature_name when given."""
    from squall.core import documents

    if not isinstance(body, Mapping):
        raise CommandError(
            f"{source}: expected a JSON object with 'instances' or 'inputs', got {documents.kind(body)}"
        )
    body = dict(body)
    unknown = sorted(str(key) for key in set(body) - REQUEST_KEYS)
    if unknown:
        raise CommandError(
            f"{source}: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k[:40]) for k in unknown[:5])}: a predict request has 'instances' or 'inputs', "
            "and optionally 'signature_name'"
        )
    given = [key for key in ("instances", "inputs") if key in body]
    if len(given) != 1:
        which = "both" if given else "neither"
        raise CommandError(
            f"{source}: has {which} of 'instances' (a list of rows) and 'inputs' (columns): give exactly one"
        )
    if "instances" in body and (not isinstance(body["instances"], list) or not body["instances"]):
        raise CommandError(f"{source}: 'instances' must be a non-empty list of rows")
    if "signature_name" in body and not isinstance(body["signature_name"], str):
        raise CommandError(f"{source}: 'signature_name' must be a string")
    if signature is not None:
        body["signature_name"] = signature
    return body


def rest_base(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"--url {url[:80]!r}: expected the REST address, e.g. http://localhost:8501")
    return url.strip().rstrip("/")


def grpc_target(url: str) -> str:
    text = url.strip()
    for prefix in ("grpc://", "dns:///"):
        text = text.removeprefix(prefix)
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in text:
        raise CommandError(f"--url {url[:80]!r}: expected the gRPC address as host:port, e.g. localhost:8500")
    return text


def _model_path(name: str, version: int | None) -> str:
    return f"/v1/models/{name}" + (f"/versions/{version}" if version is not None else "")


def rest_predict(
    base: str, *, name: str, version: int | None, body: Mapping[str, Any], timeout: float
) -> Any:
    """POST <base>/v1/models/<name>[/versions/N]:predict; the answer's JSON, or CommandError (exit 1).

    `timeout` bounds each read of the socket and the whole exchange: a server that sends
    a byte now and then cannot hold the command past it (the exchange's thread is left).
    """
    import http.client
    import urllib.error
    import urllib.request

    url = f"{base}{_model_path(name, version)}:predict"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    outcome: list[Any] = []  # (None, the answer) or (an HTTP error's code, its text), or what was raised

    def exchange() -> None:
        try:
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    outcome.append((None, response.read(MAX_ANSWER_BYTES + 1)))
            except urllib.error.HTTPError as exc:
                outcome.append((exc.code, _server_error(exc)))
        except BaseException as exc:  # raised again in the command's thread
            outcome.append(exc)

    worker = threading.Thread(target=exchange, name="predict", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise CommandError(f"{_shown(url)}: no whole answer within {timeout:g} s", code=EXIT_FAILED)
    try:
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
    except http.client.HTTPException as exc:  # a status line, headers or chunks that are not HTTP's
        raise CommandError(
            f"{_shown(url)}: the answer is not HTTP: {type(exc).__name__}: {_shown(str(exc)[:200])}",
            code=EXIT_FAILED,
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"cannot reach {_shown(url)}: {_shown(str(reason))}", code=EXIT_FAILED) from exc
    status, raw = outcome[0]
    if status is not None:
        raise CommandError(f"{_shown(url)}: HTTP {status}: {_shown(raw)}", code=EXIT_FAILED)
    if len(raw) > MAX_ANSWER_BYTES:
        raise CommandError(
            f"{_shown(url)}: the answer is over {MAX_ANSWER_BYTES // 2**20} MiB", code=EXIT_FAILED
        )
    return parse_answer(raw, source=_shown(url))


def _shown(text: str) -> str:
    """Text a server or a record wrote, as one line of an error shows it."""
    return printable(text, newlines=False)


# A string once its escapes are gone, or an unterminated one to the end of the text: every
# quote starts a match that succeeds, so no search is retried from the quotes inside an
# unterminated string (a regex over escapes made 320 KB of escaped quotes take minutes).
_JSON_STRING = re.compile(rb'"[^"]*(?:"|\Z)')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_ONE_KIND = bytes.maketrans(b"{}", b"[]")
_STRIDE = 16  # brackets measured at once: 2**16 kinds of stride, each measured once


def nested_deeper(raw: bytes, limit: int) -> bool:
    """True when the JSON text `raw` nests arrays and objects more than `limit` deep.

    Without parsing it (a parser recurses once a level): strings out, only the brackets
    kept (objects' as arrays'), then their running depth followed `_STRIDE` brackets at
    a time, each stride's rise and peak looked up once measured. Linear in the text's
    length, whatever its shape. A text whose brackets do not pair up is left to the
    parser to refuse.
    """
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped backslashes first, then quotes
    brackets = _JSON_STRING.sub(b"", unescaped).translate(_ONE_KIND, _NOT_BRACKETS)
    depth = 0
    for start in range(0, len(brackets), _STRIDE):
        peak, rise = _measured(brackets[start : start + _STRIDE])
        if depth + peak > limit:
            return True
        depth += rise
    return False


@functools.cache
def _measured(stride: bytes) -> tuple[int, int]:
    """The highest depth a run of brackets reaches from where it starts, and where it ends."""
    depth = peak = 0
    for byte in stride:
        depth += 1 if byte == ord("[") else -1
        peak = max(peak, depth)
    return peak, depth


def parse_answer(raw: bytes, *, source: str) -> Any:
    """A REST answer's JSON, or CommandError (exit 1) when it is not JSON or nests too deep to read."""
    deep = f"{source}: the answer is nested more than {MAX_ANSWER_DEPTH} levels deep: not a predict answer"
    if nested_deeper(raw, MAX_ANSWER_DEPTH):
        raise CommandError(deep, code=EXIT_FAILED)
    try:
        return json.loads(raw)
    except RecursionError:  # unpaired brackets that still nest past the interpreter's limit
        raise CommandError(deep, code=EXIT_FAILED) from None
    except ValueError as exc:
        raise CommandError(f"{source}: the answer is not JSON: {raw[:200]!r}", code=EXIT_FAILED) from exc


def _server_error(exc: Any) -> str:
    """TensorFlow Serving's {"error": "..."}, else the start of whatever the server said."""
    import http.client

    try:
        raw = exc.read(64 * 1024)
    except (OSError, http.client.HTTPException):  # cut short, or chunks that are not HTTP's
        return str(exc.reason)
    body = None
    if not nested_deeper(raw, MAX_ANSWER_DEPTH):
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: brackets that do not pair up, nested deep
            body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    text = raw.decode("utf-8", "replace").strip()
    return text[:500] or str(exc.reason)


# ---- gRPC: TensorFlow Serving's PredictionService ----


_PROTOS_LOCK = threading.Lock()


def serving_protos() -> types.SimpleNamespace:
    """tensorflow-serving-api's messages and stubs, loaded without importing TensorFlow.

    Its modules import `tensorflow.core.framework.tensor_pb2` and the like: plain protobuf
    modules, but inside the `tensorflow` package, whose __init__ imports all of TensorFlow
    (seconds, and C++ start-up notes on stderr). Unless TensorFlow is loaded already, an
    empty stand-in for the package (its __path__ only) takes its place while they load,
    and is taken away after: a later `import tensorflow` runs the real one, which finds
    these same message modules loaded.
    """
    with _PROTOS_LOCK:
        stand_in = None
        if "tensorflow" not in sys.modules:
            spec = importlib.util.find_spec("tensorflow")
            if spec is None or not spec.submodule_search_locations:
                raise CommandError(
                    "--grpc needs tensorflow-serving-api and the package that holds its messages "
                    "(tensorflow or tensorflow-cpu)",
                    code=EXIT_FAILED,
                )
            stand_in = types.ModuleType("tensorflow")
            stand_in.__path__ = list(spec.submodule_search_locations)
            sys.modules["tensorflow"] = stand_in
        try:
            from tensorflow.core.framework import tensor_pb2, types_pb2
            from tensorflow_serving.apis import (
                get_model_metadata_pb2,
                predict_pb2,
                prediction_service_pb2_grpc,
            )
        finally:
            if stand_in is not None and sys.modules.get("tensorflow") is stand_in:
                del sys.modules["tensorflow"]
    return types.SimpleNamespace(
        tensor_pb2=tensor_pb2,
        types_pb2=types_pb2,
        get_model_metadata_pb2=get_model_metadata_pb2,
        predict_pb2=predict_pb2,
        prediction_service_pb2_grpc=prediction_service_pb2_grpc,
    )


def grpc_predict(
    target: str, *, name: str, version: int | None, body: Mapping[str, Any], timeout: float
) -> dict[str, Any]:
    """Predict through gRPC; the answer as TensorFlow Serving's REST API gives a columnar request's.

    The tensors are built from the signature's metadata (GetModelMetadata: the input
    names, dtypes and shapes), so a row request becomes the same columns the REST API
    would make of it; an input that does not match is refused here, naming it. The
    answer's tensors are checked before they are decoded (`decode_tensor`).
    """
    import grpc
    from google.protobuf.message import DecodeError

    protos = serving_protos()
    options = [
        ("grpc.max_send_message_length", MAX_INPUT_BYTES * 4),
        ("grpc.max_receive_message_length", MAX_ANSWER_BYTES),
    ]
    signature_name = str(body.get("signature_name") or DEFAULT_SIGNATURE)
    with grpc.insecure_channel(target, options=options) as channel:
        stub = protos.prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            metadata_request = protos.get_model_metadata_pb2.GetModelMetadataRequest()
            metadata_request.model_spec.name = name
            if version is not None:
                metadata_request.model_spec.version.value = version
            metadata_request.metadata_field.append("signature_def")
            metadata = stub.GetModelMetadata(metadata_request, timeout=timeout)
            signatures = protos.get_model_metadata_pb2.SignatureDefMap()
            try:
                metadata.metadata["signature_def"].Unpack(signatures)
            except DecodeError as exc:  # the type it names, but bytes that are not one
                raise CommandError(
                    f"{target}: model {name}'s metadata holds no readable signature_def: {_shown(str(exc))}",
                    code=EXIT_FAILED,
                ) from None
            if signature_name not in signatures.signature_def:
                known = ", ".join(sorted(signatures.signature_def)) or "none"
                raise CommandError(
                    f"{target}: model {name} has no signature {_shown(repr(signature_name))} "
                    f"(its signatures: {_shown(known)})",
                    code=EXIT_FAILED,
                )
            signature = signatures.signature_def[signature_name]
            request = protos.predict_pb2.PredictRequest()
            request.model_spec.name = name
            request.model_spec.signature_name = signature_name
            if version is not None:
                request.model_spec.version.value = version
            specs = {key: (info.dtype, _shape(info.tensor_shape)) for key, info in signature.inputs.items()}
            for key, value in columns(body, inputs=sorted(specs), signature=signature_name).items():
                request.inputs[key].CopyFrom(tensor(key, value, dtype=specs[key][0], shape=specs[key][1]))
            response = stub.Predict(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            shown = code.name if code is not None else "error"
            raise CommandError(f"{target}: {shown}: {_shown(str(details))}", code=EXIT_FAILED) from exc
    budget, elements = MAX_ANSWER_BYTES, MAX_ANSWER_ELEMENTS
    outputs: dict[str, Any] = {}
    for key in sorted(response.outputs):
        try:
            array = decode_tensor(response.outputs[key], budget=budget, elements=elements)
        except TensorError as exc:
            raise CommandError(
                f"{target}: output {_shown(repr(key))} of the answer: {exc}: not a tensor this command reads "
                f"(an answer's tensors take at most {MAX_ANSWER_BYTES // 2**20} MiB and "
                f"{MAX_ANSWER_ELEMENTS:,} elements in all)",
                code=EXIT_FAILED,
            ) from None
        budget -= _decoded_bytes(array)
        elements -= int(array.size)
        outputs[key] = _plain(array.tolist())
    if len(outputs) == 1:
        return {"outputs": next(iter(outputs.values()))}
    return {"outputs": outputs}


def _shape(proto: Any) -> tuple[int, ...] | None:
    """A TensorShapeProto as sizes (-1 unknown); None when even the rank is unknown."""
    return None if proto.unknown_rank else tuple(int(d.size) for d in proto.dim)


def columns(body: Mapping[str, Any], *, inputs: Sequence[str], signature: str) -> dict[str, Any]:
    """The request's values per input name, as TensorFlow Serving reads `instances` (rows) and `inputs` (columns)."""
    only = inputs[0] if len(inputs) == 1 else None
    if "inputs" in body:
        value = body["inputs"]
        if not isinstance(value, dict) or _is_b64(value):
            if only is None:
                raise _mismatch(signature, inputs, "give 'inputs' as an object of them")
            return {only: value}
        return _check_names(dict(value), inputs=inputs, signature=signature)
    rows = body["instances"]
    if all(isinstance(row, dict) and not _is_b64(row) for row in rows):
        keys = set(rows[0])
        if any(set(row) != keys for row in rows):
            raise CommandError("every instance (row) must name the same inputs", code=EXIT_FAILED)
        return _check_names(
            {key: [row[key] for row in rows] for key in rows[0]}, inputs=inputs, signature=signature
        )
    if only is None:
        raise _mismatch(signature, inputs, "give each instance as an object of them")
    return {only: rows}


def _mismatch(signature: str, inputs: Sequence[str], what: str) -> CommandError:
    return CommandError(
        f"signature {signature!r} takes {len(inputs)} inputs ({', '.join(inputs)}): {what}", code=EXIT_FAILED
    )


def _check_names(named: dict[str, Any], *, inputs: Sequence[str], signature: str) -> dict[str, Any]:
    unknown = sorted(set(named) - set(inputs))
    missing = sorted(set(inputs) - set(named))
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"no input {', '.join(repr(k[:40]) for k in unknown[:5])}")
        if missing:
            parts.append(f"missing {', '.join(repr(k) for k in missing[:5])}")
        raise CommandError(
            f"the request does not match signature {signature!r} (its inputs: {', '.join(inputs)}): "
            + "; ".join(parts),
            code=EXIT_FAILED,
        )
    return named


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


# DataType -> the numpy dtype and the TensorProto field that holds its values, for the
# dtypes a predict request or answer carries (tensorflow/core/framework/types.proto).
_DTYPES: dict[int, tuple[str, str]] = {
    1: ("float32", "float_val"),  # DT_FLOAT
    2: ("float64", "double_val"),  # DT_DOUBLE
    3: ("int32", "int_val"),  # DT_INT32
    4: ("uint8", "int_val"),  # DT_UINT8
    5: ("int16", "int_val"),  # DT_INT16
    6: ("int8", "int_val"),  # DT_INT8
    7: ("object", "string_val"),  # DT_STRING
    8: ("complex64", "scomplex_val"),  # DT_COMPLEX64: (real, imaginary) pairs
    9: ("int64", "int64_val"),  # DT_INT64
    10: ("bool", "bool_val"),  # DT_BOOL
    17: ("uint16", "int_val"),  # DT_UINT16
    18: ("complex128", "dcomplex_val"),  # DT_COMPLEX128
    19: ("float16", "half_val"),  # DT_HALF: the bits, in int32s
    22: ("uint32", "uint32_val"),  # DT_UINT32
    23: ("uint64", "uint64_val"),  # DT_UINT64
}
_STRING = 7


def _dtype_name(dtype: int) -> str:
    known = _DTYPES.get(dtype)
    if known is None:
        return f"DataType {dtype}"
    return "string" if dtype == _STRING else known[0]


def tensor(key: str, value: Any, *, dtype: int, shape: tuple[int, ...] | None) -> Any:
    """A TensorProto of `value` as the signature's input `key` takes it, or CommandError naming the input."""
    import numpy as np

    protos = serving_protos()
    known = _DTYPES.get(dtype)
    if known is None:
        raise CommandError(
            f"input {key!r}: the signature takes {_dtype_name(dtype)}, which predict --grpc cannot send "
            "(use REST)",
            code=EXIT_FAILED,
        )
    numpy_dtype = known[0]
    try:
        if dtype == _STRING:
            array = np.asarray(_bytes(value), dtype=object)
        else:
            array = np.asarray(value, dtype=numpy_dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CommandError(
            f"input {key!r}: cannot be read as {_dtype_name(dtype)}: {exc}", code=EXIT_FAILED
        ) from exc
    if array.ndim > MAX_RANK:
        raise CommandError(f"input {key!r}: rank {array.ndim} is more than {MAX_RANK}", code=EXIT_FAILED)
    if shape is not None and (
        array.ndim != len(shape)
        or any(want not in (-1, got) for want, got in zip(shape, array.shape, strict=True))
    ):
        expected = "(" + ", ".join("None" if d == -1 else str(d) for d in shape) + ")"
        raise CommandError(
            f"input {key!r}: shape {tuple(array.shape)} does not match the signature's {expected}",
            code=EXIT_FAILED,
        )
    proto = protos.tensor_pb2.TensorProto(dtype=dtype)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=int(size))
    if dtype == _STRING:
        if array.dtype != object or not all(isinstance(item, bytes) for item in array.flat):
            raise CommandError(f"input {key!r}: cannot be read as string: expected strings", code=EXIT_FAILED)
        proto.string_val.extend(array.flat)
    else:
        # TensorFlow Serving reads tensor_content in little-endian order, whatever the host.
        proto.tensor_content = array.astype(np.dtype(numpy_dtype).newbyteorder("<")).tobytes()
    return proto


class TensorError(ValueError):
    """A TensorProto that cannot be read: what is wrong with it (its dtype, shape or contents)."""


def tensor_shape(proto: Any) -> tuple[int, ...]:
    """A TensorProto's declared shape: at most MAX_RANK dimensions, none negative, or TensorError."""
    if proto.tensor_shape.unknown_rank:
        raise TensorError("its shape has no rank")
    dims = proto.tensor_shape.dim
    if len(dims) > MAX_RANK:
        raise TensorError(f"rank {len(dims)} is more than {MAX_RANK}")
    shape = tuple(int(d.size) for d in dims)
    if any(size < 0 for size in shape):
        raise TensorError(f"shape {list(shape)} has a negative size")
    return shape


def decode_tensor(proto: Any, *, budget: int = MAX_ANSWER_BYTES, elements: int = MAX_ANSWER_ELEMENTS) -> Any:
    """A TensorProto as a numpy array, its shape and contents checked before anything is allocated.

    `tensor_shape`'s bounds; the elements times the dtype's size (for strings, the bytes
    they hold too) at most `budget`; `tensor_content` exactly the bytes the shape needs,
    a value field no longer than the shape has elements (TensorFlow repeats the last
    value for the rest, so twenty bytes may declare gigabytes). TensorError says which.
    """
    import numpy as np

    known = _DTYPES.get(proto.dtype)
    if known is None:
        raise TensorError(f"its dtype is {_dtype_name(proto.dtype)}")
    numpy_dtype, field = known
    shape = tensor_shape(proto)
    if any(size > budget for size in shape):  # even beside a 0 (no elements): no array has such a side
        raise TensorError(f"shape {list(shape)} has a size over {budget}")
    count = 0 if 0 in shape else 1
    for size in shape if count else ():
        count *= size
        if count > budget:  # every element takes a byte at least: past the bound already
            break
    declared = count * (8 if proto.dtype == _STRING else np.dtype(numpy_dtype).itemsize)
    if proto.dtype == _STRING:
        values = proto.string_val
        if len(values) > count:
            raise TensorError(f"{len(values)} strings for a shape {list(shape)} of {count} elements")
        if values:
            declared += sum(len(v) for v in values) + (count - len(values)) * len(values[-1])
    if declared > budget:
        raise TensorError(
            f"shape {list(shape)} of {_dtype_name(proto.dtype)} would take {declared} bytes, more than {budget}"
        )
    if count > elements:
        raise TensorError(f"shape {list(shape)} has more than {elements} elements")
    if proto.dtype == _STRING:
        items = list(proto.string_val)
        if len(items) < count:
            items += [items[-1] if items else b""] * (count - len(items))
        array = np.empty(count, dtype=object)
        array[:] = items
        return array.reshape(shape)
    if proto.tensor_content:
        if len(proto.tensor_content) != declared:
            raise TensorError(
                f"tensor_content holds {len(proto.tensor_content)} bytes where shape {list(shape)} "
                f"of {numpy_dtype} needs {declared}"
            )
        little = np.dtype(numpy_dtype).newbyteorder("<")
        return np.frombuffer(proto.tensor_content, dtype=little).astype(numpy_dtype).reshape(shape)
    raw = getattr(proto, field)
    pairs = 2 if numpy_dtype.startswith("complex") else 1
    if len(raw) % pairs or len(raw) // pairs > count:
        raise TensorError(f"{len(raw) // pairs} values for a shape {list(shape)} of {count} elements")
    if numpy_dtype == "float16":
        given = np.asarray(raw, dtype=np.uint16).view(np.float16)
    elif pairs == 2:
        parts = np.asarray(raw, dtype="float32" if numpy_dtype == "complex64" else "float64")
        given = (parts[0::2] + 1j * parts[1::2]).astype(numpy_dtype)
    else:
        given = np.asarray(raw).astype(numpy_dtype)
    array = np.zeros(count, dtype=numpy_dtype)
    if given.size:
        array[: given.size] = given
        array[given.size :] = given[-1]
    return array.reshape(shape)


def _decoded_bytes(array: Any) -> int:
    if array.dtype == object:
        return int(array.size) * 8 + sum(len(item) for item in array.flat)
    return int(array.nbytes)


def _bytes(value: Any) -> Any:
    if _is_b64(value):
        return base64.b64decode(value["b64"], validate=True)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [_bytes(item) for item in value]
    raise TypeError(f"expected strings, got {type(value).__name__}")


def _plain(value: Any) -> Any:
    """Bytes as TensorFlow Serving's REST API writes them: text when UTF-8, else {"b64": ...}."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return value  # json.dumps writes NaN / Infinity as TensorFlow Serving does
    return value
