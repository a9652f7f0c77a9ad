"""Serving the console on a loopback port: werkzeug's threaded server (Flask's own), as
TensorBoard serves its UI, started and stopped by `squall console` or a test."""

from __future__ import annotations

import threading
from types import TracebackType

from werkzeug.serving import BaseWSGIServer, make_server

from squall.console.app import create_app
from squall.console.context import ConsoleContext

HOST = "127.0.0.1"  # loopback only: the console is the user's own, never a shared endpoint


class ConsoleServer:
    """The console bound to 127.0.0.1:`port` (0: a free port), serving in a thread until stopped."""

    def __init__(self, context: ConsoleContext, *, port: int = 0) -> None:
        # Bound before the app is built: the guard needs the port a free one turned out to be.
        self._server: BaseWSGIServer = make_server(HOST, port, _unset_app, threaded=True)
        self.port = int(self._server.server_port)
        self.app = create_app(context, port=self.port)
        self._server.app = self.app
        self._thread: threading.Thread | None = None
        self.token = context.token

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The URL to open: it carries the session's token, which the console then keeps in a cookie."""
        return f"{self.base_url}/?token={self.token}"

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def start(self) -> ConsoleServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="squall-console", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _unset_app(environ: object, start_response: object) -> list[bytes]:  # pragma: no cover - replaced at once
    raise RuntimeError("the console's app is set right after its port is bound")
