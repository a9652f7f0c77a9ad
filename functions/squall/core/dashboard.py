"""The Squall dashboard and its alarms, described once as plain data.

Two renderers read this description: the CDK monitoring construct
(``stacks/monitoring.py``) turns it into a CloudWatch dashboard and alarms, and
the local runtime draws the same graphs from the metrics it recorded. Keeping the
description here, free of any AWS or plotting library, is what makes the local
dashboard show exactly what operators see in CloudWatch.

The description depends on the deployment only through names (functions, queues,
node groups, teams) and the teams' monthly budgets, which the caller passes in as a
``Deployment``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from squall.core.jobs import JobStatus
from squall.core.serving import ServiceStatus
from squall.core.telemetry import NAMESPACE, SERVICE, Metric

__all__ = [
    "BUDGET_ALARM_PERCENTS",
    "DASHBOARD_COLUMNS",
    "LAMBDA_NAMESPACE",
    "SQS_NAMESPACE",
    "Alarm",
    "Comparison",
    "Dashboard",
    "DashboardGroup",
    "DashboardTeam",
    "Deployment",
    "Graph",
    "MetricRef",
    "MissingData",
    "MonitoringDescription",
    "Section",
    "Stat",
    "Text",
    "Thresholds",
    "Widget",
    "budget_alarms",
    "costs_section",
    "describe",
    "squall",
    "validate",
]

LAMBDA_NAMESPACE = "AWS/Lambda"
SQS_NAMESPACE = "AWS/SQS"
DASHBOARD_COLUMNS = 24  # CloudWatch dashboards are 24 units wide
# The shares of a team's monthly budget that alarm: a warning while there is room left, and the
# point where admission holds the team's jobs (BudgetExceeded).
BUDGET_ALARM_PERCENTS = (80, 100)
# TeamMonthSpend is emitted every scale check (about a minute); five minutes ride over a missed one.
SPEND_PERIOD_SECONDS = 300


class Stat(StrEnum):
    SUM = "Sum"
    AVERAGE = "Average"
    MAXIMUM = "Maximum"
    MINIMUM = "Minimum"
    P50 = "p50"
    P90 = "p90"


class Comparison(StrEnum):
    GREATER_THAN_OR_EQUAL = "GreaterThanOrEqualToThreshold"
    GREATER_THAN = "GreaterThanThreshold"
    LESS_THAN = "LessThanThreshold"
    LESS_THAN_OR_EQUAL = "LessThanOrEqualToThreshold"


class MissingData(StrEnum):
    NOT_BREACHING = "notBreaching"
    BREACHING = "breaching"
    IGNORE = "ignore"
    MISSING = "missing"


@dataclass(frozen=True)
class MetricRef:
    """One metric series: where it lives, how it is aggregated, what it is called."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...] = ()
    stat: Stat = Stat.SUM
    period_seconds: int = 60
    label: str = ""

    @property
    def dimension_map(self) -> dict[str, str]:
        return dict(self.dimensions)


@dataclass(frozen=True)
class Graph:
    """A line graph; ``right`` series use a second axis (durations next to counts)."""

    title: str
    left: tuple[MetricRef, ...]
    right: tuple[MetricRef, ...] = ()
    left_label: str = ""
    right_label: str = ""
    stacked: bool = False
    width: int = 12
    height: int = 6

    @property
    def metrics(self) -> tuple[MetricRef, ...]:
        return self.left + self.right


@dataclass(frozen=True)
class Text:
    markdown: str
    width: int = DASHBOARD_COLUMNS
    height: int = 1

    @property
    def metrics(self) -> tuple[MetricRef, ...]:
        return ()


Widget = Graph | Text


@dataclass(frozen=True)
class Section:
    """A titled band of widgets, laid out left to right and wrapped at 24 columns."""

    title: str
    widgets: tuple[Widget, ...]

    def rows(self) -> list[list[Widget]]:
        """The section's rows, title first: the layout both renderers use."""
        rows: list[list[Widget]] = [[Text(f"## {self.title}")]]
        row: list[Widget] = []
        used = 0
        for widget in self.widgets:
            if row and used + widget.width > DASHBOARD_COLUMNS:
                rows.append(row)
                row, used = [], 0
            row.append(widget)
            used += widget.width
        if row:
            rows.append(row)
        return rows


@dataclass(frozen=True)
class Dashboard:
    name: str
    sections: tuple[Section, ...]

    def rows(self) -> list[list[Widget]]:
        return [row for section in self.sections for row in section.rows()]

    def metrics(self) -> Iterator[MetricRef]:
        for section in self.sections:
            for widget in section.widgets:
                yield from widget.metrics


