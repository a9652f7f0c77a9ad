"""The local runtime's Lambda stand-in keeps to what the stacks deploy and what the dashboard reads."""

from __future__ import annotations

from datetime import UTC, datetime

from squall.core import dashboard as spec
from squall.core.telemetry import Metric
from squall.local.lambda_events import HANDLERS, function_name
from squall.local.render import local_deployment
from squall.local.runtime import ASYNC_RETRIES, ASYNC_RETRY_DELAYS, DRAIN_MAX_RECEIVE_COUNT
from stacks import constants

# What the runtime records in the AWS namespaces, beside Squall's own metrics.
AWS_METRICS = {
    "Invocations",
    "Errors",
    "Duration",
    "Throttles",
    "ApproximateNumberOfMessagesVisible",
    "ApproximateAgeOfOldestMessage",
}
LAMBDA_DEFAULT_RETRIES = 2


def test_async_retries_are_the_ones_the_stack_configures() -> None:
    triggered_by_eventbridge = {constants.SCALE, constants.RECONCILE, constants.LIFECYCLE}
    deployed = {
        handler: LAMBDA_DEFAULT_RETRIES if function.async_retries is None else function.async_retries
        for handler, function in constants.FUNCTIONS.items()
        if handler in triggered_by_eventbridge
    }
    assert deployed == ASYNC_RETRIES
    assert len(ASYNC_RETRY_DELAYS) >= max(ASYNC_RETRIES.values())
    assert DRAIN_MAX_RECEIVE_COUNT == constants.DRAIN_MAX_RECEIVE_COUNT


def test_function_names_are_the_ones_the_local_dashboard_graphs() -> None:
    assert set(HANDLERS) == set(constants.FUNCTIONS)
    assert dict(local_deployment([]).functions) == {h: function_name(h) for h in HANDLERS}


def test_aws_metrics_share_the_recorder_without_colliding_with_squalls() -> None:
    # one recorder holds both; the names alone keep the series apart
    assert AWS_METRICS.isdisjoint(str(m) for m in Metric)
    graphed = {
        ref.name
        for ref in spec.describe(local_deployment([])).dashboard.metrics()
        if ref.namespace in (spec.LAMBDA_NAMESPACE, spec.SQS_NAMESPACE)
    }
    assert graphed <= AWS_METRICS


def test_event_and_request_ids_are_version_4_uuids_and_unique() -> None:
    import uuid

    from squall.local.lambda_events import LocalContext, scheduled_event

    ids = [
        scheduled_event(rule="r", at=datetime(2026, 1, 1, tzinfo=UTC), region="us-west-2")["id"]
        for _ in range(500)
    ]
    ids += [LocalContext(function_name="f").aws_request_id for _ in range(500)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == text
    assert len(set(ids)) == len(ids)
