"""Code archives that would expire under a run are uploaded again (adapters/aws/artifacts.py).

The bucket's lifecycle rule counts from the upload: an archive re-used 85 days after it
was stored would expire five days into a 30-day run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from squall.adapters.aws.artifacts import (
    CODE_EXPIRATION_ENV,
    DEFAULT_CODE_EXPIRATION_DAYS,
    CodeArtifacts,
    code_expiration,
    code_key,
)
from squall.core.errors import PermanentError

pytestmark = pytest.mark.timeout(60)

BUCKET = "squall-artifacts"
REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.at


def stored(s3: Any, sha256: str) -> datetime:
    modified: datetime = s3.head_object(Bucket=BUCKET, Key=code_key(team="research", sha256=sha256))[
        "LastModified"
    ]
    return modified


def test_an_archive_too_old_to_outlive_the_longest_run_is_uploaded_again(s3: Any, archive: Any) -> None:
    clock = Clock()
    artifacts = CodeArtifacts(
        s3, BUCKET, expiration=timedelta(days=90), longest_run=timedelta(days=30), now=clock
    )
    first = artifacts.store(team="research", sha256=archive.sha256, path=archive.path)
    assert first.uploaded and not first.renewed
    uploaded_at = stored(s3, archive.sha256)

    # 59 days on it still outlives a 30-day run started now (it expires at 90): kept
    clock.at = uploaded_at + timedelta(days=59)
    kept = artifacts.store(team="research", sha256=archive.sha256, path=archive.path)
    assert (kept.uploaded, kept.renewed) == (False, False)

    # 61 days on a 30-day run would outlive it: uploaded again, under the same name
    clock.at = uploaded_at + timedelta(days=61)
    renewed = artifacts.store(team="research", sha256=archive.sha256, path=archive.path)
    assert (renewed.uploaded, renewed.renewed) == (True, True) and renewed.uri == first.uri
    listed = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"] for o in listed] == [code_key(team="research", sha256=archive.sha256)]


def test_the_renewal_is_dated_by_s3_so_the_next_submit_reuses_it(archive: Any) -> None:
    # S3 stamps the new upload: the next look-up sees a fresh date
    client = boto3.client("s3", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    now = datetime(2026, 6, 1, tzinfo=UTC)
    key = code_key(team="research", sha256=archive.sha256)
    stubber = Stubber(client)
    stubber.add_response(
        "head_object", {"LastModified": now - timedelta(days=85)}, {"Bucket": BUCKET, "Key": key}
    )
    stubber.add_response("put_object", {})
    stubber.add_response("head_object", {"LastModified": now}, {"Bucket": BUCKET, "Key": key})
    artifacts = CodeArtifacts(client, BUCKET, expiration=timedelta(days=90), now=lambda: now)
    with stubber:
        assert artifacts.store(team="research", sha256=archive.sha256, path=archive.path).renewed
        assert not artifacts.store(team="research", sha256=archive.sha256, path=archive.path).uploaded
    stubber.assert_no_pending_responses()


def test_an_expiration_no_longer_than_the_longest_run_uploads_every_time(s3: Any, archive: Any) -> None:
    artifacts = CodeArtifacts(s3, BUCKET, expiration=timedelta(days=30), longest_run=timedelta(days=30))
    artifacts.store(team="research", sha256=archive.sha256, path=archive.path)
    assert artifacts.store(team="research", sha256=archive.sha256, path=archive.path).renewed


def test_the_expiration_comes_from_the_environment(
    s3: Any, archive: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CODE_EXPIRATION_ENV, "40")
    clock = Clock()
    artifacts = CodeArtifacts(s3, BUCKET, now=clock)  # the CLI's construction; longest run 30 days
    assert artifacts.expiration == timedelta(days=40)
    artifacts.store(team="research", sha256=archive.sha256, path=archive.path)
    clock.at = stored(s3, archive.sha256) + timedelta(days=11)
    assert artifacts.store(team="research", sha256=archive.sha256, path=archive.path).renewed

    monkeypatch.delenv(CODE_EXPIRATION_ENV)
    assert CodeArtifacts(s3, BUCKET).expiration == timedelta(days=DEFAULT_CODE_EXPIRATION_DAYS)


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "1.5", "36501", "٣"])
def test_a_bad_expiration_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(PermanentError, match=f"{CODE_EXPIRATION_ENV}=.*whole number of days"):
        code_expiration({CODE_EXPIRATION_ENV: raw})
    assert code_expiration({CODE_EXPIRATION_ENV: " 120 "}) == timedelta(days=120)


def test_the_default_is_the_deployments() -> None:
    from stacks import constants

    context = json.loads((REPO / "cdk.json").read_text())["context"]
    assert (
        DEFAULT_CODE_EXPIRATION_DAYS
        == constants.CODE_EXPIRATION_DAYS
        == context["artifacts"]["codeExpirationDays"]
    )
