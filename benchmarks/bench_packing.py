"""Packing quality: nodes the planner asks for, against the lower bound, on mixed workloads.

The lower bound for a group is, per resource, the sum of the requests over one node's
allocatable, rounded up; the largest over cpu, memory, GPUs and pods. No packing can use
fewer nodes. Each workload is packed from zero onto one group; the ratio is nodes
requested / lower bound (goal: within 5%, i.e. <= 1.05). For context the same workloads
are packed by a naive first fit per pod in arrival order, measured in the same run.

Run: .venv/bin/python benchmarks/bench_packing.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable
from datetime import UTC, datetime

from squall.planner import NodeGroup, Pod, Policy, Resources, Taint, Toleration, plan
from squall.planner.fit import fit_count

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
GI = 2**30
GPU_TAINT = Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
TOLERATE_GPU = (Toleration(key="nvidia.com/gpu", operator="Exists"),)
GOAL = 1.05

P4D = Resources(cpu=95_000, memory=1_100 * GI, gpu=8, pods=110)
G5 = Resources(cpu=191_000, memory=760 * GI, gpu=8, pods=345)
M5 = Resources(cpu=31_800, memory=120 * GI, pods=110)


def gpu_mix(rng: random.Random) -> list[Pod]:
    """Training replicas of 1-8 GPUs with cpu and memory roughly in proportion, plus CPU helpers."""
    pods: list[Pod] = []
    for n in range(rng.randint(800, 1200)):
        gpu = rng.choice((1, 1, 1, 1, 2, 2, 4, 8))
        cpu = gpu * rng.randint(6_000, 11_000)
        memory = gpu * rng.randint(60, 130) * GI
        pods.append(_pod(f"train-{n}", cpu, memory, gpu))
    for n in range(rng.randint(500, 1500)):
        pods.append(
            _pod(f"helper-{n}", rng.choice((500, 1_000, 2_000, 4_000)), rng.choice((1, 2, 4, 8)) * GI, 0)
        )
    return pods


def shared_mix(rng: random.Random) -> list[Pod]:
    """GPU replicas and enough cpu-heavy helpers on the same nodes that cpu binds as much as GPUs."""
    pods = [
        _pod(f"train-{n}", gpu * rng.randint(8_000, 16_000), gpu * rng.randint(40, 90) * GI, gpu)
        for n, gpu in enumerate(rng.choice((1, 2, 4, 8)) for _ in range(rng.randint(300, 500)))
    ]
    pods.extend(
        _pod(f"helper-{n}", rng.choice((4_000, 8_000, 12_000, 16_000)), rng.choice((8, 16, 32)) * GI, 0)
        for n in range(rng.randint(600, 900))
    )
    return pods


def cpu_mix(rng: random.Random) -> list[Pod]:
    """Parameter servers, preprocessing and evaluation pods: cpu-heavy and memory-heavy."""
    shapes = [(rng.randint(1, 16) * 500, rng.randint(1, 32) * GI) for _ in range(12)]
    return [_pod(f"cpu-{n}", *rng.choice(shapes), 0) for n in range(rng.randint(2_000, 4_000))]


def _pod(name: str, cpu: int, memory: int, gpu: int) -> Pod:
    return Pod(
        namespace="team-a",
        name=name,
        requests=Resources(cpu=cpu, memory=memory, gpu=gpu),
        tolerations=TOLERATE_GPU,
    )


def lower_bound(pods: list[Pod], allocatable: Resources) -> int:
    totals = [
        sum(p.requests.cpu for p in pods),
        sum(p.requests.memory for p in pods),
        sum(p.requests.gpu for p in pods),
        len(pods),
    ]
    return max(
        math.ceil(total / have) for total, have in zip(totals, allocatable.vector(), strict=True) if have
    )


def planner_nodes(pods: list[Pod], allocatable: Resources) -> int:
    group = NodeGroup(
        name="bench",
        region="us-west-2",
        instance_type="bench",
        allocatable=allocatable,
        taints=(GPU_TAINT,) if allocatable.gpu else (),
        max_size=100_000,
    )
    result = plan(nodes=[], pods=pods, groups=[group], health={}, policy=Policy(), now=NOW)
    assert not result.unschedulable, result.unschedulable[:1]
    return sum(s.to_desired - s.from_desired for s in result.scale_ups)


def naive_nodes(pods: list[Pod], allocatable: Resources) -> int:
    """First fit per pod, in arrival order, over the nodes opened so far."""
    opened: list[list[int]] = []
    for pod in pods:
        request = (pod.requests.cpu, pod.requests.memory, pod.requests.gpu, 1)
        for room in opened:
            if fit_count((room[0], room[1], room[2], room[3]), request):
                break
        else:
            room = list(allocatable.vector())
            opened.append(room)
        for i in range(4):
            room[i] -= request[i]
    return len(opened)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    workloads: list[tuple[str, Callable[[random.Random], list[Pod]], Resources]] = [
        ("GPU training mix on p4d.24xlarge", gpu_mix, P4D),
        ("GPU replicas and cpu-heavy helpers sharing g5.48xlarge", shared_mix, G5),
        ("CPU mix (cpu- and memory-heavy) on m5.8xlarge", cpu_mix, M5),
    ]
    worst = 0.0
    for title, make, allocatable in workloads:
        print(f"packing quality: {title}")
        for seed in range(args.seeds):
            pods = make(random.Random(seed))
            rng = random.Random(seed)
            rng.shuffle(pods)
            bound = lower_bound(pods, allocatable)
            ours = planner_nodes(pods, allocatable)
            naive = naive_nodes(pods, allocatable)
            worst = max(worst, ours / bound)
            print(
                f"  seed {seed}: {len(pods):,} pods, lower bound {bound} nodes; "
                f"squall {ours} (ratio {ours / bound:.3f}); naive first fit {naive} (ratio {naive / bound:.3f})"
            )
    print(
        f"worst ratio nodes requested / lower bound: {worst:.3f} (goal <= {GOAL}: {'met' if worst <= GOAL else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
