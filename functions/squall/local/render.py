"""The CloudWatch dashboard, drawn locally from the metrics the functions emitted.

squall.core.dashboard describes the dashboard once, its Costs section included (each
team's TeamMonthSpend, each group's OverheadCost, as the local scale checks emit them);
the CDK monitoring construct deploys it, and this module renders the same description
three ways:

- `dashboard_body`: the dashboard body JSON exactly as the CDK construct synthesises
  it (same widgets, positions, metric arrays and axes), put on the local endpoint
  with `put_dashboard` when the run used moto;
- `render_png`: one image of the whole dashboard (matplotlib, Agg);
- `render_html`: a self-contained page, one inline SVG per graph, laid out on
  CloudWatch's 24-column grid.

Series are aggregated as CloudWatch aggregates them: points whose namespace, name
and full dimension set match the graphed metric (powertools adds ``service`` to
every metric it emits), bucketed by the metric's period, reduced by its statistic
(Sum, Average, Minimum, Maximum, pNN nearest-rank); an empty period is a gap.
AWS-namespace metrics are not emitted by Squall's code: the local runtime records
them in the same recorder, as Lambda and SQS would publish them (Invocations,
Errors, Duration, Throttles per FunctionName; queue depth and age of the oldest
message per QueueName).
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from squall.core import dashboard as spec
from squall.core.telemetry import NAMESPACE, SERVICE, RecordedMetric
from squall.local.aws import DEAD_LETTER_QUEUE, DRAIN_QUEUE, JOBS_QUEUE, REGION
from squall.local.lambda_events import FUNCTION_PREFIX, HANDLERS, function_name
from squall.planner import NodeGroup
from squall.planner.admission import TeamShare

PREFIX = FUNCTION_PREFIX
DEFAULT_INTERVAL = "-PT3H"  # the CDK construct's default_interval
UNIT_HEIGHT_INCHES = 0.42
FIGURE_WIDTH_INCHES = 22.0


def local_deployment(groups: Sequence[NodeGroup], teams: Mapping[str, TeamShare] | None = None) -> spec.Deployment:
    """The names the local runtime uses, where the CDK app uses its own; `teams` as admission has them."""
    return spec.Deployment(
        prefix=PREFIX,
        functions={handler: function_name(handler) for handler in HANDLERS},
        jobs_queue=JOBS_QUEUE,
        drain_queue=DRAIN_QUEUE,
        dead_letter_queues=(DEAD_LETTER_QUEUE,),
        groups=tuple(spec.DashboardGroup(g.name, g.region) for g in groups),
        teams=tuple(spec.DashboardTeam(name, share.quota) for name, share in sorted((teams or {}).items())),
    )


# ---- the dashboard body, as the CDK construct synthesises it ----------------------------------


def dashboard_body(board: spec.Dashboard, *, region: str = REGION) -> dict[str, Any]:
    widgets: list[dict[str, Any]] = []
    y = 0
    for row in board.rows():
        x = 0
        for widget in row:
            widgets.append(_widget_json(widget, x=x, y=y, region=region))
            x += widget.width
        y += max(widget.height for widget in row)
    return {"start": DEFAULT_INTERVAL, "widgets": widgets}


def _widget_json(widget: spec.Widget, *, x: int, y: int, region: str) -> dict[str, Any]:
    place = {"width": widget.width, "height": widget.height, "x": x, "y": y}
    if isinstance(widget, spec.Text):
        return {"type": "text", **place, "properties": {"markdown": widget.markdown}}
    metrics = [_metric_json(m, right=False) for m in widget.left] + [
        _metric_json(m, right=True) for m in widget.right
    ]
    return {
        "type": "metric",
        **place,
        "properties": {
            "view": "timeSeries",
            "title": widget.title,
            "region": region,
            "stacked": widget.stacked,
            "metrics": metrics,
            "yAxis": {
                "left": {"label": widget.left_label, "min": 0, "showUnits": False},
                "right": {"label": widget.right_label, "min": 0, "showUnits": False},
            },
        },
    }


def _metric_json(ref: spec.MetricRef, *, right: bool) -> list[Any]:
    options: dict[str, Any] = {"period": ref.period_seconds, "stat": str(ref.stat)}
    if ref.label:
        options["label"] = ref.label
    if right:
        options["yAxis"] = "right"
    # CloudWatch's metric array: namespace, name, then dimension name/value pairs (by name).
    dimensions = [part for key, value in sorted(ref.dimensions) for part in (key, value)]
    return [ref.namespace, ref.name, *dimensions, options]


def put_dashboard(endpoint: str, *, name: str, body: dict[str, Any], region: str = REGION) -> str:
    """Create (or replace) the dashboard on the local endpoint, as the CDK stack does in AWS; its ARN."""
    from squall.local.aws import client

    cloudwatch = client("cloudwatch", endpoint, region=region)
    cloudwatch.put_dashboard(DashboardName=name, DashboardBody=json.dumps(body))
    return str(cloudwatch.get_dashboard(DashboardName=name)["DashboardArn"])


# ---- series ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    label: str
    times: list[datetime]  # the start of each period that has data
    values: list[float]
    right: bool = False


def _matches(ref: spec.MetricRef, point: RecordedMetric) -> bool:
    if point.name != ref.name:
        return False
    if ref.namespace == NAMESPACE:
        # powertools puts `service` on every metric it emits.
        return ref.dimension_map == {"service": SERVICE, **point.dimensions}
    return ref.dimension_map == point.dimensions


def statistic(stat: spec.Stat, values: Sequence[float]) -> float:
    if stat is spec.Stat.SUM:
        return sum(values)
    if stat is spec.Stat.AVERAGE:
        return sum(values) / len(values)
    if stat is spec.Stat.MAXIMUM:
        return max(values)
    if stat is spec.Stat.MINIMUM:
        return min(values)
    fraction = int(str(stat).removeprefix("p")) / 100
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def series(
    ref: spec.MetricRef, points: Iterable[RecordedMetric], *, start: datetime, right: bool = False
) -> Series:
    period = timedelta(seconds=ref.period_seconds)
    buckets: dict[int, list[float]] = {}
    for point in points:
        if _matches(ref, point):
            buckets.setdefault((point.at - start) // period, []).append(point.value)
    ordered = sorted(buckets)
    return Series(
        label=ref.label or ref.name,
        times=[start + index * period for index in ordered],
        values=[statistic(ref.stat, buckets[index]) for index in ordered],
        right=right,
    )


def graph_series(graph: spec.Graph, points: Sequence[RecordedMetric], *, start: datetime) -> list[Series]:
    return [series(m, points, start=start) for m in graph.left] + [
        series(m, points, start=start, right=True) for m in graph.right
    ]


# ---- drawing ----------------------------------------------------------------------------------------


def _draw_graph(ax: Any, graph: spec.Graph, found: list[Series], *, start: datetime, end: datetime) -> None:
    import matplotlib.dates as mdates

    ax.set_title(graph.title, fontsize=9, loc="left")
    ax.set_xlim(start, end)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=start.tzinfo))
    ax.tick_params(labelsize=7)
    ax.set_ylabel(graph.left_label, fontsize=7)
    ax.grid(alpha=0.3)
    right_ax = None
    if graph.right:
        right_ax = ax.twinx()
        right_ax.set_ylabel(graph.right_label, fontsize=7)
        right_ax.tick_params(labelsize=7)
    left = [s for s in found if not s.right and s.values]
    if graph.stacked and left:
        _stack(ax, left)
    else:
        for line in left:
            ax.plot(line.times, line.values, marker=".", markersize=3, linewidth=1.2, label=line.label)
    for line in found:
        if line.right and line.values and right_ax is not None:
            right_ax.plot(line.times, line.values, linestyle="--", linewidth=1.2, label=line.label)
    ax.set_ylim(bottom=0)
    if right_ax is not None:
        right_ax.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    if right_ax is not None:
        more_handles, more_labels = right_ax.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    if handles:
        ax.legend(handles, labels, fontsize=6, loc="upper left", ncol=2, frameon=False)
    else:
        ax.text(
            0.5, 0.5, "No data available.", transform=ax.transAxes, ha="center", va="center", color="grey"
        )


def _stack(ax: Any, lines: list[Series]) -> None:
    times = sorted({t for line in lines for t in line.times})
    columns = [[dict(zip(line.times, line.values, strict=True)).get(t, 0.0) for t in times] for line in lines]
    ax.stackplot(times, columns, labels=[line.label for line in lines], alpha=0.7)


def _draw_text(ax: Any, text: spec.Text) -> None:
    ax.axis("off")
    title = text.markdown.lstrip("#").strip()
    ax.text(0.0, 0.5, title, fontsize=12 if text.markdown.startswith("#") else 9, weight="bold", va="center")


def _rect(place: dict[str, Any], *, rows: int) -> tuple[float, float, float, float]:
    """A widget's axes in figure fractions: its grid cell less room for title and tick labels."""
    column = 1 / spec.DASHBOARD_COLUMNS
    row = 1 / rows
    text = place["height"] == 1
    left = place["x"] * column + (0.002 if text else 0.9 * column)
    right = (place["x"] + place["width"]) * column - (0.002 if text else 0.9 * column)
    top = 1 - place["y"] * row - (0.0 if text else 0.45 * row)
    bottom = 1 - (place["y"] + place["height"]) * row + (0.0 if text else 0.75 * row)
    return left, bottom, right - left, top - bottom


