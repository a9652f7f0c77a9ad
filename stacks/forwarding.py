"""Forwards one region's Auto Scaling events to the home region's event bus.

Auto Scaling publishes lifecycle actions and launch failures only in the group's
own region. This rule sends those of Squall's groups to the home region's
default bus, where the control plane's rules route them to the lifecycle and
scale functions as if they had happened at home (the event keeps its source,
detail type and original region).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from constructs import Construct

from stacks import constants
from stacks.triggers import autoscaling_pattern


class EventForwarding(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        home_region: str,
        group_names: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
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
            targets=[targets.EventBus(self.home_bus)],
        )
