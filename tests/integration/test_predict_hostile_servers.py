"""`squall predict` against servers that answer badly, and `--grpc` without TensorFlow.

A PredictionService stand-in is built here from tensorflow-serving-api's messages alone
(`serving_protos`); a tiny HTTP server plays a REST endpoint. What `squall predict`
prints is a clear error with exit 1, never a traceback, and a server's words escaped.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from squall.cli import main
from squall.cli.prediction import decode_tensor, serving_protos, tensor

pytestmark = pytest.mark.timeout(120)

HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
DT_FLOAT = 1
ROOT = Path(__file__).resolve().parents[2]


class Answers:
    """What the gRPC stand-in answers Predict with: 'twice' (the input doubled), 'giant', or 'error';
    'corrupt metadata' spoils GetModelMetadata's answer."""

    mode = "twice"


@pytest.fixture(scope="module")
def grpc_target() -> Iterator[str]:
    """Model `gan`: signature serving_default, input `noise` float32 (-1, 2), output `twice`."""
    import grpc

    protos = serving_protos()

    class Service(protos.prediction_service_pb2_grpc.PredictionServiceServicer):  # type: ignore[misc]
        def GetModelMetadata(self, request: Any, context: Any) -> Any:
            if Answers.mode == "corrupt metadata":  # the SignatureDefMap's type, bytes that are not one
                corrupt = protos.get_model_metadata_pb2.GetModelMetadataResponse()
                packed = corrupt.metadata["signature_def"]
                packed.type_url = "type.googleapis.com/tensorflow.serving.SignatureDefMap"
                packed.value = b"\xff\xff\xff\xff"
                return corrupt
            signatures = protos.get_model_metadata_pb2.SignatureDefMap()
            signature = signatures.signature_def["serving_default"]
            signature.method_name = "tensorflow/serving/predict"
            noise = signature.inputs["noise"]
            noise.dtype = DT_FLOAT
            noise.tensor_shape.dim.add(size=-1)
            noise.tensor_shape.dim.add(size=2)
            signature.outputs["twice"].dtype = DT_FLOAT
            response = protos.get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = "gan"
            response.metadata["signature_def"].Pack(signatures)
            return response

        def Predict(self, request: Any, context: Any) -> Any:
            response = protos.predict_pb2.PredictResponse()
            if Answers.mode == "error":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad{HOSTILE}\nsquall: all is well")
            if Answers.mode == "giant":
                giant = response.outputs["twice"]
                giant.dtype = DT_FLOAT
                giant.tensor_shape.dim.add(size=49)
                giant.tensor_shape.dim.add(size=2**20)
                giant.float_val.append(1.0)  # 20 bytes that TensorFlow would make 196 MiB of
                return response
            noise = decode_tensor(request.inputs["noise"])
            response.outputs["twice"].CopyFrom(
                tensor("twice", (noise * 2).tolist(), dtype=DT_FLOAT, shape=None)
            )
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    protos.prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        Answers.mode = "twice"
        server.stop(None)


def request_file(tmp_path: Path) -> str:
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"instances": [[1, 2], [3, 4]]}))
    return str(path)


def test_predict_grpc_imports_no_tensorflow_and_prints_nothing_of_it(
    grpc_target: str, tmp_path: Path
) -> None:
    # given: the command in a fresh interpreter, as a researcher runs it
    script = (
        "import sys\n"
        "from squall.cli import main\n"
        f"code = main(['predict', 'gan', '--grpc', '--url', {grpc_target!r}, '--input', {request_file(tmp_path)!r}])\n"
        "print('tensorflow.python' in sys.modules, 'tensorflow' in sys.modules, code)\n"
    )
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    # when
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100, cwd=ROOT, env=env
    )
    # then: the answer, TensorFlow's package never run, and stderr empty (no start-up notes)
    lines = done.stdout.splitlines()
    assert json.loads(lines[0]) == {"outputs": [[2.0, 4.0], [6.0, 8.0]]}
    assert lines[1] == "False False 0"
    assert done.stderr == ""


