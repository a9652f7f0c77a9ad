"""The model services pages over the local runtime: a job trained on the local runtime, served from
the console (confirmation, then the serve request the submit function takes), listed and shown
with its job and history; predict answered by a stand-in TensorFlow Serving REST server; unserve
confirmed and sent; read-only mode without buttons and its POSTs refused; hostile text shown as text."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from squall.core.jobs import JobStatus
from squall.core.serving import ModelService, ServiceStatus, transition_service
from tests.e2e.helpers_runtime import IMAGE
from tests.integration.console.conftest import BUCKET, Console
from tests.serving_records import first_record

pytestmark = pytest.mark.timeout(300)

OUTPUT = f"s3://{BUCKET}/teams/research/models"
JOB: dict[str, Any] = {
    "name": "mnist",
    "id": "mnist-1",
    "team": "research",
    "image": IMAGE,
    "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1},
    "maxRuntime": "1h",
    "outputUri": OUTPUT,
}


def trained(console: Console) -> str:
    """A job run to SUCCEEDED on the local runtime, its SavedModel where its trainer exports it."""
    console.runtime.cluster.set_behaviour(JOB["id"], run_for=timedelta(minutes=3))
    job_id = console.sdk.submit(JOB)
    job = console.sdk.wait(job_id, timeout=3600, poll=30, wait_for_record=60)
    assert job.status is JobStatus.SUCCEEDED
    boto3.client("s3").put_object(
        Bucket=BUCKET, Key=f"teams/research/models/{job_id}/saved_model.pb", Body=b"model"
    )
    return job_id


def until(console: Console, check: Any, *, seconds: int = 900) -> None:
    for _ in range(seconds // 10):
        if check():
            return
        console.step(10)
    raise AssertionError("not reached in the runtime's time")


def record(
    console: Console,
    name: str,
    *,
    status: ServiceStatus,
    rest_url: str | None = None,
    reason: str | None = None,
) -> ModelService:
    """A model service's record as intake and reconcile write it, straight into the runtime's table."""
    store = console.sdk.service_store
    service, event = first_record(
        name, at=console.runtime.clock.now(), job_id="mnist-1", model_uri=f"{OUTPUT}/mnist-1"
    )
    store.create(service, event)
    if status is ServiceStatus.DEPLOYING:
        return service
    changes: dict[str, Any] = {}
    if status is ServiceStatus.SERVING:
        changes = {"ready_replicas": 1, "rest_url": rest_url, "grpc_target": "127.0.0.1:2"}
    updated, event = transition_service(
        service, to=status, reason=reason or ("Ready:1/1" if status is ServiceStatus.SERVING else "UnserveRequested"),
        at=console.runtime.clock.now(), message=reason or "", **changes,
    )  # fmt: skip
    store.save(updated, event)
    return updated


# ---- serve, list, show, unserve: with --allow-actions ----


def test_a_trained_job_is_served_listed_shown_and_unserved_from_the_console(
    console_with_actions: Console,
) -> None:
    console = console_with_actions
    job_id = trained(console)
    browser = console.browser
    # the confirmation page names the job and the service, with the form's token
    confirm = browser.text(f"/services/serve?job={job_id}")
    assert f"Serve job {job_id}" in confirm and 'name="csrf" value="test-session-token"' in confirm
    assert f'name="name" value="{job_id}"' in confirm
    # when it is confirmed
    response = browser.post("/services/serve", {"job": job_id, "name": "digits", "replicas": "1", "gpu": "1"})
    assert response.status_code == 303, response.get_data(as_text=True)[:2000]
    assert response.headers["Location"] == "/services/digits?requested=1"
    assert "Serve requested for digits" in browser.text("/services/digits?requested=1")  # before its record
    assert browser.get("/services/digits").status_code == 404
    # then the submit function takes the request and the service is recorded, then served
    until(
        console,
        lambda: (
            (s := console.sdk.service_store.get("digits")) is not None and s.status is ServiceStatus.SERVING
        ),
    )
    listed = browser.text("/services")
    assert 'href="/services/digits"' in listed and "SERVING" in listed and f'href="/jobs/{job_id}"' in listed
    page = browser.text("/services/digits")
    assert "Model service digits" in page and f'href="/jobs/{job_id}"' in page
    service = console.sdk.service("digits")
    assert service.rest_url and f"REST <code>{service.rest_url}</code>" in page
    assert "Requested" in page and "Ready:1/1" in page  # its history
    assert 'href="/services/digits/unserve"' in page and "Send predict request" in page
    # unserve: confirmed, then sent as `squall unserve` sends it
    assert "Unserve digits" in browser.text("/services/digits/unserve")
    response = browser.post("/services/digits/unserve")
    assert response.status_code == 303 and response.headers["Location"] == "/services/digits?sent=unserve"
    until(console, lambda: console.sdk.service("digits").status is ServiceStatus.STOPPED)
    page = browser.text("/services/digits")
    assert "STOPPED" in page and "UnserveRequested" in page and 'href="/services/digits/unserve"' not in page
    serving_now = browser.text("/services?state=SERVING")
    assert "No model service SERVING." in serving_now and 'href="/services/digits"' not in serving_now


def test_serve_refusals_name_the_field(console_with_actions: Console) -> None:
    browser = console_with_actions.browser
    missing = browser.get("/services/serve?job=no-such-job")
    assert missing.status_code == 404 and "no job no-such-job" in missing.get_data(as_text=True)
    assert browser.get("/services/serve").status_code == 400
    assert "job: expected the id of a SUCCEEDED job" in browser.get("/services/serve").get_data(as_text=True)
    bad = browser.post("/services/serve", {"job": "mnist-1", "replicas": "two"})
    assert bad.status_code == 400 and "replicas: expected a whole number, got &#39;two&#39;" in bad.get_data(
        as_text=True
    )


# ---- predict: in read-only mode too ----


class StandInServing(http.server.BaseHTTPRequestHandler):
    """TensorFlow Serving's REST predict: answers each row's sum, and a row with text as hostile markup."""

    asked: list[Any] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StandInServing.asked.append((self.path, body))
        rows = body["instances"]
        answer = {
            "predictions": [sum(r) if all(isinstance(v, int) for v in r) else "<b>bold</b>" for r in rows]
        }
        raw = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInServing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    StandInServing.asked = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_predict_answers_in_read_only_mode_and_shows_the_answer_as_text(
    console: Console, stand_in: str
) -> None:
    record(console, "digits", status=ServiceStatus.SERVING, rest_url=stand_in)
    page = console.browser.text("/services/digits")
    assert 'action="/services/digits/predict"' in page and 'name="csrf" value="test-session-token"' in page
    assert "/unserve" not in page  # read-only: no action
    # a list of rows
    response = console.browser.post("/services/digits/predict", {"instances": "[[1, 2], [3, 4]]"})
    assert response.status_code == 200
    assert StandInServing.asked == [("/v1/models/digits:predict", {"instances": [[1, 2], [3, 4]]})]
    answer = response.get_data(as_text=True)
    assert "&#34;predictions&#34;: [\n    3,\n    7\n  ]" in answer
    assert "[[1, 2], [3, 4]]</textarea>" in answer  # the form keeps what was sent
    # a whole request; an answer holding markup is shown as text
    response = console.browser.post("/services/digits/predict", {"instances": '{"instances": [["x"]]}'})
    text = response.get_data(as_text=True)
    assert response.status_code == 200 and "&lt;b&gt;bold&lt;/b&gt;" in text and "<b>bold" not in text


FORM_ERRORS = [
    ("[1, 2", "instances: not JSON: Expecting"),
    ("", "instances: empty"),
    ('{"rows": [1]}', "instances: unknown key &#39;rows&#39;"),
    ("[]", "instances: &#39;instances&#39; must be a non-empty list of rows"),
    ("[" + "1," * 130_000 + "1]", "instances: 260003 characters; a predict form sends at most 256000"),
]


def test_predict_form_errors_name_the_field_and_send_nothing(console: Console, stand_in: str) -> None:
    record(console, "digits", status=ServiceStatus.SERVING, rest_url=stand_in)
    for sent, said in FORM_ERRORS:
        response = console.browser.post("/services/digits/predict", {"instances": sent})
        assert response.status_code == 400, said
        assert said in response.get_data(as_text=True)
        assert len(response.get_data()) < 100_000  # an over-long request is not sent back
    assert StandInServing.asked == []


def test_predict_to_a_service_not_serving_says_why(console: Console) -> None:
    record(console, "digits", status=ServiceStatus.DEPLOYING)
    response = console.browser.post("/services/digits/predict", {"instances": "[[1]]"})
    assert response.status_code == 502
    assert "model service digits is DEPLOYING (Requested): no endpoint to send to" in response.get_data(
        as_text=True
    )


def test_predict_without_the_form_token_is_refused(console: Console, stand_in: str) -> None:
    record(console, "digits", status=ServiceStatus.SERVING, rest_url=stand_in)
    response = console.browser.post("/services/digits/predict", {"csrf": "wrong", "instances": "[[1]]"})
    assert response.status_code == 403 and StandInServing.asked == []


# ---- read-only, not found, hostile text, the list's arguments ----


def test_read_only_shows_no_action_and_refuses_the_actions(console: Console) -> None:
    record(console, "digits", status=ServiceStatus.SERVING, rest_url="http://127.0.0.1:1")
    browser = console.browser
    assert "/unserve" not in browser.text("/services/digits") and "/services/serve" not in browser.text(
        "/services"
    )
    for response in (
        browser.get("/services/serve?job=mnist-1"),
        browser.post("/services/serve", {"job": "mnist-1"}),
        browser.get("/services/digits/unserve"),
        browser.post("/services/digits/unserve"),
    ):
        assert response.status_code == 403
        assert "read-only: start it with --allow-actions" in response.get_data(as_text=True)
    assert console.sdk.service("digits").status is ServiceStatus.SERVING


def test_an_unknown_service_is_a_404_naming_it_and_a_bad_name_a_400(console_with_actions: Console) -> None:
    browser = console_with_actions.browser
    for path in ("/services/ghost", "/services/ghost/unserve"):
        response = browser.get(path)
        assert response.status_code == 404 and "no model service ghost" in response.get_data(as_text=True)
    assert browser.post("/services/ghost/unserve").status_code == 404
    bad = browser.get("/services/Bad_Name")
    assert bad.status_code == 400 and "is not a model service name" in bad.get_data(as_text=True)


def test_a_stopped_service_cannot_be_unserved_again(console_with_actions: Console) -> None:
    record(console_with_actions, "digits", status=ServiceStatus.STOPPED)
    assert "already STOPPED" in console_with_actions.browser.text("/services/digits/unserve")
    response = console_with_actions.browser.post("/services/digits/unserve")
    assert response.status_code == 400 and "already STOPPED" in response.get_data(as_text=True)


def test_a_hostile_reason_and_message_are_shown_as_text(console: Console) -> None:
    hostile = "<img src=x onerror=alert(1)>"
    record(console, "digits", status=ServiceStatus.FAILED, reason=hostile)
    for path in ("/services", "/services?state=FAILED", "/services/digits"):
        page = console.browser.text(path)
        assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page, path
    # a hostile name in the address is refused, and named as text
    response = console.browser.get("/services/%3Cscript%3Ealert(1)")
    page = response.get_data(as_text=True)
    assert response.status_code == 400 and "<script>alert" not in page and "&lt;script&gt;alert(1)" in page


def test_the_list_pages_through_the_states_with_a_cursor(console: Console) -> None:
    import dataclasses

    app = console.browser.http.application
    app.extensions["squall"] = dataclasses.replace(app.extensions["squall"], page_size=2)  # type: ignore[attr-defined]
    for name in ("s1", "s2", "s3"):
        record(console, name, status=ServiceStatus.SERVING, rest_url="http://127.0.0.1:1")
    record(console, "d1", status=ServiceStatus.DEPLOYING)
    first = console.browser.text("/services")
    assert "/services/s1" in first and "/services/s2" in first and "/services/s3" not in first
    assert 'href="/services?after=SERVING:2"' in first
    second = console.browser.text("/services?after=SERVING:2")
    assert "/services/s3" in second and "/services/d1" in second and "/services/s1" not in second
    assert "Next page" not in second and ">First page</a>" in second  # the last page
    only = console.browser.text("/services?state=DEPLOYING")
    assert "/services/d1" in only and "/services/s1" not in only


BAD_ARGUMENTS = [
    ("state=RUNNING", "state: expected one of SERVING, DEPLOYING, FAILED, STOPPED, got &#39;RUNNING&#39;"),
    ("after=nonsense", "after: expected a cursor"),
    ("after=SERVING:99999999", "after: expected a cursor"),
    ("state=FAILED&after=SERVING:2", "after: expected a cursor"),
]


def test_bad_list_arguments_are_a_400_naming_them(console: Console) -> None:
    for query, said in BAD_ARGUMENTS:
        response = console.browser.get(f"/services?{query}")
        assert response.status_code == 400 and said in response.get_data(as_text=True), query
