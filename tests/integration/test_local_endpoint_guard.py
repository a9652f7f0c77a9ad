"""The local endpoint's gate (local/endpoint_guard.py) on a running endpoint.

What a web page the researcher visits could send while `squall local up` runs: a
CORS preflight, a `SendMessage` to the jobs queue with a foreign `Origin`, the same
through a rebound DNS name, unsigned, signed with another key or with a made-up
signature for the right key id, and moto's `/moto-api/` reset and state dump. Each
is refused with 403 before moto sees it, and the jobs queue and the state stay as
they were; the same request signed with the session's credentials goes through.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from werkzeug.test import Client

from squall.local.aws import LocalResources, create_resources, endpoint_credentials, local_endpoint
from squall.local.endpoint_guard import is_loopback_host

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Endpoint:
    url: str
    resources: LocalResources
    access_key: str
    secret_key: str

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: str


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    with local_endpoint() as url:
        resources = create_resources(url)
        credentials = endpoint_credentials(url)
        assert credentials is not None
        yield Endpoint(url, resources, credentials.access_key_id, credentials.secret_access_key)


def send(
    endpoint: Endpoint,
    *,
    method: str = "POST",
    path: str = "/",
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    host: str | None = None,
) -> Answer:
    """One raw HTTP request to the endpoint, as a browser (or anything else) could send it."""
    connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=30)
    try:
        sent = {"Host": host or f"127.0.0.1:{endpoint.port}", **(headers or {})}
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return Answer(
            response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
        )
    finally:
        connection.close()


def send_message_request(
    endpoint: Endpoint,
    *,
    key: str | None,
    secret: str | None,
    host: str | None = None,
    body_text: str = "job",
) -> tuple[bytes, dict[str, str]]:
    """An SQS SendMessage to the jobs queue (JSON protocol), signed with `key`/`secret` unless None."""
    body = json.dumps({"QueueUrl": endpoint.resources.jobs_queue_url, "MessageBody": body_text}).encode()
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "AmazonSQS.SendMessage",
        "Host": host or f"127.0.0.1:{endpoint.port}",
    }
    if key is None or secret is None:
        return body, headers
    request = AWSRequest(method="POST", url=f"{endpoint.url}/", data=body, headers=headers)
    SigV4Auth(Credentials(key, secret), "sqs", "us-west-2").add_auth(request)
    return body, dict(request.headers.items())


def _sqs(endpoint: Endpoint) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=endpoint.url,
        region_name="us-west-2",
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
    )


def queued(endpoint: Endpoint) -> list[str]:
    """The jobs queue's messages (received and put straight back)."""
    got = _sqs(endpoint).receive_message(
        QueueUrl=endpoint.resources.jobs_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0
    )
    return [m["Body"] for m in got.get("Messages", [])]


def purge(endpoint: Endpoint) -> None:
    """Delete what is queued (PurgeQueue may run once a minute only)."""
    sqs = _sqs(endpoint)
    while messages := sqs.receive_message(
        QueueUrl=endpoint.resources.jobs_queue_url, MaxNumberOfMessages=10
    ).get("Messages"):
        for message in messages:
            sqs.delete_message(
                QueueUrl=endpoint.resources.jobs_queue_url, ReceiptHandle=message["ReceiptHandle"]
            )


@pytest.fixture
def empty_queue(endpoint: Endpoint) -> Endpoint:
    purge(endpoint)
    assert queued(endpoint) == []
    return endpoint


def assert_refused(answer: Answer, why: str) -> None:
    assert answer.status == 403, answer
    assert why in answer.body
    assert "access-control-allow-origin" not in answer.headers


def test_the_session_s_signature_goes_through(empty_queue: Endpoint) -> None:
    # The control: the raw request below is right, so each refusal is the gate's doing.
    body, headers = send_message_request(
        empty_queue, key=empty_queue.access_key, secret=empty_queue.secret_key
    )
    answer = send(empty_queue, body=body, headers=headers)
    assert answer.status == 200, answer.body
    assert queued(empty_queue) == ["job"]


