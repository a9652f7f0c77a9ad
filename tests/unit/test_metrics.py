"""core/metrics.py: `squall-metric` lines parsed, merged into a bounded record, stored and read back."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall.core.metrics import (
    HISTORY_POINTS,
    MAX_CURSOR_CHARS,
    MAX_LINE_CHARS,
    MAX_METRICS,
    MAX_RECORD_BYTES,
    JobMetrics,
    MetricLine,
    MetricPoint,
    MetricSeries,
    describe_metrics,
    from_json,
    from_record,
    merge,
    parse_metric_line,
    record_size,
    to_json,
    to_record,
)

# ---- parsing ----


def test_a_metric_line_gives_its_values_and_step() -> None:
    assert parse_metric_line("squall-metric train/loss=0.231 eval/score=9e-1 step=400\n") == MetricLine(
        values=(("train/loss", 0.231), ("eval/score", 0.9)), step=400, ignored=0
    )


def test_blanks_before_the_prefix_are_allowed_and_the_step_may_be_left_out() -> None:
    assert parse_metric_line("   squall-metric acc=-.5\tloss=+3") == MetricLine(
        values=(("acc", -0.5), ("loss", 3.0)), step=None, ignored=0
    )


@pytest.mark.parametrize(
    "text",
    ["", "hello world", "loss=0.3", "squall-metrics loss=1", "squall-metric=1", "INFO squall-metric loss=1"],
)
def test_other_lines_are_no_metric_lines(text: str) -> None:
    assert parse_metric_line(text) is None


@pytest.mark.parametrize(
    "part",
    [
        "loss=nan",
        "loss=inf",
        "loss=-Infinity",
        "loss=1e999",
        "loss=",
        "loss",
        "loss=0x10",
        "loss=1_000",
        "loss=1,5",
        "lo ss",
        "/loss=1",
        "l" * 65 + "=1",
        "l\u00e9ss=1",
        "loss=\u0661",
    ],
)
def test_a_bad_part_is_ignored_and_counted_and_the_rest_kept(part: str) -> None:
    parsed = parse_metric_line(f"squall-metric good=1 {part} step=3")
    assert parsed is not None
    assert parsed.values == (("good", 1.0),) and parsed.step == 3 and parsed.ignored >= 1


@pytest.mark.parametrize("step", ["-1", "1.5", "x", "", "1" * 17, "\u0661"])
def test_a_bad_step_ignores_the_whole_line(step: str) -> None:
    assert parse_metric_line(f"squall-metric loss=1 step={step}") == MetricLine(
        values=(), step=None, ignored=1
    )


def test_a_line_over_the_length_limit_is_ignored_whole() -> None:
    line = "squall-metric loss=1 " + "x" * MAX_LINE_CHARS
    assert parse_metric_line(line) == MetricLine(values=(), step=None, ignored=1)
    fits = "squall-metric loss=1 " + "1" * (MAX_LINE_CHARS - len("squall-metric loss=1 ") - 5) + "=1"
    assert parse_metric_line(fits) is not None and parse_metric_line(fits).values[0] == ("loss", 1.0)  # type: ignore[union-attr]


def test_a_line_without_values_counts_once() -> None:
    assert parse_metric_line("squall-metric") == MetricLine(values=(), step=None, ignored=1)
    assert parse_metric_line("squall-metric step=4") == MetricLine(values=(), step=None, ignored=1)


# ---- merging ----


def test_points_take_their_step_or_the_metric_s_next_one() -> None:
    metrics = merge(
        None,
        [
            "squall-metric loss=3",
            "squall-metric loss=2",
            "squall-metric loss=4 step=10",
            "squall-metric loss=1",
        ],
        cursor="c-1",
    )
    loss = metrics.get("loss")
    assert loss is not None
    assert [(p.step, p.value) for p in loss.history] == [(0, 3.0), (1, 2.0), (10, 4.0), (11, 1.0)]
    assert (loss.last, loss.min, loss.max) == (
        MetricPoint(11, 1.0),
        MetricPoint(11, 1.0),
        MetricPoint(10, 4.0),
    )
    assert loss.best("minimize") == MetricPoint(11, 1.0) and loss.best("maximize") == MetricPoint(10, 4.0)
    assert metrics.cursor == "c-1" and metrics.ignored == 0


def test_merge_goes_on_from_the_record_it_is_given() -> None:
    first = merge(None, ["squall-metric loss=3 step=5", "squall-metric loss=nan"], cursor="a")
    second = merge(first, ["squall-metric loss=2", "squall-metric acc=0.5 step=7"], cursor="b")
    loss = second.get("loss")
    assert loss is not None and [p.step for p in loss.history] == [5, 6]
    assert second.ignored == 1 and second.cursor == "b" and second.get("acc") is not None


def test_value_at_is_the_latest_point_at_or_before_a_step() -> None:
    series = merge(
        None, [f"squall-metric s={v} step={s}" for s, v in [(0, 1), (10, 2), (20, 3), (10, 5)]], cursor=None
    ).get("s")
    assert series is not None
    assert series.value_at(-1) is None
    assert series.value_at(0) == 1.0
    assert series.value_at(15) == 5.0  # the later report of step 10 (a run resumed from its checkpoint)
    assert series.value_at(25) == 3.0


def test_at_most_the_metric_limit_of_names_the_others_counted() -> None:
    lines = [f"squall-metric m{i}=1" for i in range(MAX_METRICS + 5)]
    metrics = merge(None, lines, cursor=None)
    assert len(metrics.series) == MAX_METRICS and metrics.ignored == 5
    more = merge(metrics, ["squall-metric m0=2 extra=1"], cursor=None)
    assert more.get("m0").last.value == 2.0 and more.get("extra") is None and more.ignored == 6  # type: ignore[union-attr]


def test_a_full_history_keeps_an_even_spread_with_the_first_and_the_last() -> None:
    metrics = None
    for i in range(1000):
        metrics = merge(metrics, [f"squall-metric loss={i}"], cursor=None)
    assert metrics is not None
    loss = metrics.get("loss")
    assert loss is not None and loss.count == 1000
    steps = [p.step for p in loss.history]
    assert len(steps) <= HISTORY_POINTS
    assert steps[0] == 0 and steps[-1] == 999
    gaps = {b - a for a, b in itertools.pairwise(steps[:-1])}
    assert gaps == {16}  # evenly spread; only the last point comes off the stride


def test_the_history_thins_as_points_come_in_one_batch_or_many() -> None:
    lines = [f"squall-metric loss={i}" for i in range(300)]
    at_once = merge(None, lines, cursor=None)
    one_by_one = None
    for line in lines:
        one_by_one = merge(one_by_one, [line], cursor=None)
    assert at_once == one_by_one


def test_the_record_is_thinned_to_its_size_bound_for_the_widest_reports() -> None:
    names = [f"m{j:02d}_" + "y" * 60 for j in range(MAX_METRICS)]
    lines = [
        "squall-metric "
        + " ".join(f"{n}=-3.3333333333333335e-300" for n in names[k : k + 8])
        + f" step={10**15 - i}"
        for i in range(200)
        for k in range(0, MAX_METRICS, 8)
    ]
    metrics = merge(None, lines, cursor="z" * MAX_CURSOR_CHARS)
    assert len(metrics.series) == MAX_METRICS
    assert record_size(metrics) <= MAX_RECORD_BYTES
    assert metrics.history_points < HISTORY_POINTS
    for series in metrics.series.values():
        assert series.history[0].step == 10**15 and series.history[-1].step == 10**15 - 199
    assert from_record(json.loads(to_json(metrics))) == metrics


def test_a_cursor_past_its_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="cursor"):
        merge(None, [], cursor="x" * (MAX_CURSOR_CHARS + 1))


def test_best_names_the_goals_allowed() -> None:
    series = merge(None, ["squall-metric a=1"], cursor=None).get("a")
    with pytest.raises(ValueError, match="maximize, minimize"):
        series.best("largest")  # type: ignore[arg-type,union-attr]


_text = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda parts, step: "squall-metric " + " ".join(parts) + step,
        st.lists(
            st.builds(
                lambda n, v: f"{n}={v}",
                st.one_of(st.sampled_from(["loss", "eval/score", "a.b-c_d", "step"]), st.text(max_size=70)),
                st.one_of(
                    st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.integers().map(str),
                    st.text(max_size=30),
                ),
            ),
            max_size=12,
        ),
        st.one_of(st.just(""), st.integers(min_value=-5, max_value=10**17).map(lambda s: f" step={s}")),
    ),
    st.builds(lambda i: f"squall-metric m{i % 40}_{'x' * 50}={i / 7} step={i}", st.integers(0, 10**6)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(_text, max_size=40), max_size=6), cursor=st.text(max_size=MAX_CURSOR_CHARS))
def test_whatever_a_job_prints_the_record_stays_bounded_and_reads_back(
    batches: list[list[str]], cursor: str
) -> None:
    metrics: JobMetrics | None = None
    for lines in batches:
        metrics = merge(metrics, lines, cursor=cursor)
        assert record_size(metrics) <= MAX_RECORD_BYTES
        assert len(to_json(metrics).encode()) <= MAX_RECORD_BYTES
        assert len(metrics.series) <= MAX_METRICS
        for series in metrics.series.values():
            assert 1 <= len(series.history) <= HISTORY_POINTS
            assert series.history[-1] == series.last
            assert all(math.isfinite(p.value) for p in series.history)
            assert series.min.value <= series.last.value <= series.max.value
        assert from_record(to_record(metrics)) == metrics


@given(text=st.text(max_size=2000))
def test_parsing_never_raises(text: str) -> None:
    parsed = parse_metric_line(text)
    assert parsed is None or parsed.ignored >= 0


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(
    record=st.one_of(
        _json,
        st.fixed_dictionaries(
            {"s": st.dictionaries(st.sampled_from(["a", "b", "bad name", ""]), _json, max_size=4)},
            optional={"i": _json, "c": _json, "hp": _json},
        ),
        st.fixed_dictionaries(
            {
                "s": st.dictionaries(
                    st.sampled_from(["a", "b"]),
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "n": _json,
                            "l": st.lists(st.integers(-2, 10) | st.floats(), min_size=2, max_size=2),
                            "lo": _json,
                            "hi": _json,
                            "h": st.lists(st.integers(-1, 300) | st.floats(), max_size=300),
                        },
                    ),
                ),
                "hp": st.integers(-5, 500),
            }
        ),
    )
)
def test_a_stored_record_never_fails_to_read(record: object) -> None:
    metrics = from_record(record)
    assert record_size(metrics) <= MAX_RECORD_BYTES
    for series in metrics.series.values():
        assert len(series.history) <= HISTORY_POINTS and series.history[-1] == series.last
    assert from_record(to_record(metrics)) == metrics
    assert from_json(json.dumps(record, default=str)) is not None


def test_stored_text_that_is_no_json_reads_as_no_metrics() -> None:
    assert from_json("{not json") == JobMetrics()
    assert from_json(None) == JobMetrics()


def test_the_record_is_compact_and_round_trips() -> None:
    metrics = merge(None, ["squall-metric loss=0.5 step=3", "squall-metric bad=nan"], cursor="c")
    assert to_record(metrics) == {
        "s": {"loss": {"n": 1, "l": [3, 0.5], "lo": [3, 0.5], "hi": [3, 0.5], "h": [3, 0.5]}},
        "i": 1,
        "c": "c",
    }
    assert from_record(to_record(metrics)) == metrics


def test_describe_shows_last_and_range_and_the_objective_s_best() -> None:
    metrics = merge(
        None,
        [
            "squall-metric eval/score=0.5 loss=3 step=10",
            "squall-metric eval/score=0.4 loss=2 step=20",
            "squall-metric x",
        ],
        cursor=None,
    )
    lines = describe_metrics(metrics, objective="eval/score", goal="maximize")
    assert lines[0] == "Metrics:"
    assert "eval/score  last 0.4 (step 20)  best 0.5 (step 10, maximize)" in lines[1]
    assert "loss" in lines[2] and "min 2 (step 20)" in lines[2] and "max 3 (step 10)" in lines[2]
    assert "1 metric line part(s) ignored" in lines[3]
    assert describe_metrics(None) == [] and describe_metrics(JobMetrics()) == []


def test_a_series_built_by_hand_reports_at_least_its_history() -> None:
    point = MetricPoint(1, 2.0)
    assert MetricSeries(last=point, min=point, max=point, history=(point, point)).reported == 2
