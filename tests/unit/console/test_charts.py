"""The console's charts as geometry (console/charts.py): scales, ticks, thinning, odd points."""

from __future__ import annotations

import math

import pytest

from squall.console.charts import (
    MAX_POINTS,
    PALETTE,
    Scale,
    Tick,
    extent,
    line_chart,
    number_label,
    thin,
)


def points_of(text: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (pair.split(",") for pair in text.split())]


# Scale -------------------------------------------------------------------------------------


def test_a_scale_maps_its_ends_onto_the_pixel_range_and_rounds_to_a_tenth() -> None:
    scale = Scale(low=0, high=10, start=56, end=628)
    assert scale(0) == 56 and scale(10) == 628 and scale(5) == 342
    assert scale(1 / 3) == 75.1


def test_a_y_scale_runs_downwards() -> None:
    scale = Scale(low=-1, high=1, start=218, end=10)
    assert scale(-1) == 218 and scale(1) == 10 and scale(0) == 114


def test_a_scale_of_one_value_puts_it_in_the_middle() -> None:
    scale = Scale(low=3, high=3, start=0, end=100)
    assert scale(3) == 50
    assert scale.ticks() == (Tick(50, "3"),)


def test_ticks_span_the_range_evenly() -> None:
    ticks = Scale(low=0, high=100, start=0, end=400).ticks(5)
    assert [t.at for t in ticks] == [0, 100, 200, 300, 400]
    assert [t.label for t in ticks] == ["0", "25", "50", "75", "100"]
    assert len(Scale(0, 1, 0, 10).ticks(3)) == 3


def test_a_scale_over_non_finite_ends_has_no_ticks() -> None:
    assert Scale(low=0, high=math.inf, start=0, end=10).ticks() == ()
    assert Scale(low=math.nan, high=1, start=0, end=10).ticks() == ()


@pytest.mark.parametrize(
    ("value", "label"),
    [
        (0, "0"),
        (0.0, "0"),
        (1, "1"),
        (0.5, "0.5"),
        (12345.678, "1.235e+04"),
        (99999, "1e+05"),
        (123456, "1.23e+05"),
        (0.0005, "5.00e-04"),
        (-0.0005, "-5.00e-04"),
        (-42.5, "-42.5"),
        (0.001, "0.001"),
    ],
)
def test_number_labels_are_short(value: float, label: str) -> None:
    assert number_label(value) == label


# extent and thin ---------------------------------------------------------------------------


def test_extent_ignores_non_finite_values_and_has_a_default() -> None:
    assert extent([3.0, math.nan, -1.0, math.inf, 2.0, -math.inf]) == (-1.0, 3.0)
    assert extent([]) == (0.0, 1.0)
    assert extent([math.nan, math.inf]) == (0.0, 1.0)


def test_a_short_series_is_drawn_whole() -> None:
    points = [(float(i), float(i)) for i in range(MAX_POINTS)]
    assert thin(points) is points


def test_a_long_series_is_thinned_evenly_keeping_its_ends() -> None:
    points = [(float(i), float(i * i)) for i in range(10_001)]
    thinned = thin(points, limit=100)
    assert len(thinned) == 101
    assert thinned[0] == points[0] and thinned[-1] == points[-1]
    xs = [x for x, _ in thinned]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    gaps = {xs[i + 1] - xs[i] for i in range(len(xs) - 2)}
    assert gaps <= {100.0, 101.0} and min(gaps) >= 99  # even strides (the last gap meets the end)


# line_chart --------------------------------------------------------------------------------


def test_a_chart_draws_one_polyline_per_series_on_shared_axes() -> None:
    chart = line_chart({"loss": [(0, 1.0), (10, 0.5), (20, 0.25)], "score": [(0, 0.0), (20, 1.0)]})
    assert (chart.width, chart.height) == (640, 240)
    assert [s.name for s in chart.series] == ["loss", "score"]
    assert [s.colour for s in chart.series] == list(PALETTE[:2])
    loss, score = (points_of(s.points) for s in chart.series)
    left, right = chart.left, chart.width - chart.right
    top, bottom = chart.top, chart.height - chart.bottom
    assert loss[0] == (left, top) and loss[-1] == (right, (top + bottom) / 2 + (bottom - top) / 4)
    assert score == [(left, bottom), (right, top)]
    assert len(chart.x_ticks) == 5 and chart.x_ticks[0].label == "0" and chart.x_ticks[-1].label == "20"
    assert chart.y_ticks[0].at == bottom and chart.y_ticks[-1].at == top


def test_every_point_lies_inside_the_plot_area() -> None:
    chart = line_chart({"a": [(x, math.sin(x / 7) * 1e6) for x in range(-500, 500)]}, width=300, height=120)
    for x, y in points_of(chart.series[0].points):
        assert chart.left <= x <= chart.width - chart.right
        assert chart.top <= y <= chart.height - chart.bottom


def test_non_finite_points_are_left_out_and_do_not_stretch_the_axes() -> None:
    chart = line_chart(
        {"a": [(0, 1.0), (1, math.nan), (2, math.inf), (math.inf, 2.0), (3, -math.inf), (4, 3.0)]}
    )
    drawn = points_of(chart.series[0].points)
    assert len(drawn) == 2
    assert [t.label for t in chart.y_ticks][:: len(chart.y_ticks) - 1] == ["1", "3"]
    assert all(math.isfinite(v) for point in drawn for v in point)


def test_a_series_with_no_finite_point_is_not_drawn() -> None:
    chart = line_chart({"empty": [], "nan": [(math.nan, math.nan)], "ok": [(1, 1.0)]})
    assert [s.name for s in chart.series] == ["ok"]
    assert chart.series[0].colour == PALETTE[2]  # a series keeps its colour by its place


def test_no_series_at_all_is_an_empty_chart_with_default_axes() -> None:
    chart = line_chart({})
    assert chart.series == ()
    assert chart.x_ticks[0].label == "0" and chart.x_ticks[-1].label == "1"


def test_a_long_series_is_thinned_in_the_chart() -> None:
    chart = line_chart({"a": [(float(i), float(i % 7)) for i in range(50_000)]})
    drawn = points_of(chart.series[0].points)
    assert len(drawn) == MAX_POINTS + 1
    assert drawn[-1][0] == chart.width - chart.right


def test_colours_cycle_past_the_palette() -> None:
    chart = line_chart({f"s{i}": [(0, i)] for i in range(len(PALETTE) + 2)})
    assert [s.colour for s in chart.series][len(PALETTE) :] == list(PALETTE[:2])


def test_series_names_are_kept_as_given_for_the_template_to_escape() -> None:
    hostile = "<script>alert(1)</script>"
    chart = line_chart({hostile: [(0, 0), (1, 1)]})
    assert chart.series[0].name == hostile
    assert "<" not in chart.series[0].points
