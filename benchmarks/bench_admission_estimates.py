"""Admission with backfill and start estimates (issue 27): admit() on 10,000 queued jobs and 2,000 nodes.

The snapshot: bench_planner's 2,000 ready nodes (40 groups in 3 regions), whose busy
pods are running jobs that declared a maxRuntime (1 hour to 3 days) and started
within it, as the scale check reads them (unsuspended replica Jobs with their
activeDeadlineSeconds and startTime; each busy pod named `<its Job>-<suffix>`, as the Job
controller names them, so admission finds every running Job's pod); and bench_admission's
queue of 10,000 suspended
jobs (four teams, priorities 30-90, 1 to 64 GPUs), each declaring a limit as users do
(1h, 2h, 4h, 8h, 1d or 3d). Two fleets: as bench_planner has it (groups may grow to 400
nodes, so most of the queue is bought for), and full (every group at its max size: the
queue waits for running jobs to end, which is where backfill and estimates work).

On each, `squall.planner.admission.admit` with the policy's backfill off (today's
admission: reservations only, no estimates) and on (the time profile: backfill and
every waiting job's startsBy and likelyStart), measured in the same run in turns, each
after a full collection, median of `--runs`. Prints admitted (and how many of them
backfilled), waiting jobs with an estimate, wall and CPU seconds of each, and the ratio
on / off; the issue's goal: admission with backfill and estimates still well under a
second (taken as under 0.5 s, as bench_admission does).

Run: .venv/bin/python benchmarks/bench_admission_estimates.py [--queue 10000] [--runs 3] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from bench_admission import TEAMS, queue_jobs
from bench_planner import NOW, Scenario, build_scenario

from squall.planner import Policy
from squall.planner.admission import TeamShare, admit
from squall.planner.kube import parse_replica_jobs
from squall.planner.model import REGION_LABEL
from squall.planner.queue_types import ReplicaJob

HOUR = 3600
DECLARED = tuple(h * HOUR for h in (1, 2, 4, 8, 24, 72))
RUNNING_TEAM = "platform"  # the running jobs' team: no quota, so the queue's teams' quotas are theirs alone
GOAL_SECONDS = 0.5


def with_job_names(scenario: Scenario) -> Scenario:
    """The scenario with each busy pod named as the Job controller names a Job's pod (`<Job>-<suffix>`),
    so admission finds the pod of each running replica Job (and does not take the Job for one whose
    pod is still to come, holding its room twice)."""
    pods = [
        replace(pod, name=f"{pod.name}-x7k2p")
        if pod.node_name is not None and pod.job_id is not None and not pod.daemonset
        else pod
        for pod in scenario.pods
    ]
    return replace(scenario, pods=pods)


def running_jobs(scenario: Scenario, *, seed: int = 27) -> list[ReplicaJob]:
    """A running replica Job for each busy pod (named as with_job_names names them): a declared limit,
    started within it."""
    rng = random.Random(seed)
    regions = {node.name: node.labels.get(REGION_LABEL, "") for node in scenario.nodes}
    jobs = []
    for pod in scenario.pods:
        if pod.node_name is None or pod.job_id is None or pod.daemonset:
            continue
        limit = rng.choice(DECLARED)
        started = NOW - timedelta(seconds=rng.uniform(0, limit))
        jobs.append(
            ReplicaJob(
                name=pod.name.rsplit("-", 1)[0],
                namespace=pod.namespace,
                job_id=pod.job_id,
                team=RUNNING_TEAM,
                priority=50,
                submitted_at=started - timedelta(minutes=5),
                suspended=False,
                started=True,
                started_at=started,
                max_runtime=timedelta(seconds=limit),
                admitted_region=regions[pod.node_name],
                pod=replace(pod, node_name=None, phase="Pending"),
            )
        )
    return jobs


def declared_limits(replica_jobs: list[ReplicaJob], *, seed: int = 28) -> list[ReplicaJob]:
    """The queue with a limit per job as users declare them (the same for every replica of a job)."""
    rng = random.Random(seed)
    chosen: dict[str, timedelta] = {}
    for job in replica_jobs:
        if job.job_id not in chosen:
            chosen[job.job_id] = timedelta(seconds=rng.choice(DECLARED))
    return [replace(job, max_runtime=chosen[job.job_id]) for job in replica_jobs]


def full(scenario: Scenario) -> Scenario:
    """The same fleet with every group at its max size: nothing more to buy."""
    groups = [replace(g, max_size=len(g.instances), desired=len(g.instances)) for g in scenario.groups]
    return replace(scenario, groups=groups)


def measure(
    case: Scenario, jobs: list[ReplicaJob], teams: dict[str, TeamShare], runs: int
) -> dict[bool, Any]:
    """admit() off and on, in turns; each one's medians (wall, CPU) and its last plan."""
    running = [p for p in case.pods if not p.is_pending]
    # Every team's jobs run half their declared limit: likelyStart's profile differs from startsBy's.
    ratios = dict.fromkeys(teams, 0.5)
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    decided: dict[bool, Any] = {}
    for _ in range(runs):
        for backfill in (False, True):
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            decided[backfill] = admit(
                jobs=jobs,
                nodes=case.nodes,
                pods=running,
                groups=case.groups,
                teams=teams,
                policy=Policy(backfill=backfill),
                now=NOW,
                run_ratios=ratios,
            )
            times[backfill].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {
        backfill: (
            statistics.median(t[0] for t in times[backfill]),
            statistics.median(t[1] for t in times[backfill]),
            decided[backfill],
        )
        for backfill in (False, True)
    }


