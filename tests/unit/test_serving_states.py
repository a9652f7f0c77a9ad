"""The model service state machine (core/serving.py): pure, tested without fakes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squall.core.errors import InvalidTransitionError
from squall.core.serving import (
    ServiceReason,
    ServiceStatus,
    model_path,
    transition_service,
)
from tests.serving_records import first_record

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _service():
    return first_record("mnist", at=T0, team="vision", job_id="mnist-0a1b2c3d", replicas=2, message_id="m-1")


def test_a_new_service_is_deploying_at_version_one_with_its_first_event():
    service, event = _service()
    assert (service.status, service.version, service.reason) == (ServiceStatus.DEPLOYING, 1, "Requested")
    assert (event.version, event.previous, event.status) == (1, None, ServiceStatus.DEPLOYING)


def test_each_transition_numbers_its_event_and_keeps_the_fields_it_does_not_change():
    service, _ = _service()
    serving, event = transition_service(
        service,
        to=ServiceStatus.SERVING,
        reason="Ready:2/2",
        at=T0 + timedelta(minutes=1),
        ready_replicas=2,
        rest_url="http://127.0.0.1:8501",
    )
    assert (serving.version, event.version, event.previous) == (2, 2, ServiceStatus.DEPLOYING)
    assert (serving.ready_replicas, serving.rest_url, serving.job_id) == (
        2,
        "http://127.0.0.1:8501",
        service.job_id,
    )
    assert serving.created_at == T0 and serving.updated_at == T0 + timedelta(minutes=1)


def test_a_stopped_service_may_only_be_served_again():
    service, _ = _service()
    stopped, _ = transition_service(
        service, to=ServiceStatus.STOPPED, reason=ServiceReason.UNSERVE_REQUESTED, at=T0
    )
    with pytest.raises(InvalidTransitionError, match="STOPPED -> SERVING"):
        transition_service(stopped, to=ServiceStatus.SERVING, reason="Ready:1/1", at=T0)
    again, event = transition_service(
        stopped, to=ServiceStatus.DEPLOYING, reason=ServiceReason.SERVED_AGAIN, at=T0
    )
    assert (again.version, event.previous) == (3, ServiceStatus.STOPPED)


def test_a_failed_service_cannot_become_serving_without_being_served_again():
    service, _ = _service()
    failed, _ = transition_service(
        service, to=ServiceStatus.FAILED, reason=ServiceReason.MODEL_NOT_FOUND, at=T0
    )
    with pytest.raises(InvalidTransitionError):
        transition_service(failed, to=ServiceStatus.SERVING, reason="Ready:1/1", at=T0)


def test_the_model_path_is_tensorflow_servings_base_path_and_version():
    assert model_path(name="mnist", model_version=3) == "/models/mnist/3"
