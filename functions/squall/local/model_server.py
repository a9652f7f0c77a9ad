"""The local stand-in for TensorFlow Serving: a model service's pod under `squall local up`.

    python -m squall.local.model_server --model-dir D --model-name N \
        --model-version V --rest-port P --grpc-port Q

does what TensorFlow Serving does in a model service's pod, on the SavedModel in D
(local/processes.py runs the pod's `fetch-model` init container, the worker image's
`trainer.fetch_model`, first, and this in its place once it has copied the model):

- binds both ports on loopback at once (the model reports LOADING meanwhile), then
  loads the SavedModel. No `saved_model.pb` in D: exit 2 (the contract's
  ModelNotFound) with one stderr line saying so; any other failure to load: exit 1.
- loads it with `tf.saved_model.load` and serves, as TensorFlow Serving does, its
  REST API (`GET /v1/models/<name>[/versions/<v>]` model status,
  `GET …/metadata`, `POST …:predict` in the row (`instances` → `predictions`) and
  columnar (`inputs` → `outputs`) formats, errors as `{"error": "..."}`: 400 for a
  request that does not fit the signature, naming the input; 404 for another model
  or version, or before the model is loaded) and its gRPC API
  (`PredictionService/Predict`, `PredictionService/GetModelMetadata`,
  `ModelService/GetModelStatus`; INVALID_ARGUMENT for bad inputs, NOT_FOUND as 404).
- bounded: request bodies and gRPC messages at most `MAX_BODY_BYTES`; a request's
  tensors are checked against the signature's shape and `MAX_TENSOR_BYTES` before any
  is decoded (a few bytes may declare gigabytes); at most `REST_THREADS` REST requests
  and `GRPC_THREADS` RPCs run at once (more wait their turn; gRPC refuses beyond
  `GRPC_MAX_CONCURRENT`). Each REST connection has a thread of its own, at most
  `MAX_CONNECTIONS`: a request's first byte must come within `IDLE_SECONDS`, and all of
  it (request line, headers, body) within `REQUEST_SECONDS` of that, no read waiting
  more than `SOCKET_TIMEOUT_SECONDS`. A connection takes a request's turn only once its
  request has arrived; when `MAX_CONNECTIONS` are open, a new one closes the one that
  has waited longest on its client (idle, or slow to send), and is closed at once only
  when all are answering. So idle or slow connections cannot starve the others.
- SIGTERM (or SIGINT) stops it: both servers shut down, exit 0.

The model and the REST formats are in `local/servable.py`.

Leaves out: classify/regress/multi-inference (answered as unsupported), model
version policies and several versions, labels, batching, warm-up, and reloads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, cast

from squall.cli.prediction import TensorError, decode_tensor, tensor_shape
from squall.local.servable import (
    DEFAULT_SIGNATURE,
    BadRequest,
    Servable,
    ServableNotFound,
    check_names,
    check_shape,
    first_line,
    format_predict,
    parse_predict,
)

HOST = "127.0.0.1"
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_TENSOR_BYTES = 4 * MAX_BODY_BYTES  # what one request's tensors may decode to
REST_THREADS = 8
MAX_CONNECTIONS = 64
GRPC_THREADS = 8
GRPC_MAX_CONCURRENT = 32
SOCKET_TIMEOUT_SECONDS = 30.0  # the longest one read waits on the client
IDLE_SECONDS = 5.0  # for a request's first byte, on a new or a kept-alive connection
REQUEST_SECONDS = 60.0  # for all of a request from its first byte: request line, headers, body
CLOSING_SECONDS = 1.0  # for the thread of a connection closed to make room to end
_READ_CHUNK = 64 * 1024
GRPC_GRACE_SECONDS = 5.0

NO_SAVED_MODEL_EXIT = 2
FAILED_EXIT = 1

LOADING = "LOADING"
AVAILABLE = "AVAILABLE"


# ---- the servers ----


class ModelState:
    """The one model this server serves, and where it is in its life."""

    def __init__(self, *, name: str, version: int) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self._servable: Servable | None = None
        self._state = LOADING

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    def available(self, servable: Servable) -> None:
        with self._lock:
            self._servable = servable
            self._state = AVAILABLE

    def check_version(self, name: str, version: int | None) -> None:
        if name != self.name:
            raise ServableNotFound(f"Could not find any versions of model {name}")
        if version is not None and version != self.version:
            raise ServableNotFound(f"Could not find version {version} of model {name}")

    def servable(self, name: str, version: int | None) -> Servable:
        self.check_version(name, version)
        with self._lock:
            servable = self._servable
        if servable is None:
            which = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise ServableNotFound(f"Servable not found for request: {which} (the model is still loading)")
        return servable

    def status(self, name: str, version: int | None) -> dict[str, Any]:
        self.check_version(name, version)
        return {
            "model_version_status": [
                {
                    "version": str(self.version),
                    "state": self.state,
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        }

    def metadata(self, name: str, version: int | None) -> tuple[Any, Servable]:
        """The SignatureDefMap proto of the model, and the servable."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        servable = self.servable(name, version)
        return get_model_metadata_pb2.SignatureDefMap(signature_def=servable.signature_defs), servable