@dataclass(frozen=True)
class Alarm:
    """An alarm on one metric; ``name`` is unique within the deployment."""

    name: str
    description: str
    metric: MetricRef
    threshold: float
    comparison: Comparison = Comparison.GREATER_THAN_OR_EQUAL
    evaluation_periods: int = 1
    datapoints_to_alarm: int = 1
    missing_data: MissingData = MissingData.NOT_BREACHING


@dataclass(frozen=True)
class MonitoringDescription:
    dashboard: Dashboard
    alarms: tuple[Alarm, ...]


@dataclass(frozen=True)
class DashboardGroup:
    """A node group as the scale function reports it: dimensions Group and Region."""

    name: str
    region: str


@dataclass(frozen=True)
class DashboardTeam:
    """A team as the scale function reports its queue: dimension Team; its GPU quota, if it has one."""

    name: str
    gpu_quota: int | None = None


@dataclass(frozen=True)
class Deployment:
    """The names the description needs; the CDK app and the local runtime each supply theirs."""

    prefix: str
    functions: Mapping[str, str]  # handler ("submit", "scale", ...) -> function name
    jobs_queue: str
    drain_queue: str
    dead_letter_queues: tuple[str, ...]
    groups: tuple[DashboardGroup, ...] = ()
    teams: tuple[DashboardTeam, ...] = ()  # the configured teams (cdk.json ``teams``)
    clusters: tuple[str, ...] = ()  # the configured clusters' names (cdk.json ``clusters``)
    # team -> its monthly budget in dollars, for the teams that have one (cdk.json team ``budget``)
    budgets: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Thresholds:
    """Alarm thresholds (cdk.json context ``alarms``)."""

    oldest_queued_job_seconds: int = 900
    fallbacks: int = 3
    fallback_window_minutes: int = 15
    scale_errors_minutes: int = 3  # minutes with errors, out of the last five
    drains_past_deadline: int = 1


# -- metric helpers ---------------------------------------------------------------


def squall(
    metric: Metric,
    stat: Stat = Stat.SUM,
    *,
    label: str = "",
    period_seconds: int = 60,
    **dimensions: str,
) -> MetricRef:
    """A Squall metric; powertools adds ``service`` to every metric it emits."""
    dims = (("service", SERVICE), *sorted(dimensions.items()))
    return MetricRef(NAMESPACE, str(metric), dims, stat, period_seconds, label or str(metric))


_SPREAD_LABELS = {Stat.P50: "p50", Stat.P90: "p90", Stat.MAXIMUM: "max"}


def _spread(metric: Metric, *stats: Stat) -> tuple[MetricRef, ...]:
    """A duration's spread: one series per statistic, labelled p50, p90, max."""
    return tuple(squall(metric, stat, label=_SPREAD_LABELS[stat]) for stat in stats)


def _in_states(metric: Metric, *states: str) -> tuple[MetricRef, ...]:
    """How many are in each state: one series per state, labelled with it."""
    return tuple(squall(metric, Stat.MAXIMUM, label=state, State=state) for state in states)


def _counts(title: str, *metrics: Metric, left_label: str, width: int) -> Graph:
    """A graph of Squall counters, one series each, summed per minute (their period)."""
    return Graph(title, left=tuple(squall(metric) for metric in metrics), left_label=left_label, width=width)


def _lambda(name: str, function_name: str, stat: Stat, label: str) -> MetricRef:
    return MetricRef(LAMBDA_NAMESPACE, name, (("FunctionName", function_name),), stat, 60, label)


def _sqs(name: str, queue_name: str, stat: Stat, label: str = "") -> MetricRef:
    return MetricRef(SQS_NAMESPACE, name, (("QueueName", queue_name),), stat, 60, label or queue_name)


# -- the description ----------------------------------------------------------------


def describe(deployment: Deployment, thresholds: Thresholds | None = None) -> MonitoringDescription:
    thresholds = thresholds or Thresholds()
    dashboard = Dashboard(
        name=deployment.prefix,
        sections=(
            _intake(deployment),
            _model_services(),
            _queue(deployment.teams),
            _capacity(deployment),
            _groups(deployment.groups),
            _drains(),
            _functions(deployment.functions),
            costs_section(deployment.teams, deployment.groups),
        ),
    )
    alarms = (
        *_alarms(deployment, thresholds),
        *budget_alarms(prefix=deployment.prefix, budgets=deployment.budgets),
    )
    return MonitoringDescription(dashboard=dashboard, alarms=alarms)


