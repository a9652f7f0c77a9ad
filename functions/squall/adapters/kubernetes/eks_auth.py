"""EKS authentication and the ``kubernetes`` ApiClient the functions talk through.

An EKS bearer token is a presigned STS GetCallerIdentity URL, signed with the
function's IAM role and bound to one cluster by the signed ``x-k8s-aws-id``
header, then base64url-encoded (no padding) behind ``k8s-aws-v1.`` -- what
``aws eks get-token`` prints. EKS accepts a token for 15 minutes; the ApiClient
asks for a fresh one after 10, so a warm Lambda never sends a stale one.
"""

from __future__ import annotations

import base64
import binascii
import ssl
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any, Final

import boto3
import urllib3
from kubernetes.client import ApiClient, Configuration

from squall.adapters.aws.errors import translated
from squall.core.settings import ClusterSettings

TOKEN_PREFIX: Final = "k8s-aws-v1."
CLUSTER_ID_HEADER: Final = "x-k8s-aws-id"
PRESIGNED_URL_EXPIRES: Final = 60  # seconds, as aws-iam-authenticator and `aws eks get-token` sign
TOKEN_REFRESH_AFTER: Final = timedelta(minutes=10)  # EKS accepts a token for 15 minutes

# Connection attempts are retried (nothing reached the server yet); reads are not:
# a write may have happened, and the caller's own retry (SQS, the next schedule) is
# the one that knows whether repeating is safe. Redirects are not followed.
API_RETRIES: Final = urllib3.Retry(
    total=2, connect=2, read=0, status=0, other=0, redirect=False, backoff_factor=0.2
)

TokenProvider = Callable[[], str]


def eks_token(*, cluster_name: str, region: str, session: boto3.Session | None = None) -> str:
    """A bearer token for one EKS cluster from the session's credentials (no network call)."""
    session = session or boto3.Session()
    with translated(f"generate an EKS token for cluster {cluster_name}"):
        sts = session.client("sts", region_name=region)

        def bind_to_cluster(request: Any, **_: Any) -> None:
            request.headers[CLUSTER_ID_HEADER] = cluster_name

        # The header is signed, so the token is only good for this cluster.
        sts.meta.events.register("before-sign.sts.GetCallerIdentity", bind_to_cluster)
        url = sts.generate_presigned_url(
            "get_caller_identity", Params={}, ExpiresIn=PRESIGNED_URL_EXPIRES, HttpMethod="GET"
        )
    encoded = base64.urlsafe_b64encode(url.encode("utf-8")).decode("ascii").rstrip("=")
    return TOKEN_PREFIX + encoded


class CachedToken:
    """A token provider that keeps a token until `refresh_after` has passed."""

    def __init__(
        self,
        fetch: TokenProvider,
        *,
        refresh_after: timedelta = TOKEN_REFRESH_AFTER,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._refresh_after = refresh_after.total_seconds()
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._token: str | None = None
        self._fetched_at = 0.0

    def __call__(self) -> str:
        with self._lock:
            now = self._monotonic()
            if self._token is None or now - self._fetched_at >= self._refresh_after:
                # Stamped before fetching: the token's 15 minutes start no later than now.
                self._token, self._fetched_at = self._fetch(), now
            return self._token


def build_api_client(
    *,
    host: str,
    certificate_authority: str = "",
    token_provider: TokenProvider | None = None,
) -> ApiClient:
    """An ApiClient for one API server.

    `certificate_authority` is the base64 PEM bundle EKS DescribeCluster returns
    (empty: the system's trust store). `token_provider` is asked for the bearer
    token before every request, so it decides when a token is refreshed; without
    one, requests are unauthenticated (a local API stand-in).
    """
    configuration = Configuration(host=host.rstrip("/"), retries=API_RETRIES)
    if certificate_authority:
        configuration.ca_cert_data = _decode_certificate_authority(certificate_authority)
    if token_provider is not None:
        provider = token_provider
        # auth_settings() only calls the hook when the key exists: start with a placeholder.
        configuration.api_key = {"BearerToken": ""}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}

        def refresh(config: Configuration) -> None:
            config.api_key["BearerToken"] = provider()

        # The generated client annotates this attribute as None only.
        configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    return ApiClient(configuration)


def api_client_for(cluster: ClusterSettings, *, session: boto3.Session | None = None) -> ApiClient:
    """The ApiClient of the configured EKS cluster, authenticated as the function's role."""
    region = cluster.region or (session.region_name if session is not None else "") or ""
    missing = [
        field
        for field, value in (("name", cluster.name), ("endpoint", cluster.endpoint), ("region", region))
        if not value
    ]
    if missing:
        raise ValueError(f"SQUALL_CLUSTER is missing {', '.join(missing)}")
    fetch = partial(eks_token, cluster_name=cluster.name, region=region, session=session)
    return build_api_client(
        host=cluster.endpoint,
        certificate_authority=cluster.certificate_authority,
        token_provider=CachedToken(fetch),
    )


def _decode_certificate_authority(encoded: str) -> str:
    try:
        pem = base64.b64decode(encoded, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError("the cluster certificate authority is not base64-encoded PEM") from exc
    try:
        # Load it now: a broken bundle fails at cold start, not on the first request.
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"the cluster certificate authority is not a PEM certificate: {exc}") from exc
    return pem
