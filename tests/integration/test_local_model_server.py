"""The local stand-in for TensorFlow Serving (squall/local/model_server.py).

A small SavedModel is built here (a tf.Module with three signatures, and a Keras
export made as the trainer makes its own); the server runs in this process on free
loopback ports for the API tests, and as `python -m squall.local.model_server` for the
exit code and SIGTERM tests. The copy from S3 before it is the worker image's
`fetch-model` (tests/worker/test_fetch_model.py).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
# It imports TensorFlow and saves models: the slow tier.
pytestmark = pytest.mark.slow

from tensorflow_serving.apis import (  # noqa: E402 - after the skip
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from squall.local import model_server  # noqa: E402
from squall.local.model_server import ModelServer  # noqa: E402

NAME = "digits"
VERSION = 3
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Tiny(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4) / 7.0)
        self.b = tf.Variable(np.float32([0.5, -1.0, 2.0, 0.25]))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x: Any) -> dict[str, Any]:
        return {"scores": tf.matmul(x, self.w) + self.b, "total": tf.reduce_sum(x, axis=1)}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 2], tf.float32, name="a"),
            tf.TensorSpec([None], tf.int64, name="ids"),
        ]
    )
    def pair(self, a: Any, ids: Any) -> dict[str, Any]:
        return {"out": tf.reduce_sum(a, axis=1) * tf.cast(ids, tf.float32)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def lengths(self, text: Any) -> dict[str, Any]:
        return {"length": tf.strings.length(text), "upper_bytes": tf.strings.upper(text)}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "1"
    module = Tiny()
    tf.saved_model.save(
        module,
        str(path),
        signatures={"serving_default": module.serve, "pair": module.pair, "lengths": module.lengths},
    )
    return path


@pytest.fixture(scope="module")
def direct(saved_model: Path) -> Any:
    """The SavedModel's signatures, called without the server."""
    return tf.saved_model.load(str(saved_model)).signatures


@pytest.fixture(scope="module")
def server(saved_model: Path) -> Iterator[ModelServer]:
    running = ModelServer(name=NAME, version=VERSION)
    running.start()
    running.load(saved_model)
    try:
        yield running
    finally:
        running.close()


