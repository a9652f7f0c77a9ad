"""`squall sweep ID`: a sweep's trials ranked by its objective, and its best trial.

The ranking is core/experiments.py's (`Client.sweep_results`): the trials that reported
the objective best first, then the others in trial order. A trial stopped early by the
median rule ended SUCCEEDED with reason EarlyStopped, and is shown as EarlyStopped.
Parameter values, reasons and trial ids come from a spec or a pod: every cell goes
through `one_line`, so a terminal shows their control characters instead of obeying them.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from squall.cli.errors import EXIT_OK, reported
from squall.cli.human import dollars
from squall.cli.text import one_line, print_table
from squall.core.jobs import Reason
from squall.planner.text import counted

if TYPE_CHECKING:
    from squall.core.experiments import SweepResults, TrialResult

# A parameters cell longer than this is cut (--json has them whole).
PARAMETERS_SHOWN = 80


def early_stopped(trial: TrialResult) -> bool:
    return str(trial.reason).startswith(Reason.EARLY_STOPPED)


def state_words(trial: TrialResult) -> str:
    """SUCCEEDED, RUNNING, ...; EarlyStopped for a trial the median rule stopped."""
    return "EarlyStopped" if early_stopped(trial) else trial.status.value


def parameter_words(parameters: dict[str, Any], *, limit: int | None = PARAMETERS_SHOWN) -> str:
    """`lr=0.001, batch=64`, escaped; "-" for none yet (a tpe trial waiting for its slot)."""
    if not parameters:
        return "-"
    text = one_line(", ".join(f"{name}={_value(value)}" for name, value in parameters.items()))
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def _value(value: Any) -> str:
    if isinstance(value, float) and not isinstance(value, bool):
        return f"{value:.6g}"
    return str(value)


def metric_words(trial: TrialResult) -> str:
    """`0.91 (step 1000)`; "-" when it reported no value of the objective."""
    if trial.value is None:
        return "-"
    step = f" (step {trial.step})" if trial.step is not None else ""
    return f"{trial.value:.6g}{step}"


def run_time(seconds: float | None) -> str:
    """`1:02:03`; "-" for a trial that never started."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    whole = max(int(seconds), 0)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def best_line(results: SweepResults) -> str:
    """What the sweep's best trial is, or plainly why there is none."""
    metric = one_line(results.objective_metric or "")
    if results.objective_metric is None:
        return "no objective: the sweep names no metric to rank its trials by (sweep.objective)"
    if results.unreported:
        return (
            f"no trial reported {metric} (yet): a trial reports it by printing "
            f"`squall-metric {metric}=<value> step=<N>`"
        )
    best = results.best
    if best is None:
        return f"no best trial: only failed or cancelled trials reported {metric}"
    return (
        f"best trial {one_line(best.id)}: {metric} {metric_words(best)}, {state_words(best)}; "
        f"{parameter_words(best.parameters, limit=None)}"
    )


def trial_dict(trial: TrialResult, *, rank: int | None) -> dict[str, Any]:
    return {
        "rank": rank,
        "id": trial.id,
        "status": trial.status.value,
        "reason": trial.reason,
        "earlyStopped": early_stopped(trial),
        "parameters": trial.parameters,
        "value": trial.value,
        "step": trial.step,
        "runSeconds": trial.run_seconds,
        "gpuHours": trial.gpu_hours,
        "cost": trial.cost,
    }


def results_dict(results: SweepResults) -> dict[str, Any]:
    """What `squall sweep ID --json` prints: rank is null for a trial that reported no value."""
    objective = (
        {"metric": results.objective_metric, "goal": results.goal}
        if results.objective_metric is not None
        else None
    )
    return {
        "sweepId": results.sweep_id,
        "objective": objective,
        "unreported": results.unreported,
        "best": results.best.id if results.best is not None else None,
        "trials": [
            trial_dict(t, rank=i if t.value is not None else None)
            for i, t in enumerate(results.trials, start=1)
        ],
    }


