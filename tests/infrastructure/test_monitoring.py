"""The dashboard description (pure) and its CloudWatch translation."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from squall.core import dashboard
from squall.core.jobs import JobStatus
from squall.core.telemetry import NAMESPACE, Metric

from .helpers import resources
from .scenario import HOME, Synthesis

DEPLOYMENT = dashboard.Deployment(
    prefix="squall",
    functions={h: f"squall-{h}" for h in ("submit", "scale", "lifecycle", "drain", "reconcile")},
    jobs_queue="squall-jobs",
    drain_queue="squall-drain",
    dead_letter_queues=("squall-jobs-dlq", "squall-drain-dlq"),
    groups=(
        dashboard.DashboardGroup("p3-usw2", "us-west-2"),
        dashboard.DashboardGroup("p3-use1", "us-east-1"),
    ),
    teams=(dashboard.DashboardTeam("vision"), dashboard.DashboardTeam("research", gpu_quota=16)),
)


@pytest.fixture(scope="module")
def description() -> dashboard.MonitoringDescription:
    return dashboard.describe(DEPLOYMENT)


# -- the description, without CDK -----------------------------------------------------


def test_description_is_consistent(description: dashboard.MonitoringDescription) -> None:
    assert dashboard.validate(description) == []


def test_squall_metrics_use_telemetry_names_and_the_service_dimension(
    description: dashboard.MonitoringDescription,
) -> None:
    known = {m.value for m in Metric}
    squall_metrics = [m for m in description.dashboard.metrics() if m.namespace == NAMESPACE]
    assert squall_metrics
    for metric in squall_metrics:
        assert metric.name in known
        assert metric.dimension_map["service"] == "squall"


def test_dashboard_shows_what_operators_need(description: dashboard.MonitoringDescription) -> None:
    names = {(m.namespace, m.name, m.stat) for m in description.dashboard.metrics()}
    S = dashboard.Stat
    expected = {
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible", S.MAXIMUM),  # queue depth
        ("AWS/SQS", "ApproximateAgeOfOldestMessage", S.MAXIMUM),  # queue age
        (NAMESPACE, Metric.JOBS_IN_STATE, S.MAXIMUM),
        (NAMESPACE, Metric.QUEUE_WAIT_SECONDS, S.P50),
        (NAMESPACE, Metric.QUEUE_WAIT_SECONDS, S.P90),
        (NAMESPACE, Metric.PENDING_GPUS, S.MAXIMUM),
        (NAMESPACE, Metric.IN_FLIGHT_NODES, S.MAXIMUM),
        (NAMESPACE, Metric.DESIRED_CAPACITY, S.MAXIMUM),
        (NAMESPACE, Metric.IN_SERVICE_CAPACITY, S.MAXIMUM),
        (NAMESPACE, Metric.SCALE_UPS, S.SUM),
        (NAMESPACE, Metric.FALLBACKS, S.SUM),
        (NAMESPACE, Metric.SCALE_DOWNS, S.SUM),
        (NAMESPACE, Metric.DRAINS_STARTED, S.SUM),
        (NAMESPACE, Metric.DRAIN_SECONDS, S.P90),
        (NAMESPACE, Metric.QUEUED_JOBS, S.MAXIMUM),
        (NAMESPACE, Metric.QUEUED_GPUS, S.MAXIMUM),
        (NAMESPACE, Metric.ADMITTED_GPUS, S.MAXIMUM),
        (NAMESPACE, Metric.GPU_QUOTA, S.MAXIMUM),
        (NAMESPACE, Metric.JOBS_ADMITTED, S.SUM),
        (NAMESPACE, Metric.MODEL_SERVICES_IN_STATE, S.MAXIMUM),
        (NAMESPACE, Metric.MODEL_SERVICES_FAILED, S.SUM),
        (NAMESPACE, Metric.MODEL_SERVICE_OBJECTS_RECREATED, S.SUM),
        ("AWS/Lambda", "Errors", S.SUM),
        ("AWS/Lambda", "Throttles", S.SUM),
        ("AWS/Lambda", "Duration", S.P90),
    }
    assert expected <= names


def test_jobs_by_state_has_one_series_per_live_state(description: dashboard.MonitoringDescription) -> None:
    states = {
        m.dimension_map["State"] for m in description.dashboard.metrics() if m.name == Metric.JOBS_IN_STATE
    }
    assert states == {JobStatus.QUEUED, JobStatus.RUNNING}


def test_model_services_by_state_has_one_series_per_live_state(
    description: dashboard.MonitoringDescription,
) -> None:
    states = {
        m.dimension_map["State"]
        for m in description.dashboard.metrics()
        if m.name == Metric.MODEL_SERVICES_IN_STATE
    }
    assert states == {"DEPLOYING", "SERVING"}


def test_each_group_gets_desired_vs_in_service_by_group_and_region(
    description: dashboard.MonitoringDescription,
) -> None:
    for group in DEPLOYMENT.groups:
        graphs = [
            w
            for s in description.dashboard.sections
            for w in s.widgets
            if isinstance(w, dashboard.Graph) and w.title.startswith(f"{group.name} ({group.region})")
        ]
        (graph,) = graphs
        assert {m.name for m in graph.left} == {Metric.DESIRED_CAPACITY, Metric.IN_SERVICE_CAPACITY}
        for metric in graph.left:
            assert metric.dimension_map == {"service": "squall", "Group": group.name, "Region": group.region}


def _section(description: dashboard.MonitoringDescription, title: str) -> dashboard.Section:
    (section,) = [s for s in description.dashboard.sections if s.title == title]
    return section


def test_the_queue_is_graphed_per_team_with_its_quota_beside_what_it_has_admitted(
    description: dashboard.MonitoringDescription,
) -> None:
    section = _section(description, "Queue and admission")
    graphs = {w.title: w for w in section.widgets if isinstance(w, dashboard.Graph)}
    assert list(graphs) == [
        "Queued jobs by team",
        "Jobs admitted",
        "research: GPUs queued and admitted (quota 16)",
        "vision: GPUs queued and admitted (no quota)",
    ]
    S = dashboard.Stat
    queued = graphs["Queued jobs by team"]
    assert [(m.name, m.stat, m.label, m.dimension_map) for m in queued.left] == [
        (Metric.QUEUED_JOBS, S.MAXIMUM, team, {"service": "squall", "Team": team})
        for team in ("research", "vision")
    ]
    assert queued.stacked
    assert [(m.name, m.stat) for m in graphs["Jobs admitted"].left] == [(Metric.JOBS_ADMITTED, S.SUM)]
    research = graphs["research: GPUs queued and admitted (quota 16)"]
    assert [(m.name, m.stat, m.label) for m in research.left] == [
        (Metric.QUEUED_GPUS, S.MAXIMUM, "queued"),
        (Metric.ADMITTED_GPUS, S.MAXIMUM, "admitted"),
        (Metric.GPU_QUOTA, S.MAXIMUM, "quota"),
    ]
    assert all(m.dimension_map == {"service": "squall", "Team": "research"} for m in research.left)
    # a team without a quota reports none (services/scale.py): no quota series to graph
    vision = graphs["vision: GPUs queued and admitted (no quota)"]
    assert [m.name for m in vision.left] == [Metric.QUEUED_GPUS, Metric.ADMITTED_GPUS]


def test_without_teams_the_queue_section_says_so() -> None:
    section = _section(dashboard.describe(replace(DEPLOYMENT, teams=())), "Queue and admission")
    assert [getattr(w, "title", None) or getattr(w, "markdown", "") for w in section.widgets] == [
        "Jobs admitted",
        "No teams are configured.",
    ]


def test_every_function_is_graphed(description: dashboard.MonitoringDescription) -> None:
    graphed = {
        m.dimension_map["FunctionName"]
        for m in description.dashboard.metrics()
        if m.namespace == "AWS/Lambda"
    }
    assert graphed == set(DEPLOYMENT.functions.values())


def test_alarms(description: dashboard.MonitoringDescription) -> None:
    alarms = {a.name: a for a in description.alarms}
    assert sorted(alarms) == sorted(
        [
            "squall-dead-letters-squall-jobs-dlq",
            "squall-dead-letters-squall-drain-dlq",
            "squall-oldest-queued-job",
            "squall-scale-errors",
            "squall-repeated-fallbacks",
            "squall-drains-past-deadline",
        ]
    )
    dlq = alarms["squall-dead-letters-squall-jobs-dlq"]
    assert (dlq.metric.name, dlq.metric.dimension_map, dlq.threshold) == (
        "ApproximateNumberOfMessagesVisible",
        {"QueueName": "squall-jobs-dlq"},
        1,
    )
    oldest = alarms["squall-oldest-queued-job"]
    assert (oldest.metric.name, oldest.threshold, oldest.comparison) == (
        Metric.OLDEST_QUEUED_SECONDS,
        900,
        dashboard.Comparison.GREATER_THAN,
    )
    scale = alarms["squall-scale-errors"]
    assert scale.metric.dimension_map == {"FunctionName": "squall-scale"}
    fallbacks = alarms["squall-repeated-fallbacks"]
    assert (fallbacks.metric.name, fallbacks.metric.period_seconds, fallbacks.threshold) == (
        Metric.FALLBACKS,
        15 * 60,
        3,
    )
    assert alarms["squall-drains-past-deadline"].metric.name == Metric.DRAINS_PAST_DEADLINE


def test_thresholds_come_from_the_settings() -> None:
    custom = dashboard.describe(DEPLOYMENT, dashboard.Thresholds(oldest_queued_job_seconds=60, fallbacks=5))
    alarms = {a.name: a for a in custom.alarms}
    assert alarms["squall-oldest-queued-job"].threshold == 60
    assert alarms["squall-repeated-fallbacks"].threshold == 5


def test_costs_are_graphed_per_team_and_group_and_each_budget_alarms_at_80_and_100_percent(
    description: dashboard.MonitoringDescription,
) -> None:
    costed = dashboard.describe(replace(DEPLOYMENT, budgets={"research": 20000.0}))
    assert dashboard.validate(costed) == []
    assert costed.dashboard == description.dashboard  # budgets add alarms, not graphs
    spend, overhead = _section(costed, "Costs").widgets
    assert isinstance(spend, dashboard.Graph) and isinstance(overhead, dashboard.Graph)
    assert [(m.name, m.dimension_map) for m in spend.left] == [
        (Metric.TEAM_MONTH_SPEND, {"service": "squall", "Team": team}) for team in ("research", "vision")
    ]
    assert [(m.name, m.stat, m.dimension_map) for m in overhead.left] == [
        (Metric.OVERHEAD_COST, dashboard.Stat.SUM, {"service": "squall", "Group": group})
        for group in ("p3-use1", "p3-usw2")
    ]
    budget = {a.name: a for a in costed.alarms if a.name.startswith("squall-budget-")}
    assert {
        name: (a.threshold, a.metric.name, a.metric.dimension_map["Team"]) for name, a in budget.items()
    } == {
        "squall-budget-research-80pct": (16000.0, Metric.TEAM_MONTH_SPEND, "research"),
        "squall-budget-research-100pct": (20000.0, Metric.TEAM_MONTH_SPEND, "research"),
    }
    assert all(a.comparison is dashboard.Comparison.GREATER_THAN_OR_EQUAL for a in budget.values())
    # a team without a budget has no alarm; the description's other alarms stay as they were
    assert [a.name for a in costed.alarms if not a.name.startswith("squall-budget-")] == [
        a.name for a in description.alarms
    ]


def test_without_teams_or_groups_the_costs_section_says_so_instead_of_graphing_nothing() -> None:
    bare = dashboard.describe(replace(DEPLOYMENT, teams=(), groups=()))
    assert dashboard.validate(bare) == []
    assert [w.markdown for w in _section(bare, "Costs").widgets if isinstance(w, dashboard.Text)] == [
        "No teams are configured: no spend to graph.",
        "No node groups are configured: no overhead to graph.",
    ]
    assert not [w for w in _section(bare, "Costs").widgets if isinstance(w, dashboard.Graph)]


def test_rows_wrap_at_24_columns() -> None:
    many = replace(DEPLOYMENT, groups=tuple(dashboard.DashboardGroup(f"g{i}", "us-west-2") for i in range(7)))
    rows = dashboard.describe(many).dashboard.rows()
    assert all(sum(w.width for w in row) <= 24 for row in rows)
    group_rows = [row for row in rows if any(getattr(w, "title", "").startswith("g") for w in row)]
    assert [len(row) for row in group_rows] == [3, 3, 1]


# -- the CloudWatch translation -------------------------------------------------------


@pytest.fixture(scope="module")
def template(full: Synthesis) -> Template:
    return full.template(full.stacks.monitoring)


def _body(template: Template) -> dict[str, Any]:
    (board,) = resources(dict(template.to_json()), "AWS::CloudWatch::Dashboard").values()
    parts = board["Properties"]["DashboardBody"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else HOME for p in parts))


@pytest.mark.slow
def test_cloudwatch_dashboard_graphs_exactly_the_description(full: Synthesis, template: Template) -> None:
    config_description = monitoring_description_of(full)
    body = _body(template)
    graphed = [
        tuple(series[:2]) + tuple(series[2:-1]) + (series[-1]["stat"],)
        for widget in body["widgets"]
        if widget["type"] == "metric"
        for series in widget["properties"]["metrics"]
    ]
    described = [
        (m.namespace, m.name, *[x for kv in sorted(m.dimensions) for x in kv], str(m.stat))
        for m in config_description.dashboard.metrics()
    ]
    assert sorted(graphed) == sorted(described)
    titles = {w["properties"].get("title") for w in body["widgets"] if w["type"] == "metric"}
    assert "p3-use1 (us-east-1): desired vs in service" in titles
    assert "g5-use1-spot (us-east-1): desired vs in service" in titles
    # the teams of cdk.json, each with its quota (or none)
    assert "research: GPUs queued and admitted (quota 16)" in titles
    assert "vision: GPUs queued and admitted (no quota)" in titles
    template.has_resource_properties("AWS::CloudWatch::Dashboard", {"DashboardName": "squall"})


def monitoring_description_of(full: Synthesis) -> dashboard.MonitoringDescription:
    from stacks.config import SquallConfig
    from stacks.deployment import monitoring_description

    return monitoring_description(SquallConfig.from_context(full.app.node.get_all_context()))


@pytest.mark.slow
def test_cloudwatch_alarms_notify_the_topic(template: Template) -> None:
    topic = Match.object_like({"Ref": Match.string_like_regexp("AlarmTopic")})
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": "squall-scale-errors",
            "Namespace": "AWS/Lambda",
            "MetricName": "Errors",
            "Dimensions": [{"Name": "FunctionName", "Value": "squall-scale"}],
            "Statistic": "Sum",
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "EvaluationPeriods": 5,
            "DatapointsToAlarm": 3,
            "TreatMissingData": "notBreaching",
            "AlarmActions": [topic],
            "OKActions": [topic],
        },
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": "squall-oldest-queued-job",
            "Namespace": "Squall",
            "MetricName": "OldestQueuedJobAgeSeconds",
            "Dimensions": [{"Name": "service", "Value": "squall"}],
            "Statistic": "Maximum",
            "Threshold": 900,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": "squall-dead-letters-squall-drain-dlq",
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Threshold": 1,
        },
    )
    # plus one alarm per failed-event queue of the home region, on the same topic
    for queue in ("squall-lifecycle-failures", "squall-events-failed-us-west-2"):
        template.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "AlarmName": f"squall-failed-events-{queue}",
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateNumberOfMessagesVisible",
                "Dimensions": [{"Name": "QueueName", "Value": queue}],
                "Statistic": "Maximum",
                "Threshold": 1,
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
                "EvaluationPeriods": 1,
                "TreatMissingData": "notBreaching",
                "AlarmActions": [topic],
                "OKActions": [topic],
            },
        )
    # and two on the research team's spend this month: at 80% and 100% of its $20,000 budget
    for percent, threshold in ((80, 16000), (100, 20000)):
        template.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "AlarmName": f"squall-budget-research-{percent}pct",
                "Namespace": NAMESPACE,
                "MetricName": Metric.TEAM_MONTH_SPEND,
                "Dimensions": [{"Name": "Team", "Value": "research"}, {"Name": "service", "Value": "squall"}],
                "Statistic": "Maximum",
                "Period": 300,
                "Threshold": threshold,
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
                "TreatMissingData": "notBreaching",
                "AlarmActions": [topic],
                "OKActions": [topic],
            },
        )
    template.resource_count_is("AWS::CloudWatch::Alarm", 10)


@pytest.mark.slow
def test_alarm_topic_requires_tls_and_mails_the_on_call(template: Template) -> None:
    template.has_resource_properties("AWS::SNS::Topic", {"TopicName": "squall-alarms"})
    template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "gpu-oncall@example.com"}
    )
    template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            }
        },
    )
