"""What a job reports of its training: ``squall-metric`` lines, and the record kept of them.

A job's code prints lines on stdout or stderr::

    squall-metric train/loss=0.231 step=400
    squall-metric eval/score=0.91 eval/loss=0.3 step=1000

The cluster's log agent ships them to CloudWatch Logs with the rest of its output;
reconcile reads them (a bounded page per job per check) and merges them here into the
job's record: each metric's last, lowest and highest point and a short, evenly spread
history. Whatever a job prints, the record stays small: a bad line is ignored and
counted, at most MAX_METRICS names are kept, at most HISTORY_POINTS points each, and the
serialized record is at most MAX_RECORD_BYTES (histories are thinned further to fit).

Pure: no I/O. ``from_record`` never raises on a stored record, whatever it holds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

METRIC_PREFIX = "squall-metric"

MAX_LINE_CHARS = 1024
MAX_METRICS = 32
HISTORY_POINTS = 64
MAX_RECORD_BYTES = 24_000
# A step is a count of training steps: anything past this is no step but a typo or garbage.
MAX_STEP = 10**15
# The reader's resume point (adapters/aws/metric_lines.py keeps it well under this).
MAX_CURSOR_CHARS = 4096
# Fewest history points a metric keeps however many metrics share the record: its first and last.
MIN_HISTORY_POINTS = 2

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,63}", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_STEP = re.compile(r"[0-9]{1,16}", re.ASCII)

Goal = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class MetricPoint:
    step: int
    value: float


@dataclass(frozen=True)
class MetricSeries:
    """One metric of a job: its last, lowest and highest points and a bounded history.

    ``history`` is in the order the points were reported, its first point the first
    reported and its last the last; ``count`` is how many were reported in all.
    """

    last: MetricPoint
    min: MetricPoint
    max: MetricPoint
    history: tuple[MetricPoint, ...]
    count: int = 0

    def best(self, goal: Goal) -> MetricPoint:
        if goal == "maximize":
            return self.max
        if goal == "minimize":
            return self.min
        raise ValueError(f"goal {goal!r}: allowed are maximize, minimize")

    def value_at(self, step: int) -> float | None:
        """The value of the history's point with the highest step at or before `step` (the
        later one of equal steps); None when every point is after it."""
        found: MetricPoint | None = None
        for point in self.history:
            if point.step <= step and (found is None or point.step >= found.step):
                found = point
        return None if found is None else found.value

    @property
    def reported(self) -> int:
        return max(self.count, len(self.history))


@dataclass(frozen=True)
class JobMetrics:
    """Every metric of a job, the lines it ignored and where the reader goes on from.

    ``history_points`` is how many points each history keeps: HISTORY_POINTS unless the
    record had to be thinned to stay under MAX_RECORD_BYTES.
    """

    series: Mapping[str, MetricSeries] = field(default_factory=dict)
    ignored: int = 0
    cursor: str | None = None
    history_points: int = HISTORY_POINTS

    def get(self, name: str) -> MetricSeries | None:
        return self.series.get(name)


@dataclass(frozen=True)
class MetricLinesPage:
    """A page of a job's output lines that hold the metric prefix, and where the next page starts."""

    lines: tuple[str, ...]
    cursor: str | None


@dataclass(frozen=True)
class MetricLine:
    """What one ``squall-metric`` line reported: its values at `step` (None: each metric's next
    step), and how many of its parts were ignored."""

    values: tuple[tuple[str, float], ...]
    step: int | None
    ignored: int


def parse_metric_line(text: str) -> MetricLine | None:
    """The metrics of one output line; None when it is not a metric line at all.

    A metric line starts (after blanks) with METRIC_PREFIX and a blank. A line longer than
    MAX_LINE_CHARS, or with a bad step or no value, is ignored whole (``ignored`` 1, no
    values); a part with a bad name or a value that is no finite number is ignored alone.
    """
    head = text[: len(METRIC_PREFIX) + 256].lstrip()
    if not head.startswith(METRIC_PREFIX):
        return None
    rest = head[len(METRIC_PREFIX) :]
    if rest and not rest[0].isspace():
        return None  # another word (squall-metrics, squall-metric=...), not ours
    if len(text.rstrip("\r\n")) > MAX_LINE_CHARS:
        return MetricLine(values=(), step=None, ignored=1)
    parts = text.strip().split()[1:]
    values: list[tuple[str, float]] = []
    ignored = 0
    step: int | None = None
    for part in parts:
        name, equals, raw = part.partition("=")
        if name == "step":
            if not equals or not _STEP.fullmatch(raw) or int(raw) > MAX_STEP or step is not None:
                return MetricLine(values=(), step=None, ignored=1)
            step = int(raw)
            continue
        value = _number(raw) if equals and NAME.fullmatch(name) else None
        if value is None:
            ignored += 1
        else:
            values.append((name, value))
    if not values:
        return MetricLine(values=(), step=None, ignored=max(ignored, 1))
    return MetricLine(values=tuple(values), step=step, ignored=ignored)