def rest(port: int, path: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with OPENER.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def stubs(port: int) -> tuple[Any, Any, grpc.Channel]:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return (
        prediction_service_pb2_grpc.PredictionServiceStub(channel),
        model_service_pb2_grpc.ModelServiceStub(channel),
        channel,
    )


X = np.float32([[1.0, 2.0, 3.0], [-0.5, 0.25, 8.0]])


# ---- REST ----


@pytest.mark.timeout(120)
def test_rest_row_format_answers_what_the_signature_computes(server: ModelServer, direct: Any) -> None:
    expected = direct["serving_default"](x=tf.constant(X))

    code, body = rest(server.rest_port, f"/v1/models/{NAME}:predict", {"instances": X.tolist()})

    assert code == 200, body
    predictions = body["predictions"]
    assert len(predictions) == 2 and set(predictions[0]) == {"scores", "total"}
    np.testing.assert_array_equal(np.float32([p["scores"] for p in predictions]), expected["scores"].numpy())
    np.testing.assert_array_equal(np.float32([p["total"] for p in predictions]), expected["total"].numpy())


@pytest.mark.timeout(120)
def test_rest_columnar_format_answers_what_the_signature_computes(server: ModelServer, direct: Any) -> None:
    expected = direct["serving_default"](x=tf.constant(X))

    code, body = rest(
        server.rest_port, f"/v1/models/{NAME}/versions/{VERSION}:predict", {"inputs": {"x": X.tolist()}}
    )

    assert code == 200, body
    np.testing.assert_array_equal(np.float32(body["outputs"]["scores"]), expected["scores"].numpy())
    np.testing.assert_array_equal(np.float32(body["outputs"]["total"]), expected["total"].numpy())


@pytest.mark.timeout(120)
def test_rest_named_instances_of_a_two_input_signature(server: ModelServer, direct: Any) -> None:
    a = np.float32([[1.0, 2.0], [3.0, 4.0], [0.5, 0.5]])
    ids = np.int64([2, 3, 5])
    expected = direct["pair"](a=tf.constant(a), ids=tf.constant(ids))["out"].numpy()
    instances = [{"a": row.tolist(), "ids": int(i)} for row, i in zip(a, ids, strict=True)]

    rows = rest(
        server.rest_port, f"/v1/models/{NAME}:predict", {"signature_name": "pair", "instances": instances}
    )
    columns = rest(
        server.rest_port,
        f"/v1/models/{NAME}:predict",
        {"signature_name": "pair", "inputs": {"a": a.tolist(), "ids": ids.tolist()}},
    )

    assert rows[0] == 200 and columns[0] == 200, (rows, columns)
    np.testing.assert_array_equal(np.float32(rows[1]["predictions"]), expected)  # one output: bare values
    np.testing.assert_array_equal(np.float32(columns[1]["outputs"]), expected)


@pytest.mark.timeout(120)
def test_rest_strings_and_b64(server: ModelServer) -> None:
    raw = b"\xff\x00z"
    code, body = rest(
        server.rest_port,
        f"/v1/models/{NAME}:predict",
        {"signature_name": "lengths", "instances": ["abc", {"b64": base64.b64encode(raw).decode()}]},
    )

    assert code == 200, body
    assert [p["length"] for p in body["predictions"]] == [3, 3]
    # An output named *_bytes comes back base64-encoded, as TensorFlow Serving sends it.
    assert base64.b64decode(body["predictions"][0]["upper_bytes"]["b64"]) == b"ABC"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"inputs": {"y": X.tolist()}}, "'y'"),  # a wrong input name
        ({"instances": [[1.0, 2.0], [3.0, 4.0]]}, "'x'"),  # a wrong shape: [2, 2] for [-1, 3]
        ({"inputs": [1.0, 2.0, 3.0]}, "'x'"),  # a wrong rank
        ({"instances": [["a", "b", "c"]]}, "'x'"),  # a wrong dtype: strings for float
        ({"instances": [[True, False, True]]}, "'x'"),  # booleans for float
        ({"instances": [[1.0, 2.0, 3.0], [1.0]]}, "'x'"),  # ragged
        ({"signature_name": "pair", "inputs": {"a": [[1.0, 2.0]], "ids": [1.5]}}, "'ids'"),  # 1.5 for int64
        ({"signature_name": "pair", "inputs": {"a": [[1.0, 2.0]], "ids": [2**40 * 2**30]}}, "'ids'"),  # range
        ({"signature_name": "pair", "inputs": {"a": [[1.0, 2.0]]}}, "'ids'"),  # a missing input
        ({"signature_name": "lengths", "instances": [1, 2]}, "'text'"),  # numbers for a string input
        ({"signature_name": "nope", "instances": [[1.0, 2.0, 3.0]]}, "'nope'"),  # no such signature
        ({"instances": X.tolist(), "inputs": {"x": X.tolist()}}, "not both"),
        ({"signature_name": "serving_default"}, "neither"),
        ({"instances": []}, "instances"),
        ({"instances": X.tolist(), "extra": 1}, "'extra'"),
    ],
)
def test_rest_bad_input_is_a_400_naming_it(server: ModelServer, body: Any, named: str) -> None:
    code, answer = rest(server.rest_port, f"/v1/models/{NAME}:predict", body)

    assert code == 400, answer
    assert set(answer) == {"error"} and named in answer["error"]


