"""Every S3 key that becomes a local path goes through storage.key_path: a key planted
in a job's checkpoint prefix (``..``, absolute, backslashes) is skipped, and nothing is
written outside the directory the download goes to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer import storage
from trainer.fetch_model import saved_model_part
from trainer.storage import S3Location, S3Mirror, key_path

PREFIX = "checkpoints/job-1"

UNSAFE_KEYS = [
    "../../code/sitecustomize.py",  # the reproduction: it landed in the job's code directory
    "ckpt/../../../escape.py",
    "/etc/escape.py",  # "checkpoints/job-1//etc/escape.py": an absolute path once the prefix is cut
    "..\\..\\escape.py",
    "ckpt\\..\\..\\escape.py",
    "./checkpoint",
    "ckpt//x",
    "..",
    "x" * 256,
    "nul\x00.py",
]


class FakeS3:
    """Lists the keys it holds and writes a download's body to the file named, as boto3's
    client does (a local path built from a bad key goes wherever it points)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.downloaded: list[str] = []

    def get_paginator(self, name: str) -> Any:
        assert name == "list_objects_v2"
        return self

    def paginate(self, *, Bucket: str, Prefix: str) -> list[dict[str, Any]]:
        return [
            {
                "Contents": [
                    {"Key": k, "Size": len(v)} for k, v in self.objects.items() if k.startswith(Prefix)
                ]
            }
        ]

    def download_file(self, bucket: str, key: str, filename: str) -> None:
        self.downloaded.append(key)
        Path(filename).parent.mkdir(parents=True, exist_ok=True)
        Path(filename).write_bytes(self.objects[key])


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("relative", UNSAFE_KEYS, ids=repr)
def test_a_key_that_is_not_a_path_below_the_prefix_has_no_local_path(relative: str) -> None:
    assert key_path(relative) is None


@pytest.mark.parametrize(
    "relative",
    ["checkpoint", "ckpt-200.index", "logs/train/events.out.tfevents.1.host", "a..b/c.d", "x" * 255],
)
def test_a_key_below_the_prefix_maps_to_the_same_path(relative: str) -> None:
    path = key_path(relative)
    assert path is not None and path.as_posix() == relative


def test_the_checkpoint_pull_skips_planted_keys_and_writes_nothing_outside(tmp_path: Path) -> None:
    # given: a job's checkpoint prefix with its own files and keys planted beside them
    good = {f"{PREFIX}/checkpoint": b"index", f"{PREFIX}/ckpt-200.index": b"shard"}
    planted = {f"{PREFIX}/{relative}": b"import os  # planted\n" for relative in UNSAFE_KEYS}
    client = FakeS3({**good, **planted})
    job = tmp_path / "job"
    local = job / "model"

    # when
    mirror = S3Mirror(location=S3Location(bucket="squall", prefix=PREFIX), local=local, client=client)
    mirror.pull()

    # then: only the job's own files were downloaded, and nothing exists outside the model dir
    assert sorted(client.downloaded) == sorted(good)
    assert files_under(tmp_path) == {"job/model/checkpoint", "job/model/ckpt-200.index"}


def test_a_key_planted_to_become_the_jobs_code_is_not_written(tmp_path: Path) -> None:
    # The reproduction: the trainer's scratch holds code/ beside the model dir it pulls into.
    (tmp_path / "code").mkdir()
    client = FakeS3({f"{PREFIX}/checkpoint": b"index", f"{PREFIX}/../code/sitecustomize.py": b"import os\n"})

    S3Mirror(
        location=S3Location(bucket="squall", prefix=PREFIX), local=tmp_path / "model", client=client
    ).pull()

    assert not (tmp_path / "code" / "sitecustomize.py").exists()
    assert files_under(tmp_path) == {"model/checkpoint"}


def test_a_data_prefix_is_fetched_through_the_same_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = FakeS3({"data/shards/a.tfrecord": b"a", "data/shards/../../escape.py": b"x"})
    monkeypatch.setattr(storage, "s3_client", lambda: client)
    monkeypatch.setattr(storage, "_is_object", lambda client, location: False)

    target = storage.fetch("s3://squall/data/shards", staging=tmp_path / "staging")

    assert target == tmp_path / "staging" / "shards"
    assert client.downloaded == ["data/shards/a.tfrecord"]
    assert files_under(tmp_path) == {"staging/shards/a.tfrecord"}


def test_an_object_uri_whose_last_name_is_not_a_file_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "s3_client", lambda: FakeS3({}))
    with pytest.raises(storage.StorageError, match="cannot be a local file name"):
        storage.fetch("s3://squall/data/..", staging=tmp_path / "staging")


@pytest.mark.parametrize(
    "relative", ["variables/..\\..\\escape", "assets/a\\b", "variables/./x", "/saved_model.pb"]
)
def test_fetch_model_keeps_the_same_rule(relative: str) -> None:
    assert saved_model_part(relative) is None
