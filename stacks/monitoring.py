"""CloudWatch dashboard and alarms, translated from squall.core.dashboard's description.

Nothing about what is graphed or alarmed is decided here: this construct only
maps the plain description (functions/squall/core/dashboard.py) onto CloudWatch, so
the local runtime's dashboard and this one cannot drift apart (the Costs section and
the budget alarms included). One addition: the failed-event queues
(``FailedEventAlarms``): where lifecycle events and Auto Scaling events land that
nothing could handle, each with an alarm on the same topic; a region other than the
home region alarms on its own queue with a topic of its own (a CloudWatch alarm
notifies topics in its region only).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from squall.core import dashboard as spec

COMPARISONS = {
    spec.Comparison.GREATER_THAN_OR_EQUAL: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    spec.Comparison.GREATER_THAN: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    spec.Comparison.LESS_THAN: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
    spec.Comparison.LESS_THAN_OR_EQUAL: cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
}
MISSING_DATA = {
    spec.MissingData.NOT_BREACHING: cloudwatch.TreatMissingData.NOT_BREACHING,
    spec.MissingData.BREACHING: cloudwatch.TreatMissingData.BREACHING,
    spec.MissingData.IGNORE: cloudwatch.TreatMissingData.IGNORE,
    spec.MissingData.MISSING: cloudwatch.TreatMissingData.MISSING,
}


def metric(ref: spec.MetricRef, *, labelled: bool = True) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=ref.namespace,
        metric_name=ref.name,
        dimensions_map=ref.dimension_map,
        statistic=str(ref.stat),
        period=cdk.Duration.seconds(ref.period_seconds),
        # A label turns an alarm's metric into a metric-math query; graphs only.
        label=(ref.label or None) if labelled else None,
    )


def widget(item: spec.Widget) -> cloudwatch.IWidget:
    if isinstance(item, spec.Text):
        return cloudwatch.TextWidget(markdown=item.markdown, width=item.width, height=item.height)
    return cloudwatch.GraphWidget(
        title=item.title,
        left=[metric(m) for m in item.left],
        right=[metric(m) for m in item.right],
        left_y_axis=cloudwatch.YAxisProps(label=item.left_label, min=0, show_units=False),
        right_y_axis=cloudwatch.YAxisProps(label=item.right_label, min=0, show_units=False),
        stacked=item.stacked,
        width=item.width,
        height=item.height,
    )


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: spec.MonitoringDescription,
        topic_name: str,
        alarm_email: str = "",
        failed_event_queues: Sequence[str] = (),
        prefix: str = "squall",
    ) -> None:
        super().__init__(scope, construct_id)
        problems = spec.validate(description)
        if problems:
            raise ValueError("invalid monitoring description: " + "; ".join(problems))

        self.topic = alarm_topic(self, "AlarmTopic", topic_name=topic_name, alarm_email=alarm_email)

        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=description.dashboard.name,
            default_interval=cdk.Duration.hours(3),
            widgets=[[widget(item) for item in row] for row in description.dashboard.rows()],
        )

        action = actions.SnsAction(self.topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for alarm in description.alarms:
            created = cloudwatch.Alarm(
                self,
                alarm.name,
                alarm_name=alarm.name,
                alarm_description=alarm.description,
                metric=metric(alarm.metric, labelled=False),
                threshold=alarm.threshold,
                comparison_operator=COMPARISONS[alarm.comparison],
                evaluation_periods=alarm.evaluation_periods,
                datapoints_to_alarm=alarm.datapoints_to_alarm,
                treat_missing_data=MISSING_DATA[alarm.missing_data],
            )
            created.add_alarm_action(action)
            created.add_ok_action(action)
            self.alarms[alarm.name] = created
        failed = FailedEventAlarms(
            self, "FailedEvents", prefix=prefix, queue_names=failed_event_queues, topic=self.topic
        )
        self.alarms.update(failed.alarms)


def alarm_topic(scope: Construct, construct_id: str, *, topic_name: str, alarm_email: str) -> sns.Topic:
    """The topic alarms notify (TLS only), with the on-call's e-mail subscribed if there is one."""
    topic = sns.Topic(
        scope, construct_id, topic_name=topic_name, display_name="Squall alarms", enforce_ssl=True
    )
    if alarm_email:
        topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
    return topic


class FailedEventAlarms(Construct):
    """An alarm per failed-event queue: an event nobody handled is an operator's to look at."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        queue_names: Sequence[str],
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        action = actions.SnsAction(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for queue_name in queue_names:
            name = f"{prefix}-failed-events-{queue_name}"
            alarm = cloudwatch.Alarm(
                self,
                name,
                alarm_name=name,
                alarm_description=(
                    f"Events in {queue_name}: lifecycle or Auto Scaling events that could not be "
                    "delivered or handled. Read one: its instance's lifecycle action was answered "
                    "by the hook's default result, unless someone completes it by hand."
                ),
                metric=cloudwatch.Metric(
                    namespace="AWS/SQS",
                    metric_name="ApproximateNumberOfMessagesVisible",
                    dimensions_map={"QueueName": queue_name},
                    statistic="Maximum",
                    period=cdk.Duration.minutes(1),
                ),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
            self.alarms[name] = alarm