def _intake(deployment: Deployment) -> Section:
    queues = (deployment.jobs_queue, deployment.drain_queue, *deployment.dead_letter_queues)
    return Section(
        "Jobs",
        (
            Graph(
                "Queue depth and age of oldest message",
                left=tuple(_sqs("ApproximateNumberOfMessagesVisible", q, Stat.MAXIMUM) for q in queues),
                right=(
                    _sqs(
                        "ApproximateAgeOfOldestMessage",
                        deployment.jobs_queue,
                        Stat.MAXIMUM,
                        f"age {deployment.jobs_queue}",
                    ),
                ),
                left_label="messages",
                right_label="seconds",
                width=8,
            ),
            Graph(
                "Jobs by state",
                left=_in_states(Metric.JOBS_IN_STATE, JobStatus.QUEUED, JobStatus.RUNNING),
                left_label="jobs",
                stacked=True,
                width=8,
            ),
            _counts(
                "Job outcomes",
                Metric.JOBS_SUBMITTED,
                Metric.JOBS_REJECTED,
                Metric.JOBS_SUCCEEDED,
                Metric.JOBS_FAILED,
                Metric.JOBS_CANCELLED,
                Metric.JOB_RETRIES,
                left_label="jobs / minute",
                width=8,
            ),
            Graph(
                "Queue wait (submitted to running)",
                left=_spread(Metric.QUEUE_WAIT_SECONDS, Stat.P50, Stat.P90),
                right=(squall(Metric.OLDEST_QUEUED_SECONDS, Stat.MAXIMUM, label="oldest queued job"),),
                left_label="seconds",
                right_label="seconds",
                width=24,
            ),
        ),
    )


def _model_services() -> Section:
    """Model services by state, and what the reconcile function had to do about them."""
    return Section(
        "Model services",
        (
            Graph(
                "Model services by state",
                left=_in_states(
                    Metric.MODEL_SERVICES_IN_STATE, ServiceStatus.DEPLOYING, ServiceStatus.SERVING
                ),
                left_label="model services",
                stacked=True,
                width=12,
            ),
            _counts(
                "Model service failures and re-created objects",
                Metric.MODEL_SERVICES_FAILED,
                Metric.MODEL_SERVICE_OBJECTS_RECREATED,
                left_label="per minute",
                width=12,
            ),
        ),
    )


def _queue(teams: Sequence[DashboardTeam]) -> Section:
    """The admission queue per team: what waits, what is admitted against the team's quota."""
    ordered = sorted(teams, key=lambda t: t.name)
    widgets: list[Widget] = []
    if ordered:
        widgets.append(
            Graph(
                "Queued jobs by team",
                left=tuple(
                    squall(Metric.QUEUED_JOBS, Stat.MAXIMUM, label=team.name, Team=team.name)
                    for team in ordered
                ),
                left_label="jobs",
                stacked=True,
                width=12,
            )
        )
    widgets.append(
        _counts(
            "Jobs admitted",
            Metric.JOBS_ADMITTED,
            left_label="jobs / minute",
            width=12 if ordered else DASHBOARD_COLUMNS,
        )
    )
    for team in ordered:
        gpus = [
            squall(Metric.QUEUED_GPUS, Stat.MAXIMUM, label="queued", Team=team.name),
            squall(Metric.ADMITTED_GPUS, Stat.MAXIMUM, label="admitted", Team=team.name),
        ]
        if team.gpu_quota is not None:
            gpus.append(squall(Metric.GPU_QUOTA, Stat.MAXIMUM, label="quota", Team=team.name))
        quota = f"quota {team.gpu_quota}" if team.gpu_quota is not None else "no quota"
        widgets.append(
            Graph(
                f"{team.name}: GPUs queued and admitted ({quota})",
                left=tuple(gpus),
                left_label="GPUs",
                width=8,
            )
        )
    if not ordered:
        widgets.append(Text("No teams are configured.", height=2))
    return Section("Queue and admission", tuple(widgets))


