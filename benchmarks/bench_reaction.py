"""Reaction: from a message landing on the queue to the set-desired-capacity call.

The local runtime runs on a real-time clock against moto (the real queue, table and
Auto Scaling adapter): each job needs a new GPU node, so each submission should
reach a SetDesiredCapacity call within the scale-check debounce plus one check.
The baseline, measured in the same run on the virtual clock with the same arrivals
spread over the minute, is a scale function driven by its 1-minute schedule only.
Goal: p99 under 5 s.

    python benchmarks/bench_reaction.py [N]
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

from squall.core.settings import PolicySettings
from squall.local.clock import VirtualClock, WallClock
from squall.local.fleet import RegionCapacity
from squall.local.runtime import LocalRuntime

GROUP = {
    "name": "p3-usw2",
    "region": "us-west-2",
    "instanceType": "p3.8xlarge",
    "allocatable": {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58},
    "maxSize": 500,
}
# Nodes never finish booting during the measurement: every job needs one more (and
# the provision timeout is longer than the run, so no group backs off).
CAPACITY = {"us-west-2": RegionCapacity(instances={}, boot_time=timedelta(hours=10))}
POLICY = PolicySettings.model_validate({"provisionTimeout": "PT12H"})


def job(number: int) -> dict[str, Any]:
    return {
        "name": "react",
        "id": f"react-{number}",
        "team": "research",
        "image": "registry.example.com/squall/tf-trainer:1.0",
        "resources": {"cpu": "30", "memory": "200Gi", "gpu": 4},
    }


def measure(runtime: LocalRuntime, *, n: int, step: timedelta, gap: float, virtual: bool) -> list[float]:
    calls: list[float] = []
    assert runtime.fleet is not None
    original = runtime.fleet.set_desired_capacity

    def recording(**kwargs: Any) -> None:
        calls.append(runtime.clock.now().timestamp())
        original(**kwargs)

    runtime.fleet.set_desired_capacity = recording  # type: ignore[method-assign]
    rng = random.Random(7)
    latencies = []
    for number in range(n):
        if virtual:  # arrivals spread over the schedule's minute
            runtime.clock.advance(timedelta(seconds=rng.uniform(0, 60)))
        sent = runtime.clock.now().timestamp()
        runtime.send(job(number))
        before = len(calls)
        deadline = time.monotonic() + 30
        while len(calls) == before:
            runtime.step(step)
            if not virtual and time.monotonic() > deadline:
                raise RuntimeError("no scale-up within 30 s")
        latencies.append(calls[before] - sent)
        if not virtual:
            time.sleep(gap)
    return latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def main(n: int = 40) -> float:
    with LocalRuntime.start(clock=WallClock(), node_groups=[GROUP], capacity=CAPACITY, policy=POLICY) as live:
        reaction = measure(live, n=n, step=timedelta(milliseconds=100), gap=0.2, virtual=False)
    with LocalRuntime.start(
        clock=VirtualClock(), node_groups=[GROUP], capacity=CAPACITY, policy=POLICY, backend="memory"
    ) as sim:
        sim.scale_requests.requests.clear()
        sim.answer_scale_requests = lambda: sim.scale_requests.requests.clear()  # type: ignore[method-assign]
        schedule_only = measure(sim, n=n, step=timedelta(seconds=1), gap=0, virtual=True)
    print(f"reaction, queue -> SetDesiredCapacity, {n} submissions, real-time clock on the local endpoint:")
    print(f"  squall (scale-check requests, {live.settings.policy.scale_check_debounce.total_seconds():.0f} s debounce): "
          f"p50 {statistics.median(reaction):.2f} s, p99 {p99(reaction):.2f} s, max {max(reaction):.2f} s")
    print(f"  baseline, 1-minute schedule only (virtual clock): p50 {statistics.median(schedule_only):.1f} s, "
          f"p99 {p99(schedule_only):.1f} s")
    ratio = p99(reaction) / p99(schedule_only)
    print(f"  ratio p99 squall/schedule-only = {ratio:.3f} (goal: squall p99 < 5 s -> {'met' if p99(reaction) < 5 else 'NOT met'})")
    return ratio


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
