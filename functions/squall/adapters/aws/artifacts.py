"""Code archives in the artifacts bucket, stored once per content.

``s3://<bucket>/code/<team>/<sha256>.tar.gz``: the key is the archive's hash, so an
archive already there is the same bytes and is not sent again (HeadObject first). The
upload carries its SHA-256 checksum, so S3 refuses bytes that were corrupted on the way.

The bucket's lifecycle rule expires code archives `codeExpirationDays` after they were
stored (cdk.json `artifacts.codeExpirationDays`, here `SQUALL_CODE_EXPIRATION_DAYS`,
default 90), counted from the upload, not from the last job that used one. An archive
stored longer ago than that minus the longest run a job may have (the policy's
`maxRuntimeLimit`, 30 days unless the caller says otherwise) is uploaded again: the
upload makes a new current version with a fresh date, so the job submitted now cannot
lose its code mid-run (a re-run after a node loss fetches it again).

Every botocore error leaves as Squall's own, through squall.adapters.aws.errors.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from squall.adapters.aws.errors import error_code, http_status, translate, translated
from squall.core.errors import PermanentError
from squall.core.spec.limits import DEFAULT_MAX_RUNTIME_LIMIT

CODE_PREFIX = "code"
CONTENT_TYPE = "application/gzip"
CODE_EXPIRATION_ENV = "SQUALL_CODE_EXPIRATION_DAYS"
# cdk.json's artifacts.codeExpirationDays default (stacks/constants.py CODE_EXPIRATION_DAYS).
DEFAULT_CODE_EXPIRATION_DAYS = 90
MAX_CODE_EXPIRATION_DAYS = 36_500


def code_key(*, team: str, sha256: str) -> str:
    return f"{CODE_PREFIX}/{team}/{sha256}.tar.gz"


def code_expiration(environ: Mapping[str, str]) -> timedelta:
    """How long the bucket keeps a code archive: `SQUALL_CODE_EXPIRATION_DAYS`, else the default."""
    raw = environ.get(CODE_EXPIRATION_ENV, "").strip()
    if not raw:
        return timedelta(days=DEFAULT_CODE_EXPIRATION_DAYS)
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_CODE_EXPIRATION_DAYS:
        raise PermanentError(
            f"{CODE_EXPIRATION_ENV}={raw[:40]!r}: must be a whole number of days from 1 to "
            f"{MAX_CODE_EXPIRATION_DAYS} (the artifacts bucket's artifacts.codeExpirationDays in cdk.json)"
        )
    return timedelta(days=int(raw))


@dataclass(frozen=True)
class StoredCode:
    uri: str
    uploaded: bool  # False: the same archive was there already
    renewed: bool = False  # uploaded again: the stored one was too old to outlive the longest run


class CodeArtifacts:
    """Code archives of every team in one bucket (S3 HeadObject / PutObject).

    `expiration`: the bucket's code expiration (default: `code_expiration(os.environ)`);
    `longest_run`: the longest a job may run (the policy's maxRuntimeLimit); `now`: the clock.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        expiration: timedelta | None = None,
        longest_run: timedelta = DEFAULT_MAX_RUNTIME_LIMIT,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._bucket = bucket
        self.expiration = expiration if expiration is not None else code_expiration(os.environ)
        # A stored archive younger than this outlives any run that starts now.
        self.reuse_within = self.expiration - longest_run
        self._now = now

    def uri(self, *, team: str, sha256: str) -> str:
        return f"s3://{self._bucket}/{code_key(team=team, sha256=sha256)}"

    def exists(self, *, team: str, sha256: str) -> bool:
        """Whether the team's archive with this hash is stored (see `stored_at`)."""
        return self.stored_at(team=team, sha256=sha256) is not None

    def stored_at(self, *, team: str, sha256: str) -> datetime | None:
        """When the team's archive with this hash was stored (its LastModified); None if it is not.

        S3 answers 403 rather than 404 for a missing key to a caller who may not list
        the bucket: that is "not known to be there", and the upload decides. A stored
        archive whose date S3 does not give is dated long ago, so it is renewed.
        """
        key = code_key(team=team, sha256=sha256)
        try:
            head = self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if http_status(exc) in (403, 404) or error_code(exc) in ("404", "NoSuchKey", "NotFound", "403"):
                return None
            raise translate(f"look up s3://{self._bucket}/{key}", exc) from exc
        except BotoCoreError as exc:
            raise translate(f"look up s3://{self._bucket}/{key}", exc) from exc
        modified = head.get("LastModified") if isinstance(head, Mapping) else None
        if not isinstance(modified, datetime):
            return datetime.min.replace(tzinfo=UTC)
        return modified if modified.tzinfo is not None else modified.replace(tzinfo=UTC)

    def store(self, *, team: str, sha256: str, path: Path) -> StoredCode:
        """Upload the archive at `path` unless the same one is stored recently enough; its hash is `sha256`."""
        uri = self.uri(team=team, sha256=sha256)
        stored_at = self.stored_at(team=team, sha256=sha256)
        if stored_at is not None and self._now() - stored_at < self.reuse_within:
            return StoredCode(uri=uri, uploaded=False)
        checksum = base64.b64encode(bytes.fromhex(sha256)).decode("ascii")
        with translated(f"upload {uri}"), path.open("rb") as body:
            self._client.put_object(
                Bucket=self._bucket,
                Key=code_key(team=team, sha256=sha256),
                Body=body,
                ContentType=CONTENT_TYPE,
                ChecksumSHA256=checksum,
            )
        return StoredCode(uri=uri, uploaded=True, renewed=stored_at is not None)
