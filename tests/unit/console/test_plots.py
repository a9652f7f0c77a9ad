"""console/plots.py: a sweep's scatter and parallel coordinates, and stacked bars, as geometry."""

from __future__ import annotations

import math

import pytest

from squall.console.plots import (
    BEST_COLOUR,
    STOPPED_COLOUR,
    LogScale,
    PlotAxis,
    PlotTrial,
    axis_place,
    bars,
    parallel,
    scatter,
)


def trial(name: str, value: float | None, **parameters: object) -> PlotTrial:
    return PlotTrial(name=name, parameters=parameters, value=value)


def points(line: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.split())]


def test_a_linear_scatter_puts_the_extremes_at_the_plot_edges_and_higher_values_higher() -> None:
    trials = [trial("a", 0.2, dropout=0.0), trial("b", 0.8, dropout=0.5), trial("c", 0.5, dropout=0.25)]
    chart = scatter(trials, PlotAxis("dropout"), objective="eval/score", width=400, height=300)
    by_name = {m.name: m for m in chart.marks}
    assert by_name["a"].x == chart.left and by_name["b"].x == 400 - chart.right
    assert by_name["c"].x == pytest.approx((chart.left + 400 - chart.right) / 2, abs=0.1)
    assert by_name["a"].y == 300 - chart.bottom and by_name["b"].y == chart.top  # y grows upward
    assert not chart.log_x and chart.left_out == 0
    assert (chart.y_ticks[0].label, chart.y_ticks[-1].label) == ("0.2", "0.8")


def test_a_log_axis_spaces_powers_of_ten_evenly_and_ticks_at_each() -> None:
    trials = [trial("a", 0.1, lr=0.0001), trial("b", 0.2, lr=0.01), trial("c", 0.3, lr=0.001)]
    chart = scatter(trials, PlotAxis("lr", log=True, domain=(0.0001, 0.1)), objective="score", width=400)
    assert chart.log_x
    xs = {m.name: m.x for m in chart.marks}
    # 1e-4 .. 1e-1 is three decades: 1e-3 a third of the way, 1e-2 two thirds
    span = 400 - chart.right - chart.left
    assert xs["a"] == chart.left
    assert xs["c"] == pytest.approx(chart.left + span / 3, abs=0.1)
    assert xs["b"] == pytest.approx(chart.left + 2 * span / 3, abs=0.1)
    assert [t.label for t in chart.x_ticks] == ["1.00e-04", "0.001", "0.01", "0.1"]


def test_a_log_scale_within_one_decade_ticks_its_ends() -> None:
    scale = LogScale(2.0, 5.0, 0, 100)
    assert [t.label for t in scale.ticks()] == ["2", "5"]
    assert scale(2.0) == 0 and scale(5.0) == 100


def test_non_finite_values_and_values_a_log_axis_cannot_hold_are_left_out_and_counted() -> None:
    trials = [
        trial("ok", 0.5, lr=0.01),
        trial("nan-value", math.nan, lr=0.01),
        trial("no-value", None, lr=0.01),
        trial("inf-parameter", 0.4, lr=math.inf),
        trial("zero-on-log", 0.4, lr=0.0),
        trial("no-parameter", 0.4),
    ]
    chart = scatter(trials, PlotAxis("lr", log=True), objective="score")
    assert [m.name for m in chart.marks] == ["ok"]
    assert chart.left_out == 5
    for mark in chart.marks:
        assert math.isfinite(mark.x) and math.isfinite(mark.y)


def test_text_values_make_a_categorical_axis_in_the_order_the_trials_took_them() -> None:
    trials = [trial("a", 0.1, opt="sgd"), trial("b", 0.2, opt="adam"), trial("c", 0.3, opt="sgd")]
    place, ticks, log = axis_place(PlotAxis("opt"), trials, start=0, end=100)
    assert [t.label for t in ticks] == ["sgd", "adam"] and not log
    assert place("sgd") == 25 and place("adam") == 75 and place("rmsprop") is None


def test_named_categories_come_first_and_a_value_outside_them_still_has_a_place() -> None:
    trials = [trial("a", 0.1, opt="sgd"), trial("b", 0.2, opt="rmsprop")]
    _, ticks, _ = axis_place(PlotAxis("opt", categories=("adam", "sgd")), trials, start=0, end=90)
    assert [t.label for t in ticks] == ["adam", "sgd", "rmsprop"]


def test_parallel_coordinates_draw_one_polyline_per_trial_through_each_axis_and_the_objective() -> None:
    trials = [
        trial("t0", 0.9, lr=0.001, dropout=0.1, opt="adam"),
        trial("t1", 0.3, lr=0.1, dropout=0.4, opt="sgd"),
        PlotTrial("t2", {"lr": 0.01, "dropout": 0.2, "opt": "adam"}, 0.5, stopped=True),
        trial("t3", None, lr=0.01, dropout=0.2, opt="adam"),  # no value yet: not drawn
    ]
    axes = [PlotAxis("lr", log=True, domain=(0.0001, 0.1)), PlotAxis("dropout"), PlotAxis("opt")]
    chart = parallel(trials, axes, objective="eval/score", width=700, height=300)
    assert [a.name for a in chart.axes] == ["lr", "dropout", "opt", "eval/score"]
    assert sorted(line.name for line in chart.lines) == ["t0", "t1", "t2"]
    assert chart.left_out == 1
    for line in chart.lines:
        drawn = points(line.points)
        assert [x for x, _ in drawn] == [a.x for a in chart.axes]
    # the objective is the last axis: the best value at the top, the worst at the bottom
    last = {line.name: points(line.points)[-1][1] for line in chart.lines}
    assert last["t0"] == chart.top and last["t1"] == 300 - chart.bottom
    stopped = next(line for line in chart.lines if line.name == "t2")
    assert stopped.stopped and stopped.colour == STOPPED_COLOUR
    assert chart.lines[0].name == "t2"  # stopped ones under the others


def test_the_best_trial_is_drawn_last_in_its_own_colour() -> None:
    trials = [PlotTrial("best", {"x": 1.0}, 0.9, best=True), trial("other", 0.1, x=2.0)]
    chart = scatter(trials, PlotAxis("x"), objective="score")
    assert chart.marks[-1].name == "best" and chart.marks[-1].colour == BEST_COLOUR


def test_bars_stack_each_rows_amounts_on_one_scale() -> None:
    rows = [
        ("research 2026-04", [("jobs", 300.0), ("overhead", 100.0)]),
        ("vision 2026-04", [("jobs", 100.0), ("overhead", 0.0)]),
        ("(unattributed) 2026-04", [("overhead", math.nan)]),
    ]
    drawn = bars(rows, colours={"jobs": "#111111", "overhead": "#222222"}, width=200)
    first, second, third = drawn
    assert [(s.x, s.width, s.colour) for s in first.segments] == [(0, 150, "#111111"), (150, 50, "#222222")]
    assert [(s.x, s.width) for s in second.segments] == [(0, 50)]
    assert third.segments == () and third.total == 0
    assert first.total == 400


def test_long_names_and_categories_are_cut_on_the_chart_and_kept_whole_as_the_axis_name() -> None:
    long = "a_parameter_with_a_very_long_name"
    trials = [trial("t0", 0.5, **{long: "a-category-name-too-long", "x": 1.0})]
    chart = parallel(trials, [PlotAxis(long), PlotAxis("x")], objective="score")
    assert chart.axes[0].name == long and chart.axes[0].label == long[:23] + "\u2026"
    assert [t.label for t in chart.axes[0].ticks] == ["a-category-\u2026"]
    assert len(chart.lines) == 1
