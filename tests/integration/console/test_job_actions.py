"""Cancel from the console: only with --allow-actions, confirmed on a page of its own, sent as
`squall cancel` sends it; read-only, no button and a 403. And TensorBoard started on request."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

from squall.console.tensorboard import EXTENSION, TensorBoards
from squall.core.jobs import JobStatus
from tests.e2e.helpers_runtime import IMAGE
from tests.integration.console.conftest import TOKEN, Console

pytestmark = pytest.mark.timeout(240)

JOB = {
    "name": "cancel-me",
    "team": "research",
    "image": IMAGE,
    "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
    "maxRuntime": "2h",
}


def running(console: Console, job_id: str, **spec: object) -> None:
    console.runtime.cluster.set_behaviour(job_id, run_for=timedelta(hours=1))
    console.sdk.submit({**JOB, "id": job_id, **spec})
    for _ in range(60):
        console.step(10)
        if (found := console.sdk.find(job_id)) is not None and found.status is JobStatus.RUNNING:
            return
    raise AssertionError(f"job {job_id} did not start")


def test_cancel_is_confirmed_then_sent_and_the_job_ends_cancelled(console_with_actions: Console) -> None:
    console = console_with_actions
    running(console, "run-1")
    page = console.browser.text("/jobs/run-1")
    assert 'href="/jobs/run-1/cancel"' in page
    # the confirmation says what will happen, in a form that carries the session's token
    confirm = console.browser.text("/jobs/run-1/cancel")
    assert "This sends a cancel request for job run-1" in confirm
    assert f'<input type="hidden" name="csrf" value="{TOKEN}">' in confirm
    assert 'action="/jobs/run-1/cancel"' in confirm
    # when
    sent = console.browser.post("/jobs/run-1/cancel")
    # then: back on the job's page, which says it was sent; the submit function cancels it
    assert sent.status_code == 303 and sent.headers["Location"] == "/jobs/run-1?sent=cancel"
    assert "Cancel sent" in console.browser.text("/jobs/run-1?sent=cancel")
    job = console.sdk.wait("run-1", timeout=600, poll=5)
    assert job.status is JobStatus.CANCELLED
    said = [f"{e.reason} {e.message}" for e in console.sdk.events("run-1")]
    assert any("Squall console" in text for text in said), said
    # a final job has nothing to cancel, and no button
    assert "nothing to cancel" in console.browser.text("/jobs/run-1/cancel")
    assert console.browser.post("/jobs/run-1/cancel").status_code == 400
    assert 'href="/jobs/run-1/cancel"' not in console.browser.text("/jobs/run-1")


def test_a_cancel_without_the_forms_token_or_from_another_origin_is_refused(
    console_with_actions: Console,
) -> None:
    console = console_with_actions
    running(console, "run-2")
    assert console.browser.post("/jobs/run-2/cancel", data={"csrf": "guessed"}).status_code == 403
    other = {"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"}
    assert console.browser.post("/jobs/run-2/cancel", headers=other).status_code == 403
    assert console.sdk.get("run-2").status is JobStatus.RUNNING


def test_read_only_shows_no_cancel_and_answers_403(console: Console) -> None:
    running(console, "run-3")
    page = console.browser.text("/jobs/run-3")
    assert "/jobs/run-3/cancel" not in page and "read-only" in page
    for response in (console.browser.get("/jobs/run-3/cancel"), console.browser.post("/jobs/run-3/cancel")):
        assert response.status_code == 403
        assert "read-only" in response.get_data(as_text=True)
    console.step(120)
    assert console.sdk.get("run-3").status is JobStatus.RUNNING
    assert console.browser.post("/jobs/nope/cancel").status_code == 403


def test_tensorboard_starts_once_per_job_and_says_when_it_stopped(console: Console, tmp_path: Path) -> None:
    # given: a job with its files in S3, and a stand-in for `squall tensorboard` (it serves nothing)
    running(console, "board-1", outputUri="s3://squall-artifacts/out")
    started: list[tuple[str, int]] = []

    def command(job_id: str, port: int, folder: Path) -> list[str]:
        started.append((job_id, port))
        code = "import sys, time; print('serving', sys.argv[1]); time.sleep(120)"
        return [sys.executable, "-c", code, job_id]

    boards = TensorBoards(folder=tmp_path, command=command)
    console.browser.http.application.extensions[EXTENSION] = boards
    try:
        # when: asked twice
        assert console.browser.post("/jobs/board-1/tensorboard").status_code == 303
        assert console.browser.post("/jobs/board-1/tensorboard").status_code == 303
        # then: one process, on a loopback port the page links to
        assert len(started) == 1
        port = started[0][1]
        page = console.browser.text("/jobs/board-1")
        assert f'<a href="http://127.0.0.1:{port}/"' in page and "Start TensorBoard" not in page
        # when it ends, the page says so with its last output, and offers to start it again
        board = boards.status("board-1")
        assert board is not None and board.process is not None
        board.process.kill()
        board.process.wait()
        page = console.browser.text("/jobs/board-1")
        assert "TensorBoard cannot start: TensorBoard for job board-1 stopped (exit" in page
        assert "Start TensorBoard" in page
    finally:
        boards.stop_all()
