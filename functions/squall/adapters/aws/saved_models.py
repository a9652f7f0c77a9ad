"""SavedModels on S3: whether ``<uri>/saved_model.pb`` is there, by HeadObject.

Intake asks before it records a model service, so that a serve of a job whose
trainer exported nothing is refused at once rather than found by a crash-looping
pod. A key S3 says is not there (404) is "no SavedModel". A 403 is not taken for
one: S3 answers it for a missing key only to callers who may not list the bucket,
and also when the role may not read the prefix at all, which the operator must be
told about (PermanentError). Every botocore error leaves as Squall's own.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from squall.adapters.aws.errors import error_code, http_status, translate
from squall.core.errors import PermanentError
from squall.core.job_outputs import split_s3_uri
from squall.core.serving_requests import SAVED_MODEL_FILE

_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})


def _bucket_and_prefix(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` as (bucket, prefix without a trailing '/'); PermanentError for any other text."""
    try:
        bucket, prefix = split_s3_uri(uri)
    except ValueError as exc:
        raise PermanentError(f"{exc}: expected one such as 's3://bucket/prefix'") from None
    return bucket, prefix.rstrip("/")


class S3SavedModels:
    def __init__(self, client: Any) -> None:
        self._client = client

    def has_saved_model(self, uri: str) -> bool:
        bucket, prefix = _bucket_and_prefix(uri)
        key = f"{prefix}/{SAVED_MODEL_FILE}" if prefix else SAVED_MODEL_FILE
        doing = f"look for a SavedModel at s3://{bucket}/{key}"
        try:
            self._client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if http_status(exc) == 404 or error_code(exc) in _MISSING_CODES:
                return False
            if http_status(exc) == 403:
                raise PermanentError(
                    f"{doing}: 403 Forbidden: there is no such object, or this role may not read it "
                    "(S3 answers 403 for a missing key to a role without s3:ListBucket on the bucket)"
                ) from exc
            raise translate(doing, exc) from exc
        except BotoCoreError as exc:
            raise translate(doing, exc) from exc
        return True
