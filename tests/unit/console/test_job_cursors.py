"""The jobs list's and the log tail's cursors: what the console writes, it reads back; nothing else."""

from __future__ import annotations

import base64
import json

import pytest

from squall.cli.errors import CommandError
from squall.console.job_logs import decode_cursor as decode_log_cursor
from squall.console.job_logs import encode_cursor as encode_log_cursor
from squall.console.pages.jobs import decode_cursor, encode_cursor, state_argument, text_argument
from squall.core.jobs import JobStatus

KEY = {
    "pk": "JOB#gan-1",
    "sk": "META",
    "gsi1pk": "STATUS#RUNNING",
    "gsi1sk": "2026-03-02T09:00:00+00:00#gan-1",
}


def raw(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_a_list_cursor_reads_back_as_written() -> None:
    text = encode_cursor(JobStatus.RUNNING, KEY)
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert decode_cursor(text, states=list(JobStatus)) == (JobStatus.RUNNING, KEY)
    assert decode_cursor(encode_cursor(JobStatus.FAILED, None), states=list(JobStatus)) == (
        JobStatus.FAILED,
        None,
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "=",
        "a" * 3000,
        raw(None),
        raw({"state": "RUNNING", "key": KEY, "more": 1}),
        raw({"state": "running", "key": KEY}),
        raw({"state": "RUNNING", "key": {**KEY, "pk": "JOB#other"}}),
        raw({"state": "RUNNING", "key": {**KEY, "pk": "SWEEP#gan-1"}}),
        raw({"state": "RUNNING", "key": {**KEY, "gsi1pk": "QUEUE"}}),
        raw({"state": "RUNNING", "key": {**KEY, "gsi1sk": "2026-03-02T09:00:00#gan-1"}}),  # no zone
        raw({"state": "RUNNING", "key": {**KEY, "sk": ["META"]}}),
        raw({"state": "RUNNING", "key": [KEY]}),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_anything_else_is_refused_naming_after(text: str) -> None:
    with pytest.raises(CommandError, match=r"^after: "):
        decode_cursor(text, states=list(JobStatus))


def test_a_cursor_of_another_state_than_the_list_shows_is_refused() -> None:
    with pytest.raises(CommandError, match=r"^after: "):
        decode_cursor(encode_cursor(JobStatus.RUNNING, KEY), states=[JobStatus.QUEUED])


def test_filters_say_what_is_allowed() -> None:
    assert state_argument("FAILED") is JobStatus.FAILED and state_argument("") is None
    with pytest.raises(CommandError, match="state: expected one of QUEUED, RUNNING, SUCCEEDED, FAILED"):
        state_argument("failed")
    assert text_argument("team", "vision") == "vision"
    with pytest.raises(CommandError, match=r"^name: "):
        text_argument("name", "a\nb")


def test_a_log_cursor_reads_back_as_written_and_refuses_anything_else() -> None:
    tokens = {"ip-10-0-1-7-application.var.log.containers.a_b_trainer-1.log": "f/0001"}
    assert decode_log_cursor(encode_log_cursor(tokens)) == tokens
    assert decode_log_cursor("") == {} and encode_log_cursor({}) == ""
    for text in ("!!", raw([1]), raw({"s": 1}), raw({"": "t"}), raw({"s": "t" * 600}), "a" * 20_000, "é"):
        with pytest.raises(CommandError, match=r"^after: not a log cursor"):
            decode_log_cursor(text)