def sweep_lines(results: SweepResults) -> tuple[str, list[str], list[list[str]], str]:
    """The heading, the table (header, rows) and the best trial's line."""
    if results.objective_metric is not None:
        goal = f" ({results.goal})" if results.goal else ""
        what = f"objective {one_line(results.objective_metric)}{goal}"
    else:
        what = "no objective"
    heading = f"sweep {one_line(results.sweep_id)}: {counted(len(results.trials), 'trial')}, {what}"
    metric = one_line(results.objective_metric).upper() if results.objective_metric else "METRIC"
    header = ["RANK", "TRIAL", "STATE", metric, "RUN TIME", "GPU-HOURS", "COST", "PARAMETERS"]
    rows = [
        [
            str(rank) if trial.value is not None else "-",
            one_line(trial.id),
            state_words(trial),
            metric_words(trial),
            run_time(trial.run_seconds),
            f"{trial.gpu_hours:,.2f}" if trial.gpu_hours is not None else "-",
            dollars(trial.cost) if trial.cost is not None else "-",
            parameter_words(trial.parameters),
        ]
        for rank, trial in enumerate(results.trials, start=1)
    ]
    return heading, header, rows, best_line(results)


@reported
def cmd_sweep(args: argparse.Namespace) -> int:
    from squall.cli.client import Client

    results = Client().sweep_results(args.id)
    if args.json:
        print(json.dumps(results_dict(results)))
        return EXIT_OK
    heading, header, rows, best = sweep_lines(results)
    print(heading)
    if rows:
        print_table(header, rows)
    print(best)
    return EXIT_OK


def add_sweep_command(subparsers: Any) -> None:
    """Add `sweep` to the `squall` command's subparsers."""
    p = subparsers.add_parser("sweep", help="a sweep's trials ranked by its objective, and its best trial")
    p.add_argument("id", help="the sweep's job id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_sweep)


# ---- what `squall describe` adds: a job's metrics, a sweep's best trial ----


def metric_lines(job: Any) -> list[str]:
    """Each metric the job reported: its last, lowest and highest point (at most MAX_METRICS lines)."""
    metrics = getattr(job, "metrics", None)
    if metrics is None:
        return []
    lines = [
        f"  metric {one_line(name)}: last {_point(series.last)}, min {_point(series.min)}, max {_point(series.max)}"
        for name, series in sorted(metrics.series.items())
    ]
    if metrics.ignored:
        lines.append(
            f"  {counted(metrics.ignored, 'metric line')} ignored (malformed, not a finite number, "
            "too long, or past the names kept)"
        )
    return lines


def _point(point: Any) -> str:
    return f"{point.value:.6g} at step {point.step}"


def metrics_dict(job: Any) -> dict[str, Any] | None:
    """A job's metrics for `describe --json`: each one's last, min and max point, and the lines ignored."""
    metrics = getattr(job, "metrics", None)
    if metrics is None:
        return None
    return {
        "series": {
            name: {
                key: {"step": p.step, "value": p.value}
                for key, p in (("last", s.last), ("min", s.min), ("max", s.max))
            }
            for name, s in metrics.series.items()
        },
        "ignored": metrics.ignored,
    }


def best_trial_line(client: Any, job: Any) -> str:
    """`best trial gan-sweep-t003: eval/score 0.91 (step 1000), SUCCEEDED; lr=0.001` from the
    sweep's record (`bestTrial`, kept by reconcile) and that trial's; "" for a job that is no
    sweep, or a sweep with no best trial yet."""
    best_id = getattr(job, "best_trial", None)
    if not job.is_sweep or not best_id:
        return ""
    from squall.core.experiments import sweep_objective, trial_result
    from squall.core.spec import SpecError

    trial = client.find(best_id)
    try:
        objective = sweep_objective(job)
    except SpecError:
        objective = None
    if trial is None or objective is None:
        return f"  best trial {one_line(best_id)}"
    result = trial_result(trial, objective, now=client.clock.now())
    return (
        f"  best trial {one_line(best_id)}: {one_line(objective.metric)} {metric_words(result)}, "
        f"{state_words(result)}; {parameter_words(result.parameters)} (squall sweep {one_line(job.id)})"
    )
