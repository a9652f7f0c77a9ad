"""The Lambda handlers with recorded AWS events: partial batch responses, thin wiring."""

from __future__ import annotations

from typing import Any

import pytest

from squall.core.jobs import JobStatus
from squall.handlers import reconcile, scale, submit
from squall.local.runtime import LocalScaleRequests
from tests.conftest import load_event
from tests.integration.conftest import World


def test_submit_reports_only_the_malformed_message_as_failed(
    world: World, installed: LocalScaleRequests, lambda_context: Any
) -> None:
    # given a batch with a valid spec, a body that is not JSON and an invalid spec
    event = load_event("sqs_jobs_batch")
    # when
    response = submit.handler(event, lambda_context)
    # then only the malformed one comes back, to be retried and dead-lettered
    assert response == {"batchItemFailures": [{"itemIdentifier": "2e1424d4-f796-459a-8184-9c92662be6da"}]}
    assert len(world.store.list_by_status(JobStatus.QUEUED)) == 1
    assert len(world.store.list_by_status(JobStatus.REJECTED)) == 1
    # and one scale check is requested for the whole batch
    assert len(installed.requests) == 1 and len(installed.requests[0][2]) == 1


def test_submit_fails_only_the_message_that_hit_a_transient_error(
    world: World, installed: LocalScaleRequests, lambda_context: Any
) -> None:
    from squall.core.errors import RetryableError

    original = world.store.create

    def throttled_for_specs(job: Any, event: Any) -> None:
        if job.status.value == "QUEUED":
            raise RetryableError("PutItem: ProvisionedThroughputExceededException")
        original(job, event)  # the rejected body's record is written

    world.store.create = throttled_for_specs  # type: ignore[method-assign]
    event = load_event("sqs_jobs_batch")
    response = submit.handler(event, lambda_context)
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    assert failed == {"059f36b4-87a3-44ab-83d2-661975830a7d", "2e1424d4-f796-459a-8184-9c92662be6da"}


def test_a_failing_scale_request_does_not_fail_the_batch(
    world: World, installed: LocalScaleRequests, lambda_context: Any
) -> None:
    from squall.core.errors import RetryableError

    def refuse(**_: Any) -> None:
        raise RetryableError("PutEvents throttled")

    installed.request_scale_check = refuse  # type: ignore[method-assign]
    response = submit.handler(load_event("sqs_jobs_batch"), lambda_context)
    assert len(response["batchItemFailures"]) == 1


def test_reconcile_handler_reports_what_it_did(
    world: World, installed: LocalScaleRequests, lambda_context: Any
) -> None:
    submit.handler(load_event("sqs_jobs_batch"), lambda_context)
    result = reconcile.handler(load_event("schedule_reconcile"), lambda_context)
    assert result["errors"] == [] and result["transitions"] == {}


@pytest.mark.parametrize(
    ("event", "trigger"),
    [
        ({"detail-type": "Scheduled Event", "detail": {}}, "schedule"),
        (
            {"detail-type": "Scale Check Requested", "detail": {"reason": "jobs submitted"}},
            "requested:jobs submitted",
        ),
        (
            {
                "detail-type": "EC2 Instance Launch Unsuccessful",
                "detail": {"AutoScalingGroupName": "p3-usw2"},
            },
            "launch-unsuccessful:p3-usw2",
        ),
        ({"detail-type": "Something New"}, "other:Something New"),
    ],
)
def test_scale_trigger_is_named_from_the_event(event: dict[str, Any], trigger: str) -> None:
    assert scale.trigger_of(event) == trigger


@pytest.mark.parametrize(
    ("event", "jobs"),
    [
        (
            {"detail-type": "Scale Check Requested", "detail": {"jobIds": ["a", "b"], "jobCount": 2}},
            ["a", "b"],
        ),
        # more jobs than the event could name: the check cannot know them all
        ({"detail-type": "Scale Check Requested", "detail": {"jobIds": ["a"], "jobCount": 60}}, None),
        ({"detail-type": "Scale Check Requested", "detail": {"reason": "jobs submitted"}}, None),
        ({"detail-type": "Scale Check Requested", "detail": {"jobIds": [1], "jobCount": 1}}, None),
        ({"detail-type": "Scheduled Event", "detail": {"jobIds": ["a"], "jobCount": 1}}, None),
    ],
)
def test_a_request_names_the_jobs_it_asks_for_only_when_it_names_them_all(
    event: dict[str, Any], jobs: list[str] | None
) -> None:
    assert scale.asked_for(event) == jobs


def test_submit_passes_each_messages_sender_to_the_intake(
    world: World, installed: LocalScaleRequests, lambda_context: Any
) -> None:
    submit.handler(load_event("sqs_jobs_batch"), lambda_context)
    (queued,) = world.store.list_by_status(JobStatus.QUEUED)
    (rejected,) = world.store.list_by_status(JobStatus.REJECTED)
    assert queued.submitted_by == rejected.submitted_by == "AIDAIENQZJOLO23YVJ4VO"


def test_a_message_without_a_sender_id_is_still_handled(
    world: World, installed: LocalScaleRequests, lambda_context: Any
) -> None:
    event = load_event("sqs_jobs_batch")
    for record in event["Records"]:
        del record["attributes"]["SenderId"]
    response = submit.handler(event, lambda_context)
    assert len(response["batchItemFailures"]) == 1
    assert world.store.list_by_status(JobStatus.QUEUED)[0].submitted_by is None


def test_every_handler_shares_the_one_logger_metrics_and_tracer() -> None:
    import importlib

    from squall.handlers import observability

    for name in ("submit", "reconcile", "scale", "lifecycle", "drain"):
        module = importlib.import_module(f"squall.handlers.{name}")
        assert module.logger is observability.logger, name
        assert module.metrics is observability.metrics, name
        # traced() wraps a handler with the one tracer (where tracing is on)
        assert module.traced is observability.traced, name


def test_a_handler_is_traced_in_a_subsegment_only_where_tracing_is_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from squall.handlers import observability

    def handler(event: dict[str, object], context: object) -> str:
        return "done"

    monkeypatch.setattr(observability.tracer, "disabled", True)
    assert observability.traced(handler) is handler
    monkeypatch.setattr(observability.tracer, "disabled", False)
    wrapped = observability.traced(handler)
    assert wrapped is not handler and wrapped.__wrapped__ is handler  # type: ignore[attr-defined]