_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[0-9]{1,18})|/labels/(?P<label>[^/:]+))?"
    r"(?P<suffix>/metadata|:predict|:classify|:regress)?$"
)


class _Connection:
    """An open REST connection: busy answering its request, or waiting on its client since `since`."""

    __slots__ = ("busy", "closing", "since", "socket")

    def __init__(self, sock: Any) -> None:
        self.socket = sock
        self.since = time.monotonic()
        self.busy = False
        self.closing = False  # closed to make room for a new one


class _HTTPServer(socketserver.ThreadingMixIn, HTTPServer):
    """A thread per connection, at most `connections` of them.

    A connection's thread mostly waits on its client: for a request (the handler's
    `idle_seconds`), or for the rest of one (its `request_seconds`). Only once its
    request has arrived is a connection busy: it takes one of the model's turns
    (`_handler`'s `slots`) to predict, and is not closed to make room. When all
    `connections` are open, a new one closes the one that has waited longest on its
    client, and is refused only when every one is busy: idle or slow connections cannot
    starve the others. A closed one's thread ends at once (its reads see the end).
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the kernel's queue of connections not yet taken: a burst waits there

    def __init__(self, address: tuple[str, int], handler: Any, *, connections: int) -> None:
        self.connections = connections
        self._open: dict[Any, _Connection] = {}
        self._changed = threading.Condition()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._admit(request):
            self.shutdown_request(request)  # all busy answering: this one is closed, the others go on
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away, or its connection was closed to make room
        super().handle_error(request, client_address)

    def _admit(self, request: Any) -> bool:
        with self._changed:
            if len(self._open) >= self.connections:
                waiting = [c for c in self._open.values() if not c.busy and not c.closing]
                if waiting:
                    oldest = min(waiting, key=lambda c: c.since)
                    oldest.closing = True
                    with contextlib.suppress(OSError):
                        oldest.socket.shutdown(socket.SHUT_RDWR)
                if any(c.closing for c in self._open.values()):
                    self._changed.wait_for(lambda: len(self._open) < self.connections, CLOSING_SECONDS)
            if len(self._open) >= self.connections:
                return False
            self._open[request] = _Connection(request)
            return True

    def _forget(self, request: Any) -> None:
        with self._changed:
            self._open.pop(request, None)
            self._changed.notify_all()

    def mark(self, request: Any, *, busy: bool) -> bool:
        """The connection is busy answering, or waits on its client again; False if it is being closed."""
        with self._changed:
            connection = self._open.get(request)
            if connection is None or connection.closing:
                return False
            if connection.busy != busy:
                connection.busy = busy
                connection.since = time.monotonic()
            return True


class _DeadlineReader(io.RawIOBase):
    """A connection's socket, each read within the time its handler leaves it."""

    def __init__(self, recv_into: Callable[[Any], int]) -> None:
        super().__init__()
        self._recv_into = recv_into

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._recv_into(buffer)