def _number(raw: str) -> float | None:
    if not _NUMBER.fullmatch(raw):
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def merge(metrics: JobMetrics | None, lines: Iterable[str], *, cursor: str | None) -> JobMetrics:
    """`metrics` with these lines' points added (in order) and the reader's new `cursor`.

    Bounded whatever the lines hold (see the module's docstring).
    """
    if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
        raise ValueError(f"cursor: at most {MAX_CURSOR_CHARS} characters, got {len(cursor)}")
    base = metrics or JobMetrics()
    capacity = base.history_points
    series = dict(base.series)
    ignored = base.ignored
    for line in lines:
        parsed = parse_metric_line(line)
        if parsed is None:
            continue
        ignored += parsed.ignored
        for name, value in parsed.values:
            held = series.get(name)
            if held is None and len(series) >= MAX_METRICS:
                ignored += 1
                continue
            step = parsed.step if parsed.step is not None else (held.last.step + 1 if held else 0)
            series[name] = add_point(held, MetricPoint(step=min(step, MAX_STEP), value=value), capacity)
    return fit(JobMetrics(series=series, ignored=ignored, cursor=cursor, history_points=capacity))


# ---- the evenly spread history ----
#
# The points a history keeps are the reported ones whose number (0, 1, 2, ... in the order
# reported) is a multiple of a stride, plus the last one reported (its "tail") when its
# number is not. The stride is the smallest power of two that keeps the regular points under
# the capacity, so when a history fills, every other point goes (the first stays) and the
# points after it come at the new stride: the history spreads evenly over the whole run.


