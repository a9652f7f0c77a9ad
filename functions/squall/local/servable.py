"""The SavedModel a local model service serves: loaded, and fed from TensorFlow Serving's JSON.

`local/model_server.py` (the stand-in for TensorFlow Serving in a model service's pod)
serves what this module holds: `Servable` (the loaded model's signatures, their inputs
checked by name, dtype and shape), and the REST API's request and answer formats
(`parse_predict`, `format_predict`: row `instances` and columnar `inputs`, `b64`
strings). The pod's `fetch-model` init container (the worker image's
`trainer.fetch_model`) has copied the model before.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.cli.prediction import DEFAULT_SIGNATURE, MAX_RANK

# ---- the model ----


class BadRequest(ValueError):
    """A request that does not fit the model: HTTP 400, gRPC INVALID_ARGUMENT."""


class ServableNotFound(LookupError):
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
        check_names(signature, arrays)
        for name in output_filter:
            if name not in signature.outputs:
                raise BadRequest(
                    f"output_filter names {name!r}, not an output of signature {signature.name!r} "
                    f"(outputs: {', '.join(signature.outputs)})"
                )
        tensors = {}
        for name, array in arrays.items():
            spec = signature.inputs[name]
            check_shape(name, array.shape, spec)
            tensors[name] = tf.constant(array, dtype=spec.dtype)
        try:
            outputs = signature.function(**tensors)
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as exc:
            raise BadRequest(f"signature {signature.name!r} refused the inputs: {first_line(exc)}") from exc
        wanted = output_filter or signature.outputs
        return {name: outputs[name].numpy() for name in wanted}


def check_names(signature: Signature, names: Iterable[str]) -> None:
    """BadRequest naming the first input the signature does not take, or the first it misses."""
    given = set(names)
    unknown = sorted(given - set(signature.inputs))
    if unknown:
        raise BadRequest(
            f"input {unknown[0]!r} is not an input of signature {signature.name!r}; {_takes(signature)}"
        )
    missing = sorted(set(signature.inputs) - given)
    if missing:
        raise BadRequest(f"input {missing[0]!r} is missing; {_takes(signature)}")


def _takes(signature: Signature) -> str:
    described = ", ".join(f"{name} ({_describe(spec)})" for name, spec in sorted(signature.inputs.items()))
    return f"signature {signature.name!r} takes {described}"


def _describe(spec: Any) -> str:
    dims = spec.shape.as_list() if spec.shape.rank is not None else None
    shape = (
        "any shape" if dims is None else "[" + ", ".join("-1" if d is None else str(d) for d in dims) + "]"
    )
    return f"{spec.dtype.name}, shape {shape}"


def check_shape(name: str, shape: Sequence[int], spec: Any) -> None:
    """BadRequest when `shape` is not one the signature's input `name` (`spec`) takes."""
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