def _handler(
    model: ModelState, *, max_body_bytes: int, slots: threading.BoundedSemaphore
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = SOCKET_TIMEOUT_SECONDS  # the longest one read waits on the client
        idle_seconds = IDLE_SECONDS  # for a request's first byte
        request_seconds = REQUEST_SECONDS  # for all of it from its first byte: request line, headers, body
        server_version = "squall-model-server"
        _deadline = 0.0
        _started = False

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # the request is read through the deadline instead
            self.rfile = io.BufferedReader(_DeadlineReader(self._recv_into))

        def _recv_into(self, buffer: Any) -> int:
            """One read, within the time left to the request (its deadline never moves)."""
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request's time is up")
            self.connection.settimeout(left if self.timeout is None else min(self.timeout, left))
            count = int(self.connection.recv_into(buffer))
            if count and not self._started:  # its first byte: the request's deadline starts
                self._started = True
                self._deadline = time.monotonic() + self.request_seconds
            return count

        def handle_one_request(self) -> None:
            self._deadline = time.monotonic() + self.idle_seconds
            self._started = False
            super().handle_one_request()
            if not cast(_HTTPServer, self.server).mark(self.connection, busy=False):
                self.close_connection = True

        def _arrived(self) -> None:
            """The request is all here: the connection is busy answering, not to be closed for room."""
            if not cast(_HTTPServer, self.server).mark(self.connection, busy=True):
                self.close_connection = True
                raise BadRequest("the connection was closed to make room for another")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request is noise in the pod's log

        def do_GET(self) -> None:
            self._answer(self._get)

        def do_POST(self) -> None:
            self._answer(self._post)

        def _route(self) -> tuple[str, int | None, str | None]:
            match = _PATH.match(self.path.split("?", 1)[0])
            if match is None:
                raise ServableNotFound(f"Malformed request: {self.command} {self.path[:200]}")
            if match["label"] is not None:
                raise ServableNotFound(f"Unrecognized servable version label: {match['label']}")
            version = int(match["version"]) if match["version"] is not None else None
            return match["name"], version, match["suffix"]

        def _get(self) -> tuple[int, Any]:
            self._arrived()
            name, version, suffix = self._route()
            if suffix is None:
                return 200, model.status(name, version)
            if suffix != "/metadata":
                raise ServableNotFound(f"Malformed request: {self.command} {self.path[:200]}")
            from google.protobuf import json_format

            signature_map, _ = model.metadata(name, version)
            return 200, {
                "model_spec": {"name": name, "signature_name": "", "version": str(model.version)},
                "metadata": {
                    "signature_def": json_format.MessageToDict(
                        signature_map, preserving_proto_field_name=True
                    )
                },
            }

        def _post(self) -> tuple[int, Any]:
            name, version, suffix = self._route()
            if suffix in (":classify", ":regress"):
                model.servable(name, version)
                raise BadRequest(f"{suffix[1:]} is not supported by the local stand-in; use :predict")
            if suffix != ":predict":
                raise ServableNotFound(f"Malformed request: {self.command} {self.path[:200]}")
            servable = model.servable(name, version)
            body = self._body()
            with slots:  # the model's work: at most `threads` requests at once
                signature, arrays, rows = parse_predict(body, servable)
                batch = None
                if rows:
                    batch = next(iter(arrays.values())).shape[0] if arrays else 0
                outputs = servable.run(signature, arrays)
                return 200, format_predict(outputs, rows=rows, batch=batch)

        def _body(self) -> Any:
            if self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                raise BadRequest("send the request body with a Content-Length, not chunked")
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self.close_connection = True
                raise BadRequest("a predict request needs a Content-Length header") from None
            if length < 0 or length > max_body_bytes:
                self.close_connection = True  # the unread body must not be taken for a request
                raise BadRequest(f"the request body is {length} bytes; at most {max_body_bytes} are accepted")
            raw = self._read(length)
            self._arrived()
            try:
                return json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise BadRequest(f"the request body is not valid JSON: {first_line(exc)}") from exc

        def _read(self, length: int) -> bytes:
            """The body, piece by piece, within the request's deadline (each read within `timeout`)."""
            pieces: list[bytes] = []
            left = length
            try:
                while left > 0:
                    piece = self.rfile.read1(min(left, _READ_CHUNK))
                    if not piece:
                        break
                    pieces.append(piece)
                    left -= len(piece)
            except TimeoutError:
                self.close_connection = True
                paused = f" (or paused for {self.timeout:g} s)" if self.timeout is not None else ""
                raise BadRequest(
                    f"the request did not arrive within {self.request_seconds:g} s{paused}"
                ) from None
            if left:
                self.close_connection = True
                raise BadRequest("the request body ended before its Content-Length")
            return b"".join(pieces)

        def _answer(self, route: Callable[[], tuple[int, Any]]) -> None:
            try:
                code, payload = route()
            except BadRequest as exc:
                code, payload = 400, {"error": str(exc)}
            except ServableNotFound as exc:
                code, payload = 404, {"error": str(exc)}
            except Exception as exc:  # a bug or TensorFlow failing: the client hears, the server goes on
                print(
                    f"model_server: request failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True
                )
                code, payload = 500, {"error": f"{type(exc).__name__}: {first_line(exc)}"}
            data = json.dumps(payload).encode()
            try:
                self.connection.settimeout(self.timeout)  # a read may have left it shorter
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True  # the client went away

    return Handler


def _dtype_name(tf: Any, dtype: int) -> str:
    if not dtype:
        return "no dtype"
    try:
        return str(tf.dtypes.as_dtype(dtype).name)
    except TypeError:
        return f"DataType {dtype}"


def _grpc_servicers(model: ModelState) -> tuple[Any, Any]:
    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_service_pb2_grpc,
        predict_pb2,
        prediction_service_pb2_grpc,
    )

    def version_of(spec: Any) -> int | None:
        if spec.version_label:
            raise ServableNotFound(f"Unrecognized servable version label: {spec.version_label}")
        return int(spec.version.value) if spec.HasField("version") else None

    def guarded(context: Any, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except BadRequest as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except ServableNotFound as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except Exception as exc:
            if isinstance(exc, grpc.RpcError):
                raise
            print(f"model_server: RPC failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {first_line(exc)}")

    class Prediction(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request: Any, context: Any) -> Any:
            def call() -> Any:
                version = version_of(request.model_spec)
                servable = model.servable(request.model_spec.name, version)
                signature = servable.signature(request.model_spec.signature_name or DEFAULT_SIGNATURE)
                check_names(signature, request.inputs)
                arrays = {}
                budget = MAX_TENSOR_BYTES
                for name in sorted(request.inputs):
                    proto = request.inputs[name]
                    spec = signature.inputs[name]
                    if proto.dtype != spec.dtype.as_datatype_enum:
                        got = _dtype_name(tf, proto.dtype)
                        raise BadRequest(f"input {name!r}: expected {spec.dtype.name}, got {got}")
                    # The shape it declares, checked before anything is decoded or allocated.
                    try:
                        check_shape(name, tensor_shape(proto), spec)
                        arrays[name] = decode_tensor(proto, budget=budget)
                    except TensorError as exc:
                        raise BadRequest(
                            f"input {name!r}: not a tensor this server takes: {exc} "
                            f"(a request's tensors take at most {MAX_TENSOR_BYTES} bytes in all)"
                        ) from None
                    budget -= int(arrays[name].nbytes)
                outputs = servable.run(signature, arrays, output_filter=list(request.output_filter))
                response = predict_pb2.PredictResponse()
                response.model_spec.name = model.name
                response.model_spec.version.value = model.version
                response.model_spec.signature_name = signature.name
                for name, value in outputs.items():
                    response.outputs[name].CopyFrom(tf.make_tensor_proto(np.asarray(value)))
                return response

            return guarded(context, call)

        def GetModelMetadata(self, request: Any, context: Any) -> Any:
            def call() -> Any:
                if list(request.metadata_field) != ["signature_def"]:
                    raise BadRequest("metadata_field must be ['signature_def'], the only metadata served")
                signature_map, _ = model.metadata(request.model_spec.name, version_of(request.model_spec))
                response = get_model_metadata_pb2.GetModelMetadataResponse()
                response.model_spec.name = model.name
                response.model_spec.version.value = model.version
                response.metadata["signature_def"].Pack(signature_map)
                return response

            return guarded(context, call)

    class Models(model_service_pb2_grpc.ModelServiceServicer):
        def GetModelStatus(self, request: Any, context: Any) -> Any:
            def call() -> Any:
                model.check_version(request.model_spec.name, version_of(request.model_spec))
                response = get_model_status_pb2.GetModelStatusResponse()
                status = response.model_version_status.add()
                status.version = model.version
                status.state = get_model_status_pb2.ModelVersionStatus.State.Value(model.state)
                return response

            return guarded(context, call)

    return Prediction(), Models()


class ModelServer:
    """The REST and gRPC servers of one model; `load` makes it AVAILABLE."""

    def __init__(
        self,
        *,
        name: str,
        version: int,
        rest_port: int = 0,
        grpc_port: int = 0,
        max_body_bytes: int = MAX_BODY_BYTES,
        rest_threads: int = REST_THREADS,
        grpc_threads: int = GRPC_THREADS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.model = ModelState(name=name, version=version)
        self._rest_port = rest_port
        self._grpc_port = grpc_port
        self._max_body_bytes = max_body_bytes
        self._rest_threads = rest_threads
        self._grpc_threads = grpc_threads
        self._max_connections = max_connections
        self._http: _HTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc: Any = None
        self.rest_port = rest_port
        self.grpc_port = grpc_port

    def start(self) -> None:
        """Bind both ports (0: a free one) and answer; OSError when a port is taken."""
        import grpc

        slots = threading.BoundedSemaphore(self._rest_threads)
        handler = _handler(self.model, max_body_bytes=self._max_body_bytes, slots=slots)
        self._http = _HTTPServer((HOST, self._rest_port), handler, connections=self._max_connections)
        self.rest_port = int(self._http.server_address[1])
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._grpc_threads, thread_name_prefix="grpc"),
            maximum_concurrent_rpcs=GRPC_MAX_CONCURRENT,
            options=[
                ("grpc.max_receive_message_length", self._max_body_bytes),
                ("grpc.max_send_message_length", 4 * self._max_body_bytes),
                ("grpc.so_reuseport", 0),
            ],
        )
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        prediction, models = _grpc_servicers(self.model)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(prediction, server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(models, server)
        try:
            port = server.add_insecure_port(f"{HOST}:{self._grpc_port}")
        except RuntimeError as exc:
            self._http.server_close()
            raise OSError(f"cannot listen on {HOST}:{self._grpc_port} for gRPC: {exc}") from exc
        if not port:
            self._http.server_close()
            raise OSError(f"cannot listen on {HOST}:{self._grpc_port} for gRPC")
        self.grpc_port = int(port)
        server.start()
        self._grpc = server
        self._http_thread = threading.Thread(target=self._http.serve_forever, name="rest", daemon=True)
        self._http_thread.start()

    def load(self, path: Path) -> None:
        self.model.available(Servable(path))

    def close(self) -> None:
        if self._http is not None:
            if self._http_thread is not None:  # shutdown() waits for a serve_forever that ran
                self._http.shutdown()
                self._http_thread = None
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(GRPC_GRACE_SECONDS).wait()
            self._grpc = None


# ---- the command ----


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 is the contract's "no SavedModel"
        raise _UsageError(message)


class _Stopped(Exception):
    """SIGTERM arrived before the model was served."""


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="python -m squall.local.model_server", description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="the SavedModel's directory")
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--model-version", type=int, required=True)
    parser.add_argument("--rest-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", args.model_name):
        raise _UsageError(f"--model-name {args.model_name!r}: letters, digits, '.', '_', '-', at most 128")
    if not 1 <= args.model_version <= 10**9:
        raise _UsageError(f"--model-version must be 1..1000000000, got {args.model_version}")
    for flag in ("rest_port", "grpc_port"):
        if not 0 <= getattr(args, flag) <= 65535:
            raise _UsageError(f"--{flag.replace('_', '-')} must be 0..65535, got {getattr(args, flag)}")
    if args.rest_port and args.rest_port == args.grpc_port:
        raise _UsageError("--rest-port and --grpc-port must differ")
    return args