@pytest.mark.timeout(120)
def test_rest_bodies_that_are_not_json_or_too_large_are_400(saved_model: Path, server: ModelServer) -> None:
    code, answer = rest(server.rest_port, f"/v1/models/{NAME}:predict", raw=b"{not json")
    assert code == 400 and "JSON" in answer["error"]
    code, answer = rest(server.rest_port, f"/v1/models/{NAME}:predict", raw=b"[" * 200_000)
    assert code == 400 and "JSON" in answer["error"]

    small = ModelServer(name=NAME, version=VERSION, max_body_bytes=1024)
    small.start()
    try:
        small.load(saved_model)
        code, answer = rest(
            small.rest_port, f"/v1/models/{NAME}:predict", {"instances": [[1.0, 2.0, 3.0]] * 200}
        )
        assert code == 400 and "at most 1024" in answer["error"]
        # The server goes on answering after refusing it.
        code, answer = rest(small.rest_port, f"/v1/models/{NAME}:predict", {"instances": [[1.0, 2.0, 3.0]]})
        assert code == 200, answer
    finally:
        small.close()


@pytest.mark.timeout(120)
def test_rest_status_metadata_and_404s(server: ModelServer) -> None:
    ok = {
        "model_version_status": [
            {"version": "3", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    }
    assert rest(server.rest_port, f"/v1/models/{NAME}") == (200, ok)
    assert rest(server.rest_port, f"/v1/models/{NAME}/versions/{VERSION}") == (200, ok)

    code, metadata = rest(server.rest_port, f"/v1/models/{NAME}/metadata")
    assert code == 200
    assert metadata["model_spec"] == {"name": NAME, "signature_name": "", "version": "3"}
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in signature["inputs"]["x"]["tensor_shape"]["dim"]] == ["-1", "3"]
    assert set(signature["outputs"]) == {"scores", "total"}

    for path in (
        "/v1/models/other",
        f"/v1/models/{NAME}/versions/4",
        f"/v1/models/{NAME}/versions/4:predict",
        f"/v1/models/{NAME}/labels/stable",
        "/v1/nothing",
    ):
        code, answer = rest(server.rest_port, path, {"instances": [[1.0, 2.0, 3.0]]} if ":" in path else None)
        assert code == 404 and "error" in answer, (path, answer)


# ---- gRPC ----


def predict_request(signature: str = "", version: int | None = None, **inputs: Any) -> Any:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = NAME
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


@pytest.mark.timeout(120)
def test_grpc_predict_answers_what_the_signature_computes(server: ModelServer, direct: Any) -> None:
    expected = direct["serving_default"](x=tf.constant(X))
    prediction, _, channel = stubs(server.grpc_port)
    with channel:
        response = prediction.Predict(predict_request("serving_default", VERSION, x=X), timeout=30)
        only_total = predict_request(x=X)
        only_total.output_filter.append("total")
        filtered = prediction.Predict(only_total, timeout=30)

    np.testing.assert_array_equal(tf.make_ndarray(response.outputs["scores"]), expected["scores"].numpy())
    np.testing.assert_array_equal(tf.make_ndarray(response.outputs["total"]), expected["total"].numpy())
    assert response.model_spec.name == NAME and response.model_spec.version.value == VERSION
    assert response.model_spec.signature_name == "serving_default"
    assert set(filtered.outputs) == {"total"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ({"y": X}, "'y'"),  # a wrong name
        ({"x": X.astype(np.float64)}, "'x'"),  # a wrong dtype
        ({"x": np.float32([[1.0, 2.0]])}, "'x'"),  # a wrong shape
    ],
)
def test_grpc_bad_input_is_invalid_argument_naming_it(server: ModelServer, inputs: Any, named: str) -> None:
    prediction, _, channel = stubs(server.grpc_port)
    with channel, pytest.raises(grpc.RpcError) as caught:
        prediction.Predict(predict_request(**inputs), timeout=30)

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in caught.value.details()


@pytest.mark.timeout(120)
def test_grpc_status_metadata_and_not_found(server: ModelServer) -> None:
    prediction, models, channel = stubs(server.grpc_port)
    with channel:
        status_request = get_model_status_pb2.GetModelStatusRequest()
        status_request.model_spec.name = NAME
        status = models.GetModelStatus(status_request, timeout=30)
        metadata_request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        metadata_request.model_spec.name = NAME
        metadata = prediction.GetModelMetadata(metadata_request, timeout=30)
        with pytest.raises(grpc.RpcError) as other_version:
            prediction.Predict(predict_request(version=VERSION + 1, x=X), timeout=30)

    (version_status,) = status.model_version_status
    assert version_status.version == VERSION
    assert version_status.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert metadata.metadata["signature_def"].Unpack(signatures)
    assert signatures.signature_def["serving_default"].inputs["x"].dtype == tf.float32.as_datatype_enum
    assert other_version.value.code() == grpc.StatusCode.NOT_FOUND


