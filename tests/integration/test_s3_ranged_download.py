"""The S3 adapter reads an object by byte range up to the listed size, whatever the server sends."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto import mock_aws

from squall.adapters.aws.s3_objects import S3ObjectReader

BUCKET = "squall-artifacts"
KEY = "ckpt/job-1/logs/events.out.tfevents.1.host.1.v2"
GROWN = 20 * 2**20


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def test_an_object_grown_since_the_listing_is_read_up_to_the_listed_size(s3: Any, tmp_path: Path) -> None:
    # given: a 1 KiB object, listed
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"a" * 1024)
    reader = S3ObjectReader(s3)
    (listed,) = reader.list(BUCKET, "ckpt/job-1/", limit=10)
    # when: it has grown by 20 MiB before it is read
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"a" * 1024 + b"b" * GROWN)
    got = reader.download(BUCKET, KEY, tmp_path / "whole", end=listed.size)
    # then
    assert got == 1024 and (tmp_path / "whole").read_bytes() == b"a" * 1024
    # and its tail from an offset stops there too
    assert reader.download(BUCKET, KEY, tmp_path / "tail", offset=1000, end=listed.size) == 24


def test_a_range_the_object_no_longer_reaches_writes_nothing(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"short")
    target = tmp_path / "tail"
    assert S3ObjectReader(s3).download(BUCKET, KEY, target, offset=100, end=200) == 0
    assert target.read_bytes() == b""


def test_a_server_that_ignores_the_range_is_read_no_further(tmp_path: Path) -> None:
    # given: a server that answers the whole (grown) object whatever range it is asked
    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stub = Stubber(client)
    body = b"a" * 1024 + b"b" * GROWN
    stub.add_response(
        "get_object",
        {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentLength": len(body)},
        expected_params={"Bucket": BUCKET, "Key": KEY, "Range": "bytes=0-1023"},
    )
    # when
    with stub:
        got = S3ObjectReader(client).download(BUCKET, KEY, tmp_path / "f", end=1024)
    # then: the range was asked for, and no more than it was written
    assert got == 1024 and (tmp_path / "f").read_bytes() == b"a" * 1024


def test_a_tail_from_a_server_that_ignores_the_range_is_not_appended(tmp_path: Path) -> None:
    # given: asked for the tail from byte 5, a server answers the object from its start
    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stub = Stubber(client)
    body = b"0123456789"
    stub.add_response(
        "get_object",
        {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentLength": len(body)},
        expected_params={"Bucket": BUCKET, "Key": KEY, "Range": "bytes=5-9"},
    )
    # when
    with stub:
        got = S3ObjectReader(client).download(BUCKET, KEY, tmp_path / "tail", offset=5, end=10)
    # then: nothing is written rather than the head standing in for the tail
    assert got == 0 and (tmp_path / "tail").read_bytes() == b""


def test_a_listing_cannot_declare_a_negative_size() -> None:
    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stub = Stubber(client)
    stub.add_response(
        "list_objects_v2",
        {"Contents": [{"Key": "p/big", "Size": 10**12}, {"Key": "p/neg", "Size": -(10**12)}], "KeyCount": 2},
    )
    with stub:
        sizes = {o.key: o.size for o in S3ObjectReader(client).list(BUCKET, "p/", limit=10)}
    assert sizes == {"p/big": 10**12, "p/neg": 0}
