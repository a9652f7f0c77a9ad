"""The s3:// mirror of a model dir, against moto's in-memory S3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer.storage import LocalMirror, S3Location, S3Mirror, StorageError, fetch, mirror

BUCKET = "squall"  # created by the s3 fixture


def keys(client: Any, prefix: str = "") -> list[str]:
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"] for item in listing.get("Contents", []))


class RecordingClient:
    """The real (moto) client, recording the order of uploads."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.uploaded: list[str] = []

    def upload_file(self, filename: str, bucket: str, key: str) -> None:
        self.uploaded.append(key)
        self._client.upload_file(filename, bucket, key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix"),
    [("s3://b/run/ckpt/", "b", "run/ckpt"), ("s3://b", "b", ""), ("s3://b/x", "b", "x")],
)
def test_parse_s3_uri(uri: str, bucket: str, prefix: str) -> None:
    assert S3Location.parse(uri) == S3Location(bucket=bucket, prefix=prefix)


def test_s3_uri_without_bucket_is_an_error() -> None:
    with pytest.raises(StorageError, match="no bucket"):
        S3Location.parse("s3:///prefix")


def test_local_path_is_used_in_place(tmp_path: Path) -> None:
    model_dir = mirror(str(tmp_path / "model"), staging=tmp_path / "unused")

    model_dir.pull()

    assert isinstance(model_dir, LocalMirror)
    assert model_dir.local == tmp_path / "model" and model_dir.local.is_dir()


def test_push_uploads_shards_before_the_index_and_prunes_rotated_checkpoints(s3: Any, tmp_path: Path) -> None:
    client = RecordingClient(s3)
    local = tmp_path / "ckpt"
    local.mkdir()
    model_dir = S3Mirror(location=S3Location(BUCKET, "run/checkpoints"), local=local, client=client)
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001", "checkpoint"):
        (local / name).write_text(name)

    # given a first checkpoint pushed
    model_dir.push()
    assert client.uploaded[-1] == "run/checkpoints/checkpoint"

    # when CheckpointManager writes ckpt-2, rotates ckpt-1 out and rewrites the index
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001"):
        (local / name).unlink()
    for name in ("ckpt-2.index", "ckpt-2.data-00000-of-00001"):
        (local / name).write_text(name)
    (local / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"')
    client.uploaded.clear()
    model_dir.push()

    # then only what changed is uploaded, the index last, and S3 matches local disk
    assert client.uploaded == [
        "run/checkpoints/ckpt-2.data-00000-of-00001",
        "run/checkpoints/ckpt-2.index",
        "run/checkpoints/checkpoint",
    ]
    assert keys(s3) == [
        "run/checkpoints/checkpoint",
        "run/checkpoints/ckpt-2.data-00000-of-00001",
        "run/checkpoints/ckpt-2.index",
    ]


def test_pull_on_another_node_restores_the_tree(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key="run/logs/train/events.1", Body=b"e")
    s3.put_object(Bucket=BUCKET, Key="run/logs/", Body=b"")  # a console "folder"
    s3.put_object(Bucket=BUCKET, Key="other/x", Body=b"not ours")
    model_dir = mirror("s3://squall/run/logs", staging=tmp_path / "fresh")

    model_dir.pull()
    model_dir.push()  # nothing changed since the pull: nothing to upload

    assert (tmp_path / "fresh" / "train" / "events.1").read_bytes() == b"e"
    assert sorted(p.name for p in (tmp_path / "fresh").rglob("*") if p.is_file()) == ["events.1"]


def test_fetch_downloads_one_object_or_a_prefix(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key="data/train.npz", Body=b"npz")
    s3.put_object(Bucket=BUCKET, Key="data/shards/a.tfrecord", Body=b"a")
    s3.put_object(Bucket=BUCKET, Key="data/shards/b.tfrecord", Body=b"b")

    one = fetch("s3://squall/data/train.npz", staging=tmp_path / "one")
    many = fetch("s3://squall/data/shards", staging=tmp_path / "many")

    assert one.name == "train.npz" and one.read_bytes() == b"npz"
    assert sorted(p.name for p in many.iterdir()) == ["a.tfrecord", "b.tfrecord"]


def test_missing_bucket_or_data_is_a_storage_error(s3: Any, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="nothing at s3://squall/absent"):
        fetch("s3://squall/absent", staging=tmp_path)
    with pytest.raises(StorageError, match="s3://no-such-bucket/run") as error:
        mirror("s3://no-such-bucket/run", staging=tmp_path / "x").pull()
    assert error.value.__cause__ is not None  # the botocore error, chained
