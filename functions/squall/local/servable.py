"""The SavedModel a local model service serves: fetched, loaded, and fed from TensorFlow Serving's JSON.

`local/model_server.py` (the stand-in for a model service's pod) serves what this module
holds: `fetch_saved_model` (the `fetch-model` init container's part: the SavedModel's
files only, bounded), `Servable` (the loaded model's signatures, their inputs checked by
name, dtype and shape), and the REST API's request and answer formats (`parse_predict`,
`format_predict`: row `instances` and columnar `inputs`, `b64` strings).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MAX_OBJECTS = 10_000
MAX_MODEL_BYTES = 16 * 1024**3
MAX_RANK = 32
DEFAULT_SIGNATURE = "serving_default"
# The files of a SavedModel directory; anything else under the source is not copied.
SAVED_MODEL_FILES = frozenset({"saved_model.pb", "fingerprint.pb"})
SAVED_MODEL_DIRS = frozenset({"variables", "assets", "assets.extra"})


# ---- fetching ----


class FetchError(RuntimeError):
    """The SavedModel could not be copied (exit 1)."""


class NoSavedModelError(FetchError):
    """There is no saved_model.pb under the source (exit 2)."""


def fetch_saved_model(
    source: str,
    target: Path,
    *,
    client: Any = None,
    max_objects: int = MAX_OBJECTS,
    max_bytes: int = MAX_MODEL_BYTES,
) -> Path:
    """The local directory holding the SavedModel at `source` (copied to `target` when on S3)."""
    if not source.startswith("s3://"):
        path = Path(source)
        if not (path / "saved_model.pb").is_file():
            raise NoSavedModelError(f"no SavedModel at {source}: no saved_model.pb in it")
        return path
    bucket, _, prefix = source[len("s3://") :].partition("/")
    if not bucket:
        raise FetchError(f"--source {source!r} names no bucket")
    prefix = prefix.strip("/")
    base = f"{prefix}/" if prefix else ""
    if client is None:
        import boto3  # lazily: only the stand-in needs it, and only for an s3:// source

        client = boto3.client("s3")
    from botocore.exceptions import BotoCoreError, ClientError

    wanted: list[tuple[str, PurePosixPath, int]] = []
    total = 0
    listed = 0
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base):
            for item in page.get("Contents", []):
                key = str(item["Key"])
                listed += 1
                if listed > max_objects:
                    raise FetchError(
                        f"more than {max_objects} objects under {source}: not a SavedModel directory"
                    )
                relative = _saved_model_part(key[len(base) :])
                if relative is None:
                    continue
                size = int(item.get("Size", 0))
                total += size
                if total > max_bytes:
                    raise FetchError(f"the SavedModel at {source} is larger than {max_bytes} bytes")
                wanted.append((key, relative, size))
        if not any(relative == PurePosixPath("saved_model.pb") for _, relative, _ in wanted):
            raise NoSavedModelError(f"no SavedModel at {source}: no saved_model.pb under it")
        staging = target.with_name(target.name + ".partial")
        _remove(staging)
        for key, relative, _ in wanted:
            path = staging.joinpath(*relative.parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, key, str(path))
    except (BotoCoreError, ClientError) as exc:
        raise FetchError(f"cannot copy {source}: {exc}") from exc
    except OSError as exc:
        raise FetchError(f"cannot write the SavedModel to {target}: {exc}") from exc
    _remove(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(target)
    return target


def _saved_model_part(relative: str) -> PurePosixPath | None:
    """The path of a key below the source when it is part of a SavedModel, else None."""
    if not relative or relative.endswith("/"):
        return None  # the prefix itself, or a console "folder"
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None  # never written outside the target
    if len(parts) == 1:
        return PurePosixPath(relative) if relative in SAVED_MODEL_FILES else None
    return PurePosixPath(*parts) if parts[0] in SAVED_MODEL_DIRS else None


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# ---- the model ----


class BadRequest(ValueError):
    """A request that does not fit the model: HTTP 400, gRPC INVALID_ARGUMENT."""


class NotFound(LookupError):
    """Another model, version or path: HTTP 404, gRPC NOT_FOUND."""


@dataclass(frozen=True)
class Signature:
    name: str
    function: Any  # a ConcreteFunction taking the inputs by name
    inputs: Mapping[str, Any]  # name -> tf.TensorSpec
    outputs: tuple[str, ...]


class Servable:
    """A loaded SavedModel: its predict signatures and its SignatureDefs (for metadata)."""

    def __init__(self, path: Path) -> None:
        import tensorflow as tf
        from tensorflow.core.protobuf import saved_model_pb2

        self._tf = tf
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString((path / "saved_model.pb").read_bytes())
        self.signature_defs = dict(saved.meta_graphs[0].signature_def) if saved.meta_graphs else {}
        self._loaded = tf.saved_model.load(str(path))
        self.signatures: dict[str, Signature] = {}
        for name, function in self._loaded.signatures.items():
            _, kwargs = function.structured_input_signature
            outputs = function.structured_outputs
            self.signatures[name] = Signature(
                name=name,
                function=function,
                inputs=dict(kwargs),
                outputs=tuple(sorted(outputs)) if isinstance(outputs, Mapping) else (),
            )

    def signature(self, name: str) -> Signature:
        found = self.signatures.get(name)
        if found is None:
            known = ", ".join(sorted(self.signatures)) or "none"
            raise BadRequest(f"Serving signature name: {name!r} not found in signature def (it has: {known})")
        return found

    def run(
        self, signature: Signature, arrays: Mapping[str, Any], *, output_filter: Sequence[str] = ()
    ) -> dict[str, Any]:
        tf = self._tf
        unknown = sorted(set(arrays) - set(signature.inputs))
        if unknown:
            raise BadRequest(
                f"input {unknown[0]!r} is not an input of signature {signature.name!r}; {_takes(signature)}"
            )
        missing = sorted(set(signature.inputs) - set(arrays))
        if missing:
            raise BadRequest(f"input {missing[0]!r} is missing; {_takes(signature)}")
        for name in output_filter:
            if name not in signature.outputs:
                raise BadRequest(
                    f"output_filter names {name!r}, not an output of signature {signature.name!r} "
                    f"(outputs: {', '.join(signature.outputs)})"
                )
        tensors = {}
        for name, array in arrays.items():
            spec = signature.inputs[name]
            _check_shape(name, array.shape, spec)
            tensors[name] = tf.constant(array, dtype=spec.dtype)
        try:
            outputs = signature.function(**tensors)
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as exc:
            raise BadRequest(f"signature {signature.name!r} refused the inputs: {first_line(exc)}") from exc
        wanted = output_filter or signature.outputs
        return {name: outputs[name].numpy() for name in wanted}


def _takes(signature: Signature) -> str:
    described = ", ".join(f"{name} ({_describe(spec)})" for name, spec in sorted(signature.inputs.items()))
    return f"signature {signature.name!r} takes {described}"


def _describe(spec: Any) -> str:
    dims = spec.shape.as_list() if spec.shape.rank is not None else None
    shape = (
        "any shape" if dims is None else "[" + ", ".join("-1" if d is None else str(d) for d in dims) + "]"
    )
    return f"{spec.dtype.name}, shape {shape}"


def _check_shape(name: str, shape: Sequence[int], spec: Any) -> None:
    if spec.shape.rank is None:
        return
    expected = spec.shape.as_list()
    if len(shape) != len(expected) or any(
        e is not None and e != s for s, e in zip(shape, expected, strict=False)
    ):
        raise BadRequest(
            f"input {name!r} has shape [{', '.join(str(s) for s in shape)}]; "
            f"the signature takes {_describe(spec)}"
        )


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


# ---- JSON <-> arrays (REST) ----


def _json_array(name: str, value: Any, spec: Any) -> Any:
    """One input's JSON value as an array of the signature's dtype, or BadRequest naming it."""
    import numpy as np

    dtype = spec.dtype
    if dtype.name == "string":
        return _string_array(name, value)
    if isinstance(value, dict):
        raise BadRequest(f"input {name!r}: expected {dtype.name} values, got an object")
    try:
        array = np.asarray(value)
    except (ValueError, OverflowError) as exc:
        raise BadRequest(
            f"input {name!r}: the lists are not rectangular (ragged): {first_line(exc)}"
        ) from exc
    if array.ndim > MAX_RANK:
        raise BadRequest(f"input {name!r}: rank {array.ndim} is more than {MAX_RANK}")
    if not (dtype.is_bool or dtype.is_integer or dtype.is_floating or dtype.is_complex):
        raise BadRequest(f"input {name!r}: its dtype {dtype.name} cannot be sent as JSON here")
    target = np.dtype(dtype.as_numpy_dtype)
    if array.size == 0 and array.dtype.kind in "fb":
        return np.zeros(array.shape, dtype=target)  # an empty list fits any input
    kind = array.dtype.kind
    if dtype.is_bool:
        ok = kind == "b"
    elif dtype.is_integer:
        ok = kind in "iu" or (kind == "f" and bool(np.all(np.isfinite(array) & (array == np.round(array)))))
    else:
        ok = kind in "iuf"
    if not ok:
        got = {
            "b": "booleans",
            "U": "strings",
            "f": "non-integral numbers",
            "O": "mixed or non-numeric values",
        }
        raise BadRequest(
            f"input {name!r}: expected {dtype.name} values, got {got.get(kind, str(array.dtype))}"
        )
    if dtype.is_integer and array.size:
        limits = np.iinfo(target)
        if array.min() < limits.min or array.max() > limits.max:
            raise BadRequest(
                f"input {name!r}: a value is outside {dtype.name}'s range {limits.min}..{limits.max}"
            )
    return array.astype(target)


def _string_array(name: str, value: Any) -> Any:
    import numpy as np

    shape: list[int] = []
    flat: list[bytes] = []
    leaf_depth: list[int] = []

    def walk(item: Any, depth: int) -> None:
        if depth > MAX_RANK:
            raise BadRequest(f"input {name!r}: nested more than {MAX_RANK} deep")
        if isinstance(item, list):
            if leaf_depth and depth >= leaf_depth[0]:
                raise BadRequest(f"input {name!r}: the lists are not rectangular (ragged)")
            if depth == len(shape):
                shape.append(len(item))
            elif shape[depth] != len(item):
                raise BadRequest(f"input {name!r}: the lists are not rectangular (ragged)")
            for element in item:
                walk(element, depth + 1)
            return
        if not leaf_depth:
            leaf_depth.append(depth)
        if depth != leaf_depth[0] or depth != len(shape):
            raise BadRequest(f"input {name!r}: the lists are not rectangular (ragged)")
        flat.append(_string_leaf(name, item))

    walk(value, 0)
    array = np.empty(len(flat), dtype=object)
    array[:] = flat
    return array.reshape(shape)


def _string_leaf(name: str, item: Any) -> bytes:
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, dict) and set(item) == {"b64"} and isinstance(item["b64"], str):
        try:
            return base64.b64decode(item["b64"], validate=True)
        except ValueError as exc:
            raise BadRequest(f"input {name!r}: a b64 value is not base64") from exc
    raise BadRequest(f'input {name!r}: expected string values (or {{"b64": ...}}), got {type(item).__name__}')


def _is_value(item: Any) -> bool:
    """A JSON value that is an input's value, not an object naming inputs."""
    return not isinstance(item, dict) or set(item) == {"b64"}


