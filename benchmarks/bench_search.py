"""The search itself, simulated (no training): tpe against random, median stopping against none.

Each trial "trains" on a simulated clock: its trainer's squall-metric lines come from a
known objective of its parameters (squall.local.cluster.metrics.SyntheticObjective: best
at lr 0.003 on a log scale, dropout 0.2 and optimizer adam; the score rises over its
1,000 steps towards how near its parameters are, with seeded noise), read every check
(a minute of an hour-long trial, as reconcile reads them) and merged into its metrics as
reconcile merges them (core/metrics.py). The sweep's own pieces decide: its parameters
(random: core/spec/sweep.py, as intake expands them; tpe: the Optuna chooser reconcile
calls for each slot, core/search.py choose_parameters, fed the trials as reconcile feeds
them), median stopping (core/experiments.py median_stop, from step 100 once 3 trials
finished) and the best score. Four trials run at once, 40 in all.

Driven as a loop of those pure pieces on a simulated clock, not through the whole
Simulation (handlers, stores, cluster): one Simulation of a 16-trial sweep takes seconds
on the memory backend (scenarios/sweep-tpe.yaml, tests/e2e/test_sweep_tpe_scenario.py),
and this runs 80 sweeps of 40 trials.

Two measures, each as a median over seeds and as a ratio against the baseline measured in
the same run (random search, every trial run to its end):

1. trials until one reaches the target score (0.85): tpe needs fewer. A sweep that never
   reaches it counts as 41 trials, so where random search mostly never does, the ratio
   printed is an upper bound;
2. GPU-hours of a whole sweep with median stopping, and its best score: at least a
   third fewer GPU-hours at the same best (random search draws the same trials with or
   without stopping, so the comparison is trial for trial; tpe with stopping is shown
   too, its history and so its trials differing).

    python benchmarks/bench_search.py [seeds]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall.core.experiments import median_stop
from squall.core.metrics import JobMetrics, MetricSeries, merge
from squall.core.search import Observed, Outcome, choose_parameters
from squall.core.spec import EarlyStopping, Objective, Sweep
from squall.core.spec.sweep import sweep_points
from squall.local.cluster.metrics import ParameterOptimum, SyntheticObjective

OBJECTIVE = SyntheticObjective(
    parameters={
        "lr": ParameterOptimum(optimum=0.003, width=1.0, log=True),
        "dropout": ParameterOptimum(optimum=0.2, width=0.25),
        "optimizer": ParameterOptimum(optimum="adam", penalty=1.0),
    },
    steps=1000,
    log_every=50,
    eval_every=100,
    noise=0.01,
)
SPACE = {
    "lr": {"min": 0.0001, "max": 0.1, "log": True},
    "dropout": {"min": 0.0, "max": 0.5},
    "optimizer": ["adam", "sgd"],
}
GOAL = Objective(metric="eval/score", goal="maximize")
STOPPING = EarlyStopping(rule="median", min_steps=100, min_trials=3)
MAX_TRIALS = 40
PARALLELISM = 4
CHECK_EVERY = 17  # steps between reads: a minute of a 1,000-step hour
TARGET = 0.85  # the score the search must reach (0.95 at the optimum, 0.05 far from it)
RUN_HOURS = 1.0  # a whole trial: one GPU for an hour


@dataclass
class Trial:
    number: int
    params: dict[str, Any]
    started: int  # the clock's step when it started
    reached: int = 0
    cursor: str | None = None
    metrics: JobMetrics | None = None
    state: str = "running"  # running, finished, stopped

    @property
    def series(self) -> MetricSeries | None:
        return self.metrics.get(GOAL.metric) if self.metrics is not None else None

    @property
    def value(self) -> float | None:
        series = self.series
        return series.best(GOAL.goal).value if series is not None else None


@dataclass
class SweepRun:
    strategy: str
    stopping: bool
    seed: int
    trials: list[Trial] = field(default_factory=list)

    @property
    def best(self) -> float:
        return max((t.value for t in self.trials if t.value is not None), default=0.0)

    @property
    def gpu_hours(self) -> float:
        return sum(t.reached for t in self.trials) / OBJECTIVE.steps * RUN_HOURS

    @property
    def stopped(self) -> int:
        return sum(t.state == "stopped" for t in self.trials)

    def trials_to(self, target: float) -> int:
        """Trials started until one of them reached `target` (MAX_TRIALS + 1: never)."""
        reached = [t.number + 1 for t in self.trials if t.value is not None and t.value >= target]
        return min(reached, default=MAX_TRIALS + 1)


Chooser = Callable[[Sequence[Trial], int], dict[str, Any]]


def sweep_of(strategy: str, seed: int) -> Sweep:
    return Sweep.model_validate(
        {
            "parameters": SPACE,
            "strategy": strategy,
            "maxTrials": MAX_TRIALS,
            "parallelism": PARALLELISM,
            "seed": seed,
            "objective": {"metric": GOAL.metric, "goal": GOAL.goal},
        }
    )


def random_chooser(seed: int) -> Chooser:
    points = sweep_points(sweep_of("random", seed))

    def choose(_: Sequence[Trial], number: int) -> dict[str, Any]:
        point = points[number]
        assert point is not None
        return dict(point)

    return choose


def tpe_chooser(seed: int) -> Chooser:
    sweep = sweep_of("tpe", seed)

    def choose(trials: Sequence[Trial], number: int) -> dict[str, Any]:
        return dict(choose_parameters(sweep, [observed(t) for t in trials], number=number))

    return choose


def observed(trial: Trial) -> Observed:
    """The trial as reconcile hands it to the sampler (core/search.py observed_trials)."""
    series = trial.series
    if trial.state == "finished" and series is not None:
        return Observed(trial.number, trial.params, Outcome.COMPLETE, value=series.best(GOAL.goal).value)
    if trial.state == "stopped" and series is not None:
        return Observed(trial.number, trial.params, Outcome.STOPPED, points={p.step: p.value for p in series.history})
    return Observed(trial.number, trial.params, Outcome.RUNNING)


def run_sweep(strategy: str, *, seed: int, stopping: bool) -> SweepRun:
    choose = random_chooser(seed) if strategy == "random" else tpe_chooser(seed)
    run = SweepRun(strategy=strategy, stopping=stopping, seed=seed)
    now = 0
    while True:
        running = [t for t in run.trials if t.state == "running"]
        while len(running) < PARALLELISM and len(run.trials) < MAX_TRIALS:
            trial = Trial(number=len(run.trials), params=choose(run.trials, len(run.trials)), started=now)
            run.trials.append(trial)
            running.append(trial)
        if not running:
            return run
        now += CHECK_EVERY
        for trial in running:
            read(trial, now)
        for trial in running:
            if trial.reached >= OBJECTIVE.steps:
                trial.state = "finished"
            elif stopping:
                finished = [t.series for t in run.trials if t.state != "running"]
                if median_stop(trial.series, finished, objective=GOAL, rule=STOPPING) is not None:
                    trial.state = "stopped"


def read(trial: Trial, now: int) -> None:
    """What reconcile reads of the trial's lines by `now`, merged into its metrics."""
    trial.reached = min(OBJECTIVE.steps, now - trial.started)
    after = int(trial.cursor) if trial.cursor is not None else -1
    steps = list(OBJECTIVE.logged_steps(after=after, upto=trial.reached))
    if not steps:
        return
    key = f"trial-{trial.number}"
    lines = [OBJECTIVE.line(trial.params, step, key=key) for step in steps]
    trial.cursor = str(steps[-1])
    trial.metrics = merge(trial.metrics, lines, cursor=trial.cursor)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def main(seeds: int = 20) -> dict[str, float]:
    runs = {
        (strategy, stopping): [run_sweep(strategy, seed=seed, stopping=stopping) for seed in range(seeds)]
        for strategy in ("random", "tpe")
        for stopping in (False, True)
    }
    baseline = runs[("random", False)]
    base_trials = median([r.trials_to(TARGET) for r in baseline])
    base_hours = median([r.gpu_hours for r in baseline])
    base_best = median([r.best for r in baseline])
    print(
        f"search on a known objective, {seeds} seeds, {MAX_TRIALS} trials of {RUN_HOURS:g} GPU-hour, "
        f"{PARALLELISM} at a time, median stopping from step {STOPPING.min_steps} over "
        f"{STOPPING.min_trials}+ finished trials (pure pieces on a simulated clock):"
    )
    print(
        f"  {'':24} {'trials to ' + format(TARGET, 'g'):>15} {'reached':>8} {'GPU-hours':>10} {'best':>7} "
        f"{'stopped':>8}"
    )
    results: dict[str, float] = {}
    for (strategy, stopping), group in runs.items():
        name = f"{strategy}{' + median stop' if stopping else ''}"
        trials = median([r.trials_to(TARGET) for r in group])
        hours = median([r.gpu_hours for r in group])
        best = median([r.best for r in group])
        stopped = median([r.stopped for r in group])
        reached = sum(r.trials_to(TARGET) <= MAX_TRIALS for r in group)
        shown = f"{trials:g}" if trials <= MAX_TRIALS else f">{MAX_TRIALS}"
        print(f"  {name:24} {shown:>15} {f'{reached}/{seeds}':>8} {hours:10.1f} {best:7.3f} {stopped:8g}")
        results[f"{name} trials ratio"] = trials / base_trials
        results[f"{name} gpu-hours ratio"] = hours / base_hours
        results[f"{name} best ratio"] = best / base_best
    tpe_ratio = results["tpe trials ratio"]
    hours_ratio = results["random + median stop gpu-hours ratio"]
    same_best = sum(
        abs(a.best - b.best) < 1e-9 for a, b in zip(baseline, runs[("random", True)], strict=True)
    )
    censored = base_trials > MAX_TRIALS
    print(
        "  baseline: random, every trial to its end (medians over seeds; a sweep that never reached the "
        f"target counts as {MAX_TRIALS + 1} trials)"
    )
    print(
        f"  ratio trials-to-target tpe/random = {tpe_ratio:.3f}"
        f"{' (at most: random did not reach it in most seeds)' if censored else ''} "
        f"(goal < 1 -> {'met' if tpe_ratio < 1 else 'NOT met'})"
    )
    print(
        f"  ratio GPU-hours random+median-stop/random = {hours_ratio:.3f}, same best in {same_best}/{seeds} seeds "
        f"(goal <= 0.667 at the same best -> "
        f"{'met' if hours_ratio <= 2 / 3 and same_best == seeds else 'NOT met'})"
    )
    print(
        f"  ratio GPU-hours tpe+median-stop/random = {results['tpe + median stop gpu-hours ratio']:.3f}, "
        f"best {results['tpe + median stop best ratio']:.3f} of random's"
    )
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
