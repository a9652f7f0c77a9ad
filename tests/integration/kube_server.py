"""A local Kubernetes API stand-in over real HTTP: kmock's emulator on its own thread.

    with running_kube_api() as (url, kube):
        cluster = KubernetesCluster(build_api_client(host=url))
        kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        kube.fail("post", kmock.resource("batch/v1/jobs"), status=500)
        ...
        assert kube.requests("get", kmock.resource("v1/pods"))[0].params["labelSelector"] == ...

kmock's KubernetesEmulator stores what is created, answers 409 on duplicates,
serves lists, fetches, merge-patches and deletes. On top of it this module adds,
as kmock reactions, what the emulator lacks and Squall relies on:

- lists honour ``labelSelector`` (=, ==, !=, exists, !exists, in, notin) and
  ``fieldSelector`` (=, ==, != on dotted paths, a missing field reads as ""),
  and page with ``limit`` and ``continue`` in (namespace, name) order;
- ``POST .../pods/<name>/eviction`` (policy/v1): the pod is deleted and 201 is
  answered, 404 when there is no such pod.

Reactions added by a test (`fail`, `delay`, or the kmock DSL on `emulator`) take
precedence over these, which take precedence over the emulator's own behaviour.

The server runs an asyncio loop on a thread of its own, so synchronous code (the
kubernetes client) can call it. A server starts in milliseconds, so a test can
have a fresh one and share no state. kmock matches each request against every
request it has seen, so one server should not serve many thousands of requests.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import kmock

T = TypeVar("T")

STARTUP_TIMEOUT = 10.0
SHUTDOWN_TIMEOUT = 10.0

_PLURALS = {"Endpoints": "endpoints"}


def resource_of(api_version: str, kind: str) -> str:
    """The kmock resource string of a kind: ("batch/v1", "Job") -> "batch/v1/jobs"."""
    plural = _PLURALS.get(kind, kind.lower() + "s")
    return f"{api_version}/{plural}"


class KubeApi:
    """Handle on a running stand-in; safe to use from the test's thread."""

    def __init__(
        self, *, url: str, emulator: kmock.KubernetesEmulator, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.url = url
        self.emulator = emulator
        self._loop = loop

    def call(self, fn: Callable[[], T], *, timeout: float = 5.0) -> T:
        """Run `fn` on the server's event loop thread and return its result."""

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    # ---- objects --------------------------------------------------------------------

    def put(self, obj: Mapping[str, Any]) -> None:
        """Store an object as if a controller had created it (nodes, pods)."""
        metadata = obj["metadata"]
        key = (resource_of(obj["apiVersion"], obj["kind"]), metadata.get("namespace"), metadata["name"])

        def store() -> None:
            self.emulator.objects[key] = dict(obj)

        self.call(store)

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object, None when absent or deleted."""

        def find() -> dict[str, Any] | None:
            for (res, ns, nm), obj in self.emulator.objects.items():
                if res == kmock.resource(resource) and ns == namespace and nm == name and not obj.deleted:
                    return dict(obj.raw)
            return None

        return self.call(find)

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Stored objects of a resource ("v1/pods", "batch/v1/jobs"), deleted ones left out."""
        return self.call(lambda: _stored(self.emulator, kmock.resource(resource), namespace))

    # ---- requests and reactions -----------------------------------------------------

    def requests(self, *criteria: Any) -> list[kmock.Request]:
        """Requests served so far, optionally filtered with kmock criteria."""
        return self.call(lambda: list(self.emulator[criteria] if criteria else self.emulator))

    def answer(self, *criteria: Any, status: int = 200, body: bytes | Mapping[str, Any] = b"") -> None:
        """Answer matching requests with `status` and `body` (a dict goes as JSON)."""
        response = kmock.Response(status=status, payload=dict(body) if isinstance(body, Mapping) else body)
        self.call(lambda: self.emulator[criteria] << response)

    def fail(
        self,
        *criteria: Any,
        status: int,
        reason: str = "",
        message: str = "",
        times: int | None = None,
    ) -> None:
        """Answer matching requests with a Kubernetes Status error (the first `times` only).

        No criteria: every request.
        """
        body = _status(status, reason=reason or f"Status{status}", message=message or f"injected {status}")

        def register() -> None:
            view = self.emulator[criteria]
            (view[:times] if times is not None else view) << body

        self.call(register)

    def delay(self, *criteria: Any, seconds: float, times: int | None = None) -> None:
        """Hold matching requests for `seconds`, then let them through to the next reaction."""

        async def hold() -> None:
            await asyncio.sleep(seconds)
            # kmock's "matched, nothing to answer": it moves on to the next reaction and,
            # unlike for an empty answer, keeps this one active for the next request.
            raise NotImplementedError

        def register() -> None:
            view = self.emulator[criteria]
            (view[:times] if times is not None else view) << hold

        self.call(register)


@contextmanager
def running_kube_api(*, host: str = "127.0.0.1") -> Iterator[tuple[str, KubeApi]]:
    """Start a stand-in, yield (url, handle) once it answers, and stop it on exit."""
    started: concurrent.futures.Future[tuple[KubeApi, asyncio.Event]] = concurrent.futures.Future()

    async def serve() -> None:
        stop = asyncio.Event()
        try:
            async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator, host=host) as server:
                _install_reactions(emulator)
                url = str(server.url).rstrip("/")
                started.set_result(
                    (KubeApi(url=url, emulator=emulator, loop=asyncio.get_running_loop()), stop)
                )
                await stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="kube-api-stand-in", daemon=True)
    thread.start()
    try:
        kube, stop = started.result(STARTUP_TIMEOUT)
    except BaseException:
        thread.join(SHUTDOWN_TIMEOUT)
        raise
    try:
        _wait_until_answering(kube.url)
        yield kube.url, kube
    finally:
        kube._loop.call_soon_threadsafe(stop.set)
        thread.join(SHUTDOWN_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError(f"the Kubernetes API stand-in at {kube.url} did not stop")


def _wait_until_answering(url: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{url}/version", timeout=1.0) as response:
                response.read()
                return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


# ==== reactions the emulator lacks ===================================================


def _install_reactions(emulator: kmock.KubernetesEmulator) -> None:
    # Below the test's own reactions (priority 0), above the emulator's (-inf).
    builtin = emulator**-1
    builtin[kmock.action.LIST] << (lambda request: _serve_list(emulator, request))
    builtin[kmock.method.POST, kmock.resource("v1/pods"), kmock.subresource("eviction")] << (
        lambda request: _serve_eviction(emulator, request)
    )


def _serve_list(emulator: kmock.KubernetesEmulator, request: kmock.Request) -> kmock.Response:
    try:
        labels = _parse_label_selector(request.params.get("labelSelector", ""))
        fields = _parse_field_selector(request.params.get("fieldSelector", ""))
        limit = int(request.params.get("limit") or 0)
        offset = _decode_continue(request.params.get("continue", ""))
    except ValueError as exc:
        return _status(400, reason="BadRequest", message=str(exc))
    assert request.resource is not None  # a LIST is a Kubernetes request by definition
    items = [
        obj
        for obj in _stored(emulator, request.resource, request.namespace)
        if all(match(obj) for match in labels + fields)
    ]
    items.sort(key=lambda obj: (obj["metadata"].get("namespace") or "", obj["metadata"]["name"]))
    page = items[offset : offset + limit] if limit > 0 else items[offset:]
    metadata: dict[str, Any] = {"resourceVersion": "1"}
    rest = len(items) - offset - len(page)
    if rest > 0:
        metadata["continue"] = _encode_continue(offset + len(page))
        metadata["remainingItemCount"] = rest
    return kmock.Response(
        status=200, payload={"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": page}
    )


def _serve_eviction(emulator: kmock.KubernetesEmulator, request: kmock.Request) -> kmock.Response:
    key = (kmock.resource("v1/pods"), request.namespace, request.name)
    for stored_key, obj in emulator.objects.items():
        if stored_key == key and not obj.deleted:
            obj.delete()
            return _status(201, reason="", message="", status="Success")
    return _status(404, reason="NotFound", message=f'pods "{request.name}" not found')


def _stored(
    emulator: kmock.KubernetesEmulator, resource: kmock.resource, namespace: str | None
) -> list[dict[str, Any]]:
    return [
        dict(obj.raw)
        for (res, ns, _), obj in emulator.objects.items()
        if res == resource and (namespace is None or ns == namespace) and not obj.deleted
    ]


def _status(code: int, *, reason: str, message: str, status: str = "Failure") -> kmock.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": status,
        "message": message,
        "reason": reason,
        "code": code,
    }
    return kmock.Response(status=code, payload=body)


# ==== selectors ======================================================================

Match = Callable[[Mapping[str, Any]], bool]

_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQUALITY_REQUIREMENT = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")
_EXISTS_REQUIREMENT = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Split on the commas that are not inside a value set: "a in (x,y),b" -> 2 requirements."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def _parse_label_selector(selector: str) -> list[Match]:
    matches: list[Match] = []
    for requirement in _split_requirements(selector):
        if found := _SET_REQUIREMENT.match(requirement):
            key, operator = found[1], found[2]
            values = {value.strip() for value in found[3].split(",") if value.strip()}
            matches.append(_label_in(key, values, negate=operator == "notin"))
        elif found := _EQUALITY_REQUIREMENT.match(requirement):
            matches.append(_label_equals(found[1], found[3], negate=found[2] == "!="))
        elif found := _EXISTS_REQUIREMENT.match(requirement):
            matches.append(_label_exists(found[2], negate=found[1] == "!"))
        else:
            raise ValueError(f"unable to parse requirement: {requirement!r}")
    return matches


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _label_in(key: str, values: set[str], *, negate: bool) -> Match:
    if negate:  # notin also matches objects without the label, as Kubernetes does
        return lambda obj: _labels(obj).get(key) not in values
    return lambda obj: _labels(obj).get(key) in values


def _label_equals(key: str, value: str, *, negate: bool) -> Match:
    if negate:
        return lambda obj: _labels(obj).get(key) != value
    return lambda obj: _labels(obj).get(key) == value


def _label_exists(key: str, *, negate: bool) -> Match:
    return lambda obj: (key in _labels(obj)) != negate


def _parse_field_selector(selector: str) -> list[Match]:
    matches: list[Match] = []
    for requirement in _split_requirements(selector):
        found = _EQUALITY_REQUIREMENT.match(requirement)
        if not found:
            raise ValueError(f"invalid field selector: {requirement!r}")
        matches.append(_field_equals(found[1].split("."), found[3], negate=found[2] == "!="))
    return matches


def _field_equals(path: list[str], value: str, *, negate: bool) -> Match:
    def match(obj: Mapping[str, Any]) -> bool:
        current: Any = obj
        for part in path:
            current = current.get(part) if isinstance(current, Mapping) else None
        return (str(current) if current is not None else "") == value

    return (lambda obj: not match(obj)) if negate else match


def _encode_continue(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _decode_continue(token: str) -> int:
    if not token:
        return 0
    try:
        prefix, _, offset = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if prefix != "offset":
            raise ValueError(token)
        return int(offset)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"invalid continue token: {token!r}") from exc
