"""What `serve`, `services`, `unserve` and `describe NAME` print of a model service's record is escaped.

A record's reason, events, errors and endpoints come from pods, requests and other teams:
a terminal must show their escape sequences, not obey them.
"""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest

from squall.cli import deployment, main
from squall.cli.serving import follow_service
from squall.core.jobs import JobStatus, new_job
from squall.core.serving import ModelService, ServiceStatus, transition_service
from squall.local.memory import InMemoryJobStore
from squall.local.model_service_store import InMemoryModelServiceStore
from tests.outputs_helpers import START, SteppingClock
from tests.serving_records import first_record

# window title, clipboard write (OSC 52), 8-bit CSI clear screen, a right-to-left override, a line break
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e\nfake line"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def assert_escaped(text: str) -> None:
    for raw in RAW:
        assert raw not in text
    assert "\\x1b]0;owned\\x07" in text
    assert "fake line" not in text.splitlines()  # no line of its own


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> InMemoryModelServiceStore:
    services = InMemoryModelServiceStore()
    monkeypatch.setattr(deployment, "service_store", lambda: services)
    monkeypatch.setattr(deployment, "job_store", InMemoryJobStore)
    monkeypatch.setattr(deployment, "send_to_jobs_queue", lambda body, **_: "m-2")
    return services


def hostile_service(store: InMemoryModelServiceStore, *, status: ServiceStatus) -> ModelService:
    service, event = first_record(
        "gan", at=START, message_id="mine", errors=[{"field": f"f{HOSTILE}", "message": HOSTILE}]
    )
    store.create(service, event)
    changes: dict[str, Any] = {}
    if status is ServiceStatus.SERVING:
        changes = {"ready_replicas": 1, "rest_url": f"http://lb{HOSTILE}", "grpc_target": f"lb{HOSTILE}"}
    service, event = transition_service(
        service,
        to=status,
        reason=f"Reason{HOSTILE}",
        message=f"pod said {HOSTILE}",
        at=START + timedelta(minutes=1),
        **changes,
    )
    store.save(service, event)
    return service


def test_services_prints_the_records_escaped(
    store: InMemoryModelServiceStore, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_service(store, status=ServiceStatus.SERVING)
    assert main(["services"]) == 0
    out = capsys.readouterr().out
    assert_escaped(out)
    assert len(out.splitlines()) == 2  # the header and one row


def test_describe_of_a_model_service_prints_its_record_and_events_escaped(
    store: InMemoryModelServiceStore, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_service(store, status=ServiceStatus.SERVING)
    assert main(["describe", "gan"]) == 0
    out = capsys.readouterr().out
    assert_escaped(out)
    assert "pod said \\x1b]0;owned" in out and "error f\\x1b" in out
    # --json escapes as JSON does
    assert main(["describe", "gan", "--json"]) == 0
    for raw in RAW:
        assert raw not in capsys.readouterr().out


def test_unserve_prints_the_reason_escaped(
    store: InMemoryModelServiceStore, capsys: pytest.CaptureFixture[str]
) -> None:
    service = hostile_service(store, status=ServiceStatus.FAILED)
    stopped, event = transition_service(
        service, to=ServiceStatus.STOPPED, reason=f"Stopped{HOSTILE}", at=START + timedelta(minutes=2)
    )
    store.save(stopped, event)
    assert main(["unserve", "gan"]) == 0
    out = capsys.readouterr().out
    assert "already STOPPED" in out
    assert_escaped(out)


def test_predict_of_a_service_not_serving_prints_its_reason_escaped(
    store: InMemoryModelServiceStore, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    hostile_service(store, status=ServiceStatus.FAILED)
    request = tmp_path / "request.json"
    request.write_text('{"instances": [[1.0]]}')
    assert main(["predict", "gan", "--input", str(request)]) == 1
    err = capsys.readouterr().err
    assert "is FAILED" in err
    assert_escaped(err)


def test_serve_wait_prints_the_events_and_the_outcome_escaped(store: InMemoryModelServiceStore) -> None:
    clock = SteppingClock(steps=[lambda: hostile_service(store, status=ServiceStatus.SERVING)])
    out = io.StringIO()
    service = follow_service("gan", message_id="mine", store=store, clock=clock, out=out, poll=2)
    assert service.status is ServiceStatus.SERVING
    assert_escaped(out.getvalue())
    assert "REST http://lb\\x1b]0;owned" in out.getvalue()


def test_serve_wait_prints_a_refusal_escaped(store: InMemoryModelServiceStore) -> None:
    from squall.cli.errors import CommandError

    refused, _ = new_job(
        job_id="rejected-1",
        name="gan",
        team="research",
        namespace="",
        at=START,
        status=JobStatus.REJECTED,
        reason=f"Invalid{HOSTILE}",
        spec={},
        replicas=0,
        gpus=0,
        errors=[{"field": "name", "message": HOSTILE}],
    )
    with pytest.raises(CommandError) as raised:
        follow_service(
            "gan",
            message_id="mine",
            store=store,
            clock=SteppingClock(),
            out=io.StringIO(),
            rejected=lambda: refused,
        )
    assert_escaped(str(raised.value))


def test_describe_of_a_model_service_writes_its_event_times_as_every_command_does(
    store: InMemoryModelServiceStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # README: times are written one way for people (cli/human.py moment), ISO 8601 only in --json
    from squall.cli.human import moment

    hostile_service(store, status=ServiceStatus.SERVING)
    assert main(["describe", "gan"]) == 0
    out = capsys.readouterr().out
    assert f"  {moment(START)}  DEPLOYING" in out
    assert START.isoformat() not in out