def report(name: str, measured: dict[bool, Any]) -> None:
    print(f"{name}:")
    for backfill in (False, True):
        wall, cpu, result = measured[backfill]
        backfilled = sum(1 for a in result.admitted if getattr(a, "backfilled", False))
        estimated = sum(1 for w in result.waiting if getattr(w, "starts_by", None) is not None)
        label = "backfill on " if backfill else "backfill off"
        print(
            f"  {label}: admit() {wall:.3f} s wall, {cpu:.3f} s CPU; {len(result.admitted)} admitted "
            f"({backfilled} backfilled), {len(result.waiting)} waiting listed, {estimated} with startsBy, "
            f"{len(result.demand)} pods of demand"
        )
    (off_wall, off_cpu, _), (on_wall, on_cpu, _) = measured[False], measured[True]
    met = on_wall < GOAL_SECONDS
    print(
        f"  ratio on / off: wall {on_wall / off_wall:.2f}x, CPU {on_cpu / off_cpu:.2f}x; backfill and estimates "
        f"add {on_wall - off_wall:+.3f} s (goal: admission well under a second, taken as under "
        f"{GOAL_SECONDS} s: {'met' if met else 'NOT met'}, {on_wall:.3f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, default=10_000, help="queued jobs")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each case, in turns")
    parser.add_argument("--quick", action="store_true", help="2,000 queued jobs, one run")
    args = parser.parse_args(argv)
    if args.quick:
        args.queue, args.runs = 2_000, 1
    scenario = with_job_names(build_scenario())
    running = running_jobs(scenario)
    queued = declared_limits(parse_replica_jobs({"items": queue_jobs(args.queue)}))
    jobs = [*running, *queued]
    teams = {**TEAMS, RUNNING_TEAM: TeamShare()}
    print(
        f"admission snapshot: {args.queue:,} queued jobs ({len(queued):,} suspended replica Jobs, "
        f"{sum(j.gpus for j in queued):,} GPUs, limits {', '.join(f'{s // HOUR}h' for s in DECLARED)}), "
        f"{len(scenario.nodes):,} ready nodes in {len(scenario.groups)} groups, {len(running):,} running jobs "
        f"(limits as the queue's, started within them); median of {args.runs}"
    )
    report("groups may grow (bench_planner's max sizes)", measure(scenario, jobs, teams, args.runs))
    report("the fleet full (every group at its max size)", measure(full(scenario), jobs, teams, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
