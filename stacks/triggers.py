"""What invokes each function: SQS event sources, schedules and EventBridge rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks import constants
from stacks.queues import JobQueues


def autoscaling_pattern(detail_types: Sequence[str], group_names: Sequence[str]) -> events.EventPattern:
    """Auto Scaling events of Squall's groups only (other teams' groups share the bus)."""
    return events.EventPattern(
        source=[constants.AUTOSCALING_SOURCE],
        detail_type=list(detail_types),
        detail={"AutoScalingGroupName": list(group_names)},
    )


class Triggers(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        functions: Mapping[str, lambda_.IFunction],
        queues: JobQueues,
        group_names: Sequence[str],
        failed_events: sqs.IQueue,
        hook_timeout: cdk.Duration,
    ) -> None:
        super().__init__(scope, construct_id)
        submit = functions[constants.SUBMIT]
        scale = functions[constants.SCALE]
        lifecycle = functions[constants.LIFECYCLE]
        drain = functions[constants.DRAIN]
        reconcile = functions[constants.RECONCILE]

        # Partial batch responses: a failing message comes back alone, the rest of
        # the batch is acknowledged.
        submit.add_event_source(
            sources.SqsEventSource(
                queues.jobs,
                batch_size=constants.JOBS_BATCH_SIZE,
                report_batch_item_failures=True,
                max_concurrency=constants.SUBMIT_MAX_CONCURRENCY,
            )
        )
        drain.add_event_source(
            sources.SqsEventSource(
                queues.drain,
                batch_size=constants.DRAIN_BATCH_SIZE,
                report_batch_item_failures=True,
            )
        )

        every_minute = events.Schedule.rate(cdk.Duration.minutes(constants.SCHEDULE_MINUTES))
        for rule_id, description, function in (
            ("ScaleSchedule", "Squall: scale check every minute", scale),
            ("ReconcileSchedule", "Squall: reconcile job records with Kubernetes every minute", reconcile),
        ):
            events.Rule(
                self,
                rule_id,
                description=description,
                schedule=every_minute,
                targets=[targets.LambdaFunction(function)],
            )
        # Submissions (and drains) ask for a check at once instead of waiting for
        # the schedule: that is what makes scale-up take seconds, not a minute.
        events.Rule(
            self,
            "ScaleCheckRequested",
            description="Squall: scale check requested by a submission or a drain",
            event_pattern=events.EventPattern(
                source=[constants.SCALE_CHECK_SOURCE],
                detail_type=[constants.SCALE_CHECK_DETAIL_TYPE],
            ),
            targets=[targets.LambdaFunction(scale)],
        )
        # Auto Scaling's events must not vanish: an event EventBridge cannot deliver
        # is retried while it still matters, then kept in the failed-events queue
        # (with an alarm). A scale check is stale after the scale function's own
        # maximum event age; a lifecycle action once its hook has timed out.
        scale_age = constants.FUNCTIONS[constants.SCALE].max_event_age_seconds or 120
        # A failed launch (no capacity, a limit) backs the group off and spills to
        # the next group at once.
        events.Rule(
            self,
            "LaunchUnsuccessful",
            description="Squall: a managed group failed to launch an instance",
            event_pattern=autoscaling_pattern([constants.LAUNCH_UNSUCCESSFUL], group_names),
            targets=[
                targets.LambdaFunction(
                    scale,
                    dead_letter_queue=failed_events,
                    max_event_age=cdk.Duration.seconds(scale_age),
                    retry_attempts=constants.EVENT_RETRY_ATTEMPTS,
                )
            ],
        )
        events.Rule(
            self,
            "LifecycleActions",
            description="Squall: launch and terminate lifecycle actions of managed groups",
            event_pattern=autoscaling_pattern(
                [constants.LAUNCH_LIFECYCLE_ACTION, constants.TERMINATE_LIFECYCLE_ACTION],
                group_names,
            ),
            targets=[
                targets.LambdaFunction(
                    lifecycle,
                    dead_letter_queue=failed_events,
                    max_event_age=hook_timeout,
                    retry_attempts=constants.EVENT_RETRY_ATTEMPTS,
                )
            ],
        )
