"""Code archives in the artifacts bucket, stored once per content.

``s3://<bucket>/code/<team>/<sha256>.tar.gz``: the key is the archive's hash, so an
archive already there is the same bytes and is not sent again (HeadObject first). The
upload carries its SHA-256 checksum, so S3 refuses bytes that were corrupted on the way.

Every botocore error leaves as Squall's own, through squall.adapters.aws.errors.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from squall.adapters.aws.errors import error_code, http_status, translate, translated

CODE_PREFIX = "code"
CONTENT_TYPE = "application/gzip"


def code_key(*, team: str, sha256: str) -> str:
    return f"{CODE_PREFIX}/{team}/{sha256}.tar.gz"


@dataclass(frozen=True)
class StoredCode:
    uri: str
    uploaded: bool  # False: the same archive was there already


class CodeArtifacts:
    """Code archives of every team in one bucket (S3 HeadObject / PutObject)."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self._bucket = bucket

    def uri(self, *, team: str, sha256: str) -> str:
        return f"s3://{self._bucket}/{code_key(team=team, sha256=sha256)}"

    def exists(self, *, team: str, sha256: str) -> bool:
        """Whether the team's archive with this hash is stored.

        S3 answers 403 rather than 404 for a missing key to a caller who may not list
        the bucket: that is "not known to be there", and the upload decides.
        """
        key = code_key(team=team, sha256=sha256)
        try:
            self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if http_status(exc) in (403, 404) or error_code(exc) in ("404", "NoSuchKey", "NotFound", "403"):
                return False
            raise translate(f"look up s3://{self._bucket}/{key}", exc) from exc
        except BotoCoreError as exc:
            raise translate(f"look up s3://{self._bucket}/{key}", exc) from exc
        return True

    def store(self, *, team: str, sha256: str, path: Path) -> StoredCode:
        """Upload the archive at `path` unless the same one is stored; its hash is `sha256`."""
        uri = self.uri(team=team, sha256=sha256)
        if self.exists(team=team, sha256=sha256):
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
        return StoredCode(uri=uri, uploaded=True)