def _capacity(deployment: Deployment) -> Section:
    return Section(
        "Capacity",
        (
            Graph(
                "Pending GPUs and in-flight nodes",
                left=(squall(Metric.PENDING_GPUS, Stat.MAXIMUM),),
                right=(
                    squall(Metric.IN_FLIGHT_NODES, Stat.MAXIMUM),
                    squall(Metric.PENDING_PODS, Stat.MAXIMUM),
                ),
                left_label="GPUs",
                right_label="nodes / pods",
                width=12,
            ),
            Graph(
                "Scale-ups, region fallbacks, scale-downs",
                left=(
                    squall(Metric.SCALE_UPS),
                    squall(Metric.FALLBACKS),
                    squall(Metric.SCALE_DOWNS),
                    squall(Metric.UNSCHEDULABLE_PODS, Stat.MAXIMUM),
                ),
                left_label="count / minute",
                width=12,
            ),
            *(
                (
                    Graph(
                        "Clusters the functions could not reach (1: its API failed in that minute)",
                        left=tuple(
                            squall(Metric.CLUSTER_UNREACHABLE, Stat.MAXIMUM, label=name, Cluster=name)
                            for name in deployment.clusters
                        ),
                        left_label="unreachable",
                        width=24,
                    ),
                )
                if len(deployment.clusters) > 1
                else ()
            ),
        ),
    )


def _groups(groups: Sequence[DashboardGroup]) -> Section:
    widgets: list[Widget] = [
        Graph(
            f"{group.name} ({group.region}): desired vs in service",
            left=tuple(
                squall(metric, Stat.MAXIMUM, label=label, Group=group.name, Region=group.region)
                for metric, label in (
                    (Metric.DESIRED_CAPACITY, "desired"),
                    (Metric.IN_SERVICE_CAPACITY, "in service"),
                )
            ),
            left_label="instances",
            width=8,
        )
        for group in sorted(groups, key=lambda g: (g.region, g.name))
    ]
    if not widgets:
        widgets = [Text("No node groups are configured.", height=2)]
    return Section("Node groups", tuple(widgets))


def _drains() -> Section:
    return Section(
        "Lifecycle and drains",
        (
            _counts(
                "Drains",
                Metric.DRAINS_STARTED,
                Metric.DRAINS_COMPLETED,
                Metric.DRAINS_PAST_DEADLINE,
                left_label="drains / minute",
                width=8,
            ),
            Graph(
                "Drain duration",
                left=_spread(Metric.DRAIN_SECONDS, Stat.P50, Stat.P90, Stat.MAXIMUM),
                left_label="seconds",
                width=8,
            ),
            _counts(
                "Lifecycle hooks",
                Metric.HOOKS_COMPLETED,
                Metric.LAUNCHES_ABANDONED,
                left_label="hooks / minute",
                width=8,
            ),
        ),
    )


def _functions(functions: Mapping[str, str]) -> Section:
    names = [functions[handler] for handler in sorted(functions)]
    return Section(
        "Functions",
        (
            Graph(
                "Errors and throttles",
                left=tuple(_lambda("Errors", n, Stat.SUM, f"{n} errors") for n in names),
                right=tuple(_lambda("Throttles", n, Stat.SUM, f"{n} throttles") for n in names),
                left_label="errors",
                right_label="throttles",
                width=12,
            ),
            Graph(
                "Duration p90",
                left=tuple(_lambda("Duration", n, Stat.P90, n) for n in names),
                left_label="milliseconds",
                width=12,
            ),
        ),
    )


def costs_section(teams: Sequence[DashboardTeam], groups: Sequence[DashboardGroup]) -> Section:
    """What each team spent this month (TeamMonthSpend: the scale check emits it for the teams with
    a budget) and what no job held of each group (OverheadCost). A graph would have no series
    without teams or groups; a note stands in its place then, as in the other sections."""
    team_names = sorted(team.name for team in teams)
    group_names = sorted(group.name for group in groups)
    spend: Widget = (
        Graph(
            "Spend this month by team (dollars)",
            left=tuple(
                squall(Metric.TEAM_MONTH_SPEND, Stat.MAXIMUM, label=name, Team=name) for name in team_names
            ),
            left_label="dollars",
            width=12,
        )
        if team_names
        else Text("No teams are configured: no spend to graph.", width=12, height=2)
    )
    overhead: Widget = (
        Graph(
            "Overhead: what no job held, by node group (dollars / minute)",
            left=tuple(
                squall(Metric.OVERHEAD_COST, Stat.SUM, label=name, Group=name) for name in group_names
            ),
            left_label="dollars",
            stacked=True,
            width=12,
        )
        if group_names
        else Text("No node groups are configured: no overhead to graph.", width=12, height=2)
    )
    return Section("Costs", (spend, overhead))