def _say(message: str) -> None:
    print(f"model_server: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parse(argv)
    except _UsageError as exc:
        _say(f"usage: {exc}")
        return FAILED_EXIT
    stop = threading.Event()
    serving = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        if not serving.is_set():
            raise _Stopped

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = ModelServer(
        name=args.model_name, version=args.model_version, rest_port=args.rest_port, grpc_port=args.grpc_port
    )
    try:
        try:
            server.start()
        except OSError as exc:
            _say(f"cannot start: {exc}")
            return FAILED_EXIT
        _say(
            f"listening: REST {HOST}:{server.rest_port}, gRPC {HOST}:{server.grpc_port}; "
            f"loading {args.model_dir}"
        )
        if not (args.model_dir / "saved_model.pb").is_file():
            _say(f"no SavedModel at {args.model_dir}: no saved_model.pb in it")
            return NO_SAVED_MODEL_EXIT
        try:
            server.load(args.model_dir)
        except _Stopped:
            raise
        except Exception as exc:
            _say(f"cannot load the SavedModel from {args.model_dir}: {type(exc).__name__}: {first_line(exc)}")
            return FAILED_EXIT
        serving.set()
        _say(f"serving model {args.model_name} version {args.model_version}")
        stop.wait()
        _say("stopping")
        return 0
    except _Stopped:
        _say("stopped before the model was served")
        return 0
    finally:
        serving.set()  # a second signal while closing only sets `stop`
        server.close()


if __name__ == "__main__":
    sys.exit(main())
