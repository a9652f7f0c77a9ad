"""TensorFlow Serving's predict API from the command line: the request file, REST and gRPC.

`squall predict` (cli/serving.py) reads the request with `read_request` (a JSON
object with exactly one of `instances` and `inputs`, checked before anything is sent),
then sends it to the model service's endpoint: `rest_predict` POSTs it to
`/v1/models/<name>[/versions/N]:predict`; `grpc_predict` builds the tensors from the
signature's metadata (GetModelMetadata) and calls PredictionService/Predict, answering
as the REST API answers a columnar request. tensorflow and grpc are imported only there.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from squall.cli.errors import EXIT_FAILED, CommandError

DEFAULT_SIGNATURE = "serving_default"
MAX_INPUT_BYTES = 16 * 2**20  # a predict request's file
MAX_ANSWER_BYTES = 64 * 2**20  # a predict answer read back
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
    if not isinstance(body, dict):
        raise CommandError(
            f"--input {source}: expected a JSON object with 'instances' or 'inputs', got {documents.kind(body)}"
        )
    unknown = sorted(set(body) - REQUEST_KEYS)
    if unknown:
        raise CommandError(
            f"--input {source}: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k[:40]) for k in unknown[:5])}: a predict request has 'instances' or 'inputs', "
            "and optionally 'signature_name'"
        )
    given = [key for key in ("instances", "inputs") if key in body]
    if len(given) != 1:
        which = "both" if given else "neither"
        raise CommandError(
            f"--input {source}: has {which} of 'instances' (a list of rows) and 'inputs' (columns): give exactly one"
        )
    if "instances" in body and (not isinstance(body["instances"], list) or not body["instances"]):
        raise CommandError(f"--input {source}: 'instances' must be a non-empty list of rows")
    if "signature_name" in body and not isinstance(body["signature_name"], str):
        raise CommandError(f"--input {source}: 'signature_name' must be a string")
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
    """POST <base>/v1/models/<name>[/versions/N]:predict; the answer's JSON, or CommandError (exit 1)."""
    import urllib.error
    import urllib.request

    url = f"{base}{_model_path(name, version)}:predict"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise CommandError(f"{url}: HTTP {exc.code}: {_server_error(exc)}", code=EXIT_FAILED) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"cannot reach {url}: {reason}", code=EXIT_FAILED) from exc
    if len(raw) > MAX_ANSWER_BYTES:
        raise CommandError(f"{url}: the answer is over {MAX_ANSWER_BYTES // 2**20} MiB", code=EXIT_FAILED)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CommandError(f"{url}: the answer is not JSON: {raw[:200]!r}", code=EXIT_FAILED) from exc


def _server_error(exc: Any) -> str:
    """TensorFlow Serving's {"error": "..."}, else the start of whatever the server said."""
    try:
        raw = exc.read(64 * 1024)
    except OSError:
        return str(exc.reason)
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    text = raw.decode("utf-8", "replace").strip()
    return text[:500] or str(exc.reason)


# ---- gRPC: TensorFlow Serving's PredictionService ----


def grpc_predict(
    target: str, *, name: str, version: int | None, body: Mapping[str, Any], timeout: float
) -> dict[str, Any]:
    """Predict through gRPC; the answer as TensorFlow Serving's REST API gives a columnar request's.

    The tensors are built from the signature's metadata (GetModelMetadata: the input
    names, dtypes and shapes), so a row request becomes the same columns the REST API
    would make of it; an input that does not match is refused here, naming it.
    """
    # TensorFlow's C++ start-up notes (CPU features, absl) are not the command's output.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import grpc
    from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2, prediction_service_pb2_grpc

    options = [
        ("grpc.max_send_message_length", MAX_INPUT_BYTES * 4),
        ("grpc.max_receive_message_length", MAX_ANSWER_BYTES),
    ]
    signature_name = str(body.get("signature_name") or DEFAULT_SIGNATURE)
    with grpc.insecure_channel(target, options=options) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            metadata_request = get_model_metadata_pb2.GetModelMetadataRequest()
            metadata_request.model_spec.name = name
            if version is not None:
                metadata_request.model_spec.version.value = version
            metadata_request.metadata_field.append("signature_def")
            metadata = stub.GetModelMetadata(metadata_request, timeout=timeout)
            signatures = get_model_metadata_pb2.SignatureDefMap()
            metadata.metadata["signature_def"].Unpack(signatures)
            if signature_name not in signatures.signature_def:
                known = ", ".join(sorted(signatures.signature_def)) or "none"
                raise CommandError(
                    f"{target}: model {name} has no signature {signature_name!r} (its signatures: {known})",
                    code=EXIT_FAILED,
                )
            signature = signatures.signature_def[signature_name]
            request = predict_pb2.PredictRequest()
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
            raise CommandError(f"{target}: {shown}: {details}", code=EXIT_FAILED) from exc
    outputs = {key: _json_value(proto) for key, proto in response.outputs.items()}
    if len(outputs) == 1:
        return {"outputs": next(iter(outputs.values()))}
    return {"outputs": dict(sorted(outputs.items()))}


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


def tensor(key: str, value: Any, *, dtype: int, shape: tuple[int, ...] | None) -> Any:
    """A TensorProto of `value` as the signature's input `key` takes it, or CommandError naming the input."""
    import numpy as np
    import tensorflow as tf

    kind = tf.dtypes.as_dtype(dtype)
    try:
        if kind == tf.string:
            array = np.asarray(_bytes(value), dtype=object)
        else:
            array = np.asarray(value, dtype=kind.as_numpy_dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CommandError(f"input {key!r}: cannot be read as {kind.name}: {exc}", code=EXIT_FAILED) from exc
    if shape is not None and (
        array.ndim != len(shape)
        or any(want not in (-1, got) for want, got in zip(shape, array.shape, strict=True))
    ):
        expected = "(" + ", ".join("None" if d == -1 else str(d) for d in shape) + ")"
        raise CommandError(
            f"input {key!r}: shape {tuple(array.shape)} does not match the signature's {expected}",
            code=EXIT_FAILED,
        )
    return tf.make_tensor_proto(array, dtype=kind)


def _bytes(value: Any) -> Any:
    if _is_b64(value):
        return base64.b64decode(value["b64"], validate=True)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [_bytes(item) for item in value]
    raise TypeError(f"expected strings, got {type(value).__name__}")


def _json_value(proto: Any) -> Any:
    import tensorflow as tf

    return _plain(tf.make_ndarray(proto).tolist())


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