def test_a_cors_preflight_from_a_web_page_is_refused(empty_queue: Endpoint) -> None:
    answer = send(
        empty_queue,
        method="OPTIONS",
        headers={
            "Origin": "https://evil.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-amz-target,authorization,x-amz-date",
        },
    )
    assert_refused(answer, "Origin")


def test_a_request_with_a_foreign_origin_is_refused_even_when_signed(empty_queue: Endpoint) -> None:
    body, headers = send_message_request(
        empty_queue, key=empty_queue.access_key, secret=empty_queue.secret_key
    )
    answer = send(empty_queue, body=body, headers={**headers, "Origin": "https://evil.example"})
    assert_refused(answer, "Origin")
    assert queued(empty_queue) == []


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:4580", "rebind.127.0.0.1.nip.example", "10.0.0.1"]
)
def test_a_rebinding_host_is_refused(empty_queue: Endpoint, host: str) -> None:
    # DNS rebinding: the browser sends the attacker's name as Host; signed here to show the
    # Host alone is why.
    body, headers = send_message_request(
        empty_queue, key=empty_queue.access_key, secret=empty_queue.secret_key, host=host
    )
    answer = send(empty_queue, body=body, headers=headers, host=host)
    assert_refused(answer, "loopback")
    assert queued(empty_queue) == []


def test_an_unsigned_request_is_refused(empty_queue: Endpoint) -> None:
    body, headers = send_message_request(empty_queue, key=None, secret=None)
    assert_refused(send(empty_queue, body=body, headers=headers), "not signed")
    assert queued(empty_queue) == []


def test_a_request_signed_with_another_key_is_refused(empty_queue: Endpoint) -> None:
    body, headers = send_message_request(empty_queue, key="testing", secret="testing")
    assert_refused(send(empty_queue, body=body, headers=headers), "another access key")
    assert queued(empty_queue) == []


def test_a_made_up_signature_with_the_right_key_id_is_refused(empty_queue: Endpoint) -> None:
    body, headers = send_message_request(empty_queue, key=empty_queue.access_key, secret="guessed")
    assert_refused(send(empty_queue, body=body, headers=headers), "does not match")
    # and a real signature over another body: the body is part of what is signed
    body, headers = send_message_request(
        empty_queue, key=empty_queue.access_key, secret=empty_queue.secret_key
    )
    tampered = body.replace(b'"job"', b'"evil"')
    assert_refused(send(empty_queue, body=tampered, headers=headers), "does not match")
    assert queued(empty_queue) == []


def test_the_sdk_hears_why_it_was_refused(endpoint: Endpoint) -> None:
    from botocore.exceptions import ClientError

    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint.url,
        region_name="us-west-2",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with pytest.raises(ClientError) as raised:
        sqs.list_queues()
    assert "squall local env" in raised.value.response["Error"]["Message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type"),
    [
        ("POST", "/moto-api/reset", b"", "application/x-www-form-urlencoded"),  # a plain form post
        ("GET", "/moto-api/data.json", b"", ""),
        ("GET", "/moto-api/", b"", ""),
    ],
)
def test_moto_api_is_closed_and_changes_nothing(
    endpoint: Endpoint, method: str, path: str, body: bytes, content_type: str
) -> None:
    purge(endpoint)
    signed_body, signed = send_message_request(endpoint, key=endpoint.access_key, secret=endpoint.secret_key)
    assert send(endpoint, body=signed_body, headers=signed).status == 200
    headers = {"Content-Type": content_type} if content_type else {}
    answer = send(endpoint, method=method, path=path, body=body, headers=headers)
    assert_refused(answer, "/moto-api/")
    assert "squall-jobs" not in answer.body  # nothing of the state is read back
    assert queued(endpoint) == ["job"]  # not reset


