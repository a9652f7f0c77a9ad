"""S3 adapter for reading a job's files: list a prefix, download an object or its tail.

Used by `squall tensorboard` to mirror event files; errors leave as Squall's
(`errors.translate`), a missing bucket or key as NotFoundError.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
                yield StoredObject(key=key, size=int(item.get("Size", 0)), etag=str(item.get("ETag", "")))

    def download(self, bucket: str, key: str, target: Path, *, offset: int = 0) -> int:
        """Write the object's bytes from `offset` on into `target` (created or replaced); returns how many."""
        params: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if offset:
            params["Range"] = f"bytes={offset}-"
        doing = f"downloading s3://{bucket}/{key}"
        with errors.translated(doing, rules=[_MISSING]):
            body = self._client.get_object(**params)["Body"]
            try:
                with target.open("wb") as handle:
                    shutil.copyfileobj(body, handle, _CHUNK)
            finally:
                body.close()
        return target.stat().st_size
