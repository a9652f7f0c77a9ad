"""The local model server's REST side against many slow and idle connections.

More connections than the server keeps open (`MAX_CONNECTIONS`), each trickling a
byte a second into its request line or headers, or sending nothing at all: a real
predict request is still answered while they are open, and the deadlines close them
(one per request, however steadily its bytes trickle; a short one for the first byte).
The model is a stand-in with one signature (no TensorFlow): the fast tier.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from squall.local.model_server import HOST, MAX_CONNECTIONS
from squall.local.servable import BadRequest, Signature
from tests.integration.test_model_server_hostile import NAME
from tests.integration.test_model_server_hostile import Rest as HostileRest

pytestmark = pytest.mark.timeout(240)

SLOW = MAX_CONNECTIONS + 8  # more than the server keeps open
LONG = 600.0  # a deadline no test waits for: what is answered was not let in by it


class _Model:
    """A servable with one signature, `x` float32 [-1, 3] -> `total`, the sum of each row."""

    spec = SimpleNamespace(
        dtype=SimpleNamespace(
            name="float32",
            is_bool=False,
            is_integer=False,
            is_floating=True,
            is_complex=False,
            as_numpy_dtype=np.float32,
        ),
        shape=SimpleNamespace(rank=2, as_list=lambda: [None, 3]),
    )

    def signature(self, name: str) -> Signature:
        if name != "serving_default":
            raise BadRequest(f"no signature {name!r}")
        return Signature(name=name, function=None, inputs={"x": self.spec}, outputs=("total",))

    def run(self, signature: Signature, arrays: dict[str, Any]) -> dict[str, Any]:
        return {"total": arrays["x"].sum(axis=1)}


class Rest(HostileRest):
    """The REST half of the model server on a free loopback port, serving `_Model`."""

    def __init__(self, *, request_seconds: float, idle_seconds: float, timeout: float = LONG) -> None:
        super().__init__(
            connections=MAX_CONNECTIONS,
            timeout=timeout,
            servable=_Model(),
            request_seconds=request_seconds,
            idle_seconds=idle_seconds,
        )

    def predict(self) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=60)
        try:
            body = json.dumps({"instances": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.5]]})
            connection.request(
                "POST", f"/v1/models/{NAME}:predict", body, {"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()


@contextmanager
def serving(**deadlines: float) -> Iterator[Rest]:
    server = Rest(**deadlines)
    try:
        yield server
    finally:
        server.close()


def closed_by_server(connection: socket.socket) -> bool:
    """Whether the server has closed `connection` (its end read, or reset), without waiting."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(4096) == b""  # else an answer, read here, or nothing yet
    except OSError:
        return True


class Tricklers:
    """`count` connections, each sending its request one byte a second, for ever.

    Half trickle their request line; the other half have sent a request line and
    trickle an endless header.
    """

    def __init__(self, stack: ExitStack, port: int, count: int) -> None:
        self.connections: list[socket.socket] = []
        self.sent: list[int] = []
        self.payloads: list[bytes] = []
        for index in range(count):
            connection = stack.enter_context(socket.create_connection((HOST, port), timeout=10))
            if index % 2:
                head = f"POST /v1/models/{NAME}:predict HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode()
                connection.sendall(head)
                payload = head + b"y" * 60_000
                self.sent.append(len(head))
            else:
                payload = b"POST /v1/models/" + b"x" * 60_000
                connection.sendall(payload[:1])
                self.sent.append(1)
            self.connections.append(connection)
            self.payloads.append(payload)
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()
        stack.callback(self.stop)

    def _trickle(self) -> None:
        while not self._stop.wait(1.0):
            for index, connection in enumerate(self.connections):
                try:
                    connection.send(self.payloads[index][self.sent[index] : self.sent[index] + 1])
                    self.sent[index] += 1
                except OSError:
                    pass  # closed by the server
            self.rounds += 1

    def wait_rounds(self, rounds: int) -> None:
        end = time.monotonic() + 120
        while self.rounds < rounds and time.monotonic() < end:
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def open(self) -> int:
        return sum(not closed_by_server(connection) for connection in self.connections)


def wait_until_all_closed(connections: list[socket.socket], *, within: float) -> int:
    """How many of `connections` the server has not closed after at most `within` seconds."""
    end = time.monotonic() + within
    while True:
        left = sum(not closed_by_server(connection) for connection in connections)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


def test_a_predict_request_is_answered_while_many_connections_trickle_their_requests() -> None:
    with serving(request_seconds=LONG, idle_seconds=LONG) as rest, ExitStack() as stack:
        # given: more connections than the server keeps, each a byte a second into its request
        tricklers = Tricklers(stack, rest.port, SLOW)
        tricklers.wait_rounds(3)
        # when: a real request comes
        status, body = rest.predict()
        # then: it is answered, the slow connections still open (no deadline let it in)
        assert (status, body) == (200, {"predictions": [6.0, 15.5]})
        assert tricklers.open() >= MAX_CONNECTIONS // 2


def test_a_request_trickled_a_byte_a_second_is_closed_at_its_deadline() -> None:
    with serving(request_seconds=3.0, idle_seconds=LONG) as rest, ExitStack() as stack:
        # given: more connections than the server keeps, each a byte a second into its request
        tricklers = Tricklers(stack, rest.port, SLOW)
        # then: the server closes every one though each keeps sending (its bytes do not extend it)
        assert wait_until_all_closed(tricklers.connections, within=90) == 0
        assert tricklers.rounds >= 2  # they were sending past their first byte's second
        # and: the server answers
        assert rest.predict() == (200, {"predictions": [6.0, 15.5]})


def test_a_predict_request_is_answered_while_many_connections_sit_idle() -> None:
    with serving(request_seconds=LONG, idle_seconds=LONG) as rest, ExitStack() as stack:
        # given: more idle connections than the server keeps, none of which times out here
        idle = [stack.enter_context(socket.create_connection((HOST, rest.port))) for _ in range(SLOW)]
        # when: a real request comes
        status, body = rest.predict()
        # then: it is answered at once, most idle connections still open
        assert (status, body) == (200, {"predictions": [6.0, 15.5]})
        assert sum(not closed_by_server(connection) for connection in idle) >= MAX_CONNECTIONS // 2


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_deadline() -> None:
    with serving(request_seconds=LONG, idle_seconds=1.0) as rest, ExitStack() as stack:
        # given: connections that send nothing (each read may wait far longer)
        idle = [stack.enter_context(socket.create_connection((HOST, rest.port))) for _ in range(4)]
        # then: the server closes them
        assert wait_until_all_closed(idle, within=60) == 0
        # and: a connection that sends its request at once is answered
        assert rest.predict() == (200, {"predictions": [6.0, 15.5]})