def test_moto_answers_no_cors_preflight_in_this_process(endpoint: Endpoint) -> None:
    # Behind the gate too: moto's global CORS is off once an endpoint has started.
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    client = Client(DomainDispatcherApplication(create_backend_app))
    answer: Any = client.options(
        "/", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert "Access-Control-Allow-Origin" not in answer.headers


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:4580", True),
        ("127.0.0.1", True),
        ("127.1.2.3:80", True),
        ("localhost:4580", True),
        ("LOCALHOST", True),
        ("[::1]:4580", True),
        ("::1", True),
        ("", False),
        ("evil.example:4580", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.evil.example:4580", False),
        ("[::ffff:10.0.0.1]:4580", False),
        ("0.0.0.0:4580", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


# ---- what a signature binds: the body, the time, a Host that can be read ----


def test_a_signed_request_s_body_cannot_be_swapped_under_an_added_payload_hash(
    empty_queue: Endpoint,
) -> None:
    # SQS signs no X-Amz-Content-SHA256; one added with the signed body's hash must still
    # bind the body that is sent.
    body, headers = send_message_request(
        empty_queue, key=empty_queue.access_key, secret=empty_queue.secret_key
    )
    tampered = body.replace(b'"job"', b'"evil"')
    added = {**headers, "X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()}
    assert_refused(send(empty_queue, body=tampered, headers=added), "X-Amz-Content-SHA256")
    assert queued(empty_queue) == []


def test_an_s3_put_s_body_is_the_one_it_signed_and_boto3_uploads_still_work(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    bucket, host = endpoint.resources.artifacts_bucket, f"127.0.0.1:{endpoint.port}"
    request = AWSRequest(method="PUT", url=f"{endpoint.url}/{bucket}/k", data=b"mine", headers={"Host": host})
    S3SigV4Auth(Credentials(endpoint.access_key, endpoint.secret_key), "s3", "us-west-2").add_auth(request)
    signed = dict(request.headers.items())
    assert send(endpoint, method="PUT", path=f"/{bucket}/k", body=b"mine", headers=signed).status == 200
    replayed = send(endpoint, method="PUT", path=f"/{bucket}/k", body=b"EVIL", headers=signed)
    assert_refused(replayed, "X-Amz-Content-SHA256")
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint.url,
        region_name="us-west-2",
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
    )
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"mine"
    big = tmp_path / "big"
    big.write_bytes(os.urandom(9 << 20))  # over boto3's multipart threshold
    s3.upload_file(str(big), bucket, "big")
    s3.put_object(Bucket=bucket, Key="small", Body=b"x" * 1000)
    assert s3.head_object(Bucket=bucket, Key="big")["ContentLength"] == 9 << 20


def test_a_signature_from_long_ago_is_refused(empty_queue: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.auth

    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: datetime(2026, 1, 1))
    body, headers = send_message_request(
        empty_queue, key=empty_queue.access_key, secret=empty_queue.secret_key
    )
    monkeypatch.undo()
    assert_refused(send(empty_queue, body=body, headers=headers), "15 minutes")
    assert queued(empty_queue) == []


def test_the_access_key_alone_buys_no_unbounded_read(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from squall.local import endpoint_guard

    monkeypatch.setattr(endpoint_guard, "MAX_HASHED_BODY", 1 << 20)
    body, headers = send_message_request(endpoint, key=endpoint.access_key, secret="guessed")
    answer = send(endpoint, body=body + b" " * (2 << 20), headers=headers)  # read to 1 MiB, no further
    assert_refused(answer, "over 1 MiB")


def test_a_host_that_cannot_be_read_is_refused_not_an_error(endpoint: Endpoint) -> None:
    for host in ("localhost:x[", "[::1]evil"):  # signed for that Host: the gate reads it to check
        body, headers = send_message_request(
            endpoint, key=endpoint.access_key, secret=endpoint.secret_key, host=host
        )
        assert_refused(send(endpoint, body=body, headers=headers, host=host), "loopback")


@pytest.mark.parametrize("host", ["[::1]evil", "[::1]:x", "localhost:x[", "127.0.0.1:80a", "[::1"])
def test_a_loopback_name_with_more_after_it_is_not_loopback(host: str) -> None:
    assert is_loopback_host(host) is False
