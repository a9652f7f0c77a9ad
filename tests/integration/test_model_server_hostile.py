"""The local model server against hostile clients: idle connections, giant declared shapes, slow bodies.

The REST tests need no model (a model's status is answered while it loads) and no
TensorFlow; the gRPC test loads a tiny SavedModel (the slow tier).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import tracemalloc
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from squall.local import model_server
from squall.local.model_server import HOST, REST_THREADS, ModelState

pytestmark = pytest.mark.timeout(180)

NAME = "digits"


class Rest:
    """The REST half of the model server on a free loopback port, its model still loading."""

    def __init__(
        self,
        *,
        connections: int = model_server.MAX_CONNECTIONS,
        timeout: float = 30.0,
        loaded: bool = False,
        servable: Any = None,
        **deadlines: float,
    ) -> None:
        """`servable` is the model it answers with; `deadlines` set the handler's own
        (request_seconds, idle_seconds)."""
        slots = threading.BoundedSemaphore(REST_THREADS)
        model = ModelState(name=NAME, version=1)
        if servable is not None:
            model.available(servable)
        elif loaded:  # a stand-in: the tests that load one never get as far as running it
            model.available(object())  # type: ignore[arg-type]
        handler: Any = model_server._handler(model, max_body_bytes=1024, slots=slots)
        handler.timeout = timeout
        for name, seconds in deadlines.items():
            setattr(handler, name, seconds)
        self.server = model_server._HTTPServer((HOST, 0), handler, connections=connections)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def status(self, *, timeout: float = 20.0) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            connection.request("GET", f"/v1/models/{NAME}")
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()


@pytest.fixture
def rest() -> Iterator[Rest]:
    server = Rest()
    try:
        yield server
    finally:
        server.close()


def test_idle_connections_do_not_keep_a_request_from_being_answered(rest: Rest) -> None:
    # given: more idle connections than the server answers requests at once, and a body that never ends
    with ExitStack() as stack:
        for _ in range(REST_THREADS + 4):
            stack.enter_context(socket.create_connection((HOST, rest.port)))
        slow = stack.enter_context(socket.create_connection((HOST, rest.port)))
        slow.sendall(
            f"POST /v1/models/{NAME}:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{".encode()
        )
        # when: a real request comes (the client gives up well before the idle ones time out)
        status, body = rest.status(timeout=20)
    # then: it is answered
    assert status == 200
    assert body["model_version_status"][0]["state"] == "LOADING"


def test_connections_past_the_bound_are_closed_and_the_rest_served() -> None:
    server = Rest(connections=2)
    try:
        with ExitStack() as stack:
            for _ in range(2):
                stack.enter_context(socket.create_connection((HOST, server.port)))
            extra = stack.enter_context(socket.create_connection((HOST, server.port), timeout=20))
            assert extra.recv(1) == b""  # closed by the server, not left waiting
    finally:
        server.close()


def test_a_body_that_pauses_past_the_read_timeout_is_refused() -> None:
    server = Rest(timeout=0.5, loaded=True)
    try:
        with socket.create_connection((HOST, server.port), timeout=20) as slow:
            slow.sendall(
                f"POST /v1/models/{NAME}:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode()
            )
            answer = b""
            while chunk := slow.recv(4096):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 400")
        assert "did not arrive within 60 s (or paused for 0.5 s)" in json.loads(body)["error"]
    finally:
        server.close()


# ---- gRPC: a giant declared shape ----


@pytest.mark.slow
def test_a_giant_declared_shape_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    class Tiny(tf.Module):  # type: ignore[misc]
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x: Any) -> dict[str, Any]:
            return {"total": tf.reduce_sum(x, axis=1)}

    module = Tiny()
    tf.saved_model.save(module, str(tmp_path / "1"), signatures={"serving_default": module.serve})
    server = model_server.ModelServer(name=NAME, version=1)
    server.start()
    server.load(tmp_path / "1")
    try:
        channel = grpc.insecure_channel(f"{HOST}:{server.grpc_port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

        def predict(shape: list[int]) -> Any:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = NAME
            x = request.inputs["x"]
            x.dtype = 1  # DT_FLOAT
            for size in shape:
                x.tensor_shape.dim.add(size=size)
            x.float_val.append(1.0)  # TensorFlow would repeat it over the whole shape
            assert len(request.SerializeToString()) < 40
            return stub.Predict(request, timeout=60)

        tracemalloc.start()
        try:
            for shape, words in (
                ([2**28], "the signature takes float32, shape [-1, 3]"),  # the wrong rank: 1 GiB to refuse it
                ([2**24, 3], "would take 201326592 bytes"),  # the right rank, 192 MiB
            ):
                tracemalloc.reset_peak()
                with pytest.raises(grpc.RpcError) as raised:
                    predict(shape)
                assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert words in raised.value.details()
                assert tracemalloc.get_traced_memory()[1] < 64 * 2**20
        finally:
            tracemalloc.stop()
        # and the model still answers a request that fits
        request = predict_pb2.PredictRequest()
        request.model_spec.name = NAME
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([[1.0, 2.0, 3.0]], dtype=tf.float32))
        assert tf.make_ndarray(stub.Predict(request, timeout=60).outputs["total"]).tolist() == [6.0]
        channel.close()
    finally:
        server.close()
