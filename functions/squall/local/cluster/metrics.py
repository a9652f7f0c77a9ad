"""The metric lines of simulated trainers: a known objective of a trial's parameters.

A simulated pod runs no code, so it prints nothing; `SimulatedMetricLines` plays the
`squall-metric` lines a real trainer would have printed by now (the MetricLines port that
reconcile reads), from a `SyntheticObjective`: a known function of the trial's parameters
(`trialParameters` in its recorded spec) with an optimum, and of its progress.

Models: steps proportional to run time (the objective's `steps` over the pod's whole run
time, resumed work included: see SimulatedCluster.trainer_progress), the losses every
`log_every` steps and the objective's metric every `eval_every` steps and at the last one,
one line per step, as a trainer prints them (worker_images/tf_trainer). The score at step
k is ``quality(params) * (1 - exp(-k / tau))`` plus Gaussian noise seeded by the objective's
seed, the job and the step, so a run replays the same lines and median early stopping
compares trials whose curves rise alike but end where their parameters put them.

    quality(params) = floor + (best - floor) * exp(-sum(d_i ** 2) / 2)

where d_i is parameter i's distance from its optimum in its own `width` (in log space
with `log`), or `penalty` for a categorical value other than the optimum. With goal
`minimize` the metric printed is ``1 - score`` (a loss-like number).

Leaves out: lines printed between a reconcile's last read and a stop (the simulated
pods leave no log stream behind); a re-run without a checkpoint going back to step 0
(steps only move forward here).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from squall.core.jobs import Job
from squall.core.metrics import METRIC_PREFIX, MetricLinesPage
from squall.local.cluster.simulated import SimulatedCluster

Goal = Literal["maximize", "minimize"]
# A parameter that is no number where its optimum is one (or <= 0 on a log scale): this far off.
FAR = 3.0
TRAIN_LOSS = "train/loss"


@dataclass(frozen=True)
class ParameterOptimum:
    """Where one parameter is best, and how fast quality falls away from there."""

    optimum: float | str | bool
    width: float = 1.0  # distance (in ln units with `log`) at which its d is 1
    log: bool = False
    penalty: float = 1.0  # d of a categorical value other than the optimum

    def __post_init__(self) -> None:
        if not (math.isfinite(self.width) and self.width > 0):
            raise ValueError(f"width must be a positive number, got {self.width}")
        if self.log and not (_number(self.optimum) or 0) > 0:
            raise ValueError(f"optimum must be positive with log: true, got {self.optimum}")

    def distance(self, value: object) -> float:
        optimum = _number(self.optimum)
        if optimum is None:  # categorical
            return 0.0 if str(value) == str(self.optimum) else self.penalty
        number = _number(value)
        if number is None or (self.log and number <= 0):
            return FAR
        if self.log:
            return (math.log(number) - math.log(optimum)) / self.width
        return (number - optimum) / self.width


@dataclass(frozen=True)
class SyntheticObjective:
    """A known objective: what the simulated trainer of a job (or of a sweep's trials) reports."""

    parameters: Mapping[str, ParameterOptimum] = field(default_factory=dict)
    metric: str = "eval/score"
    goal: Goal = "maximize"
    best: float = 0.95  # the score at the optimum, at the end of a run
    floor: float = 0.05  # the score far from it
    steps: int = 1000  # steps of a whole run
    rise: float = 0.25  # tau as a share of `steps`: the score is ~63% of its end value at tau
    log_every: int = 50
    eval_every: int = 100
    noise: float = 0.01  # standard deviation of the noise on each value
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "log_every", "eval_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.floor <= self.best:
            raise ValueError(f"need 0 <= floor <= best, got floor {self.floor}, best {self.best}")
        if not self.rise > 0 or not self.noise >= 0:
            raise ValueError(f"rise must be positive and noise not negative, got {self.rise}, {self.noise}")
        if self.goal not in ("maximize", "minimize"):
            raise ValueError(f"goal {self.goal!r}: allowed are maximize, minimize")

    def quality(self, params: Mapping[str, object]) -> float:
        """The score a whole run of these parameters ends at, without noise."""
        squares = sum(
            optimum.distance(params[name]) ** 2 for name, optimum in self.parameters.items() if name in params
        )
        return self.floor + (self.best - self.floor) * math.exp(-squares / 2)

    def curve(self, params: Mapping[str, object], step: int) -> float:
        """The score at `step`, without noise."""
        return self.quality(params) * (1 - math.exp(-step / (self.rise * self.steps)))

    def value(self, params: Mapping[str, object], step: int, *, key: str) -> float:
        """The objective's metric at `step` as printed: the score (goal maximize) or 1 - it,
        with the noise of (seed, key, step)."""
        score = self.curve(params, step) + self._noise(key, step, "eval")
        return score if self.goal == "maximize" else 1.0 - score

    def line(self, params: Mapping[str, object], step: int, *, key: str) -> str:
        """The trainer's line at a logged step: its loss, and the metric at an evaluation."""
        loss = 1.0 - self.curve(params, step) + self._noise(key, step, "train")
        parts = [f"{TRAIN_LOSS}={loss:.6g}"]
        if step % self.eval_every == 0 or step == self.steps:
            parts.append(f"{self.metric}={self.value(params, step, key=key):.6g}")
        return f"{METRIC_PREFIX} {' '.join(parts)} step={step}"

    def logged_steps(self, *, after: int, upto: int) -> Iterable[int]:
        """The steps a trainer prints a line at, in (after, upto]: every log_every, and the last."""
        upto = min(upto, self.steps)
        step = (max(after, 0) // self.log_every + 1) * self.log_every  # none at step 0: nothing trained
        while step <= upto:
            yield step
            step += self.log_every
        if upto == self.steps and after < self.steps and self.steps % self.log_every:
            yield self.steps

    def _noise(self, key: str, step: int, what: str) -> float:
        if self.noise == 0:
            return 0.0
        return random.Random(f"{self.seed}:{key}:{step}:{what}").gauss(0.0, self.noise)


class SimulatedMetricLines:
    """The MetricLines port over simulated clusters: each job's lines from its objective.

    A job prints lines when it has an objective: its own (`set_objective(job id)`), its
    sweep's (`set_objective(sweep id)` covers every trial), else `default` (None: none).
    The cursor is the last step read; a page holds at most `limit` lines.
    """

    def __init__(
        self,
        clusters: Mapping[str, SimulatedCluster],
        *,
        default: SyntheticObjective | None = None,
    ) -> None:
        self._clusters = clusters
        self.default = default
        self._objectives: dict[str, SyntheticObjective] = {}
        # job id -> the furthest step seen: a job's pods go, its steps stay done
        self._reached: dict[str, int] = {}

    def set_objective(self, job_id: str, objective: SyntheticObjective | None) -> None:
        """What the job (or every trial of the sweep `job_id`) reports; None: nothing."""
        if objective is None:
            self._objectives.pop(job_id, None)
        else:
            self._objectives[job_id] = objective

    def objective_of(self, job: Job) -> SyntheticObjective | None:
        found = self._objectives.get(job.id)
        if found is None and job.parent_id is not None:
            found = self._objectives.get(job.parent_id)
        return found if found is not None else self.default

    def reached(self, job: Job, objective: SyntheticObjective) -> int:
        """The step the job's trainer has reached by now (0 before it runs)."""
        step = self._reached.get(job.id, 0)
        # Every cluster: a job placed again elsewhere resumes there from its checkpoint.
        for cluster in self._clusters.values():
            progress = cluster.trainer_progress(job.id)
            if progress is None:
                continue
            done, whole = progress
            share = 1.0 if whole <= timedelta(0) else min(1.0, done / whole)
            step = max(step, int(objective.steps * share))
        self._reached[job.id] = step
        return step

    def read(self, job: Job, *, cursor: str | None, limit: int) -> MetricLinesPage:
        objective = self.objective_of(job)
        if objective is None or limit <= 0:
            return MetricLinesPage(lines=(), cursor=cursor)
        after = _cursor_step(cursor)
        params = trial_parameters(job)
        lines: list[str] = []
        last = after
        for step in objective.logged_steps(after=after, upto=self.reached(job, objective)):
            if len(lines) >= limit:
                break
            lines.append(objective.line(params, step, key=job.id))
            last = step
        return MetricLinesPage(lines=tuple(lines), cursor=str(last) if lines else cursor)


def trial_parameters(job: Job) -> dict[str, object]:
    """A trial's parameter values as its recorded spec holds them ({} for any other job)."""
    spec = job.spec if isinstance(job.spec, Mapping) else {}
    values = spec.get("trialParameters", spec.get("trial_parameters"))
    return dict(values) if isinstance(values, Mapping) else {}


def _cursor_step(cursor: str | None) -> int:
    """The last step read; -1 (from the start) for none or one this reader did not write."""
    if cursor is None or len(cursor) > 20 or not cursor.isdigit():
        return -1
    return int(cursor)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None

