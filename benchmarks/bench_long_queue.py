"""A long queue: a history whose demand stays far beyond what the groups can hold, for hours.

Generates the trace deterministically (seed 1): a job every 3 s for two teams, 0-2
GPUs per replica over 1-4 replicas, runs of 1,000-5,400 s; the node groups: in
us-west-2, p3.8xlarge (4 GPUs, at most 64), p4d.24xlarge (8 GPUs, at most 16) and
c5.4xlarge (CPU only, at most 64). With 1,000 jobs the median wait is hours, and
every scale check admits and plans against the queue it finds.

Replays it through the real handlers (`squall simulate`'s machinery, memory backend)
and prints wall seconds, the queue wait and the wall time per job.
The baseline, measured in the same run: the same jobs on the same groups arriving ten
times more slowly (one every 30 s), so that they barely queue; the ratio is the long
queue's wall time per job against the baseline's: what a long queue costs the control
plane over a short one on a cluster of about the same size (each check admits and
plans against the queue it finds).

Run: .venv/bin/python benchmarks/bench_long_queue.py [--jobs 1000] [--write-trace FILE] [--write-groups FILE]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from squall.local.scenario import Simulation
from squall.local.trace import load_configuration, read_trace, trace_plan

GPU_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def node_groups() -> list[dict[str, Any]]:
    def group(
        name: str, instance: str, allocatable: dict[str, Any], most: int, price: float
    ) -> dict[str, Any]:
        gpu = "nvidia.com/gpu" in allocatable
        return {
            "name": name,
            "region": "us-west-2",
            "asgName": f"squall-{name}",
            "instanceType": instance,
            "allocatable": allocatable,
            **({"taints": GPU_TAINTS} if gpu else {}),
            "priority": 20 if instance.startswith("p4d") else 10,
            "minSize": 0,
            "maxSize": most,
            "pricePerHour": price,
        }

    return [
        group(
            "p3-usw2",
            "p3.8xlarge",
            {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58},
            64,
            12.24,
        ),
        group(
            "p4d-usw2",
            "p4d.24xlarge",
            {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": 8, "pods": 110},
            16,
            32.77,
        ),
        group("c5-usw2", "c5.4xlarge", {"cpu": "15890m", "memory": "30Gi", "pods": 58}, 64, 0.68),
    ]


def groups_file() -> str:
    teams = {team: {"namespace": f"team-{team}"} for team in ("research", "vision")}
    return yaml.safe_dump({"teams": teams, "nodeGroups": node_groups()}, sort_keys=False)


def generate_trace(jobs: int = 1000, *, seed: int = 1, every: int = 3) -> str:
    rng = random.Random(seed)
    lines = ["submit_s,team,gpus,replicas,run_s"]
    for i in range(jobs):
        team = rng.choice(("research", "vision"))
        lines.append(f"{every * i},{team},{rng.randint(0, 2)},{rng.randint(1, 4)},{rng.randint(1000, 5400)}")
    return "\n".join(lines) + "\n"


def replay(trace: Path, groups: Path) -> tuple[dict[str, Any], float]:
    configuration = load_configuration(groups)
    rows = read_trace(trace, max_run=configuration.policy.max_runtime_limit)
    plan = trace_plan(rows, configuration, name=trace.stem)
    started = time.perf_counter()
    result = Simulation(plan, backend="memory", pace=False).run()
    return result.summary, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--write-trace", type=Path, help="also write the generated trace here")
    parser.add_argument("--write-groups", type=Path, help="also write the node groups here (GROUPS.yaml)")
    args = parser.parse_args(argv)

    text = generate_trace(args.jobs)
    if args.write_trace:
        args.write_trace.write_text(text)
    if args.write_groups:
        args.write_groups.write_text(groups_file())
    walls: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        groups = Path(folder) / "groups.yaml"
        groups.write_text(groups_file())
        for label, every in (("long queue", 3), ("baseline, a job every 30 s", 30)):
            trace = Path(folder) / f"every-{every}.csv"
            trace.write_text(text if every == 3 else generate_trace(args.jobs, every=every))
            summary, wall = replay(trace, groups)
            walls[label] = wall
            waits = summary["queueWaitSeconds"]
            print(
                f"{label}: {args.jobs} jobs in {wall:.1f} s wall-clock ({1000 * wall / args.jobs:.1f} ms a job); "
                f"{summary['virtualSeconds'] / 3600:.1f} simulated hours; jobs {summary['jobs']}; "
                f"wait p50 {waits['p50']:.0f} s, p90 {waits['p90']:.0f} s; peak nodes {summary['peakNodes']}; "
                f"invariants {summary['invariants']}"
            )
            if any(summary["invariants"].values()) or not summary["finished"]:
                print("the replay broke an invariant or did not finish", file=sys.stderr)
                return 1
    long, short = walls["long queue"], walls["baseline, a job every 30 s"]
    print(f"ratio long queue / baseline (wall time per job): {long / short:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
