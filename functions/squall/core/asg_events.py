"""Typed models of the Auto Scaling events Squall answers, as EventBridge delivers them.

- ``EC2 Instance-launch Lifecycle Action`` and ``EC2 Instance-terminate Lifecycle
  Action``: an instance waits in ``Pending:Wait`` / ``Terminating:Wait`` on a hook
  (detail: LifecycleActionToken, AutoScalingGroupName, LifecycleHookName,
  EC2InstanceId, LifecycleTransition, NotificationMetadata, Origin, Destination).
- ``EC2 Instance Launch Unsuccessful``: a failed launch (the scale function takes it).
- The drain-step message Squall sends itself through the drain queue.

powertools has no Auto Scaling models of its own, so these subclass its
``EventBridgeModel`` with a typed ``detail``. ``parse_lifecycle_event`` names the
field that is wrong (``detail.EC2InstanceId: ...``), so a bad event is logged with
a reason instead of failing somewhere deeper.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, SqsRecordModel
from pydantic import BaseModel, ConfigDict, Field, Json, ValidationError, model_validator

from squall.core.errors import PermanentError

AUTOSCALING_SOURCE = "aws.autoscaling"
LAUNCH_ACTION = "EC2 Instance-launch Lifecycle Action"
TERMINATE_ACTION = "EC2 Instance-terminate Lifecycle Action"
LAUNCH_UNSUCCESSFUL = "EC2 Instance Launch Unsuccessful"
LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
_INSTANCE_ID = r"^i-[0-9a-zA-Z]+$"


class InvalidEventError(PermanentError):
    """An event that is not what it claims to be; the message names the field."""


class LifecycleActionDetail(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    lifecycle_action_token: str = Field(alias="LifecycleActionToken", min_length=1)
    auto_scaling_group_name: str = Field(alias="AutoScalingGroupName", min_length=1)
    lifecycle_hook_name: str = Field(alias="LifecycleHookName", min_length=1)
    ec2_instance_id: str = Field(alias="EC2InstanceId", pattern=_INSTANCE_ID)
    lifecycle_transition: Literal["autoscaling:EC2_INSTANCE_LAUNCHING", "autoscaling:EC2_INSTANCE_TERMINATING"] = (
        Field(alias="LifecycleTransition")
    )
    notification_metadata: str | None = Field(default=None, alias="NotificationMetadata")
    # Set when Auto Scaling knows them: EC2, AutoScalingGroup or WarmPool.
    origin: str | None = Field(default=None, alias="Origin")
    destination: str | None = Field(default=None, alias="Destination")


class _LifecycleEvent(EventBridgeModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    source: Literal["aws.autoscaling"]
    detail: LifecycleActionDetail

    TRANSITION: ClassVar[str] = ""

    @model_validator(mode="after")
    def _transition_matches(self) -> _LifecycleEvent:
        if self.detail.lifecycle_transition != self.TRANSITION:
            raise ValueError(
                f"detail.LifecycleTransition: {self.detail.lifecycle_transition} does not belong "
                f"to an {self.detail_type!r} event"
            )
        return self

    @property
    def instance_id(self) -> str:
        return self.detail.ec2_instance_id


class LaunchLifecycleEvent(_LifecycleEvent):
    detail_type: Literal["EC2 Instance-launch Lifecycle Action"] = Field(alias="detail-type")
    TRANSITION: ClassVar[str] = LAUNCHING


class TerminateLifecycleEvent(_LifecycleEvent):
    detail_type: Literal["EC2 Instance-terminate Lifecycle Action"] = Field(alias="detail-type")
    TRANSITION: ClassVar[str] = TERMINATING


LifecycleEvent = LaunchLifecycleEvent | TerminateLifecycleEvent


class LaunchUnsuccessfulDetail(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    status_code: str = Field(alias="StatusCode")
    auto_scaling_group_name: str = Field(alias="AutoScalingGroupName", min_length=1)
    activity_id: str = Field(default="", alias="ActivityId")
    details: dict[str, str] = Field(default_factory=dict, alias="Details")
    request_id: str = Field(default="", alias="RequestId")
    status_message: str = Field(default="", alias="StatusMessage")
    # Empty when no instance was created at all (no capacity).
    ec2_instance_id: str = Field(default="", alias="EC2InstanceId")
    start_time: datetime | None = Field(default=None, alias="StartTime")
    end_time: datetime | None = Field(default=None, alias="EndTime")
    cause: str = Field(default="", alias="Cause")


class LaunchUnsuccessfulEvent(EventBridgeModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    source: Literal["aws.autoscaling"]
    detail_type: Literal["EC2 Instance Launch Unsuccessful"] = Field(alias="detail-type")
    detail: LaunchUnsuccessfulDetail


_LIFECYCLE_MODELS: dict[str, type[LaunchLifecycleEvent] | type[TerminateLifecycleEvent]] = {
    LAUNCH_ACTION: LaunchLifecycleEvent,
    TERMINATE_ACTION: TerminateLifecycleEvent,
}


def parse_lifecycle_event(event: Mapping[str, Any]) -> LifecycleEvent:
    """A launch or terminate lifecycle event; InvalidEventError names what is wrong."""
    if not isinstance(event, Mapping):
        raise InvalidEventError(f"expected an EventBridge event object, got {type(event).__name__}")
    detail_type = event.get("detail-type")
    model = _LIFECYCLE_MODELS.get(str(detail_type))
    if model is None:
        raise InvalidEventError(
            f"detail-type: expected {LAUNCH_ACTION!r} or {TERMINATE_ACTION!r}, got {detail_type!r}"
        )
    try:
        return model.model_validate(dict(event))
    except ValidationError as exc:
        raise InvalidEventError(describe(exc)) from exc


def parse_launch_unsuccessful(event: Mapping[str, Any]) -> LaunchUnsuccessfulEvent:
    try:
        return LaunchUnsuccessfulEvent.model_validate(dict(event))
    except ValidationError as exc:
        raise InvalidEventError(describe(exc)) from exc


def describe(exc: ValidationError) -> str:
    """'detail.EC2InstanceId: String should match pattern ...; time: ...', one entry per problem."""
    problems = []
    for error in exc.errors(include_url=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["loc"]:
            message = ".".join(str(part) for part in error["loc"]) + ": " + message
        problems.append(message)
    return "; ".join(problems)


# ---- the drain queue's messages -------------------------------------------------------


class DrainStepMessage(BaseModel):
    """Take the next step of the drain (or launch wait) of one instance.

    ``stepId`` and ``version`` say which step of which record version sent it, so
    that a duplicate or overtaken message is recognised and dropped.
    """

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    instance_id: str = Field(alias="instanceId", pattern=_INSTANCE_ID)
    step_id: str = Field(alias="stepId", min_length=1, max_length=200)
    version: int = Field(ge=1)

    def body(self) -> str:
        return self.model_dump_json(by_alias=True)


class DrainStepRecord(SqsRecordModel):
    """An SQS record of the drain queue, its body parsed into a DrainStepMessage."""

    body: Json[DrainStepMessage]
