"""The Auto Scaling event models and the drain-step message, on recorded samples."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from squall.core.asg_events import (
    DrainStepMessage,
    DrainStepRecord,
    InvalidEventError,
    LaunchLifecycleEvent,
    TerminateLifecycleEvent,
    parse_launch_unsuccessful,
    parse_lifecycle_event,
)
from squall.handlers.scale import trigger_of
from tests.conftest import load_event


def test_the_recorded_terminate_event_parses() -> None:
    event = parse_lifecycle_event(load_event("lifecycle_terminate"))
    assert isinstance(event, TerminateLifecycleEvent)
    assert event.time == datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    assert event.region == "us-west-2" and event.source == "aws.autoscaling"
    detail = event.detail
    assert detail.ec2_instance_id == "i-0a1b2c3d4e5f60718" == event.instance_id
    assert detail.auto_scaling_group_name == "squall-p3-usw2"
    assert detail.lifecycle_hook_name == "squall-terminate"
    assert detail.lifecycle_action_token == "87654321-4321-4321-4321-210987654321"
    assert detail.lifecycle_transition == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert json.loads(detail.notification_metadata or "") == {"heartbeatTimeout": 300}
    assert (detail.origin, detail.destination) == ("AutoScalingGroup", "EC2")


def test_the_recorded_launch_event_parses() -> None:
    event = parse_lifecycle_event(load_event("lifecycle_launch"))
    assert isinstance(event, LaunchLifecycleEvent)
    assert event.detail.lifecycle_transition == "autoscaling:EC2_INSTANCE_LAUNCHING"
    assert event.detail.lifecycle_hook_name == "squall-launch"


def test_origin_destination_and_metadata_are_optional() -> None:
    # AWS's own older example carries neither Origin/Destination nor JSON metadata
    raw = load_event("lifecycle_launch")
    for key in ("Origin", "Destination", "NotificationMetadata"):
        del raw["detail"][key]
    event = parse_lifecycle_event(raw)
    assert event.detail.origin is None and event.detail.notification_metadata is None


def _broken(change: Any) -> str:
    raw = load_event("lifecycle_terminate")
    change(raw)
    with pytest.raises(InvalidEventError) as caught:
        parse_lifecycle_event(raw)
    return str(caught.value)


def test_a_bad_instance_id_is_reported_with_its_field() -> None:
    message = _broken(lambda e: e["detail"].update(EC2InstanceId="bogus"))
    assert message.startswith("detail.EC2InstanceId:")


def test_a_missing_token_and_a_bad_time_are_both_reported() -> None:
    def change(event: dict[str, Any]) -> None:
        del event["detail"]["LifecycleActionToken"]
        event["time"] = "yesterday"

    message = _broken(change)
    assert "detail.LifecycleActionToken: Field required" in message
    assert "time:" in message


def test_a_transition_that_does_not_fit_the_detail_type_is_refused() -> None:
    message = _broken(lambda e: e["detail"].update(LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING"))
    assert message.startswith("detail.LifecycleTransition:")


def test_an_unknown_transition_is_refused() -> None:
    message = _broken(lambda e: e["detail"].update(LifecycleTransition="autoscaling:TEST_NOTIFICATION"))
    assert message.startswith("detail.LifecycleTransition:")


def test_another_detail_type_or_source_is_refused() -> None:
    assert _broken(lambda e: e.update({"detail-type": "EC2 Instance Launch Successful"})).startswith("detail-type:")
    assert _broken(lambda e: e.update(source="aws.ec2")).startswith("source:")
    with pytest.raises(InvalidEventError, match="EventBridge event object"):
        parse_lifecycle_event([])  # type: ignore[arg-type]


def test_the_recorded_launch_unsuccessful_event_parses() -> None:
    event = parse_launch_unsuccessful(load_event("launch_unsuccessful"))
    assert event.detail.status_code == "Failed"
    assert event.detail.auto_scaling_group_name == "squall-p3-usw2"
    assert "sufficient p3.2xlarge capacity" in event.detail.status_message
    assert event.detail.details["Availability Zone"] == "us-west-2b"
    assert event.detail.ec2_instance_id == ""
    assert event.detail.end_time == datetime(2026, 1, 5, 9, 0, 4, 512000, tzinfo=UTC)


def test_the_scale_trigger_names_a_launch_unsuccessful_event() -> None:
    assert trigger_of(load_event("launch_unsuccessful")) == "launch-unsuccessful:squall-p3-usw2"


def test_drain_step_messages_round_trip_through_an_sqs_record() -> None:
    # given the recorded batch
    records = load_event("drain_step")["Records"]
    # when
    parsed = DrainStepRecord.model_validate(records[0])
    # then the body is the typed message, and serialises back to the same body
    assert parsed.body == DrainStepMessage(instance_id="i-0a1b2c3d4e5f60718", step_id="5d41402abc4b2a76b9719d911017c592", version=2)
    assert json.loads(parsed.body.body()) == json.loads(records[0]["body"])


def test_a_malformed_drain_step_body_is_refused() -> None:
    records = load_event("drain_step")["Records"]
    with pytest.raises(ValueError) as caught:
        DrainStepRecord.model_validate(records[1])
    text = str(caught.value)
    assert "instanceId" in text and "stepId" in text and "version" in text
