"""Admission (issue 13): the 3,000-job burst history on the default cdk.json, and admit() at scale.

1. The burst history (benchmarks/histories.py, seed 13): two working days of one
   researcher iterating on single-GPU jobs of minutes, five bursts of hyperparameter
   sweeps (hundreds of 1-4 GPU trials at once) and waves of 8-replica distributed
   runs, replayed through the real handlers (`Simulation`, memory backend, unpaced, as
   `squall simulate` does) against the node groups and policy of the repository's
   cdk.json. Prints wall seconds, jobs by final state, how many FAILED with
   DeadlineExceeded, gangsReleased, the invariants, the number of scale checks, and
   queue wait p50/p95 per team; the issue's goal: every job SUCCEEDED, invariants
   zero, under 60 s.
2. The admission micro-benchmark: `squall.planner.admission.admit` on a queue of
   10,000 suspended jobs (rendered by `squall.core.manifests.render` and read back by
   `squall.planner.kube.parse_replica_jobs`, as the scale check reads them) onto the
   2,000 ready nodes of bench_planner's snapshot (40 groups in 3 regions), then the
   planner on the running pods plus admission's demand: the new check. The baseline,
   measured in the same run: today's check on the same snapshot, `plan()` with every
   queued replica's pod created at once and pending. Prints each median and the ratio
   (admission + planning) / today's planning; the goal: admission adds well under a
   second.
3. The same queue onto the same 2,000 nodes in 4 clusters (issue 26): the 40 groups
   spread over clusters cluster-0..3 (each with groups in all 3 regions, so clusters
   share regions: 12 sites), nodes and running pods read as planner/kube.py reads a
   cluster's objects (names "<cluster>/<node>", CLUSTER_LABEL), the queue not in any
   cluster yet (as core/queue.py builds it from the job table). Prints admit() and
   plan() against the one-cluster case of the same run and what the clusters add to a
   check; the goal: well under a second.

Run: .venv/bin/python benchmarks/bench_admission.py [--jobs 3000] [--queue 10000] [--runs 3]
     [--quick] [--no-replay] [--no-micro] [--write-trace FILE] [--run-times 3]
"""

from __future__ import annotations

import argparse
import csv
import gc
import io
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from bench_planner import NOW, Scenario, build_scenario
from bench_replay import ideal_peak_gpus
from histories import burst_history

from squall.conventions import CLUSTER_LABEL
from squall.core import manifests
from squall.core.spec.parse import load_spec
from squall.local.runtime import DEFAULT_REGISTRIES, LocalRuntime
from squall.local.scenario import Simulation
from squall.local.scenario.simulation import SimulationResult
from squall.local.summary import percentile
from squall.local.trace import TraceRow, job_spec, load_configuration, parse_trace, trace_plan
from squall.planner import Pod, Policy, plan
from squall.planner.admission import TeamShare, admit
from squall.planner.kube import parse_replica_jobs

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


# ---- 1. the burst history ------------------------------------------------------------------


