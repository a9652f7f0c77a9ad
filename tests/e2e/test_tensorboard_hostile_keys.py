"""`squall tensorboard --once` prints the S3 key names a job's pods chose escaped, never raw."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_tensorboard_cli import BUCKET, JOB, aws  # noqa: F401  (the fixture: its job and bucket)
from tests.outputs_helpers import LocalAws, squall

# window title, clipboard write (OSC 52), an 8-bit CSI, a right-to-left override (S3 takes no newline)
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e"


def test_a_hostile_key_is_printed_escaped(
    aws: LocalAws,  # noqa: F811  (test_tensorboard_cli's fixture, imported above)
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given: a key that would leave the directory, named to take over the terminal
    aws.s3.put_object(Bucket=BUCKET, Key=f"checkpoints/{JOB}/logs/a\\{HOSTILE}.tfevents.1", Body=b"x")
    aws.s3.put_object(Bucket=BUCKET, Key=f"checkpoints/{JOB}/logs/events.out.tfevents.1", Body=b"ok")
    # when
    assert squall("tensorboard", JOB, "--once", "--dir", str(tmp_path / "board")) == 0
    # then: it is named, escaped, on one line; the good file is copied
    captured = capsys.readouterr()
    assert (
        "squall: skipped s3://squall-artifacts/checkpoints/gan-5e6f7a8b/logs/a\\\\x1b]0;owned\\x07"
        in captured.err
    )
    assert "\\x9b2J\\u202e.tfevents.1: its key would leave the directory" in captured.err
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in captured.err + captured.out
    assert ": 1 TensorBoard file\n" in captured.out
    assert (tmp_path / "board" / "logs" / "events.out.tfevents.1").read_bytes() == b"ok"
