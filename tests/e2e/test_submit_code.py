"""`squall submit job.yaml --code DIR` on the local endpoint: packed, uploaded once per content,
recorded as the spec's codeUri; refused before anything is uploaded when it cannot be."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from squall.cli import main
from squall.core import codepack
from squall.core.manifests import render
from squall.core.spec import load_spec
from squall.local.runtime import LocalRuntime

pytestmark = pytest.mark.timeout(120)

BUCKET = "squall-artifacts"
JOB = """
name: gan-digits
team: research
image: registry.example.com/squall/tf-trainer:1.0
command: [python, train.py]
args: [--steps, "10"]
"""


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "job.yaml").write_text(JOB)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('training')\n")
    (code / ".git").mkdir()
    (code / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    with LocalRuntime.start() as runtime:
        monkeypatch.setenv("SQUALL_TABLE_NAME", runtime.resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", runtime.resources.jobs_queue_url)
        monkeypatch.setenv("SQUALL_ARTIFACTS_BUCKET", BUCKET)
        s3 = boto3.client("s3")
        if BUCKET not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=BUCKET)
        yield runtime


def objects() -> list[str]:
    listing = boto3.client("s3").list_objects_v2(Bucket=BUCKET)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def messages(runtime: LocalRuntime) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=runtime.resources.jobs_queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def submitted(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["submit", "job.yaml", "--code", "code", "--json", *args]) == 0, capsys.readouterr().err
    body: dict[str, Any] = json.loads(capsys.readouterr().out)
    return body


def test_the_code_is_uploaded_once_and_the_job_runs_it(
    local: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    # when the same directory is submitted twice
    assert main(["submit", "job.yaml", "--code", "code"]) == 0
    first = capsys.readouterr().out
    second = submitted(capsys)

    # then it is uploaded once, under its hash, and both jobs name it
    sha = second["codeSha256"]
    key = f"code/research/{sha}.tar.gz"
    assert f"code sha256 {sha}: uploaded (s3://{BUCKET}/{key}" in first
    assert second["codeUploaded"] is False and second["codeUri"] == f"s3://{BUCKET}/{key}"
    assert objects() == [key]
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == sha

    job_id = second["jobId"]
    local.run(
        until=lambda rt: rt.store.get(job_id) is not None,
        step=timedelta(seconds=5),
        limit=timedelta(minutes=1),
    )
    record = local.store.get(job_id)
    assert record is not None and record.spec["codeUri"] == second["codeUri"]
    # the Job admission creates from the record (this runtime has no nodes: it stays queued)
    (job, *_) = render(load_spec(record.spec), job_id=job_id, namespace=record.namespace, region="us-west-2")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "trainer.launch", "--", "python", "train.py"]
    assert container["args"] == ["--steps", "10"]
    assert {"name": "SQUALL_CODE_URI", "value": second["codeUri"]} in container["env"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "squall-job"


def test_changed_code_is_a_new_archive(local: LocalRuntime, capsys: pytest.CaptureFixture[str]) -> None:
    first = submitted(capsys)
    Path("code/train.py").write_text("print('training harder')\n")
    second = submitted(capsys)
    assert first["codeSha256"] != second["codeSha256"] and second["codeUploaded"] is True
    assert len(objects()) == 2


def test_the_spec_may_name_its_code_itself(local: LocalRuntime, capsys: pytest.CaptureFixture[str]) -> None:
    uri = submitted(capsys)["codeUri"]
    Path("named.yaml").write_text(JOB + f"codeUri: {uri}\n")
    assert main(["submit", "named.yaml", "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["jobId"]
    local.run(
        until=lambda rt: rt.store.get(job_id) is not None,
        step=timedelta(seconds=5),
        limit=timedelta(minutes=1),
    )
    assert local.store.get(job_id).spec["codeUri"] == uri  # type: ignore[union-attr]


def test_an_oversized_directory_fails_before_anything_is_uploaded_or_sent(
    local: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    with Path("code/weights.bin").open("wb") as handle:  # sparse: costs nothing to make
        handle.truncate(codepack.MAX_FILE_BYTES + 1)

    assert main(["submit", "job.yaml", "--code", "code"]) == 2

    err = capsys.readouterr().err
    assert "--code code:" in err and "weights.bin" in err and ".squallignore" in err
    assert objects() == []
    assert messages(local) == 0


def test_without_an_artifacts_bucket_nothing_is_packed_or_sent(
    local: LocalRuntime, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SQUALL_ARTIFACTS_BUCKET")
    assert main(["submit", "job.yaml", "--code", "code"]) == 2
    assert "SQUALL_ARTIFACTS_BUCKET is not set" in capsys.readouterr().err
    assert objects() == [] and messages(local) == 0


def test_a_missing_bucket_fails_before_anything_is_sent(
    local: LocalRuntime, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQUALL_ARTIFACTS_BUCKET", "no-such-bucket")
    assert main(["submit", "job.yaml", "--code", "code"]) == 1
    assert "NoSuchBucket" in capsys.readouterr().err
    assert messages(local) == 0


def test_code_that_is_not_a_directory_is_a_usage_error(
    local: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", "job.yaml", "--code", "job.yaml"]) == 2
    assert "--code job.yaml: " in capsys.readouterr().err and objects() == []