def replay_burst(jobs: int, *, write_trace: Path | None, run_times: float = 1.0) -> bool:
    configuration = load_configuration(ROOT / "cdk.json")
    most_per_node = max(g.allocatable.gpu for g in configuration.groups)
    text = burst_history(jobs, max_gpus_per_replica=most_per_node)
    if run_times != 1.0:
        text = _longer_runs(text, run_times)
    if write_trace is not None:
        write_trace.write_text(text)
    rows = parse_trace(text, source="burst", max_run=configuration.policy.max_runtime_limit)
    plan_ = trace_plan(rows, configuration, name="burst")
    fleet = sum(g.allocatable.gpu * g.max_size for g in configuration.groups)
    print(
        f"burst history: {len(rows)} jobs ({_kinds(text)}), {sum(r.gpus * r.replicas * r.run_s for r in rows) / 3600:.0f} "
        f"GPU-hours, ideal peak {ideal_peak_gpus(rows)} GPUs, last arrival at {rows[-1].submit_s / 3600:.1f} h; "
        f"cdk.json groups: {len(configuration.groups)}, at most {fleet} GPUs"
    )
    checks: list[int] = []

    def count_checks(local: LocalRuntime, _: SimulationResult) -> None:
        checks.append(len(local.scale_results))

    started = time.perf_counter()
    result = Simulation(plan_, backend="memory", pace=False).run(after=count_checks)
    wall = time.perf_counter() - started
    summary = result.summary
    finals = Counter(row.state for row in result.jobs)
    deadline = sum(1 for row in result.jobs if row.state == "FAILED" and row.reason == "DeadlineExceeded")
    reasons = Counter(row.reason for row in result.jobs if row.state != "SUCCEEDED")
    print(
        f"replay: {summary['virtualSeconds'] / 3600:.1f} simulated hours in {wall:.1f} s wall-clock "
        f"(finished: {summary['finished']}), {checks[0] if checks else 0} scale checks"
    )
    print(f"jobs by final state: {dict(sorted(finals.items()))}")
    print(
        f"FAILED with DeadlineExceeded: {deadline}; not SUCCEEDED by reason: {dict(reasons.most_common(6))}"
    )
    print(f"gangsReleased: {summary['gangsReleased']}; invariants: {summary['invariants']}")
    print(f"functionErrors: {summary['functionErrors']}; peakNodes: {summary['peakNodes']}")
    for team, (p50, p95, waited) in sorted(_waits_by_team(result).items()):
        print(f"queue wait {team}: p50 {p50:.0f} s, p95 {p95:.0f} s ({waited} jobs started)")
    succeeded = finals.get("SUCCEEDED", 0)
    met = succeeded == len(rows) and result.checks.hold and wall < 60
    print(
        f"goal: every job SUCCEEDED, invariants zero, under 60 s: {'met' if met else 'NOT met'} "
        f"({succeeded}/{len(rows)} SUCCEEDED, {wall:.1f} s)"
    )
    return result.checks.hold


