"""Sweep expansion: each trial's parameters, never more trials than maxTrials, never a grid built.

Grid: the grid's first maxTrials points (a range counts as its values, `min` then every
`step`). Random: maxTrials distinct points of that grid drawn with the sweep's seed when
every parameter can be counted; else each trial's values drawn on their own (a range
uniformly, or uniformly in its logarithm with `log`), from the seed and the trial's
number. Tpe: no parameters here; each trial's are chosen when its slot comes, from the
trials before it (services/sweeps.py), and set on its spec with `with_parameters`.
The same spec always gives the same trials.
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Iterator, Sequence
from typing import overload

from squall.core.spec.model import JobSpec, ParameterRange, Sweep, SweepValue


def trial_indices(sweep: Sweep) -> list[int]:
    """Which points of the grid become trials, in grid order; never more than maxTrials.

    Grid: the first maxTrials points. Random: maxTrials distinct points drawn with
    the sweep's seed (the same spec always draws the same ones). Either way the
    work is proportional to maxTrials, whatever the size of the grid.
    """
    total = sweep.combinations()
    count = min(total, sweep.max_trials)
    if sweep.strategy != "random":
        return list(range(count))
    rng = random.Random(sweep.seed)
    if total <= sys.maxsize:
        return sorted(rng.sample(range(total), count))  # a range is never materialised
    chosen: set[int] = set()
    while len(chosen) < count:  # len(range) overflows here; draw as sample does for large ones
        chosen.add(rng.randrange(total))
    return sorted(chosen)


def grid_point(columns: Sequence[Sequence[SweepValue]], index: int) -> tuple[SweepValue, ...]:
    """The index-th point of the grid in itertools.product order (the last column varies fastest)."""
    digits: list[SweepValue] = []
    for values in reversed(columns):
        index, digit = divmod(index, len(values))
        digits.append(values[digit])
    return tuple(reversed(digits))


class RangeValues(Sequence[SweepValue]):
    """A discrete range's values as a sequence, computed when asked for (never a list)."""

    def __init__(self, bounds: ParameterRange) -> None:
        self._range = bounds
        self._size = bounds.size()

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> SweepValue: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[SweepValue]: ...

    def __getitem__(self, index: int | slice) -> SweepValue | Sequence[SweepValue]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if not -self._size <= index < self._size:
            raise IndexError(index)
        return self._range.value(index % self._size)

    def __iter__(self) -> Iterator[SweepValue]:
        return (self[i] for i in range(self._size))


def columns_of(sweep: Sweep) -> list[Sequence[SweepValue]]:
    """Each parameter's values in order, for a sweep whose parameters can all be counted."""
    return [RangeValues(v) if isinstance(v, ParameterRange) else v for v in sweep.parameters.values()]


def trial_count(sweep: Sweep) -> int:
    """How many trials a sweep has: maxTrials, or fewer when its grid has fewer points."""
    return min(sweep.combinations(), sweep.max_trials) if sweep.discrete else sweep.max_trials


def sample_value(values: ParameterRange | Sequence[SweepValue], rng: random.Random) -> SweepValue:
    """One value drawn from a parameter: a list's item, or a range's value (its logarithm uniform with log)."""
    if not isinstance(values, ParameterRange):
        return values[rng.randrange(len(values))]
    if values.step is not None:
        return values.value(rng.randrange(values.size()))
    low, high = float(values.min), float(values.max)
    drawn = math.exp(rng.uniform(math.log(low), math.log(high))) if values.log else rng.uniform(low, high)
    if values.is_int:
        return min(max(round(drawn), int(values.min)), int(values.max))
    return min(max(drawn, low), high)


def sampled_point(sweep: Sweep, number: int) -> dict[str, SweepValue]:
    """Trial `number`'s values drawn on their own, from the seed and the number alone."""
    # A str seed is hashed with sha512: the same in every process, whatever PYTHONHASHSEED.
    rng = random.Random(f"squall-sweep:{sweep.seed}:{number}")
    return {name: sample_value(values, rng) for name, values in sweep.parameters.items()}


def sweep_points(sweep: Sweep) -> list[dict[str, SweepValue] | None]:
    """Each trial's values in trial order; None for a trial whose values are chosen later (tpe)."""
    count = trial_count(sweep)
    if sweep.strategy == "tpe":
        return [None] * count
    names = list(sweep.parameters)
    if sweep.discrete:
        columns = columns_of(sweep)
        return [dict(zip(names, grid_point(columns, i), strict=True)) for i in trial_indices(sweep)]
    return [sampled_point(sweep, number) for number in range(count)]


def with_parameters(trial: JobSpec, values: dict[str, SweepValue], *, args: Sequence[str]) -> JobSpec:
    """A trial's spec with its values: as `trial_parameters` (SQUALL_PARAM_<NAME> env vars) and as
    `--name=value` after `args` (the sweep's own)."""
    return trial.model_copy(
        update={
            "trial_parameters": values,
            "args": [*args, *(f"--{k}={format_parameter(v)}" for k, v in values.items())],
        }
    )


def expand_sweep(spec: JobSpec, *, job_id: str) -> list[tuple[str, JobSpec]]:
    """Trial ids and specs of a sweep, deterministic for a given spec.

    Each trial carries its values as `trial_parameters` (rendered as
    SQUALL_PARAM_<NAME> env vars) and as `--name=value` args, so a trainer can
    take them either way; a tpe trial has none yet (see with_parameters).
    """
    sweep = spec.sweep
    if sweep is None:
        return []
    trials = []
    for number, values in enumerate(sweep_points(sweep)):
        trial_id = f"{job_id}-t{number:03d}"
        trial = spec.model_copy(update={"id": trial_id, "sweep": None, "parent_id": job_id})
        if values is not None:
            trial = with_parameters(trial, values, args=spec.args)
        trials.append((trial_id, trial))
    return trials


def format_parameter(value: SweepValue) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)
