"""S3 adapter for reading a job's files: list a prefix, download an object or its tail.

Used by `squall tensorboard` to mirror event files; errors leave as Squall's
(`errors.translate`), a missing bucket or key as NotFoundError.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from squall.adapters.aws import errors
from squall.core.job_outputs import StoredObject

LIST_PAGE = 1000  # ListObjectsV2's largest page
_MISSING = errors.not_found("NoSuchBucket", "NoSuchKey", "404", "NotFound")
_CHUNK = 1024 * 1024


class S3ObjectReader:
    def __init__(self, client: Any) -> None:
        self._client = client

    def list(self, bucket: str, prefix: str, *, limit: int) -> Iterator[StoredObject]:
        """The objects under `prefix`, in key order, at most `limit` (folder markers left out)."""
        count = 0
        for page in errors.pages(
            f"listing s3://{bucket}/{prefix}",
            self._client,
            "list_objects_v2",
            page_size=LIST_PAGE,
            rules=[_MISSING],
            Bucket=bucket,
            Prefix=prefix,
        ):
            for item in page.get("Contents", []):
                key = str(item["Key"])
                if key.endswith("/"):
                    continue
                if count >= limit:
                    return
                count += 1
                # A listing is the server's to write: a negative size would cancel out another's.
                size = max(0, int(item.get("Size", 0)))
                yield StoredObject(key=key, size=size, etag=str(item.get("ETag", "")))

    def download(self, bucket: str, key: str, target: Path, *, offset: int = 0, end: int) -> int:
        """Write the object's bytes `offset`..`end - 1` into `target` (created or replaced); returns how many.

        Asked for by range (`Range: bytes=offset-(end-1)`) and read no further than that
        whatever S3 (or a server standing in for it) sends: `end` is the size the
        listing gave, and an object written since cannot bring more than was planned for.
        A range the object no longer reaches (it shrank) writes nothing, and so does an
        answer that is not the range asked for (a server that ignored `Range` sends the
        object from its start, which must not be appended as its tail).
        """
        target.write_bytes(b"")
        wanted = end - offset
        if wanted <= 0:
            return 0
        params: dict[str, Any] = {"Bucket": bucket, "Key": key, "Range": f"bytes={offset}-{end - 1}"}
        doing = f"downloading s3://{bucket}/{key}"
        with errors.translated(doing, rules=[_MISSING]):
            try:
                answer = self._client.get_object(**params)
            except ClientError as exc:
                if errors.error_code(exc) == "InvalidRange":  # 416: it no longer reaches `offset`
                    return 0
                raise
            body = answer["Body"]
            if offset and not str(answer.get("ContentRange", "")).startswith(f"bytes {offset}-"):
                body.close()
                return 0
            try:
                with target.open("wb") as handle:
                    while wanted > 0:
                        chunk = body.read(min(_CHUNK, wanted))
                        if not chunk:
                            break
                        handle.write(chunk)
                        wanted -= len(chunk)
            finally:
                body.close()
        return target.stat().st_size