def _stride(count: int, capacity: int) -> int:
    stride = 1
    while -(-count // stride) > capacity - 1:
        stride *= 2
    return stride


def _has_tail(count: int, stride: int) -> bool:
    return count > 0 and (count - 1) % stride != 0


def add_point(
    series: MetricSeries | None, point: MetricPoint, capacity: int = HISTORY_POINTS
) -> MetricSeries:
    """`series` (its history kept at `capacity`) with one more reported point."""
    if series is None:
        return MetricSeries(last=point, min=point, max=point, history=(point,), count=1)
    count = series.reported
    history = _bounded(series.history, capacity)
    stride = _stride(count, capacity)
    regular = list(history[:-1] if _has_tail(count, stride) and len(history) > 1 else history)
    new_stride = _stride(count + 1, capacity)
    if new_stride > stride:
        regular = regular[:: new_stride // stride]
    regular.append(point)
    return MetricSeries(
        last=point,
        min=point if point.value < series.min.value else series.min,
        max=point if point.value > series.max.value else series.max,
        history=_bounded(tuple(regular), capacity),
        count=count + 1,
    )


def _reshaped(series: MetricSeries, *, capacity: int, smaller: int) -> MetricSeries:
    """The series' history (kept at `capacity`) as kept at the `smaller` one: regular points
    at the new stride, and the last."""
    count = series.reported
    old, new = _stride(count, capacity), _stride(count, smaller)
    history = _bounded(series.history, capacity)
    if new > old and len(history) > 1:
        last = history[-1]
        regular = list(history[:-1] if _has_tail(count, old) else history)[:: new // old]
        if regular[-1] is not last and _has_tail(count, new):
            regular.append(last)
        history = tuple(regular)
    return replace(series, history=_bounded(history, smaller))


def _bounded(history: tuple[MetricPoint, ...], capacity: int) -> tuple[MetricPoint, ...]:
    """Never more than `capacity` points, whatever a stored record held: every other one, and the last."""
    while len(history) > capacity:
        history = (*history[:-1][::2], history[-1])
    return history


def fit(metrics: JobMetrics) -> JobMetrics:
    """`metrics` with histories thinned until its record is at most MAX_RECORD_BYTES."""
    while record_size(metrics) > MAX_RECORD_BYTES and metrics.history_points > MIN_HISTORY_POINTS:
        capacity = metrics.history_points
        smaller = max(capacity // 2, MIN_HISTORY_POINTS)
        metrics = replace(
            metrics,
            history_points=smaller,
            series={
                name: _reshaped(s, capacity=capacity, smaller=smaller) for name, s in metrics.series.items()
            },
        )
    return metrics


# ---- the stored record ----


def record_size(metrics: JobMetrics) -> int:
    """The bytes of its serialized record (ASCII JSON: characters are bytes)."""
    return len(to_json(metrics, fitted=False))


def to_json(metrics: JobMetrics, *, fitted: bool = True) -> str:
    return json.dumps(to_record(metrics) if fitted else _record(metrics), separators=(",", ":"))


def to_record(metrics: JobMetrics) -> dict[str, Any]:
    """The compact record of `metrics` (plain JSON values), at most MAX_RECORD_BYTES serialized."""
    return _record(fit(metrics))


def _record(metrics: JobMetrics) -> dict[str, Any]:
    record: dict[str, Any] = {
        "s": {
            name: {
                "n": s.reported,
                "l": _pair(s.last),
                "lo": _pair(s.min),
                "hi": _pair(s.max),
                "h": [number for p in s.history for number in _pair(p)],
            }
            for name, s in metrics.series.items()
        }
    }
    if metrics.ignored:
        record["i"] = metrics.ignored
    if metrics.cursor is not None:
        record["c"] = metrics.cursor
    if metrics.history_points != HISTORY_POINTS:
        record["hp"] = metrics.history_points
    return record


def _pair(point: MetricPoint) -> list[int | float]:
    return [point.step, point.value]


def from_json(text: Any) -> JobMetrics:
    """The metrics of a stored JSON record; empty metrics for text that is no JSON."""
    try:
        return from_record(json.loads(text))
    except (TypeError, ValueError, RecursionError):
        return JobMetrics()


def from_record(record: Any) -> JobMetrics:
    """The metrics a record holds. Never raises: whatever does not read is left out, and the
    result keeps the bounds (names, points, size) whatever the record held."""
    if not isinstance(record, Mapping):
        return JobMetrics()
    capacity = _int(record.get("hp"), default=HISTORY_POINTS)
    capacity = min(max(capacity, MIN_HISTORY_POINTS), HISTORY_POINTS)
    cursor = record.get("c")
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:
        cursor = None
    series: dict[str, MetricSeries] = {}
    stored = record.get("s")
    if isinstance(stored, Mapping):
        for name, value in stored.items():
            if len(series) >= MAX_METRICS:
                break
            read = _series(value, capacity) if isinstance(name, str) and NAME.fullmatch(name) else None
            if read is not None:
                series[name] = read
    return fit(
        JobMetrics(
            series=series,
            ignored=max(_int(record.get("i"), default=0), 0),
            cursor=cursor,
            history_points=capacity,
        )
    )


def _series(value: Any, capacity: int) -> MetricSeries | None:
    if not isinstance(value, Mapping):
        return None
    last, low, high = (_point(value.get(key)) for key in ("l", "lo", "hi"))
    if last is None:
        return None
    numbers = value.get("h")
    history: list[MetricPoint] = []
    if isinstance(numbers, list):
        for i in range(0, len(numbers) - 1, 2):
            point = _point(numbers[i : i + 2])
            if point is not None:
                history.append(point)
    if not history or history[-1] != last:
        history.append(last)
    low = low if low is not None and low.value <= last.value else last
    high = high if high is not None and high.value >= last.value else last
    count = max(_int(value.get("n"), default=len(history)), len(history))
    return MetricSeries(last=last, min=low, max=high, history=_bounded(tuple(history), capacity), count=count)


def _point(value: Any) -> MetricPoint | None:
    if not isinstance(value, list) or len(value) != 2:
        return None
    step, number = value
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        return None
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
        return None
    return MetricPoint(step=step, value=float(number))


def _int(value: Any, *, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return min(value, 2**53)


# ---- how describe shows them ----


def describe_metrics(
    metrics: JobMetrics | None, *, goal: Goal | None = None, objective: str | None = None
) -> list[str]:
    """Lines for `squall describe`: each metric's last point and its lowest and highest (or,
    for the objective, its best per `goal`), then how many lines were ignored."""
    if metrics is None or (not metrics.series and not metrics.ignored):
        return []
    lines = ["Metrics:"]
    width = max((len(name) for name in metrics.series), default=0)
    for name in sorted(metrics.series):
        s = metrics.series[name]
        text = f"  {name:<{width}}  last {_value(s.last.value)} (step {s.last.step})"
        if name == objective and goal is not None:
            best = s.best(goal)
            text += f"  best {_value(best.value)} (step {best.step}, {goal})"
        else:
            text += f"  min {_value(s.min.value)} (step {s.min.step})  max {_value(s.max.value)} (step {s.max.step})"
        lines.append(text)
    if metrics.ignored:
        lines.append(
            f"  ({metrics.ignored} metric line part(s) ignored: malformed, non-finite or over the limits)"
        )
    return lines


def _value(value: float) -> str:
    return f"{value:.6g}"
