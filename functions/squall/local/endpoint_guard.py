"""The local endpoint's gate: what reaches moto's server, and what is refused before it.

moto checks no credentials, and its `/moto-api/` reads and resets the whole state. On
a researcher's machine a web page they visit could otherwise reach the endpoint on
127.0.0.1 (a `fetch()` with a made-up signature, a plain form post, DNS rebinding)
and queue a job whose command the local runtime then runs as them. `EndpointGuard`
wraps moto's WSGI application and refuses, with 403 and before moto sees it:

- a request whose `Host` is not a loopback address or `localhost` (DNS rebinding);
- a request with an `Origin` header (a browser's cross-origin request or preflight:
  no SDK sends one);
- any `/moto-api/` path (moto's own state, dashboard and reset);
- a request not signed (SigV4, the Authorization header) with this session's access
  key, or whose signature the session's secret does not reproduce.

The signature is recomputed with botocore's signer over what the request carries:
its method, the path and query as sent, the headers it names as signed, and its
payload's SHA-256 (the `X-Amz-Content-SHA256` header where it sends one, and then the
body must have that hash, else the body's, read up to 64 MiB). As AWS, a signature
dated over 15 minutes from this machine's clock is refused. Presigned URLs (query
authentication) are refused: nothing local uses them.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import ipaddress
import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

SIGV4 = "AWS4-HMAC-SHA256"
LOOPBACK_NAMES = frozenset({"localhost"})
MAX_SKEW = timedelta(minutes=15)  # as AWS: a signature older (or newer) than this is refused
MAX_HASHED_BODY = 64 << 20  # read to check a signature before it holds: no local API sends more
HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
# What a refused client is told: enough to find the right credentials again.
HINT = 'the credentials `squall local up` printed for this session (`eval "$(squall local env)"` sets them)'

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Refused(Exception):
    """Why a request does not reach moto."""


class EndpointGuard:
    """A WSGI middleware: `app` sees only loopback, origin-less requests signed with `access_key`."""

    def __init__(self, app: WsgiApp, *, access_key: str, secret_key: str) -> None:
        self.app = app
        self._access_key = access_key
        self._credentials = Credentials(access_key, secret_key)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            self.check(environ)
        except Refused as exc:
            return _refuse(environ, start_response, str(exc))
        return self.app(environ, start_response)

    def check(self, environ: dict[str, Any]) -> None:
        """Return when `environ` may reach moto; else Refused, saying why."""
        host = environ.get("HTTP_HOST", "")
        if not is_loopback_host(host):
            raise Refused(
                f"Host {host[:80]!r} is not a loopback address: the local endpoint answers only those"
            )
        if "HTTP_ORIGIN" in environ:
            raise Refused(
                "a request with an Origin header (from a web page) is refused by the local endpoint"
            )
        if _path(environ).startswith("/moto-api"):
            raise Refused("/moto-api/ is closed on the local endpoint")
        self._check_signature(environ)

    def _check_signature(self, environ: dict[str, Any]) -> None:
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        if not authorization.startswith(SIGV4 + " "):
            raise Refused(f"the request is not signed (SigV4): sign it with {HINT}")
        fields = _auth_fields(authorization[len(SIGV4) :])
        scope = fields.get("Credential", "").split("/")
        signed = [name for name in fields.get("SignedHeaders", "").split(";") if name]
        signature = fields.get("Signature", "")
        if len(scope) != 5 or scope[4] != "aws4_request" or not signed or not signature:
            raise Refused(f"the request's SigV4 Authorization header is malformed: sign it with {HINT}")
        access_key, date, region, service, _ = scope
        if not hmac.compare_digest(access_key.encode(), self._access_key.encode()):
            raise Refused(f"the request is signed with another access key than this session's: use {HINT}")
        timestamp = environ.get("HTTP_X_AMZ_DATE", "")
        if "host" not in signed or not timestamp.startswith(date):
            raise Refused(f"the request's signature does not cover its host and date: sign it with {HINT}")
        try:
            skew = abs(datetime.now(UTC) - datetime.strptime(timestamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC))
            expected = self._signature(
                environ, signed=signed, timestamp=timestamp, region=region, service=service
            )
        except ValueError as exc:  # a date or URL that cannot be read
            raise Refused(
                f"the request cannot be signed as sent ({str(exc)[:80]}): sign it with {HINT}"
            ) from None
        if skew > MAX_SKEW:
            raise Refused(f"the request was signed at {timestamp}, over 15 minutes from this machine's clock")
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise Refused(f"the request's signature does not match this session's secret key: use {HINT}")
        declared = _headers(environ).get("X-Amz-Content-SHA256", "")
        if (
            HEX_DIGEST.fullmatch(declared)
            and hashlib.sha256(_read_body(environ)).hexdigest() != declared.lower()
        ):
            raise Refused("the request's body is not the one its X-Amz-Content-SHA256 header names")

    def _signature(
        self, environ: dict[str, Any], *, signed: list[str], timestamp: str, region: str, service: str
    ) -> str:
        headers = _headers(environ)
        raw = urlsplit(environ.get("RAW_URI") or _path(environ))
        url = f"http://{environ.get('HTTP_HOST', '')}{raw.path}" + (f"?{raw.query}" if raw.query else "")
        body = b""
        if "X-Amz-Content-SHA256" not in headers:  # (any case) else the body's hash: read it
            body = _read_body(environ, limit=MAX_HASHED_BODY)
        request = AWSRequest(method=environ.get("REQUEST_METHOD", "GET"), url=url, headers=headers, data=body)
        request.context["timestamp"] = timestamp
        to_sign = HTTPHeaders()
        for name in signed:
            for value in headers.get_all(name):
                to_sign[name] = value
        signer = _Signer(self._credentials, service, region, to_sign, s3=service == "s3")
        canonical = signer.canonical_request(request)
        return str(signer.signature(signer.string_to_sign(request, canonical), request))


def is_loopback_host(host: str) -> bool:
    """`host` (a Host header: name or address, maybe a port) names this machine's loopback."""
    name, port = host.strip(), ""
    if name.startswith("["):  # [::1]:4580
        name, bracket, port = name[1:].partition("]")
        if not bracket or port[:1] not in ("", ":"):
            return False
        port = port[1:]
    elif name.count(":") == 1:
        name, _, port = name.partition(":")
    if port and not (port.isascii() and port.isdigit()):
        return False
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class _Signer(SigV4Auth):
    """botocore's SigV4 signer, held to the headers the request names as signed."""

    def __init__(
        self, credentials: Credentials, service: str, region: str, headers: HTTPHeaders, *, s3: bool
    ):
        super().__init__(credentials, service, region)
        self._signed_headers = headers
        self._s3 = s3

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        return self._signed_headers

    def _normalize_url_path(self, path: str) -> str:
        if self._s3:  # S3 signs its path as sent (botocore's S3SigV4Auth)
            return path
        return str(super()._normalize_url_path(path))


