"""Long histories (issue 13): 109 days of 3,000 multi-GPU jobs, replayed; cost per event, not per minute.

The history (benchmarks/histories.py, seed 109): 3,000 jobs of 4 to 128 GPUs (replicas
of at most 8 GPUs), weekday arrivals, heavy-tailed sizes and run times (minutes to
three weeks), over 109 days. It is replayed through the real handlers (`Simulation`,
memory backend, unpaced) against bench_replay's three regions of p4d.24xlarge (8 GPUs,
at most 60 each) and g5.xlarge (1 GPU, at most 120 each): a 128-GPU gang needs 16 p4d
in one region.

Prints wall seconds, simulated days, the scale checks run (and how many ended early,
after one read), jobs by final state and the invariants. The baseline, measured in the
same run: the first `--baseline-days` simulated days of the same history only (the
jobs submitted in them, the replay stopped at that time; jobs still running then are
left unfinished, which is no fault here). If a replay's cost followed its events, the
whole history would cost about (its jobs / the baseline's jobs) times the baseline; if
it followed its length in minutes, (its simulated days / the baseline's). It prints
both ratios beside the measured one. The issue's goal: the whole history under 3 minutes.

By default 30 days of 800 jobs (a few minutes on a shared 2-core machine); `--full` is
the issue's 109 days of 3,000 jobs, whose goal line is the one that counts.

Run: .venv/bin/python benchmarks/bench_history.py [--full | --quick] [--days 30] [--jobs 800] [--baseline-days 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import timedelta

from bench_replay import configuration
from histories import long_history

from squall.local.runtime import LocalRuntime
from squall.local.scenario import EndModel, Simulation
from squall.local.scenario.simulation import SimulationResult
from squall.local.trace import TraceRow, parse_trace, trace_plan

DAY = 24 * 3600
GOAL_SECONDS = 180


@dataclass
class Replay:
    jobs: int
    wall: float
    virtual_days: float
    checks: int
    ended_early: int
    result: SimulationResult


def replay(rows: list[TraceRow], name: str, *, days: float | None = None) -> Replay:
    """Replay `rows` to their end, or (`days`) for that many simulated days only."""
    config = configuration()
    plan = trace_plan(rows, config, name=name)
    if days is not None:
        at = timedelta(days=days)
        plan = replace(plan, end=EndModel(when="time", at=at, limit=at + timedelta(seconds=1)))
    counted: list[tuple[int, int]] = []

    def count_checks(local: LocalRuntime, _: SimulationResult) -> None:
        early = sum(1 for r in local.scale_results if r.get("skipped") and not r.get("plan"))
        counted.append((len(local.scale_results), early))

    started = time.perf_counter()
    result = Simulation(plan, backend="memory", pace=False).run(after=count_checks)
    wall = time.perf_counter() - started
    checks, early = counted[0] if counted else (0, 0)
    return Replay(len(rows), wall, result.summary["virtualSeconds"] / DAY, checks, early, result)


def report(label: str, r: Replay, *, stopped: bool = False) -> None:
    """`stopped`: the replay was stopped part way, its unfinished jobs counted as lost."""
    summary = r.result.summary
    finals = Counter(row.state for row in r.result.jobs)
    deadline = sum(1 for row in r.result.jobs if row.state == "FAILED" and row.reason == "DeadlineExceeded")
    print(
        f"{label}: {r.jobs} jobs, {r.virtual_days:.1f} simulated days in {r.wall:.1f} s wall-clock "
        f"(finished: {summary['finished']}); {r.checks} scale checks, {r.ended_early} ended early; "
        f"{r.wall / max(1, r.checks) * 1000:.2f} ms per check"
    )
    print(
        f"  jobs by final state: {dict(sorted(finals.items()))}; FAILED with DeadlineExceeded: {deadline}; "
        f"gangsReleased: {summary['gangsReleased']}; invariants: {summary['invariants']}"
        + (" (stopped part way: its unfinished jobs count as lost)" if stopped else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=800)
    parser.add_argument("--baseline-days", type=int, default=5, help="the baseline: the first N days only")
    parser.add_argument(
        "--full", action="store_true", help="the issue's history: 109 days of 3,000 jobs, 10 days as baseline"
    )
    parser.add_argument(
        "--quick", action="store_true", help="10 days of 300 jobs, the first 2 days as baseline"
    )
    args = parser.parse_args(argv)
    if args.full:
        args.days, args.jobs, args.baseline_days = 109, 3_000, 10
    elif args.quick:
        args.days, args.jobs, args.baseline_days = 10, 300, 2
    config = configuration()
    rows = parse_trace(
        long_history(args.jobs, days=args.days), source="long", max_run=config.policy.max_runtime_limit
    )
    sizes = Counter(r.gpus * r.replicas for r in rows)
    print(
        f"long history: {len(rows)} jobs over {args.days} days, by GPUs {dict(sorted(sizes.items()))}, "
        f"{sum(r.gpus * r.replicas * r.run_s for r in rows) / 3600:,.0f} GPU-hours, longest run "
        f"{max(r.run_s for r in rows) / DAY:.1f} days; fleet at most "
        f"{sum(g.allocatable.gpu * g.max_size for g in config.groups)} GPUs in 3 regions"
    )
    first = [r for r in rows if r.submit_s < args.baseline_days * DAY]
    base = replay(first, "baseline", days=args.baseline_days)
    report(f"baseline (the first {args.baseline_days} simulated days only)", base, stopped=True)
    whole = replay(rows, "history")
    report("whole history", whole)
    print(
        f"ratio whole / baseline: wall {whole.wall / base.wall:.2f}x, scale checks {whole.checks / max(1, base.checks):.2f}x; "
        f"jobs {whole.jobs / max(1, base.jobs):.2f}x, simulated days {whole.virtual_days / max(1e-9, base.virtual_days):.2f}x"
    )
    print(
        f"goal: the whole history under {GOAL_SECONDS} s: {'met' if whole.wall < GOAL_SECONDS else 'NOT met'} "
        f"({whole.wall:.1f} s)"
    )
    # The baseline stops mid-run: its unfinished jobs count as lost, so only the whole run is held to it.
    return 0 if whole.result.checks.hold else 1


if __name__ == "__main__":
    sys.exit(main())
