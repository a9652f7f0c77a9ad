"""Deterministic job histories for the admission and long-history benchmarks (issue 13).

Both return the text of a TRACE.csv (`squall simulate --trace`), the same for the same
arguments and seed:

- `burst_history`: two working days of one team's researcher iterating (a stream of
  small 1-GPU jobs of minutes), with bursts of hyperparameter sweeps (hundreds of 1-4
  GPU trials at once) and 8-replica distributed runs on top. Sized for the default
  cdk.json node groups (two regions of 16 single-GPU p3.2xlarge at most: 32 GPUs, 16
  in one region): its peaks ask for many times what can be bought, while the whole
  history needs well under the fleet's GPU-hours over the two days, so a replay
  that queues well can finish every job.
- `long_history`: 109 days of multi-GPU training jobs (4 to 128 GPUs each, as
  replicas of at most 8 GPUs), heavy-tailed in size and run time as the published
  Philly and Helios traces are: most jobs small and short, a few huge or running for
  weeks.

Without a `max_runtime_s` column every row is submitted with twice its run time, at
least an hour (squall.local.trace.job_spec). The generators size run times with that
in mind: an iterating job of minutes has an hour, so queueing of about an hour is what
kills it when time queued counts against it. `long_history(..., declared_limits=True)`
adds the column as users set limits (issue 27): coarse, and above the real run time
(1.5 to 5 times it, rounded up to a whole hour or to a usual step: 1h, 2h, 4h, 8h,
12h, 1d, 2d, 3d, 7d, 14d, 21d, 30d); the jobs are the same as without it.

Run: .venv/bin/python benchmarks/histories.py burst|long [--jobs N] [--seed S] [--declared-limits] > TRACE.csv
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass

HEADER = "submit_s,team,gpus,replicas,run_s,priority,note"
HEADER_WITH_LIMITS = "submit_s,team,gpus,replicas,run_s,priority,max_runtime_s,note"
HOUR = 3600
DAY = 24 * HOUR
MINUTE = 60


@dataclass(frozen=True, slots=True)
class Row:
    submit_s: float
    team: str
    gpus: int  # per replica
    replicas: int
    run_s: float
    priority: int
    note: str
    max_runtime_s: int | None = None  # the user's declared limit; None: no such column

    def line(self) -> str:
        limit = "" if self.max_runtime_s is None else f"{self.max_runtime_s},"
        return (
            f"{self.submit_s:.1f},{self.team},{self.gpus},{self.replicas},{self.run_s:.0f},"
            f"{self.priority},{limit}{self.note}"
        )


def render(rows: list[Row], *, header: str = HEADER) -> str:
    ordered = sorted(rows, key=lambda r: r.submit_s)
    return "\n".join([header, *(r.line() for r in ordered)]) + "\n"


def _shape(gpus: int, max_gpus_per_replica: int) -> tuple[int, int]:
    """(GPUs per replica, replicas) for a job of `gpus` GPUs on nodes of at most that many."""
    per = min(gpus, max_gpus_per_replica)
    return per, math.ceil(gpus / per)


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, rng.lognormvariate(math.log(median), sigma)))


# ---- a) the burst history ----------------------------------------------------------------


# (day, hour, trials share, team): when the sweeps land; each sweep's trials come within minutes.
SWEEPS = (
    (0, 10.5, 0.22, "research"),
    (0, 14.0, 0.18, "vision"),
    (0, 17.5, 0.15, "research"),
    (1, 10.0, 0.20, "vision"),
    (1, 15.0, 0.25, "research"),
)
# (day, hour, runs share, team): waves of 8-replica distributed runs.
DISTRIBUTED = (
    (0, 11.0, 0.3, "vision"),
    (0, 16.0, 0.2, "research"),
    (1, 11.5, 0.3, "research"),
    (1, 16.5, 0.2, "vision"),
)
ITERATE_SHARE, SWEEP_SHARE = 0.5, 0.48  # the rest: distributed runs


def burst_history(jobs: int = 3_000, *, seed: int = 13, max_gpus_per_replica: int = 1) -> str:
    """Two days: 50% iterating jobs, 48% sweep trials in five bursts, 2% 8-replica runs.

    `max_gpus_per_replica`: the most GPUs one node of the groups has (1 for the default
    cdk.json's p3.2xlarge); a trial or replica wanting more is split into replicas of
    that many, so every row fits the groups it is meant for.
    """
    rng = random.Random(seed)
    rows: list[Row] = []
    iterate = round(jobs * ITERATE_SHARE)
    sweep = round(jobs * SWEEP_SHARE)
    distributed = jobs - iterate - sweep

    # One researcher iterating through two working days (09:00-19:00): a job every ~50 s,
    # each a few minutes on one GPU; a quick look in the evening too.
    for _ in range(iterate):
        day = rng.random() < 0.5
        hour = rng.gauss(14, 3.0)
        hour = min(22.0, max(8.5, hour))
        submit = int(day) * DAY + hour * HOUR
        run = _lognormal(rng, 6 * MINUTE, 0.6, 1 * MINUTE, 40 * MINUTE)
        rows.append(Row(submit, "research", 1, 1, run, 60, "iterate"))

    # Sweeps: every trial of one sweep is submitted within three minutes; trials of 1-4 GPUs.
    counts = _split(sweep, [share for *_, share, _ in SWEEPS])
    for (day, hour, _, team), count in zip(SWEEPS, counts, strict=True):
        start = day * DAY + hour * HOUR
        for _ in range(count):
            gpus = rng.choice((1, 1, 1, 1, 2, 4))
            per, replicas = _shape(gpus, max_gpus_per_replica)
            run = _lognormal(rng, 7 * MINUTE, 0.5, 2 * MINUTE, 40 * MINUTE)
            rows.append(Row(start + rng.random() * 3 * MINUTE, team, per, replicas, run, 40, "sweep"))

    # Distributed runs: 8 replicas of 8 GPUs (or of what one node holds), within half an hour.
    counts = _split(distributed, [share for *_, share, _ in DISTRIBUTED])
    for (day, hour, _, team), count in zip(DISTRIBUTED, counts, strict=True):
        start = day * DAY + hour * HOUR
        for _ in range(count):
            per = min(rng.choice((1, 8)), max_gpus_per_replica)
            run = _lognormal(rng, 25 * MINUTE, 0.5, 5 * MINUTE, 2 * HOUR)
            rows.append(Row(start + rng.random() * 30 * MINUTE, team, per, 8, run, 50, "distributed"))
    return render(rows)


def _split(total: int, shares: list[float]) -> list[int]:
    """`total` split by `shares`, the remainder to the last."""
    counts = [math.floor(total * s / sum(shares)) for s in shares]
    counts[-1] += total - sum(counts)
    return counts


# ---- b) the long history -----------------------------------------------------------------

# Job sizes in GPUs and their shares: most jobs small, a few huge (Philly, Helios).
SIZES = ((4, 0.38), (8, 0.34), (16, 0.13), (32, 0.09), (64, 0.045), (128, 0.015))
LONG_TEAMS = ("research", "vision", "speech", "nlp")
LONGEST = 21 * DAY  # within the default maxRuntimeLimit (30 days) with room for twice a run
# The limits users write when not a whole number of hours: 1h, 2h, 4h, 8h, 12h, 1d, 2d, 3d, 7d, 14d, 21d,
# and the default maxRuntimeLimit, 30d (no limit may pass it).
LIMIT_STEPS = tuple(h * HOUR for h in (1, 2, 4, 8, 12)) + tuple(d * DAY for d in (1, 2, 3, 7, 14, 21, 30))
MOST_DECLARED = 30 * DAY


def long_history(
    jobs: int = 3_000,
    *,
    days: int = 109,
    seed: int = 109,
    longest: float = LONGEST,
    declared_limits: bool = False,
) -> str:
    """`jobs` multi-GPU jobs over `days`: arrivals on weekday working hours, heavy tails.

    Run times are log-normal (median 90 minutes, sigma 2.2: a few minutes for the
    short end, days to `longest` for the long), longer for larger jobs.
    `declared_limits`: each row also has the max_runtime_s its user would declare
    (`declared_limit`), drawn from a generator of its own so that the jobs stay the same.
    """
    rng = random.Random(seed)
    limits = random.Random(f"{seed}-limits")
    rows: list[Row] = []
    weights = [w for _, w in SIZES]
    for _ in range(jobs):
        # A weekday three times as busy as a weekend day, the working day the busiest part.
        while True:
            day = rng.randrange(days)
            if day % 7 < 5 or rng.random() < 1 / 3:
                break
        hour = min(23.99, max(0.0, rng.gauss(14, 4.0)))
        submit = day * DAY + hour * HOUR
        (gpus,) = rng.choices([s for s, _ in SIZES], weights=weights)
        per, replicas = _shape(gpus, 8)
        median = 90 * MINUTE * (1 + math.log2(gpus / 4) / 3)
        run = _lognormal(rng, median, 2.2, 2 * MINUTE, longest)
        team = rng.choice(LONG_TEAMS)
        limit = declared_limit(limits, round(run)) if declared_limits else None
        rows.append(Row(submit, team, per, replicas, run, 50, f"g{gpus}", max_runtime_s=limit))
    return render(rows, header=HEADER_WITH_LIMITS if declared_limits else HEADER)


def declared_limit(rng: random.Random, run_s: float) -> int:
    """A limit as a user sets one for a job that will run `run_s`: coarse, and well above the run.

    Users do not know the run time; they guess high, 1.5 to 5 times it (log-uniform: as
    often 2x as 4x), and write a round figure: half of them a whole number of hours, the
    rest the next usual step (LIMIT_STEPS). Never past the default maxRuntimeLimit.
    """
    wanted = run_s * math.exp(rng.uniform(math.log(1.5), math.log(5.0)))
    if rng.random() < 0.5:
        limit = max(HOUR, math.ceil(wanted / HOUR) * HOUR)
    else:
        limit = next((step for step in LIMIT_STEPS if step >= wanted), MOST_DECLARED)
    return min(limit, MOST_DECLARED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=("burst", "long"))
    parser.add_argument("--jobs", type=int, default=3_000)
    parser.add_argument("--seed", type=int)
    parser.add_argument(
        "--declared-limits",
        action="store_true",
        help="long: add max_runtime_s, the limits users would declare",
    )
    args = parser.parse_args(argv)
    if args.which == "burst":
        text = burst_history(args.jobs, **({"seed": args.seed} if args.seed is not None else {}))
    else:
        text = long_history(
            args.jobs,
            declared_limits=args.declared_limits,
            **({"seed": args.seed} if args.seed is not None else {}),
        )
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