def render_png(
    board: spec.Dashboard, points: Sequence[RecordedMetric], path: Path, *, start: datetime, end: datetime
) -> Path:
    """The whole dashboard as one PNG, widgets where CloudWatch puts them."""
    from matplotlib.figure import Figure

    layout = dashboard_body(board)["widgets"]
    rows = max(w["y"] + w["height"] for w in layout) + 2  # two rows for the figure's title
    figure = Figure(figsize=(FIGURE_WIDTH_INCHES, rows * UNIT_HEIGHT_INCHES))
    figure.text(
        0.01,
        1 - 1 / rows,
        f"{board.name}: {start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC on the virtual clock",
        fontsize=14,
        weight="bold",
    )
    widgets = [w for row in board.rows() for w in row]
    for widget, place in zip(widgets, layout, strict=True):
        ax = figure.add_axes(_rect(place | {"y": place["y"] + 2}, rows=rows))
        if isinstance(widget, spec.Text):
            _draw_text(ax, widget)
        else:
            _draw_graph(ax, widget, graph_series(widget, points, start=start), start=start, end=end)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    return path


def _graph_svg(graph: spec.Graph, points: Sequence[RecordedMetric], *, start: datetime, end: datetime) -> str:
    from matplotlib.figure import Figure

    figure = Figure(
        figsize=(graph.width * FIGURE_WIDTH_INCHES / 24, graph.height * UNIT_HEIGHT_INCHES * 1.15)
    )
    ax = figure.add_subplot()
    _draw_graph(ax, graph, graph_series(graph, points, start=start), start=start, end=end)
    figure.tight_layout()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def render_html(
    board: spec.Dashboard, points: Sequence[RecordedMetric], path: Path, *, start: datetime, end: datetime
) -> Path:
    """A self-contained page: the same grid, one inline SVG per graph, no external files."""
    cells = []
    for widget, place in zip(
        (w for row in board.rows() for w in row), dashboard_body(board)["widgets"], strict=True
    ):
        style = (
            f"grid-column: {place['x'] + 1} / span {place['width']}; "
            f"grid-row: {place['y'] + 1} / span {place['height']};"
        )
        if isinstance(widget, spec.Text):
            content = f"<h2>{html.escape(widget.markdown.lstrip('#').strip())}</h2>"
            cells.append(f'<div class="text" style="{style}">{content}</div>')
        else:
            svg = _graph_svg(widget, points, start=start, end=end)
            cells.append(
                f'<div class="graph" style="{style}" title="{html.escape(widget.title)}">{svg}</div>'
            )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(board.name)} dashboard (local)</title>
