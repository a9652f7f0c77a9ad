"""Forwards one region's Auto Scaling events to the home region's event bus.

Auto Scaling publishes lifecycle actions and launch failures only in the group's
own region. This rule sends those of Squall's groups to the home region's
default bus, where the control plane's rules route them to the lifecycle and
scale functions as if they had happened at home (the event keeps its source,
detail type and original region).

An event the rule cannot put on the home bus is retried while its hook still
waits, then kept in this region's failed-events queue (a rule's dead-letter
queue lives in the rule's region), which alarms on a topic of this region.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from constructs import Construct

from stacks import constants
from stacks.monitoring import FailedEventAlarms, alarm_topic
from stacks.queues import failed_events_queue
from stacks.triggers import autoscaling_pattern


class EventForwarding(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        home_region: str,
        group_names: Sequence[str],
        hook_timeout: cdk.Duration,
        alarm_email: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        region = cdk.Stack.of(self).region
        queue_name = constants.event_failures_queue_name(prefix, region)
        self.failed_events = failed_events_queue(
            self, "FailedEvents", queue_name=queue_name, what=f"Auto Scaling events of {region}"
        )
        home_bus_arn = cdk.Stack.of(self).format_arn(
            service="events",
            region=home_region,
            resource="event-bus",
            resource_name=constants.EVENT_BUS_NAME,
        )
        self.home_bus = events.EventBus.from_event_bus_arn(self, "HomeBus", home_bus_arn)
        self.rule = events.Rule(
            self,
            "ToHomeRegion",
            description=f"Squall: Auto Scaling events of managed groups to {home_region}",
            event_pattern=autoscaling_pattern(
                [
                    constants.LAUNCH_LIFECYCLE_ACTION,
                    constants.TERMINATE_LIFECYCLE_ACTION,
                    constants.LAUNCH_UNSUCCESSFUL,
                ],
                group_names,
            ),
            # CDK creates the role EventBridge assumes, allowed events:PutEvents on
            # the home bus only.
            targets=[targets.EventBus(self.home_bus, dead_letter_queue=self.failed_events)],
        )
        # The bus target has no retry settings of its own in CDK: without them a
        # forwarded event would be retried for 24 hours, long after its hook expired.
        rule = self.rule.node.default_child
        assert isinstance(rule, events.CfnRule)
        rule.add_property_override(
            "Targets.0.RetryPolicy",
            {
                "MaximumEventAgeInSeconds": int(hook_timeout.to_seconds()),
                "MaximumRetryAttempts": constants.EVENT_RETRY_ATTEMPTS,
            },
        )
        topic = alarm_topic(self, "AlarmTopic", topic_name=f"{prefix}-alarms-{region}", alarm_email=alarm_email)
        FailedEventAlarms(self, "Alarms", prefix=prefix, queue_names=[queue_name], topic=topic)