def budget_alarms(*, prefix: str, budgets: Mapping[str, float]) -> tuple[Alarm, ...]:
    """For each team with a monthly budget, an alarm when its spend this month reaches 80% and 100% of it."""
    return tuple(
        Alarm(
            name=f"{prefix}-budget-{team}-{percent}pct",
            description=(
                f"Team {team} has spent {percent}% of its monthly budget (${budget:,.0f}) this month"
                + (
                    ": admission now holds its new jobs (BudgetExceeded) until the month ends or the "
                    "budget is raised; running jobs go on."
                    if percent >= 100
                    else ". At 100% admission holds its new jobs (BudgetExceeded); running jobs go on."
                )
            ),
            metric=squall(
                Metric.TEAM_MONTH_SPEND, Stat.MAXIMUM, period_seconds=SPEND_PERIOD_SECONDS, Team=team
            ),
            threshold=round(budget * percent / 100, 2),
        )
        for team, budget in sorted(budgets.items())
        for percent in BUDGET_ALARM_PERCENTS
    )


def _alarms(deployment: Deployment, thresholds: Thresholds) -> tuple[Alarm, ...]:
    prefix = deployment.prefix
    dead_letters = tuple(
        Alarm(
            name=f"{prefix}-dead-letters-{queue}",
            description=(
                f"Messages in {queue}: they failed processing repeatedly. Read one, fix the "
                "cause, then redrive the queue to its source."
            ),
            metric=_sqs("ApproximateNumberOfMessagesVisible", queue, Stat.MAXIMUM),
            threshold=1,
        )
        for queue in deployment.dead_letter_queues
    )
    window = thresholds.fallback_window_minutes * 60
    scale_function = deployment.functions["scale"]
    return (
        *dead_letters,
        Alarm(
            name=f"{prefix}-oldest-queued-job",
            description=(
                f"A job has waited for capacity longer than {thresholds.oldest_queued_job_seconds} s "
                "for three minutes in a row: check group health, quotas and backoff."
            ),
            metric=squall(Metric.OLDEST_QUEUED_SECONDS, Stat.MAXIMUM),
            threshold=thresholds.oldest_queued_job_seconds,
            comparison=Comparison.GREATER_THAN,
            evaluation_periods=3,
            datapoints_to_alarm=3,
        ),
        Alarm(
            name=f"{prefix}-scale-errors",
            description=(
                f"The scale function ({scale_function}) failed in "
                f"{thresholds.scale_errors_minutes} of the last 5 minutes: capacity is not "
                "being managed. Read its logs."
            ),
            metric=_lambda("Errors", scale_function, Stat.SUM, "scale errors"),
            threshold=1,
            evaluation_periods=5,
            datapoints_to_alarm=thresholds.scale_errors_minutes,
        ),
        Alarm(
            name=f"{prefix}-repeated-fallbacks",
            description=(
                f"{thresholds.fallbacks} or more region fallbacks within "
                f"{thresholds.fallback_window_minutes} minutes: a preferred region keeps "
                "failing to launch GPUs."
            ),
            metric=squall(Metric.FALLBACKS, Stat.SUM, period_seconds=window),
            threshold=thresholds.fallbacks,
        ),
        Alarm(
            name=f"{prefix}-drains-past-deadline",
            description=(
                "A node was terminated before its pods finished draining (drain deadline "
                "reached): jobs may have lost work."
            ),
            metric=squall(Metric.DRAINS_PAST_DEADLINE, Stat.SUM, period_seconds=300),
            threshold=thresholds.drains_past_deadline,
        ),
        *(
            Alarm(
                name=f"{prefix}-cluster-unreachable-{name}",
                description=(
                    f"Cluster {name}'s API could not be read for 5 minutes in a row (timeouts, 5xx or "
                    "expired credentials): its jobs are left as they are and new work goes to the "
                    "other clusters. Check its endpoint, the functions' access entries and its health."
                ),
                metric=squall(Metric.CLUSTER_UNREACHABLE, Stat.MAXIMUM, Cluster=name),
                threshold=1,
                evaluation_periods=5,
                datapoints_to_alarm=5,
            )
            for name in deployment.clusters
            if len(deployment.clusters) > 1
        ),
    )


def validate(monitoring: MonitoringDescription) -> list[str]:
    """Problems that would make a renderer fail or mislead; empty when all is well."""
    problems: list[str] = []
    names = [alarm.name for alarm in monitoring.alarms]
    if len(set(names)) != len(names):
        problems.append("alarm names are not unique")
    for row in monitoring.dashboard.rows():
        width = sum(widget.width for widget in row)
        if width > DASHBOARD_COLUMNS:
            problems.append(f"a row is {width} columns wide")
    for metric in monitoring.dashboard.metrics():
        if metric.period_seconds % 60:
            problems.append(f"{metric.name}: period must be a multiple of 60 s")
    return problems
