"""The dashboard drawn locally: the CDK's body JSON, CloudWatch's aggregation, PNG and HTML."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from squall.core import dashboard as spec
from squall.core.telemetry import RecordedMetric
from squall.local.render import (
    dashboard_body,
    graph_series,
    local_deployment,
    render_html,
    render_png,
    series,
    statistic,
    write_dashboard,
)
from squall.planner.admission import TeamShare
from squall.planner.offline import parse_groups

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
GROUPS, _ = parse_groups(
    [
        {
            "name": name,
            "region": region,
            "asgName": f"squall-{name}",
            "instanceType": "p3.2xlarge",
            "allocatable": {"cpu": "7800m", "memory": "55Gi", "nvidia.com/gpu": 1, "pods": 58},
            "maxSize": 16,
        }
        for name, region in (("p3-usw2", "us-west-2"), ("p3-use1", "us-east-1"))
    ]
)
# What the CDK monitoring construct synthesises for these widgets (cdk synth, region token resolved).
CDK_JOBS_BY_STATE = {
    "type": "metric", "width": 8, "height": 6, "x": 8, "y": 1,
    "properties": {
        "view": "timeSeries", "title": "Jobs by state", "region": "us-west-2", "stacked": True,
        "metrics": [
            ["Squall", "JobsInState", "State", "QUEUED", "service", "squall", {"label": "QUEUED", "period": 60, "stat": "Maximum"}],
            ["Squall", "JobsInState", "State", "RUNNING", "service", "squall", {"label": "RUNNING", "period": 60, "stat": "Maximum"}],
        ],
        "yAxis": {"left": {"label": "jobs", "min": 0, "showUnits": False}, "right": {"label": "", "min": 0, "showUnits": False}},
    },
}  # fmt: skip
CDK_GROUP = {
    "type": "metric", "width": 8, "height": 6, "x": 0, "y": 37,
    "properties": {
        "view": "timeSeries", "title": "p3-use1 (us-east-1): desired vs in service", "region": "us-west-2",
        "stacked": False,
        "metrics": [
            ["Squall", "DesiredCapacity", "Group", "p3-use1", "Region", "us-east-1", "service", "squall",
             {"label": "desired", "period": 60, "stat": "Maximum"}],
            ["Squall", "InServiceCapacity", "Group", "p3-use1", "Region", "us-east-1", "service", "squall",
             {"label": "in service", "period": 60, "stat": "Maximum"}],
        ],
        "yAxis": {"left": {"label": "instances", "min": 0, "showUnits": False}, "right": {"label": "", "min": 0, "showUnits": False}},
    },
}  # fmt: skip
CDK_QUEUE_WAIT_METRICS = [
    ["Squall", "QueueWaitSeconds", "service", "squall", {"label": "p50", "period": 60, "stat": "p50"}],
    ["Squall", "QueueWaitSeconds", "service", "squall", {"label": "p90", "period": 60, "stat": "p90"}],
    ["Squall", "OldestQueuedJobAgeSeconds", "service", "squall",
     {"label": "oldest queued job", "period": 60, "stat": "Maximum", "yAxis": "right"}],
]  # fmt: skip


@pytest.fixture(scope="module")
def board() -> spec.Dashboard:
    return spec.describe(local_deployment(GROUPS)).dashboard


def point(minute: float, name: str, value: float, **dimensions: str) -> RecordedMetric:
    return RecordedMetric(
        at=START + timedelta(minutes=minute), name=name, value=value, unit="Count", dimensions=dimensions
    )


def test_the_body_is_what_the_cdk_construct_synthesises(board: spec.Dashboard) -> None:
    body = dashboard_body(board, region="us-west-2")
    assert body["start"] == "-PT3H"
    widgets = body["widgets"]
    assert widgets[0] == {
        "type": "text",
        "width": 24,
        "height": 1,
        "x": 0,
        "y": 0,
        "properties": {"markdown": "## Jobs"},
    }
    assert CDK_JOBS_BY_STATE in widgets
    assert CDK_GROUP in widgets
    queue_wait = next(
        w for w in widgets if w["properties"].get("title") == "Queue wait (submitted to running)"
    )
    assert queue_wait["properties"]["metrics"] == CDK_QUEUE_WAIT_METRICS


def test_the_body_lays_every_row_out_on_24_columns_without_overlap(board: spec.Dashboard) -> None:
    cells: set[tuple[int, int]] = set()
    for widget in dashboard_body(board)["widgets"]:
        assert widget["x"] + widget["width"] <= 24
        mine = {
            (widget["x"] + dx, widget["y"] + dy)
            for dx in range(widget["width"])
            for dy in range(widget["height"])
        }
        assert not cells & mine
        cells |= mine
    graphed = sum(len(w.metrics) for row in board.rows() for w in row)
    assert graphed == sum(len(w["properties"].get("metrics", [])) for w in dashboard_body(board)["widgets"])


def test_local_names_are_the_local_runtimes() -> None:
    deployment = local_deployment(GROUPS)
    assert deployment.jobs_queue == "squall-jobs" and deployment.dead_letter_queues == ("squall-jobs-dlq",)
    assert deployment.functions["scale"] == "squall-scale"
    assert [(g.name, g.region) for g in deployment.groups] == [
        ("p3-usw2", "us-west-2"),
        ("p3-use1", "us-east-1"),
    ]


@pytest.mark.parametrize(
    ("stat", "expected"),
    [(spec.Stat.SUM, 16.0), (spec.Stat.AVERAGE, 4.0), (spec.Stat.MAXIMUM, 10.0), (spec.Stat.MINIMUM, 1.0),
     (spec.Stat.P50, 2.0), (spec.Stat.P90, 10.0)],
)  # fmt: skip
def test_statistics_as_cloudwatch_computes_them(stat: spec.Stat, expected: float) -> None:
    assert statistic(stat, [3.0, 1.0, 10.0, 2.0]) == expected


def test_series_bucket_by_period_and_match_the_whole_dimension_set() -> None:
    ref = spec.squall(spec.Metric.JOBS_IN_STATE, spec.Stat.MAXIMUM, label="QUEUED", State="QUEUED")
    points = [
        point(0.2, "JobsInState", 3, State="QUEUED"),
        point(0.9, "JobsInState", 5, State="QUEUED"),
        point(0.5, "JobsInState", 99, State="RUNNING"),  # another series
        point(0.5, "JobsInState", 77),  # no State: another series too
        point(3.1, "JobsInState", 1, State="QUEUED"),  # minutes 1 and 2 have no data: a gap
    ]
    found = series(ref, points, start=START)
    assert found.label == "QUEUED"
    assert found.times == [START, START + timedelta(minutes=3)]
    assert found.values == [5, 1]


def test_lambda_and_sqs_metrics_fill_the_aws_graphs(board: spec.Dashboard) -> None:
    # given the points the local runtime records as Lambda and SQS publish them
    graphs = {w.title: w for row in board.rows() for w in row if isinstance(w, spec.Graph)}
    points = [
        point(1, "Errors", 1, FunctionName="squall-scale"),
        point(1.1, "Errors", 1, FunctionName="squall-scale"),
        point(1.2, "Errors", 0, FunctionName="squall-submit"),
        point(1.2, "Throttles", 0, FunctionName="squall-submit"),
        point(1, "Duration", 40, FunctionName="squall-submit"),
        point(1.5, "Duration", 90, FunctionName="squall-submit"),
        point(2, "ApproximateNumberOfMessagesVisible", 6, QueueName="squall-jobs"),
        point(2, "ApproximateAgeOfOldestMessage", 30, QueueName="squall-jobs"),
        point(2, "ApproximateNumberOfMessagesVisible", 1, QueueName="squall-jobs-dlq"),
    ]
    # when each graph reads them
    errors = {s.label: s.values for s in graph_series(graphs["Errors and throttles"], points, start=START)}
    durations = {s.label: s.values for s in graph_series(graphs["Duration p90"], points, start=START)}
    queues = {
        s.label: s.values
        for s in graph_series(graphs["Queue depth and age of oldest message"], points, start=START)
    }
    # then each lands in its own function's or queue's series, aggregated as CloudWatch does
    assert errors["squall-scale errors"] == [2.0]
    assert errors["squall-submit errors"] == [0.0] and errors["squall-submit throttles"] == [0.0]
    assert errors["squall-drain errors"] == []
    assert durations["squall-submit"] == [90.0]
    assert queues == {
        "squall-jobs": [6.0],
        "squall-drain": [],
        "squall-jobs-dlq": [1.0],
        "age squall-jobs": [30.0],
    }


@pytest.mark.slow  # matplotlib draws every widget to a PNG
def test_png_and_html_show_every_widget(board: spec.Dashboard, tmp_path: Path) -> None:
    points = [point(m, "PendingGpus", m * 2) for m in range(10)] + [
        point(m, "DesiredCapacity", 3, Group="p3-usw2", Region="us-west-2") for m in range(10)
    ]
    png = render_png(board, points, tmp_path / "d.png", start=START, end=START + timedelta(minutes=10))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    page = render_html(
        board, points, tmp_path / "d.html", start=START, end=START + timedelta(minutes=10)
    ).read_text()
    graphs = [w for row in board.rows() for w in row if isinstance(w, spec.Graph)]
    assert page.count("<svg") == len(graphs)
    for graph in graphs:
        assert f'title="{graph.title}"' in page
    assert "## " not in page and "<h2>Node groups</h2>" in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "self-contained: nothing fetched from elsewhere"


def test_write_dashboard_writes_png_html_and_the_body(tmp_path: Path) -> None:
    files = write_dashboard(
        tmp_path / "out",
        groups=GROUPS,
        points=[point(1, "ScaleUps", 2)],
        start=START,
        end=START + timedelta(minutes=3),
    )
    assert files.png.exists() and files.html.exists() and files.created is None
    assert '"title": "Scale-ups, region fallbacks, scale-downs"' in files.body.read_text()


# What the local scale checks emit: spend this month for the teams with a budget (research),
# what no job held of each group since the last check.
COST_POINTS = [
    point(1, "TeamMonthSpend", 12.5, Team="research"),
    point(1.5, "TeamMonthSpend", 13.25, Team="research"),
    point(2, "TeamMonthSpend", 14.0, Team="research"),
    point(1, "OverheadCost", 0.25, Group="p3-usw2"),
    point(1.5, "OverheadCost", 0.5, Group="p3-usw2"),
    point(2, "OverheadCost", 0.75, Group="p3-use1"),
    point(2, "TeamBudget", 500, Team="research"),  # another metric: in no Costs series
]
COST_TEAMS = {"research": TeamShare(quota=16), "vision": TeamShare()}


def test_the_costs_section_graphs_recorded_spend_per_team_and_overhead_per_group() -> None:
    # given the local dashboard of two teams and two groups, and the points the run recorded
    points = COST_POINTS
    board = spec.describe(local_deployment(GROUPS, COST_TEAMS)).dashboard
    # when the body is laid out and each Costs graph reads the points
    body = dashboard_body(board, region="us-west-2")["widgets"]
    by_title = {w["properties"].get("title"): w for w in body if w["type"] == "metric"}
    spend = by_title["Spend this month by team (dollars)"]
    overhead = by_title["Overhead: what no job held, by node group (dollars / minute)"]
    costs = {
        w.title: w
        for section in board.sections
        if section.title == "Costs"
        for w in section.widgets
        if isinstance(w, spec.Graph)
    }
    # then the body has the Costs title and both graphs, as the CDK construct synthesises them
    assert {"type": "text", "width": 24, "height": 1, "x": 0, "y": spend["y"] - 1,
            "properties": {"markdown": "## Costs"}} in body  # fmt: skip
    assert spend["properties"]["metrics"] == [
        ["Squall", "TeamMonthSpend", "Team", team, "service", "squall",
         {"label": team, "period": 60, "stat": "Maximum"}]
        for team in ("research", "vision")
    ]  # fmt: skip
    assert overhead["properties"]["stacked"] is True
    assert [m[1:4] for m in overhead["properties"]["metrics"]] == [
        ["OverheadCost", "Group", "p3-use1"],
        ["OverheadCost", "Group", "p3-usw2"],
    ]
    # and the series come from the recorded points, aggregated as CloudWatch does
    spent = graph_series(costs["Spend this month by team (dollars)"], points, start=START)
    assert {s.label: s.values for s in spent} == {"research": [13.25, 14.0], "vision": []}
    held = graph_series(costs[overhead["properties"]["title"]], points, start=START)
    assert {s.label: s.values for s in held} == {"p3-use1": [0.75], "p3-usw2": [0.75]}


@pytest.mark.slow  # matplotlib draws every widget
def test_the_local_dashboard_files_draw_the_costs_section(tmp_path: Path) -> None:
    files = write_dashboard(
        tmp_path / "out",
        groups=GROUPS,
        points=COST_POINTS,
        start=START,
        end=START + timedelta(minutes=5),
        teams=COST_TEAMS,
    )
    page = files.html.read_text()
    assert "<h2>Costs</h2>" in page
    for title in (
        "Spend this month by team (dollars)",
        "Overhead: what no job held, by node group (dollars / minute)",
    ):
        assert f'title="{title}"' in page
        assert f'"title": "{title}"' in files.body.read_text()