<style>
body {{ font-family: sans-serif; margin: 1em; background: #fafafa; }}
.board {{ display: grid; grid-template-columns: repeat(24, 1fr); grid-auto-rows: 2.6em; gap: 0.4em; }}
.graph {{ background: white; border: 1px solid #ddd; overflow: hidden; }}
.graph svg {{ width: 100%; height: 100%; }}
.text h2 {{ margin: 0.2em 0; font-size: 1.2em; }}
</style></head>
<body>
<h1>{html.escape(board.name)}</h1>
<p>{start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC on the virtual clock; drawn from the metrics the functions emitted
during the run, laid out from the same description the CDK stack deploys.</p>
<div class="board">
{chr(10).join(cells)}
</div>
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


@dataclass(frozen=True)
class DashboardFiles:
    png: Path
    html: Path
    body: Path
    created: str | None = None  # the dashboard's ARN on the local endpoint, when there was one


def write_dashboard(
    directory: Path,
    *,
    groups: Sequence[NodeGroup],
    points: Sequence[RecordedMetric],
    start: datetime,
    end: datetime,
    endpoint: str | None = None,
    teams: Mapping[str, TeamShare] | None = None,
) -> DashboardFiles:
    """PNG, HTML and the body JSON under `directory`; on a local endpoint, the dashboard too."""
    monitoring = spec.describe(local_deployment(groups, teams))
    board = monitoring.dashboard
    body = dashboard_body(board)
    directory.mkdir(parents=True, exist_ok=True)
    body_path = directory / f"{board.name}.json"
    body_path.write_text(json.dumps(body, indent=1))
    created = put_dashboard(endpoint, name=board.name, body=body) if endpoint is not None else None
    end = max(end, start + timedelta(minutes=5))
    return DashboardFiles(
        png=render_png(board, points, directory / f"{board.name}.png", start=start, end=end),
        html=render_html(board, points, directory / f"{board.name}.html", start=start, end=end),
        body=body_path,
        created=created,
    )