def parse_predict(body: Any, servable: Servable) -> tuple[Signature, dict[str, Any], bool]:
    """A REST predict body as (signature, inputs, row format)."""
    if not isinstance(body, dict):
        raise BadRequest("a predict request is a JSON object")
    unknown = sorted(set(body) - {"signature_name", "instances", "inputs"})
    if unknown:
        raise BadRequest(
            f"unknown field {unknown[0]!r}: a predict request takes signature_name and instances or inputs"
        )
    signature_name = body.get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(signature_name, str):
        raise BadRequest("signature_name must be a string")
    signature = servable.signature(signature_name or DEFAULT_SIGNATURE)
    if ("instances" in body) == ("inputs" in body):
        raise BadRequest(
            "a predict request takes either 'instances' (row format) or 'inputs' (columnar format), "
            + ("not both" if "instances" in body else "and has neither")
        )
    single = next(iter(signature.inputs)) if len(signature.inputs) == 1 else None
    if "inputs" in body:
        value = body["inputs"]
        if _is_value(value):
            if single is None:
                raise BadRequest(f"'inputs' must be an object naming each input: {_takes(signature)}")
            named = {single: value}
        else:
            named = value
        return signature, _arrays(named, signature), False
    instances = body["instances"]
    if not isinstance(instances, list) or not instances:
        raise BadRequest("'instances' must be a non-empty list, one element per example")
    columns: dict[str, list[Any]] = {}
    if all(_is_value(item) for item in instances):
        if single is None:
            raise BadRequest(f"each instance must be an object naming each input: {_takes(signature)}")
        columns[single] = instances
    elif all(not _is_value(item) for item in instances):
        names = set(instances[0])
        for index, item in enumerate(instances):
            if set(item) != names:
                other = sorted(names.symmetric_difference(item))[0]
                raise BadRequest(f"instance {index} and instance 0 differ in input {other!r}")
        for input_name in names:
            columns[input_name] = [item[input_name] for item in instances]
    else:
        raise BadRequest("'instances' mixes objects naming inputs with bare values")
    return signature, _arrays(columns, signature), True


