"""Sweep expansion: trials are drawn from the grid without building it, never more than maxTrials."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Sequence

from squall.core.spec.model import JobSpec, Sweep, SweepValue


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


def expand_sweep(spec: JobSpec, *, job_id: str) -> list[tuple[str, JobSpec]]:
    """Trial ids and specs of a sweep, deterministic for a given spec.

    Each trial carries its values as `trial_parameters` (rendered as
    SQUALL_PARAM_<NAME> env vars) and as `--name=value` args, so a trainer can
    take them either way.
    """
    sweep = spec.sweep
    if sweep is None:
        return []
    names = list(sweep.parameters)
    columns = [sweep.parameters[n] for n in names]
    trials = []
    for number, index in enumerate(trial_indices(sweep)):
        values = dict(zip(names, grid_point(columns, index), strict=True))
        trial_id = f"{job_id}-t{number:03d}"
        args = [*spec.args, *(f"--{k}={format_parameter(v)}" for k, v in values.items())]
        trial = spec.model_copy(
            update={
                "id": trial_id,
                "sweep": None,
                "parent_id": job_id,
                "trial_parameters": values,
                "args": args,
            }
        )
        trials.append((trial_id, trial))
    return trials


def format_parameter(value: SweepValue) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)
