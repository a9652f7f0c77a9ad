"""Code archives in the artifacts bucket (moto): once per content, checksummed, errors as Squall's own."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from squall.adapters.aws.artifacts import CodeArtifacts, code_key
from squall.core.errors import PermanentError, RetryableError, SquallError

pytestmark = pytest.mark.timeout(60)

BUCKET = "squall-artifacts"


class Recording:
    """The moto client, counting uploads."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.puts: list[dict[str, Any]] = []

    def put_object(self, **kwargs: Any) -> Any:
        self.puts.append({k: v for k, v in kwargs.items() if k != "Body"})
        return self._client.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_the_same_code_is_uploaded_once(s3: Any, archive: Any) -> None:
    client = Recording(s3)
    artifacts = CodeArtifacts(client, BUCKET)

    first = artifacts.store(team="research", sha256=archive.sha256, path=archive.path)
    second = artifacts.store(team="research", sha256=archive.sha256, path=archive.path)

    key = f"code/research/{archive.sha256}.tar.gz"
    assert (first.uploaded, second.uploaded) == (True, False)
    assert first.uri == second.uri == f"s3://{BUCKET}/{key}"
    assert len(client.puts) == 1
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == archive.path.read_bytes()
    listed = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"] for o in listed] == [key]


def test_each_team_has_its_own_copy(s3: Any, archive: Any) -> None:
    artifacts = CodeArtifacts(s3, BUCKET)
    artifacts.store(team="research", sha256=archive.sha256, path=archive.path)
    other = artifacts.store(team="vision", sha256=archive.sha256, path=archive.path)
    assert other.uploaded and other.uri.endswith(code_key(team="vision", sha256=archive.sha256))


def test_the_upload_carries_the_hash_for_s3_to_check(s3: Any, archive: Any) -> None:
    client = Recording(s3)
    CodeArtifacts(client, BUCKET).store(team="research", sha256=archive.sha256, path=archive.path)

    (put,) = client.puts
    assert (
        put["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(archive.path.read_bytes()).digest()).decode()
    )
    assert put["ContentType"] == "application/gzip"


def test_a_missing_bucket_is_a_permanent_error_naming_it(s3: Any, archive: Any) -> None:
    with pytest.raises(PermanentError, match=r"upload s3://no-such-bucket/code/research/.*NoSuchBucket"):
        CodeArtifacts(s3, "no-such-bucket").store(team="research", sha256=archive.sha256, path=archive.path)


def stubbed(error_code: str, status: int, *, operation: str = "head_object") -> tuple[Any, Stubber]:
    client = boto3.client("s3", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_client_error(operation, service_error_code=error_code, http_status_code=status)
    return client, stubber


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [("SlowDown", 503, RetryableError), ("InternalError", 500, RetryableError), ("400", 400, PermanentError)],
)
def test_lookup_errors_are_translated(
    archive: Any, code: str, status: int, expected: type[SquallError]
) -> None:
    client, stubber = stubbed(code, status)
    with stubber, pytest.raises(expected) as caught:
        CodeArtifacts(client, BUCKET).store(team="research", sha256=archive.sha256, path=archive.path)
    assert isinstance(caught.value.__cause__, ClientError)
    assert "look up s3://squall-artifacts/code/research/" in str(caught.value)


def test_a_forbidden_lookup_leaves_the_decision_to_the_upload(archive: Any) -> None:
    # S3 answers 403 for a missing key to a caller that may not list the bucket
    client, stubber = stubbed("403", 403)
    stubber.add_client_error("put_object", service_error_code="AccessDenied", http_status_code=403)
    with stubber, pytest.raises(PermanentError, match=r"upload .*AccessDenied"):
        CodeArtifacts(client, BUCKET).store(team="research", sha256=archive.sha256, path=archive.path)
    stubber.assert_no_pending_responses()


def test_an_unreachable_endpoint_is_retryable(archive: Any, aws_credentials: None) -> None:
    client = boto3.client(
        "s3",
        region_name="us-west-2",
        endpoint_url="http://127.0.0.1:9",  # discard port: nothing listens
        config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=1),
    )
    with pytest.raises(RetryableError, match="look up"):
        CodeArtifacts(client, BUCKET).store(team="research", sha256=archive.sha256, path=archive.path)