def _arrays(named: Mapping[str, Any], signature: Signature) -> dict[str, Any]:
    for input_name in sorted(named):
        if input_name not in signature.inputs:
            raise BadRequest(
                f"input {input_name!r} is not an input of signature {signature.name!r}; {_takes(signature)}"
            )
    return {name: _json_array(name, value, signature.inputs[name]) for name, value in named.items()}


def format_predict(outputs: Mapping[str, Any], *, rows: bool, batch: int | None) -> dict[str, Any]:
    if not rows:
        if len(outputs) == 1:
            (only,) = outputs.items()
            return {"outputs": _json_value(only[0], only[1])}
        return {"outputs": {name: _json_value(name, value) for name, value in outputs.items()}}
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != batch:
            raise BadRequest(
                f"output {name!r} has batch size {value.shape[0] if value.ndim else 'none'}, expecting {batch}: "
                "use the columnar format ('inputs')"
            )
    if len(outputs) == 1:
        (only,) = outputs.items()
        return {"predictions": _json_value(only[0], only[1])}
    columns = {name: _json_value(name, value) for name, value in outputs.items()}
    return {"predictions": [{name: column[i] for name, column in columns.items()} for i in range(batch or 0)]}


def _json_value(name: str, array: Any) -> Any:
    if array.dtype.kind not in ("O", "S"):
        return array.tolist()
    binary = name.endswith("_bytes")

    def convert(item: Any) -> Any:
        if isinstance(item, list):
            return [convert(i) for i in item]
        if not binary:
            try:
                return item.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(item).decode("ascii")}

    return convert(array.tolist())
