"""Charts as geometry for the templates to draw as SVG: pure, no HTML.

A template draws what these return with SVG presentation attributes (the console's
Content-Security-Policy allows no inline style), and escapes every name it shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#bc4c00", "#6e7781")
MAX_POINTS = 2_000  # points drawn per series: a longer series is thinned evenly


@dataclass(frozen=True)
class Tick:
    at: float  # the pixel position
    label: str


@dataclass(frozen=True)
class ChartLine:
    name: str
    colour: str
    points: str  # "x,y x,y ...": a polyline's points, in pixels


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    series: tuple[ChartLine, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]


@dataclass(frozen=True)
class Scale:
    """A linear map from [low, high] onto pixels [start, end] (end < start for a y axis)."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.high - self.low
        share = 0.5 if span == 0 else (value - self.low) / span
        return round(self.start + share * (self.end - self.start), 1)

    def ticks(self, count: int = 5) -> tuple[Tick, ...]:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return ()
        if self.high == self.low:
            return (Tick(self(self.low), number_label(self.low)),)
        step = (self.high - self.low) / (count - 1)
        return tuple(Tick(self(self.low + i * step), number_label(self.low + i * step)) for i in range(count))


def number_label(value: float) -> str:
    """A tick's label: short, and exact enough to tell ticks apart."""
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4g}"


def extent(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    return min(finite), max(finite)


def thin(points: Sequence[tuple[float, float]], limit: int = MAX_POINTS) -> Sequence[tuple[float, float]]:
    if len(points) <= limit:
        return points
    stride = len(points) / limit
    return [points[int(i * stride)] for i in range(limit)] + [points[-1]]


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    width: int = 640,
    height: int = 240,
    x_label: str = "",
) -> LineChart:
    """One polyline per named series of (x, y) points, on shared axes. Non-finite points are left out."""
    left, right, top, bottom = 56, 12, 10, 22
    cleaned = {
        name: [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
        for name, points in series.items()
    }
    xs = [x for points in cleaned.values() for x, _ in points]
    ys = [y for points in cleaned.values() for _, y in points]
    x_scale = Scale(*extent(xs), left, width - right)
    y_scale = Scale(*extent(ys), height - bottom, top)
    drawn = tuple(
        ChartLine(
            name=name,
            colour=PALETTE[index % len(PALETTE)],
            points=" ".join(f"{x_scale(x)},{y_scale(y)}" for x, y in thin(points)),
        )
        for index, (name, points) in enumerate(cleaned.items())
        if points
    )
    del x_label  # reserved for a caption; the x ticks carry the numbers
    return LineChart(width, height, left, right, top, bottom, drawn, x_scale.ticks(), y_scale.ticks())