def predict_answered(*, mode: str, target: str, tmp_path: Path) -> int:
    """`squall predict --grpc` against the stand-in server while it answers in `mode`."""
    Answers.mode = mode
    try:
        return main(["predict", "gan", "--grpc", "--url", target, "--input", request_file(tmp_path)])
    finally:
        Answers.mode = "twice"


def test_a_grpc_answer_declaring_a_giant_tensor_is_a_clear_error(
    grpc_target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = predict_answered(mode="giant", target=grpc_target, tmp_path=tmp_path)
    err = capsys.readouterr().err
    assert code == 1
    assert f"squall: {grpc_target}: output 'twice' of the answer: shape [49, 1048576] of float32" in err
    assert "Traceback" not in err


def test_grpc_metadata_that_does_not_decode_is_a_clear_error(
    grpc_target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = predict_answered(mode="corrupt metadata", target=grpc_target, tmp_path=tmp_path)
    err = capsys.readouterr().err
    assert code == 1
    assert f"squall: {grpc_target}: model gan's metadata holds no readable signature_def" in err
    assert "Traceback" not in err


def test_a_grpc_servers_error_is_printed_escaped(
    grpc_target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = predict_answered(mode="error", target=grpc_target, tmp_path=tmp_path)
    err = capsys.readouterr().err
    assert code == 1
    assert "INVALID_ARGUMENT: bad\\x1b]0;owned\\x07" in err
    assert "\nsquall: all is well" not in err
    for raw in RAW:
        assert raw not in err


@pytest.fixture
def rest_answer() -> Iterator[tuple[str, list[tuple[int, bytes]]]]:
    """A REST endpoint that answers each POST with the next (status, body) the test puts in the list."""
    answers: list[tuple[int, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = answers.pop(0)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()


def test_a_rest_answer_nested_100k_deep_is_a_clear_error(
    rest_answer: tuple[str, list[tuple[int, bytes]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, answers = rest_answer
    answers.append((200, b'{"predictions": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))
    assert main(["predict", "gan", "--url", url, "--input", request_file(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "the answer is nested more than 64 levels deep" in err
    assert "Traceback" not in err and "RecursionError" not in err


def test_a_rest_servers_error_is_printed_escaped(
    rest_answer: tuple[str, list[tuple[int, bytes]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, answers = rest_answer
    answers.append((400, json.dumps({"error": f"bad{HOSTILE}\nsquall: all is well"}).encode()))
    answers.append((500, f"plain text{HOSTILE}".encode()))
    for _ in range(2):
        assert main(["predict", "gan", "--url", url, "--input", request_file(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert "\\x1b]0;owned\\x07" in err and "\nsquall: all is well" not in err
        for raw in RAW:
            assert raw not in err


@pytest.fixture
def raw_server() -> Iterator[tuple[str, list[bytes]]]:
    """A TCP server that answers one request with the bytes queued, a piece at a time (0.3 s apart)."""
    import socket
    import time

    pieces: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            for piece in pieces:
                connection.sendall(piece)
                time.sleep(0.3)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", pieces
    finally:
        listener.close()


def test_a_rest_answer_sent_a_byte_at_a_time_is_cut_at_the_timeout(
    raw_server: tuple[str, list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    url, pieces = raw_server
    answer = b'{"predictions": [1, 2, 3, 4, 5, 6, 7, 8, 9]}'
    pieces.append(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(answer))
    pieces.extend(answer[i : i + 1] for i in range(len(answer)))  # each byte within the socket timeout
    started = time.monotonic()
    code = main(["predict", "gan", "--url", url, "--input", request_file(tmp_path), "--timeout", "2"])
    took = time.monotonic() - started
    assert code == 1
    assert "no whole answer within 2 s" in capsys.readouterr().err
    assert took < 4  # was ~13 s: each byte came within the timeout of the one before


def test_a_rest_answer_that_is_not_http_is_a_clear_error(
    raw_server: tuple[str, list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, pieces = raw_server
    pieces.append(b"HELLO\x1b]0;owned\x07\r\n\r\n")
    assert main(["predict", "gan", "--url", url, "--input", request_file(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "the answer is not HTTP: BadStatusLine" in err
    assert "Traceback" not in err and "\x1b" not in err