# ---- loading ----


@pytest.mark.timeout(120)
def test_the_model_is_available_only_once_loaded(saved_model: Path) -> None:
    # given a server that listens but has not loaded its model yet
    loading = ModelServer(name=NAME, version=1)
    loading.start()
    try:
        code, status = rest(loading.rest_port, f"/v1/models/{NAME}")
        assert code == 200 and status["model_version_status"][0]["state"] == "LOADING"
        code, answer = rest(loading.rest_port, f"/v1/models/{NAME}:predict", {"instances": X.tolist()})
        assert code == 404 and "loading" in answer["error"]

        # when it has loaded it
        loading.load(saved_model)

        # then it is AVAILABLE and answers
        code, status = rest(loading.rest_port, f"/v1/models/{NAME}/versions/1")
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
        assert rest(loading.rest_port, f"/v1/models/{NAME}:predict", {"instances": X.tolist()})[0] == 200
    finally:
        loading.close()


@pytest.mark.timeout(120)
def test_a_keras_export_like_the_trainers_is_served(tmp_path: Path) -> None:
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="tanh")])
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default",
        lambda noise: {"images": model(noise, training=False)},
        input_signature=[tf.TensorSpec((None, 4), tf.float32, name="noise")],
    )
    archive.write_out(str(tmp_path / "export"), verbose=False)
    noise = np.random.default_rng(7).normal(size=(5, 4)).astype(np.float32)
    expected = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"](noise=noise)

    served = ModelServer(name="gan", version=1)
    served.start()
    try:
        served.load(tmp_path / "export")
        code, body = rest(served.rest_port, "/v1/models/gan:predict", {"instances": noise.tolist()})
    finally:
        served.close()

    assert code == 200, body
    np.testing.assert_array_equal(np.float32(body["predictions"]), expected["images"].numpy())


# ---- the command ----


def start_command(model_dir: Path, *ports: int) -> subprocess.Popen[bytes]:
    rest_port, grpc_port = ports
    env = os.environ | {
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": str(Path(model_server.__file__).resolve().parents[2]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "squall.local.model_server", "--model-dir", str(model_dir), "--model-name", NAME,
         "--model-version", "1", "--rest-port", str(rest_port), "--grpc-port", str(grpc_port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_command_exits_2_when_there_is_no_saved_model(tmp_path: Path) -> None:
    from squall.local.processes import free_port

    (tmp_path / "variables").mkdir()
    process = start_command(tmp_path, free_port(), free_port())
    _, stderr = process.communicate(timeout=150)

    assert process.returncode == 2
    assert f"no SavedModel at {tmp_path}" in stderr.decode().strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_command_serves_its_model_and_stops_on_sigterm(saved_model: Path, direct: Any) -> None:
    from squall.local.processes import free_port

    rest_port, grpc_port = free_port(), free_port()
    process = start_command(saved_model, rest_port, grpc_port)
    try:
        # Waiting for it to load is bounded by the test's timeout, not asserted on.
        state = None
        while state != "AVAILABLE" and process.poll() is None:
            try:
                state = rest(rest_port, f"/v1/models/{NAME}")[1]["model_version_status"][0]["state"]
            except OSError:
                time.sleep(0.2)
                continue
            time.sleep(0.2)
        assert process.poll() is None, process.communicate()[1].decode()[-2000:]

        code, body = rest(rest_port, f"/v1/models/{NAME}:predict", {"inputs": X.tolist()})
        assert code == 200, body
        np.testing.assert_array_equal(
            np.float32(body["outputs"]["scores"]),
            direct["serving_default"](x=tf.constant(X))["scores"].numpy(),
        )

        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr.decode()[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
