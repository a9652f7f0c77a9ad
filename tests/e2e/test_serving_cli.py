"""`squall serve`, `services`, `describe NAME`, `unserve` and `predict` against the local endpoint (moto).

The records are written as the submit function and reconcile write them (the DynamoDB
adapters); the model services' servers are stand-ins in this process: an HTTP server
speaking TensorFlow Serving's REST predict, and a gRPC PredictionService.
"""

from __future__ import annotations

import dataclasses
import http.server
import io
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.cli import main
from squall.cli.prediction import MAX_INPUT_BYTES
from squall.cli.researcher import CommandError
from squall.cli.serving import follow_service, serve_exit
from squall.core.errors import PermanentError
from squall.core.jobs import JobStatus
from squall.core.serving import ModelService, ServiceReason, ServiceStatus, transition_service
from tests.outputs_helpers import START, SteppingClock, move, record_job, spec_record
from tests.serving_records import first_record

pytestmark = pytest.mark.timeout(120)

BUCKET = "squall-artifacts"
OUTPUT = f"s3://{BUCKET}/teams/research/models"


@dataclasses.dataclass
class Deployment:
    """The local endpoint with the jobs table, the jobs queue and the artifacts bucket."""

    jobs: Any
    services: Any
    s3: Any
    sqs: Any
    queue_url: str

    def sent(self) -> list[dict[str, Any]]:
        """The bodies on the jobs queue (taken off it)."""
        bodies = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            if not got.get("Messages"):
                return bodies
            for message in got["Messages"]:
                bodies.append(json.loads(message["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Deployment]:
    from squall.adapters.aws.job_store import DynamoJobStore
    from squall.adapters.aws.model_service_store import DynamoModelServiceStore
    from squall.local.aws import client, create_resources, local_endpoint

    monkeypatch.chdir(tmp_path)
    with local_endpoint() as endpoint:
        resources = create_resources(endpoint)
        monkeypatch.setenv("SQUALL_TABLE_NAME", resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", resources.jobs_queue_url)
        s3 = client("s3", endpoint)
        yield Deployment(
            jobs=DynamoJobStore(client("dynamodb", endpoint), resources.table_name),
            services=DynamoModelServiceStore(client("dynamodb", endpoint), resources.table_name),
            s3=s3,
            sqs=client("sqs", endpoint),
            queue_url=resources.jobs_queue_url,
        )


def finished_job(
    aws: Deployment, job_id: str, *, status: JobStatus = JobStatus.SUCCEEDED, **spec: Any
) -> None:
    job = record_job(aws.jobs, job_id, spec=spec_record(**({"outputUri": OUTPUT} | spec)))
    job = move(aws.jobs, job, JobStatus.RUNNING, "Started", at=START + timedelta(minutes=1))
    if status is not JobStatus.RUNNING:
        move(aws.jobs, job, status, "Completed", at=START + timedelta(minutes=2))


def saved_model(aws: Deployment, job_id: str) -> None:
    aws.s3.put_object(Bucket=BUCKET, Key=f"teams/research/models/{job_id}/saved_model.pb", Body=b"model")


def record_service(
    aws: Deployment,
    name: str,
    *,
    job_id: str = "gan-1",
    status: ServiceStatus = ServiceStatus.SERVING,
    rest_url: str | None = "http://127.0.0.1:1",
    message_id: str = "m-1",
) -> ModelService:
    service, event = first_record(
        name, at=START, job_id=job_id, model_uri=f"{OUTPUT}/{job_id}", message_id=message_id
    )
    aws.services.create(service, event)
    if status is ServiceStatus.DEPLOYING:
        return service
    if status is ServiceStatus.SERVING:
        changes: dict[str, Any] = {"ready_replicas": 1, "rest_url": rest_url, "grpc_target": "127.0.0.1:2"}
        reason = "Ready:1/1"
    elif status is ServiceStatus.FAILED:
        changes, reason = {}, ServiceReason.MODEL_NOT_FOUND
    else:
        changes, reason = {}, ServiceReason.UNSERVE_REQUESTED
    updated, event = transition_service(
        service, to=status, reason=reason, at=START + timedelta(minutes=1), **changes
    )
    aws.services.save(updated, event)
    return updated


# ---- serve ----


def test_serve_checks_the_request_then_sends_the_serve_message(
    aws: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a succeeded job whose SavedModel is where its trainer exports it
    finished_job(aws, "gan-1")
    saved_model(aws, "gan-1")
    # when
    code = main(["serve", "gan-1", "--replicas", "2", "--gpu", "1", "--memory", "4Gi", "--json"])
    # then the message names only what was asked; the name is the job id
    assert code == 0, capsys.readouterr().err
    answer = json.loads(capsys.readouterr().out)
    assert answer["name"] == "gan-1" and answer["job"] == "gan-1" and answer["messageId"]
    assert aws.sent() == [
        {"action": "serve", "job": "gan-1", "replicas": 2, "resources": {"gpu": 1, "memory": "4Gi"}}
    ]
    assert main(["serve", "gan-1", "--name", "gan-two", "--version", "3"]) == 0
    assert "serve requested: model service gan-two of job gan-1" in capsys.readouterr().out
    assert aws.sent() == [{"action": "serve", "job": "gan-1", "name": "gan-two", "modelVersion": 3}]


@pytest.mark.parametrize(
    ("given", "argv", "field", "words"),
    [
        ("none", ["serve", "gan-1"], "job", "no job gan-1"),
        (
            "running",
            ["serve", "gan-1"],
            "job",
            "gan-1 is RUNNING; only a SUCCEEDED job's model can be served",
        ),
        ("failed", ["serve", "gan-1"], "job", "gan-1 is FAILED"),
        ("no model", ["serve", "gan-1"], "job", f"no SavedModel at {OUTPUT}/gan-1"),
        ("elsewhere", ["serve", "gan-1"], "job", "outside the team's prefix teams/research/"),
        (
            "clash",
            ["serve", "gan-1", "--name", "taken"],
            "name",
            "taken is already serving job other-1 (SERVING)",
        ),
        ("ready", ["serve", "gan-1", "--replicas", "0"], "replicas", ""),
        ("ready", ["serve", "gan-1", "--replicas", "21"], "replicas", ""),
        ("ready", ["serve", "gan-1", "--gpu", "9"], "resources.gpu", ""),
        ("ready", ["serve", "gan-1", "--version", "0"], "modelVersion", ""),
        ("ready", ["serve", "gan-1", "--cpu", "lots"], "resources.cpu", ""),
        ("ready", ["serve", "gan-1", "--name", "Bad_Name"], "name", ""),
        ("ready", ["serve", "gan-1", "--name", "a" * 41], "name", ""),
    ],
)
def test_a_request_that_cannot_be_served_fails_at_once_naming_the_field_and_sends_nothing(
    aws: Deployment, capsys: pytest.CaptureFixture[str], given: str, argv: list[str], field: str, words: str
) -> None:
    if given != "none":
        status = {"running": JobStatus.RUNNING, "failed": JobStatus.FAILED}.get(given, JobStatus.SUCCEEDED)
        spec = {"outputUri": f"s3://{BUCKET}/research/models"} if given == "elsewhere" else {}
        finished_job(aws, "gan-1", status=status, **spec)
    if given not in ("no model", "none"):
        saved_model(aws, "gan-1")
    if given == "clash":
        record_service(aws, "taken", job_id="other-1")
    # when
    code = main(argv)
    # then
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"\n  {field}: " in err and words in err
    assert aws.sent() == []
    assert aws.services.list_by_status(ServiceStatus.DEPLOYING) == []


class DeniedSavedModels:
    """S3 as credentials that may not read the model's prefix see it (403)."""

    def has_saved_model(self, uri: str) -> bool:
        raise PermanentError(f"look for a SavedModel at {uri}/saved_model.pb: AccessDenied (403)")


def test_a_saved_model_these_credentials_cannot_look_for_is_left_to_the_submit_function(
    aws: Deployment, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import squall.cli.deployment

    finished_job(aws, "gan-1")
    monkeypatch.setattr(squall.cli.deployment, "saved_models", DeniedSavedModels)
    assert main(["serve", "gan-1"]) == 0
    assert "could not check for the SavedModel (look for a SavedModel at" in capsys.readouterr().err
    assert aws.sent() == [{"action": "serve", "job": "gan-1"}]
    # every other check still holds
    finished_job(aws, "gan-2", status=JobStatus.RUNNING)
    assert main(["serve", "gan-2"]) == 2
    assert aws.sent() == []


def test_a_job_id_that_is_no_service_name_needs_a_name(
    aws: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = "gan-" + "x" * 45  # a job id may be longer than a model service name
    assert main(["serve", job_id]) == 2
    assert (
        f"name: is required: the job id {job_id!r} is not a valid model service name"
        in capsys.readouterr().err
    )
    assert aws.sent() == []


# ---- serve --wait: the record followed ----


class Steps:
    """A model service's record moved step by step, as the submit function and reconcile move it."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.service: ModelService | None = None

    def create(self, message_id: str = "mine") -> None:
        self.service, event = first_record(
            "gan", at=START, job_id="gan-1", model_uri=f"{OUTPUT}/gan-1", replicas=2, message_id=message_id
        )
        self.store.create(self.service, event)

    def move(self, to: ServiceStatus, reason: str, **changes: Any) -> None:
        assert self.service is not None
        self.service, event = transition_service(self.service, to=to, reason=reason, at=START, **changes)
        self.store.save(self.service, event)

    def serving(self) -> None:
        """Both replicas ready and the endpoints known."""
        self.move(
            ServiceStatus.SERVING,
            "Ready:2/2",
            ready_replicas=2,
            rest_url="http://lb:8501",
            grpc_target="lb:8500",
        )


def test_wait_follows_the_record_until_serving_and_prints_the_endpoints() -> None:
    from squall.local.model_service_store import InMemoryModelServiceStore

    steps = Steps(InMemoryModelServiceStore())
    clock = SteppingClock(
        steps=[
            lambda: None,  # the message not taken yet
            steps.create,
            lambda: steps.move(ServiceStatus.DEPLOYING, "Unready:1/2"),
            steps.serving,
        ]
    )
    out = io.StringIO()
    # when
    service = follow_service("gan", message_id="mine", store=steps.store, clock=clock, out=out, poll=2)
    # then
    assert service.status is ServiceStatus.SERVING and serve_exit(service) == 0
    lines = out.getvalue().splitlines()
    # each line: the time (`2026-12-02 08:13:21 UTC`, three words), the state, the reason
    assert [line.split()[3:5] for line in lines[:3]] == [
        ["DEPLOYING", "Requested"],
        ["DEPLOYING", "Unready:1/2"],
        ["SERVING", "Ready:2/2"],
    ]
    assert lines[3] == "gan SERVING (2/2 ready): REST http://lb:8501, gRPC lb:8500"
    assert len(clock.slept) == 4


def test_wait_ends_with_the_reason_when_the_service_fails() -> None:
    from squall.local.model_service_store import InMemoryModelServiceStore

    steps = Steps(InMemoryModelServiceStore())
    steps.create()
    clock = SteppingClock(steps=[lambda: steps.move(ServiceStatus.FAILED, ServiceReason.MODEL_NOT_FOUND)])
    out = io.StringIO()
    service = follow_service("gan", message_id="mine", store=steps.store, clock=clock, out=out)
    assert serve_exit(service) == 1
    assert out.getvalue().splitlines()[-1] == "gan FAILED (ModelNotFound)"


def test_wait_for_a_name_served_again_does_not_take_its_last_end_for_this_request() -> None:
    from squall.local.model_service_store import InMemoryModelServiceStore

    # given the name FAILED once, under an earlier request
    steps = Steps(InMemoryModelServiceStore())
    steps.create(message_id="earlier")
    steps.move(ServiceStatus.FAILED, ServiceReason.MODEL_NOT_FOUND)
    clock = SteppingClock(
        steps=[
            lambda: None,
            lambda: steps.move(ServiceStatus.DEPLOYING, ServiceReason.SERVED_AGAIN, message_id="mine"),
            steps.serving,
        ]
    )
    out = io.StringIO()
    # when
    service = follow_service("gan", message_id="mine", store=steps.store, clock=clock, out=out)
    # then only this request's events are shown, and it ended SERVING
    assert service.status is ServiceStatus.SERVING
    assert [line.split()[4] for line in out.getvalue().splitlines()[:2]] == ["ServedAgain", "Ready:2/2"]


def test_wait_gives_up_when_no_record_takes_the_request_and_when_it_never_gets_ready() -> None:
    from squall.local.model_service_store import InMemoryModelServiceStore

    store = InMemoryModelServiceStore()
    with pytest.raises(CommandError, match="the serve request for gan was not taken within 30 s"):
        follow_service(
            "gan",
            message_id="mine",
            store=store,
            clock=SteppingClock(),
            out=io.StringIO(),
            wait_for_record=30,
        )
    steps = Steps(store)
    steps.create()
    with pytest.raises(CommandError, match="model service gan is still DEPLOYING after 60 s"):
        follow_service(
            "gan", message_id="mine", store=store, clock=SteppingClock(), out=io.StringIO(), timeout=60
        )


def test_wait_ends_at_once_with_the_errors_when_the_submit_function_refuses_the_request() -> None:
    from squall.cli.serving import rejected_id
    from squall.local.runtime import LocalRuntime

    # given a serve request the submit function refuses: the memory backend has no S3, so
    # serving is not available there (a refusal the CLI's own check cannot see)
    with LocalRuntime.start(backend="memory") as local:
        message_id = local.send({"action": "serve", "job": "nope"})
        local.deliver()
        # when
        with pytest.raises(CommandError) as refused:
            follow_service(
                "nope",
                message_id=message_id,
                store=local.backend.model_services,
                clock=SteppingClock(),
                out=io.StringIO(),
                rejected=lambda: local.store.get(rejected_id(message_id)),
            )
    # then the refusal and its reasons, without waiting for a record
    assert str(refused.value).startswith(
        "the submit function refused the serve request for nope (InvalidSpec"
    )
    assert "\n  action: serving is not available here" in str(refused.value)
    assert refused.value.code == 1


# ---- services, describe, unserve ----


def test_services_lists_the_live_ones_and_all_with_all(
    aws: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    record_service(aws, "up", rest_url="http://10.0.0.1:8501")
    record_service(aws, "coming", status=ServiceStatus.DEPLOYING)
    record_service(aws, "broken", status=ServiceStatus.FAILED)
    assert main(["services"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "REASON", "JOB", "READY", "REST", "GRPC"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"up", "coming"}
    assert rows["up"][1:] == ["SERVING", "Ready:1/1", "gan-1", "1/1", "http://10.0.0.1:8501", "127.0.0.1:2"]
    assert rows["coming"][1:] == ["DEPLOYING", "Requested", "gan-1", "0/1", "-", "-"]
    assert main(["services", "--all", "--json"]) == 0
    listed = {s["name"]: s for s in json.loads(capsys.readouterr().out)}
    assert set(listed) == {"up", "coming", "broken"}
    assert listed["broken"]["status"] == "FAILED" and listed["broken"]["reason"] == "ModelNotFound"


def test_describe_shows_a_model_services_history_by_its_name(
    aws: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    record_service(aws, "up", rest_url="http://10.0.0.1:8501")
    assert main(["describe", "up"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("model service up  SERVING  (Ready:1/1)")
    assert "REST http://10.0.0.1:8501, gRPC 127.0.0.1:2" in text
    assert "DEPLOYING  Requested" in text and "SERVING    Ready:1/1" in text
    assert main(["describe", "up", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [e["reason"] for e in body["events"]] == ["Requested", "Ready:1/1"]
    assert main(["describe", "nothing-here"]) == 1
    assert "no job or model service nothing-here" in capsys.readouterr().err


def test_describe_of_a_job_served_under_its_own_id_shows_both(
    aws: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    finished_job(aws, "gan-1")
    record_service(aws, "gan-1")
    assert main(["describe", "gan-1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("gan-1  SUCCEEDED  (Completed)")
    assert "model service gan-1  SERVING  (Ready:1/1)" in text
    assert main(["describe", "gan-1", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["status"] == "SUCCEEDED" and body["modelService"]["status"] == "SERVING"


def test_unserve_sends_the_unserve_message(aws: Deployment, capsys: pytest.CaptureFixture[str]) -> None:
    record_service(aws, "up")
    record_service(aws, "gone", status=ServiceStatus.STOPPED)
    assert main(["unserve", "up", "--reason", "done with it"]) == 0
    assert "unserve requested for up (SERVING)" in capsys.readouterr().out
    assert aws.sent() == [{"action": "unserve", "name": "up", "reason": "done with it"}]
    # nothing to do: nothing sent
    assert main(["unserve", "gone"]) == 0
    assert "already STOPPED" in capsys.readouterr().out
    assert main(["unserve", "never"]) == 1
    assert "no model service never" in capsys.readouterr().err
    assert main(["unserve", "up", "--reason", "x" * 513]) == 2
    assert "reason:" in capsys.readouterr().err
    assert main(["unserve", "Not_A_Name"]) == 2
    assert aws.sent() == []


# ---- predict, REST ----


class RestStandIn:
    """TensorFlow Serving's REST predict for a model `gan`: doubles `inputs` or each of `instances`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.requests.append((self.path, body))
                if self.path.startswith("/v1/models/gan") and self.path.endswith(":predict"):
                    if "inputs" in body:
                        answer, status = {"outputs": [[2 * x for x in row] for row in body["inputs"]]}, 200
                    elif all(isinstance(row, list) and len(row) == 2 for row in body["instances"]):
                        answer, status = (
                            {"predictions": [[2 * x for x in row] for row in body["instances"]]},
                            200,
                        )
                    else:
                        answer, status = {"error": "Input to reshape is a tensor with 3 values"}, 400
                else:
                    answer, status = {"error": "Servable not found for request: Latest(other)"}, 404
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RestStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def rest() -> Iterator[RestStandIn]:
    with RestStandIn() as stand_in:
        yield stand_in


def write(tmp_path: Path, body: Any, name: str = "request.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


def test_predict_posts_the_file_to_the_recorded_endpoint_and_prints_the_answer(
    aws: Deployment, rest: RestStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_service(aws, "gan", rest_url=rest.url)
    request = write(tmp_path, {"instances": [[1, 2], [3, 4]]})
    assert main(["predict", "gan", "--input", request]) == 0
    assert json.loads(capsys.readouterr().out) == {"predictions": [[2, 4], [6, 8]]}
    assert rest.requests == [("/v1/models/gan:predict", {"instances": [[1, 2], [3, 4]]})]
    # a version and a signature; columns
    columns = write(tmp_path, {"inputs": [[1, 1]], "signature_name": "other"})
    assert main(["predict", "gan", "--input", columns, "--model-version", "3", "--signature", "mine"]) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": [[2, 2]]}
    assert rest.requests[-1] == (
        "/v1/models/gan/versions/3:predict",
        {"inputs": [[1, 1]], "signature_name": "mine"},
    )


def test_predict_with_url_needs_no_record(
    rest: RestStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SQUALL_TABLE_NAME", raising=False)  # e.g. through kubectl port-forward
    assert (
        main(["predict", "gan", "--input", write(tmp_path, {"inputs": [[5, 0]]}), "--url", rest.url + "/"])
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {"outputs": [[10, 0]]}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"signature_name": "x"}, "has neither of 'instances' (a list of rows) and 'inputs' (columns)"),
        ({"instances": [[1, 2]], "inputs": [[1, 2]]}, "has both of 'instances'"),
        ({"instances": [[1, 2]], "extra": 1}, "unknown key 'extra'"),
        ({"instances": []}, "'instances' must be a non-empty list of rows"),
        ({"instances": {"a": 1}}, "'instances' must be a non-empty list of rows"),
        ({"inputs": [1], "signature_name": 3}, "'signature_name' must be a string"),
        ([1, 2], "expected a JSON object with 'instances' or 'inputs', got a list"),
    ],
)
def test_predict_refuses_a_file_that_is_no_predict_request_before_sending(
    aws: Deployment,
    rest: RestStandIn,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: Any,
    words: str,
) -> None:
    record_service(aws, "gan", rest_url=rest.url)
    assert main(["predict", "gan", "--input", write(tmp_path, body)]) == 2
    assert words in capsys.readouterr().err
    assert rest.requests == []


def test_predict_refuses_a_file_too_large_or_unreadable_before_sending(
    aws: Deployment, rest: RestStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_service(aws, "gan", rest_url=rest.url)
    big = tmp_path / "big.json"
    big.write_text('{"instances": [' + ",".join(["[1, 2]"] * (MAX_INPUT_BYTES // 6)) + "]}")
    assert main(["predict", "gan", "--input", str(big)]) == 2
    assert "more than 16 MiB" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["predict", "gan", "--input", str(tmp_path / "bad.json")]) == 2
    assert main(["predict", "gan", "--input", str(tmp_path / "absent.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert rest.requests == []


def test_predict_prints_the_servers_error_and_exits_1(
    aws: Deployment, rest: RestStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_service(aws, "gan", rest_url=rest.url)
    assert main(["predict", "gan", "--input", write(tmp_path, {"instances": [[1, 2, 3]]})]) == 1
    err = capsys.readouterr().err
    assert f"{rest.url}/v1/models/gan:predict: HTTP 400: Input to reshape is a tensor with 3 values" in err
    # nothing listening
    record_service(aws, "dead", rest_url="http://127.0.0.1:9")
    assert main(["predict", "dead", "--input", write(tmp_path, {"instances": [[1, 2]]})]) == 1
    assert "cannot reach http://127.0.0.1:9/v1/models/dead:predict" in capsys.readouterr().err


def test_predict_of_a_service_not_serving_says_so(
    aws: Deployment, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_service(aws, "coming", status=ServiceStatus.DEPLOYING)
    request = write(tmp_path, {"instances": [[1, 2]]})
    assert main(["predict", "coming", "--input", request]) == 1
    assert "model service coming is DEPLOYING (Requested): no endpoint to send to" in capsys.readouterr().err
    assert main(["predict", "never", "--input", request]) == 1
    assert "no model service never" in capsys.readouterr().err
    assert main(["predict", "../x", "--input", request]) == 2
    assert main(["predict", "coming", "--input", request, "--url", "ftp://x"]) == 2
    assert main(["predict", "coming", "--input", request, "--grpc", "--url", "http://x:1/path"]) == 2


# ---- predict --grpc ----


@pytest.fixture(scope="module")
def grpc_stand_in() -> Iterator[tuple[str, list[Any]]]:
    """A PredictionService for model `gan`: signature serving_default, input `noise` float32 (-1, 2), output `twice`."""
    import grpc
    import tensorflow as tf
    from tensorflow.core.protobuf import meta_graph_pb2
    from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2, prediction_service_pb2_grpc

    received: list[Any] = []

    class Service(prediction_service_pb2_grpc.PredictionServiceServicer):  # type: ignore[misc]
        def GetModelMetadata(self, request: Any, context: Any) -> Any:
            if request.model_spec.name != "gan":
                context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"Servable not found for request: Latest({request.model_spec.name})",
                )
            signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
            noise = signature.inputs["noise"]
            noise.name, noise.dtype = "serving_default_noise:0", tf.float32.as_datatype_enum
            noise.tensor_shape.dim.add(size=-1)
            noise.tensor_shape.dim.add(size=2)
            signature.outputs["twice"].dtype = tf.float32.as_datatype_enum
            signatures = get_model_metadata_pb2.SignatureDefMap()
            signatures.signature_def["serving_default"].CopyFrom(signature)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = "gan"
            response.metadata["signature_def"].Pack(signatures)
            return response

        def Predict(self, request: Any, context: Any) -> Any:
            received.append(request)
            noise = tf.make_ndarray(request.inputs["noise"])
            response = predict_pb2.PredictResponse()
            response.outputs["twice"].CopyFrom(tf.make_tensor_proto(noise * 2))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", received
    finally:
        server.stop(None)


def predict_grpc(target: str, tmp_path: Path, body: Any, *, name: str = "gan") -> int:
    """`squall predict NAME --grpc --url TARGET` with `body` as its input file."""
    return main(["predict", name, "--grpc", "--url", target, "--input", write(tmp_path, body)])


@pytest.mark.timeout(180)
def test_predict_grpc_builds_the_tensors_from_the_signature_and_prints_rest_columns(
    grpc_stand_in: tuple[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, received = grpc_stand_in
    # rows, as REST takes them: the one input's column
    assert predict_grpc(target, tmp_path, {"instances": [[1, 2], [3, 4]]}) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": [[2.0, 4.0], [6.0, 8.0]]}
    assert received[-1].model_spec.signature_name == "serving_default"
    assert received[-1].inputs["noise"].dtype == 1  # DT_FLOAT: the signature's dtype, from ints
    # named columns
    assert predict_grpc(f"grpc://{target}", tmp_path, {"inputs": {"noise": [[0.5, 1]]}}) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": [[1.0, 2.0]]}


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            {"inputs": {"nosie": [[1, 2]]}},
            "does not match signature 'serving_default' (its inputs: noise): no input 'nosie'; missing 'noise'",
        ),
        ({"instances": [[1, 2, 3]]}, "input 'noise': shape (1, 3) does not match the signature's (None, 2)"),
        ({"instances": [["a", "b"]]}, "input 'noise': cannot be read as float32"),
        ({"instances": [[1, 2], [3]]}, "input 'noise': cannot be read as float32"),
        (
            {"inputs": [[1, 2]], "signature_name": "other"},
            "model gan has no signature 'other' (its signatures: serving_default)",
        ),
    ],
)
def test_predict_grpc_refuses_an_input_that_does_not_match_the_signature(
    grpc_stand_in: tuple[str, list[Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: Any,
    words: str,
) -> None:
    target, received = grpc_stand_in
    before = len(received)
    assert predict_grpc(target, tmp_path, body) == 1
    assert words in capsys.readouterr().err
    assert len(received) == before  # refused before Predict


@pytest.mark.timeout(180)
def test_predict_grpc_prints_the_servers_error(
    grpc_stand_in: tuple[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, _ = grpc_stand_in
    assert predict_grpc(target, tmp_path, {"inputs": [[1, 2]]}, name="other") == 1
    assert f"{target}: NOT_FOUND: Servable not found for request: Latest(other)" in capsys.readouterr().err
