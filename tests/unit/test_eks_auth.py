"""EKS bearer tokens and the ApiClient builder, with fake credentials and no network."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import boto3
import pytest
from botocore.exceptions import NoCredentialsError

from squall.adapters.kubernetes.eks_auth import (
    API_RETRIES,
    CachedToken,
    api_client_for,
    build_api_client,
    eks_token,
)
from squall.core.errors import PermanentError
from squall.core.settings import ClusterSettings

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
REGION = "us-west-2"

# A self-signed CA (EC P-256, valid until 2124) that signs nothing: only its loading matters.
TEST_CA_PEM = """-----BEGIN CERTIFICATE-----
MIIBNjCB3KADAgECAgEBMAoGCCqGSM49BAMCMBkxFzAVBgNVBAMMDnNxdWFsbC10
ZXN0LWNhMCAXDTI1MDEwMTAwMDAwMFoYDzIxMjQxMjA4MDAwMDAwWjAZMRcwFQYD
VQQDDA5zcXVhbGwtdGVzdC1jYTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABJOV
Cy+IePo3zkq1DXj8VCjKWMf5ww887ihydgBlPhRBm6KHVofzOsbgdSE6lqZlPMRe
WeASSX/SEvKF0meBX6WjEzARMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwID
SQAwRgIhAKx71p5Pvfyps/NXkOrKOmyO38/CYw/YFF8lB8gxFGkMAiEAgr736duz
e4VQ5VSymqK9m8+5x8FXD7c8u/vfH2zEMso=
-----END CERTIFICATE-----
"""
TEST_CA_B64 = base64.b64encode(TEST_CA_PEM.encode()).decode()


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a unit test tried to open a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture
def session() -> boto3.Session:
    return boto3.Session(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        aws_session_token=SESSION_TOKEN,
        region_name=REGION,
    )


def decode(token: str) -> str:
    body = token.removeprefix("k8s-aws-v1.")
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def signature_holds(url: str, *, cluster_name: str) -> bool:
    """Recompute the SigV4 query signature as STS will, with this cluster header."""
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    signature = params.pop("X-Amz-Signature")
    _, date, region, service, _ = params["X-Amz-Credential"].split("/")
    headers = {"host": parts.netloc, "x-k8s-aws-id": cluster_name}
    signed = params["X-Amz-SignedHeaders"].split(";")
    canonical_request = "\n".join(
        [
            "GET",
            parts.path or "/",
            "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items())),
            "".join(f"{name}:{headers[name]}\n" for name in signed),
            ";".join(signed),
            hashlib.sha256(b"").hexdigest(),
        ]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            params["X-Amz-Date"],
            scope,
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )
    key = f"AWS4{SECRET_KEY}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.compare_digest(hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), signature)


# ==== the token ======================================================================


def test_token_is_a_prefixed_unpadded_base64url_presigned_sts_url(session: boto3.Session) -> None:
    token = eks_token(cluster_name="squall-prod", region=REGION, session=session)

    assert token.startswith("k8s-aws-v1.")
    body = token.removeprefix("k8s-aws-v1.")
    assert "=" not in body
    assert set(body) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    url = urlsplit(decode(token))
    assert (url.scheme, url.netloc, url.path) == ("https", "sts.us-west-2.amazonaws.com", "/")
    params = dict(parse_qsl(url.query))
    assert params["Action"] == "GetCallerIdentity"
    assert params["Version"] == "2011-06-15"
    assert params["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert params["X-Amz-Expires"] == "60"
    assert params["X-Amz-Credential"].startswith(f"{ACCESS_KEY}/")
    assert params["X-Amz-Credential"].endswith(f"/{REGION}/sts/aws4_request")
    assert params["X-Amz-Security-Token"] == SESSION_TOKEN


def test_the_cluster_header_is_signed(session: boto3.Session) -> None:
    url = decode(eks_token(cluster_name="squall-prod", region=REGION, session=session))

    signed_headers = dict(parse_qsl(urlsplit(url).query))["X-Amz-SignedHeaders"].split(";")
    assert "x-k8s-aws-id" in signed_headers
    assert "host" in signed_headers
    # The signature covers the header's value: the token is good for this cluster only.
    assert signature_holds(url, cluster_name="squall-prod")
    assert not signature_holds(url, cluster_name="squall-staging")


# Issue #12 decides retryable vs permanent once (squall.adapters.aws.errors): no credentials at
# all is a deployment fault, permanent, where this test used to pin RetryableError; credentials a
# provider failed to fetch stay retryable (test_adapter_errors.py).
def test_missing_credentials_are_a_permanent_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(PermanentError, match="generate an EKS token for cluster squall-prod") as info:
        eks_token(cluster_name="squall-prod", region=REGION, session=boto3.Session())

    assert isinstance(info.value.__cause__, NoCredentialsError)


# ==== caching ========================================================================


class Tokens:
    """A token source that counts what it hands out."""

    def __init__(self) -> None:
        self.issued: list[str] = []

    def __call__(self) -> str:
        self.issued.append(f"token-{len(self.issued) + 1}")
        return self.issued[-1]


def test_a_cached_token_is_reused_for_ten_minutes_then_refreshed() -> None:
    now = [1000.0]
    tokens = Tokens()
    cached = CachedToken(tokens, monotonic=lambda: now[0])

    first = [cached() for _ in range(3)]
    now[0] += 10 * 60 - 1
    before_refresh = cached()
    now[0] += 1
    refreshed = cached()

    assert first == ["token-1"] * 3
    assert before_refresh == "token-1"
    assert refreshed == "token-2"
    assert tokens.issued == ["token-1", "token-2"]


def test_refresh_interval_is_configurable() -> None:
    now = [0.0]
    cached = CachedToken(Tokens(), refresh_after=timedelta(seconds=30), monotonic=lambda: now[0])

    assert cached() == "token-1"
    now[0] = 30.0
    assert cached() == "token-2"


# ==== the ApiClient ==================================================================


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    for client in clients:
        client.close()


def test_api_client_sends_a_fresh_bearer_token_per_request(closing: list[Any]) -> None:
    # given
    now = [0.0]
    client = build_api_client(
        host="https://example.eks.amazonaws.com/",
        certificate_authority=TEST_CA_B64,
        token_provider=CachedToken(Tokens(), monotonic=lambda: now[0]),
    )
    closing.append(client)
    configuration = client.configuration

    # when / then: the client asks for auth settings on every request
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer token-1"
    now[0] += 11 * 60
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer token-2"
    assert configuration.host == "https://example.eks.amazonaws.com"
    assert configuration.ca_cert_data == TEST_CA_PEM
    assert configuration.retries is API_RETRIES
    assert configuration.verify_ssl is True


def test_api_client_without_token_or_ca_is_unauthenticated(closing: list[Any]) -> None:
    client = build_api_client(host="http://127.0.0.1:8001")
    closing.append(client)

    assert client.configuration.auth_settings() == {}
    assert client.configuration.ca_cert_data is None


@pytest.mark.parametrize(
    ("certificate_authority", "complaint"),
    [
        ("not base64 at all!", "not base64-encoded PEM"),
        (
            base64.b64encode(b"-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n").decode(),
            "not a PEM",
        ),
    ],
)
def test_a_broken_certificate_authority_fails_at_construction(
    certificate_authority: str, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        build_api_client(
            host="https://example.eks.amazonaws.com", certificate_authority=certificate_authority
        )


def test_api_client_for_the_configured_cluster_signs_eks_tokens(
    session: boto3.Session, closing: list[Any]
) -> None:
    settings = ClusterSettings(
        name="squall-prod",
        endpoint="https://ABC.gr7.us-west-2.eks.amazonaws.com",
        certificate_authority=TEST_CA_B64,
        region=REGION,
    )

    client = api_client_for(settings, session=session)
    closing.append(client)

    header = client.configuration.auth_settings()["BearerToken"]["value"]
    assert header.startswith("Bearer k8s-aws-v1.")
    assert signature_holds(decode(header.removeprefix("Bearer ")), cluster_name="squall-prod")
    assert client.configuration.host == settings.endpoint


def test_api_client_for_names_what_the_settings_lack() -> None:
    with pytest.raises(ValueError, match="SQUALL_CLUSTER is missing name, endpoint, region"):
        api_client_for(ClusterSettings())