def _longer_runs(text: str, factor: float) -> str:
    """The same history with every run `factor` times as long (a heavier burst: more waits)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row | {"run_s": str(round(float(row["run_s"]) * factor))})
    return out.getvalue()


def _kinds(text: str) -> str:
    notes = Counter(line.rsplit(",", 1)[1] for line in text.splitlines()[1:])
    return ", ".join(f"{count} {note}" for note, count in sorted(notes.items()))


def _waits_by_team(result: SimulationResult) -> dict[str, tuple[float, float, int]]:
    waits: dict[str, list[float]] = {}
    for row in result.jobs:
        if row.started_s is not None:
            waits.setdefault(row.team, []).append(row.started_s - row.submitted_s)
    return {team: (percentile(w, 0.5), percentile(w, 0.95), len(w)) for team, w in waits.items()}


# ---- 2. admission at scale -----------------------------------------------------------------

TEAMS = {
    "research": TeamShare(quota=2000, weight=2.0),
    "vision": TeamShare(quota=1000),
    "speech": TeamShare(),
    "robotics": TeamShare(quota=400, weight=0.5),
}


def queue_jobs(count: int, *, seed: int = 11) -> list[dict[str, Any]]:
    """`count` jobs' Job objects, suspended, as the submit function creates them.

    60% single-GPU, 20% of 4 GPUs, 12% of 8 GPUs, 8% distributed (2-8 replicas of 8
    GPUs); priorities 30/50/70/90; four teams; submitted over the last six hours.
    """
    rng = random.Random(seed)
    registry = DEFAULT_REGISTRIES[0]
    objects: list[dict[str, Any]] = []
    for n in range(count):
        kind = rng.random()
        if kind < 0.60:
            gpus, replicas = 1, 1
        elif kind < 0.80:
            gpus, replicas = 4, 1
        elif kind < 0.92:
            gpus, replicas = 8, 1
        else:
            gpus, replicas = 8, rng.randint(2, 8)
        team = rng.choice(sorted(TEAMS))
        row = TraceRow(n + 2, 0.0, team, gpus, replicas, 1800.0, priority=rng.choice((30, 50, 50, 70, 90)))
        spec = load_spec(job_spec(row, registry=registry))
        submitted = NOW - timedelta(seconds=rng.uniform(0, 6 * 3600))
        objects.extend(
            o
            for o in manifests.render(
                spec, job_id=row.job_id, namespace=f"team-{team}", submitted_at=submitted
            )
            if o["kind"] == "Job"
        )
    return objects


def median_time(runs: int, work: Callable[[], T]) -> tuple[float, T]:
    times, value = [], None
    for _ in range(runs):
        started = time.perf_counter()
        value = work()
        times.append(time.perf_counter() - started)
    assert value is not None
    return statistics.median(times), value


def in_clusters(scenario: Scenario, clusters: int) -> Scenario:
    """The same nodes, pods and groups spread over `clusters` clusters, as the scale check reads them."""
    groups = [replace(g, cluster=f"cluster-{i % clusters}") for i, g in enumerate(scenario.groups)]
    by_instance = {i.instance_id: g.cluster for g in groups for i in g.instances}
    nodes, by_node = [], {}
    for node in scenario.nodes:
        cluster = by_instance[node.instance_id or ""]
        by_node[node.name] = cluster
        nodes.append(
            replace(node, name=f"{cluster}/{node.name}", labels={**node.labels, CLUSTER_LABEL: cluster})
        )
    pods = []
    for pod in scenario.pods:
        if pod.node_name is not None:
            cluster = by_node[pod.node_name]
            pod = replace(
                pod,
                node_name=f"{cluster}/{pod.node_name}",
                node_selector={**pod.node_selector, CLUSTER_LABEL: cluster},
            )
        pods.append(pod)
    return Scenario(nodes=nodes, pods=pods, groups=groups, health=scenario.health)


def micro(queue: int, runs: int) -> None:
    scenario = build_scenario()
    running = [p for p in scenario.pods if not p.is_pending]
    objects = queue_jobs(queue)
    read_s, replica_jobs = median_time(runs, lambda: parse_replica_jobs({"items": objects}))
    print(
        f"admission snapshot: {queue} queued jobs ({len(replica_jobs)} suspended replica Jobs, "
        f"{sum(j.gpus for j in replica_jobs)} GPUs), {len(scenario.nodes)} ready nodes, "
        f"{len(scenario.groups)} groups, {len(running)} running pods; teams {sorted(TEAMS)}"
    )
    print(f"  reading the queue (parse_replica_jobs, uncached): {read_s:.3f} s")
    policy = Policy()

    def admission() -> Any:
        return admit(
            jobs=replica_jobs,
            nodes=scenario.nodes,
            pods=running,
            groups=scenario.groups,
            teams=TEAMS,
            policy=policy,
            now=NOW,
        )

    def planning(pods: list[Pod]) -> Callable[[], Any]:
        return lambda: plan(
            nodes=scenario.nodes,
            pods=pods,
            groups=scenario.groups,
            health=scenario.health,
            policy=policy,
            now=NOW,
        )

    admit_s, decided = median_time(runs, admission)
    new_pods = [*running, *decided.demand]
    plan_s, new_plan = median_time(runs, planning(new_pods))
    # Today's check: every replica's pod created at once, all of them pending.
    today_pods = [*running, *(job.pod for job in replica_jobs)]
    today_s, today_plan = median_time(runs, planning(today_pods))
    print(
        f"  admit(): {admit_s:.3f} s median of {runs}: {len(decided.admitted)} admitted, "
        f"{len(decided.waiting)} waiting ({sum(1 for w in decided.waiting if w.reason != 'Queued')} held by quota), "
        f"{len(decided.demand)} pods of demand"
    )
    print(
        f"  plan() on running pods + admission's demand: {plan_s:.3f} s ({len(new_plan.scale_ups)} scale-ups); "
        f"new check (admit + plan): {admit_s + plan_s:.3f} s"
    )
    print(
        f"  baseline, today's check: plan() on every queued pod pending ({len(today_pods) - len(running)} pods): "
        f"{today_s:.3f} s ({len(today_plan.scale_ups)} scale-ups)"
    )
    print(
        f"  ratio new check / today's check: {(admit_s + plan_s) / today_s:.2f}x; admission adds {admit_s:.3f} s "
        f"(goal: well under a second, taken as under 0.5 s: {'met' if admit_s < 0.5 else 'NOT met'})"
    )
    many_clusters(scenario, replica_jobs, runs)


def many_clusters(scenario: Scenario, replica_jobs: list[Any], runs: int) -> None:
    """The same queue onto the same nodes in 4 clusters, against one cluster, measured in turns.

    The two cases' runs alternate, so that what else the machine does falls on both
    alike, each after a full collection; each check's CPU seconds are printed beside
    its wall seconds (on a loaded machine, the steadier of the two).
    """
    policy = Policy()
    cases = {"one cluster": scenario, "4 clusters": in_clusters(scenario, 4)}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    decided: dict[str, Any] = {}
    planned: dict[str, Any] = {}
    for _ in range(runs):
        for name, case in cases.items():
            running = [p for p in case.pods if not p.is_pending]
            gc.collect()  # neither case pays for the other's garbage
            wall, cpu = time.perf_counter(), time.process_time()
            decided[name] = admit(
                jobs=replica_jobs,
                nodes=case.nodes,
                pods=running,
                groups=case.groups,
                teams=TEAMS,
                policy=policy,
                now=NOW,
            )
            admitted_at = (time.perf_counter(), time.process_time())
            planned[name] = plan(
                nodes=case.nodes,
                pods=[*running, *decided[name].demand],
                groups=case.groups,
                health=case.health,
                policy=policy,
                now=NOW,
            )
            end = (time.perf_counter(), time.process_time())
            times[name].append((admitted_at[0] - wall, end[0] - admitted_at[0]))
            times[name].append((admitted_at[1] - cpu, end[1] - admitted_at[1]))
    medians = {
        name: {
            kind: (
                statistics.median(t[0] for t in runs_[index::2]),
                statistics.median(t[1] for t in runs_[index::2]),
            )
            for index, kind in enumerate(("wall", "cpu"))
        }
        for name, runs_ in times.items()
    }
    four = cases["4 clusters"]
    sites = len({g.site for g in four.groups})
    by_cluster = Counter(a.region.split("/", 1)[0] for a in decided["4 clusters"].admitted)
    print(
        f"{len(replica_jobs)} queued replica Jobs onto the same {len(four.nodes)} nodes in 4 clusters "
        f"({sites} sites: the clusters share the 3 regions), against one cluster, in turns, median of {runs}:"
    )
    for name in cases:
        result = decided[name]
        print(
            f"  {name}: {len(result.admitted)} admitted, {len(result.demand)} pods of demand, "
            f"{len(planned[name].scale_ups)} scale-ups"
            + (f"; admitted by cluster {dict(sorted(by_cluster.items()))}" if name != "one cluster" else "")
        )
    for kind in ("wall", "cpu"):
        (one_admit, one_plan), (four_admit, four_plan) = (
            medians["one cluster"][kind],
            medians["4 clusters"][kind],
        )
        added = four_admit + four_plan - one_admit - one_plan
        print(
            f"  {kind} s: admit() {four_admit:.3f} vs {one_admit:.3f} ({four_admit / one_admit:.2f}x), plan() "
            f"{four_plan:.3f} vs {one_plan:.3f} ({four_plan / one_plan:.2f}x); the check "
            f"{(four_admit + four_plan) / (one_admit + one_plan):.2f}x one cluster's: 4 clusters add {added:+.3f} s"
            + (
                f" (goal: well under a second, taken as under 0.5 s: {'met' if added < 0.5 else 'NOT met'})"
                if kind == "wall"
                else ""
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3_000, help="jobs in the burst history")
    parser.add_argument("--queue", type=int, default=10_000, help="queued jobs in the admission benchmark")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each step of the micro-benchmark")
    parser.add_argument("--quick", action="store_true", help="1,000 burst jobs, 2,000 queued, one run")
    parser.add_argument("--no-replay", action="store_true", help="only the micro-benchmark")
    parser.add_argument("--no-micro", action="store_true", help="only the replay")
    parser.add_argument("--write-trace", type=Path, help="also write the burst history here (TRACE.csv)")
    parser.add_argument(
        "--run-times",
        type=float,
        default=1.0,
        help="every run this many times as long (3: a heavier burst, near the issue's 2,737 of 3,000 failed before admission)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.queue, args.runs = 1_000, 2_000, 1
    ok = True
    if not args.no_replay:
        ok = replay_burst(args.jobs, write_trace=args.write_trace, run_times=args.run_times)
    if not args.no_micro:
        micro(args.queue, args.runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
