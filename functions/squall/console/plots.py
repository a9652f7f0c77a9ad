"""A sweep's trials and a ledger's months as geometry for the templates to draw as SVG: pure, no HTML.

Three charts, as console/charts.py does for lines: a scatter of one parameter against the
objective (a log axis where the sweep's range is log), parallel coordinates for several
(one polyline per trial, the objective the last axis), and horizontal bars of stacked
amounts. A value that cannot be placed (not finite, not above 0 on a log axis, a category
the axis lacks) leaves its trial out of the chart, counted in `left_out`: a chart never
draws a point it would have to invent. Names are returned as given; templates escape them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from squall.console.charts import PALETTE, Scale, Tick, extent, number_label

# Labels drawn on a chart are cut to this many characters (the whole name is in the chart's <title>s and the table).
AXIS_LABEL_CHARS = 24
CATEGORY_LABEL_CHARS = 12
# A finished trial, one stopped early, the best one: how each is drawn.
TRIAL_COLOUR = PALETTE[0]
STOPPED_COLOUR = "#8c959f"
BEST_COLOUR = PALETTE[2]


@dataclass(frozen=True)
class PlotTrial:
    """What a chart needs of one trial: its name, its parameters and its objective value."""

    name: str
    parameters: Mapping[str, object]
    value: float | None
    stopped: bool = False
    best: bool = False


@dataclass(frozen=True)
class PlotAxis:
    """One parameter's axis: numbers (on a log scale with `log`) unless `categories` names its
    values; `domain` is the searched range, drawn whole even where no trial went."""

    name: str
    log: bool = False
    categories: tuple[str, ...] = ()
    domain: tuple[float, float] | None = None


@dataclass(frozen=True)
class Mark:
    name: str
    x: float
    y: float
    colour: str
    stopped: bool
    best: bool


@dataclass(frozen=True)
class ScatterChart:
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_label: str  # the parameter's name, cut to AXIS_LABEL_CHARS
    y_label: str
    log_x: bool
    marks: tuple[Mark, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    left_out: int  # trials with no place on the chart (no value yet, a value not drawable)


@dataclass(frozen=True)
class ParallelAxis:
    name: str
    label: str  # the name, cut to AXIS_LABEL_CHARS
    x: float
    log: bool
    ticks: tuple[Tick, ...]  # `at` is the pixel height on this axis


@dataclass(frozen=True)
class TrialLine:
    name: str
    points: str  # "x,y x,y ...": a polyline's points, one per axis
    colour: str
    stopped: bool
    best: bool


@dataclass(frozen=True)
class ParallelChart:
    width: int
    height: int
    top: int
    bottom: int
    axes: tuple[ParallelAxis, ...]  # the parameters', then the objective's
    lines: tuple[TrialLine, ...]
    left_out: int


@dataclass(frozen=True)
class Segment:
    x: float
    width: float
    colour: str
    label: str


@dataclass(frozen=True)
class BarRow:
    label: str
    segments: tuple[Segment, ...]
    total: float


# A map from a parameter's value to its pixel position; None: it has none on this axis.
Place = Callable[[object], float | None]


class LogScale:
    """A map from [low, high] (both above 0) onto pixels [start, end] by the values' logarithm."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.high = low, high
        self._linear = Scale(math.log10(low), math.log10(high), start, end)

    def __call__(self, value: float) -> float:
        return self._linear(math.log10(value))

    def ticks(self) -> tuple[Tick, ...]:
        """Each power of ten in the range; the range's ends when it holds fewer than two."""
        first, last = math.ceil(math.log10(self.low) - 1e-9), math.floor(math.log10(self.high) + 1e-9)
        powers = [10.0**k for k in range(first, last + 1)]
        if len(powers) < 2:
            powers = sorted({self.low, self.high})
        return tuple(Tick(self(v), number_label(v)) for v in powers)


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` - 1 characters and an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def number(value: object) -> float | None:
    """A parameter's value as a finite number; None for text, a bool, NaN or an infinity."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def categorical(axis: PlotAxis, trials: Sequence[PlotTrial]) -> tuple[str, ...]:
    """The axis's categories: those it names and then any other value a trial took, or (when
    it names none and some value is no number) every value the trials took, in their order;
    () for a numeric axis."""
    values = [t.parameters[axis.name] for t in trials if axis.name in t.parameters]
    if not axis.categories and all(number(v) is not None or _non_finite(v) for v in values):
        return ()
    return tuple(dict.fromkeys([*axis.categories, *(str(v) for v in values)]))


def _non_finite(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def axis_place(
    axis: PlotAxis, trials: Sequence[PlotTrial], *, start: float, end: float
) -> tuple[Place, tuple[Tick, ...], bool]:
    """Where each value of `axis` goes between pixels `start` and `end`, the axis's ticks, and
    whether it is drawn on a log scale."""
    categories = categorical(axis, trials)
    if categories:
        step = (end - start) / len(categories)
        at = {name: round(start + (i + 0.5) * step, 1) for i, name in enumerate(categories)}
        ticks = tuple(Tick(at[name], cut(name, CATEGORY_LABEL_CHARS)) for name in categories)
        return (lambda value: at.get(str(value))), ticks, False
    values = [v for v in (number(t.parameters.get(axis.name)) for t in trials) if v is not None]
    bounds = list(axis.domain) if axis.domain is not None else []
    if axis.log:
        positive = [v for v in [*values, *bounds] if v > 0]
        low, high = (min(positive), max(positive)) if positive else (1.0, 10.0)
        if low == high:
            low, high = low / 10, high * 10
        log = LogScale(low, high, start, end)
        return (lambda value: _log_place(log, value)), log.ticks(), True
    linear = Scale(*extent([*values, *bounds]), start, end)
    return (lambda value: _linear_place(linear, value)), linear.ticks(), False


def _log_place(scale: LogScale, value: object) -> float | None:
    v = number(value)
    return scale(v) if v is not None and v > 0 else None


def _linear_place(scale: Scale, value: object) -> float | None:
    v = number(value)
    return scale(v) if v is not None else None


def trial_colour(trial: PlotTrial) -> str:
    return BEST_COLOUR if trial.best else STOPPED_COLOUR if trial.stopped else TRIAL_COLOUR


def objective_scale(trials: Sequence[PlotTrial], *, start: float, end: float) -> Scale:
    return Scale(*extent([t.value for t in trials if t.value is not None]), start, end)


def scatter(
    trials: Sequence[PlotTrial],
    axis: PlotAxis,
    *,
    objective: str,
    width: int = 640,
    height: int = 320,
) -> ScatterChart:
    """One mark per trial that has a value of `axis`'s parameter and of the objective."""
    left, right, top, bottom = 60, 16, 12, 36
    place_x, x_ticks, log = axis_place(axis, trials, start=left, end=width - right)
    y_scale = objective_scale(trials, start=height - bottom, end=top)
    marks: list[Mark] = []
    for trial in trials:
        x = place_x(trial.parameters.get(axis.name, None)) if axis.name in trial.parameters else None
        value = number(trial.value)
        if x is None or value is None:
            continue
        marks.append(Mark(trial.name, x, y_scale(value), trial_colour(trial), trial.stopped, trial.best))
    # the best drawn last, on top of the others
    marks.sort(key=lambda m: m.best)
    return ScatterChart(
        width=width,
        height=height,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        x_label=cut(axis.name, AXIS_LABEL_CHARS),
        y_label=cut(objective, AXIS_LABEL_CHARS),
        log_x=log,
        marks=tuple(marks),
        x_ticks=x_ticks,
        y_ticks=y_scale.ticks(),
        left_out=len(trials) - len(marks),
    )


def parallel(
    trials: Sequence[PlotTrial],
    axes: Sequence[PlotAxis],
    *,
    objective: str,
    width: int = 760,
    height: int = 320,
) -> ParallelChart:
    """One polyline per trial through each parameter's axis and then the objective's; a trial
    with a value that has no place on some axis is left out."""
    top, bottom, margin = 24, 24, 70
    count = len(axes) + 1
    gap = (width - 2 * margin) / max(count - 1, 1)
    xs = [round(margin + i * gap, 1) for i in range(count)]
    low, high = height - bottom, top
    placed: list[tuple[PlotAxis, Place, tuple[Tick, ...], bool]] = []
    for axis in axes:
        place, ticks, log = axis_place(axis, trials, start=low, end=high)
        placed.append((axis, place, ticks, log))
    y_scale = objective_scale(trials, start=low, end=high)
    drawn: list[ParallelAxis] = [
        ParallelAxis(axis.name, cut(axis.name, AXIS_LABEL_CHARS), x, log, ticks)
        for (axis, _, ticks, log), x in zip(placed, xs, strict=False)
    ]
    drawn.append(ParallelAxis(objective, cut(objective, AXIS_LABEL_CHARS), xs[-1], False, y_scale.ticks()))
    lines: list[TrialLine] = []
    for trial in trials:
        value = number(trial.value)
        ys = [
            place(trial.parameters[axis.name]) if axis.name in trial.parameters else None
            for axis, place, *_ in placed
        ]
        if value is None or any(y is None for y in ys):
            continue
        points = [*zip(xs, ys, strict=False), (xs[-1], y_scale(value))]
        lines.append(
            TrialLine(
                name=trial.name,
                points=" ".join(f"{x},{y}" for x, y in points),
                colour=trial_colour(trial),
                stopped=trial.stopped,
                best=trial.best,
            )
        )
    lines.sort(key=lambda line: (line.best, not line.stopped))  # stopped under, the best on top
    return ParallelChart(
        width=width,
        height=height,
        top=top,
        bottom=bottom,
        axes=tuple(drawn),
        lines=tuple(lines),
        left_out=len(trials) - len(lines),
    )


def bars(
    rows: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    *,
    colours: Mapping[str, str],
    width: float = 320,
) -> tuple[BarRow, ...]:
    """Each row's amounts (label, amount) stacked from the left, every row on the same scale:
    the largest total fills `width`. Amounts that are not finite or not above 0 take no room."""
    totals = [sum(a for _, a in parts if math.isfinite(a) and a > 0) for _, parts in rows]
    largest = max(totals, default=0.0)
    drawn: list[BarRow] = []
    for (label, parts), total in zip(rows, totals, strict=True):
        x = 0.0
        segments: list[Segment] = []
        for name, amount in parts:
            if not (math.isfinite(amount) and amount > 0) or largest <= 0:
                continue
            share = round(width * amount / largest, 1)
            segments.append(Segment(round(x, 1), share, colours.get(name, PALETTE[-1]), name))
            x += share
        drawn.append(BarRow(label, tuple(segments), total))
    return tuple(drawn)