def _auth_fields(text: str) -> dict[str, str]:
    fields = {}
    for part in text.split(","):
        key, _, value = part.strip().partition("=")
        fields[key] = value
    return fields


def _path(environ: dict[str, Any]) -> str:
    path = environ.get("PATH_INFO", "")
    if isinstance(path, bytes):
        path = path.decode("latin-1")
    return str(path)


def _headers(environ: dict[str, Any]) -> HTTPHeaders:
    """The request's headers with their names in lower case (WSGI keeps only their values)."""
    headers = HTTPHeaders()
    original = environ.get("moto.preserved_header_names") or {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            name = original.get(key) or key[5:].replace("_", "-")
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = key.replace("_", "-")
        else:
            continue
        if isinstance(value, str):
            headers[name.lower()] = value
    return headers


def _read_body(environ: dict[str, Any], *, limit: int | None = None) -> bytes:
    """The whole body, put back for moto to read again; Refused when it is over `limit` bytes."""
    stream = environ["wsgi.input"]
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if environ.get("wsgi.input_terminated"):
        body = stream.read(-1 if limit is None else limit + 1)
    else:
        body = stream.read(length if limit is None else min(length, limit + 1)) if length > 0 else b""
    if limit is not None and len(body) > limit:
        raise Refused(f"the request's body is over {limit >> 20} MiB, more than any local API takes")
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return bytes(body)


def _refuse(environ: dict[str, Any], start_response: StartResponse, reason: str) -> list[bytes]:
    """403 in the request's protocol's error shape, so an SDK shows the reason; no CORS headers."""
    message = f"squall local refused the request: {reason}"
    if "json" in environ.get("CONTENT_TYPE", ""):
        body = json.dumps({"__type": "AccessDeniedException", "message": message}).encode()
        content_type = "application/x-amz-json-1.0"
    else:
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
            f"<Message>{escape(message)}</Message></Error></ErrorResponse>"
        ).encode()
        content_type = "text/xml"
    start_response(
        "403 Forbidden",
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("x-amzn-ErrorType", "AccessDeniedException"),
            # the unread body of a refused request must not be taken for the next request
            ("Connection", "close"),
        ],
    )
    return [body]
