"""Property checks over random clusters: invariants that must hold whatever the workload."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest

from squall.planner import GroupHealth, Node, NodeGroup, Plan, Pod, Resources, ScalingFailure
from squall.planner.demand import build_demand
from squall.planner.model import REGION_LABEL
from squall.planner.packing import GroupOption, Packer, Room, RoomKind

from .builders import GPU_TAINT, NOW, ago, instance, node_of, pod, resources, run_plan

TEMPLATES = {
    "p3.2xlarge": (resources("7800m", "55Gi", 1, 58), True),
    "p3.8xlarge": (resources("31800m", "240Gi", 4, 58), True),
    "p4d.24xlarge": (resources("95", "1100Gi", 8, 110), True),
    "c5.4xlarge": (resources("15800m", "28Gi", 0, 58), False),
    "m5.8xlarge": (resources("31800m", "120Gi", 0, 110), False),
}
SHAPES = [
    ("1", "2Gi", 0),
    ("4", "16Gi", 0),
    ("4", "16Gi", 1),
    ("8", "60Gi", 1),
    ("16", "120Gi", 4),
    ("48", "500Gi", 8),
]
STATES = ["InService"] * 6 + ["Pending", "Pending:Wait", "Terminating:Wait", "Detached", "Quarantined:Odd"]
REGIONS = ["us-west-2", "us-east-1", "eu-west-1"]
SEEDS = range(60)


def random_cluster(
    rng: random.Random,
) -> tuple[list[NodeGroup], list[Node], list[Pod], dict[str, GroupHealth]]:
    groups: list[NodeGroup] = []
    nodes: list[Node] = []
    health: dict[str, GroupHealth] = {}
    regions = REGIONS[: rng.randint(1, 3)]
    for region in regions:
        for instance_type in rng.sample(sorted(TEMPLATES), rng.randint(1, 4)):
            groups.append(_random_group(rng, region, instance_type))
            if rng.random() < 0.15:
                health[groups[-1].name] = GroupHealth(
                    backoff_until=NOW + timedelta(minutes=rng.randint(-10, 20)), consecutive_failures=1
                )
    for members in groups:
        for member in members.instances:
            if rng.random() < 0.8:
                nodes.append(
                    node_of(
                        members,
                        member.instance_id,
                        ready=rng.random() < 0.9,
                        gpus_ready=rng.random() < 0.9,
                        cordoned_by_squall=rng.random() < 0.1,
                        unschedulable=rng.random() < 0.05,
                        ready_since=ago(minutes=rng.randint(0, 240)),
                    )
                )
    nodes.extend(
        Node(
            name=f"byo-{n}",
            allocatable=resources("16", "64Gi", 0, 110),
            labels={REGION_LABEL: rng.choice(regions)},
        )
        for n in range(rng.randint(0, 2))
    )
    return groups, nodes, _random_pods(rng, nodes, regions), health


def _random_group(rng: random.Random, region: str, instance_type: str) -> NodeGroup:
    allocatable, gpu = TEMPLATES[instance_type]
    name = f"{instance_type.split('.')[0]}-{instance_type.split('.')[1]}-{region}"
    max_size = rng.randint(0, 30)
    instances = [
        instance(f"i-{name}-{n}", rng.choice(STATES), ago(minutes=rng.randint(1, 180)))
        for n in range(rng.randint(0, min(max_size, 6)))
    ]
    failures = [ScalingFailure(time=ago(minutes=rng.randint(0, 90)), reason="InsufficientInstanceCapacity")]
    return NodeGroup(
        name=name,
        region=region,
        instance_type=instance_type,
        allocatable=allocatable,
        taints=(GPU_TAINT,) if gpu else (),
        priority=rng.choice([0, 10, 20]),
        min_size=rng.randint(0, min(2, max_size)),
        max_size=max_size,
        desired=min(max_size, len(instances) + rng.randint(0, 2)),
        instances=tuple(instances),
        failures=tuple(failures) if rng.random() < 0.2 else (),
        price_per_hour=rng.choice([None, 1.0, 3.06, 12.24, 32.77]),
    )


def _random_pods(rng: random.Random, nodes: list[Node], regions: list[str]) -> list[Pod]:
    pods: list[Pod] = []
    for n, node in enumerate(nodes):
        for k in range(rng.randint(0, 3)):
            cpu, memory, gpu = rng.choice(SHAPES[:3])
            pods.append(
                pod(
                    f"run-{n}-{k}",
                    cpu=cpu,
                    memory=memory,
                    gpu=gpu,
                    node=node.name,
                    daemonset=rng.random() < 0.3,
                    phase=rng.choice(["Running", "Running", "Succeeded"]),
                    finished_at=ago(minutes=rng.randint(0, 60)),
                    job=f"job-{n}" if rng.random() < 0.3 else None,
                )
            )
    for n in range(rng.randint(0, 60)):
        cpu, memory, gpu = rng.choice(SHAPES)
        selector = {REGION_LABEL: rng.choice(regions)} if rng.random() < 0.1 else None
        job = f"gang-{rng.randint(0, 8)}" if rng.random() < 0.4 else None
        pods.append(pod(f"pend-{n}", cpu=cpu, memory=memory, gpu=gpu, selector=selector, job=job))
    return pods


def _busy_nodes(pods: list[Pod]) -> set[str]:
    return {p.node_name for p in pods if p.node_name and p.is_active and p.is_workload}


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_invariants_hold_on_random_clusters(seed: int) -> None:
    # given
    rng = random.Random(seed)
    groups, nodes, pods, health = random_cluster(rng)
    # when
    result = run_plan(groups=groups, nodes=nodes, pods=pods, health=health)
    # then
    by_name = {g.name: g for g in groups}
    removed_nodes = {d.node for d in result.scale_downs if d.node}
    assert not removed_nodes & _busy_nodes(pods), "a busy node was scaled down"
    assert len({d.instance for d in result.scale_downs}) == len(result.scale_downs)
    assert len({s.group for s in result.scale_ups}) == len(result.scale_ups)
    backed_off = {b.group for b in result.backoffs if b.health.in_backoff(NOW)} | {
        name
        for name, h in health.items()
        if h.in_backoff(NOW) and name not in {b.group for b in result.backoffs}
    }
    for scale_up in result.scale_ups:
        assert scale_up.from_desired < scale_up.to_desired <= by_name[scale_up.group].max_size
        assert scale_up.group not in backed_off
    _assert_sizes_stay_within_bounds(result, by_name)
    pending = {p.key for p in pods if p.is_pending}
    unschedulable = [u.pod for u in result.unschedulable]
    assert set(unschedulable) <= pending and len(set(unschedulable)) == len(unschedulable)
    cordoned = {n.name for n in nodes if n.cordoned_by_squall}
    assert {u.node for u in result.uncordons} <= cordoned
    _assert_gangs_all_or_nothing(pods, set(unschedulable))


def _assert_sizes_stay_within_bounds(result: Plan, groups: dict[str, NodeGroup]) -> None:
    targets = {g.group: g.to_desired for g in result.give_backs}
    removed = Counter(d.group for d in result.scale_downs)
    for name, count in removed.items():
        assert targets.get(name, groups[name].desired) - count >= groups[name].min_size


def _assert_gangs_all_or_nothing(pods: list[Pod], unschedulable: set[str]) -> None:
    jobs: dict[str, list[str]] = {}
    for p in pods:
        if p.is_pending and p.job_id:
            jobs.setdefault(p.job_id, []).append(p.key)
    for keys in jobs.values():
        if len(keys) > 1:
            waiting = [k in unschedulable for k in keys]
            assert all(waiting) or not any(waiting)


def _replan_after_applying(
    groups: list[NodeGroup], nodes: list[Node], pods: list[Pod], health: dict[str, GroupHealth]
) -> tuple[Plan, Plan]:
    """Plan; raise desired and give back as planned (AWS has launched nothing yet); plan again."""
    first = run_plan(groups=groups, nodes=nodes, pods=pods, health=health)
    targets = {s.group: s.to_desired for s in first.scale_ups} | {
        g.group: g.to_desired for g in first.give_backs
    }
    applied = [replace(g, desired=targets.get(g.name, g.desired)) for g in groups]
    remembered = dict(health) | {b.group: b.health for b in first.backoffs}
    return first, run_plan(groups=applied, nodes=nodes, pods=pods, health=remembered)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_burst_is_never_scaled_twice(seed: int) -> None:
    # given: a burst of pending pods onto a cluster with nothing booting
    rng = random.Random(seed)
    groups, nodes, pods, health = random_cluster(rng)
    groups = [
        replace(g, instances=tuple(i for i in g.instances if i.lifecycle_state == "InService"))
        for g in groups
    ]
    groups = [replace(g, desired=len(g.instances)) for g in groups]
    pods = [replace(p, job_id=None, node_selector={}) for p in pods]
    # when
    _first, second = _replan_after_applying(groups, nodes, pods, health)
    # then: what the first plan launches, the second counts as booting
    assert second.scale_ups == ()
    assert second.backoffs == ()


@pytest.mark.parametrize("seed", SEEDS)
def test_replanning_any_cluster_asks_for_at_most_a_few_more_nodes(seed: int) -> None:
    """Gangs, region selectors and old booting nodes make greedy packing order-dependent.

    A later check may then pack a little worse than the one that launched and ask for a
    node or so more (about 1.5% of random clusters, 1-3 nodes); it never re-launches a burst.
    """
    # given
    rng = random.Random(seed)
    groups, nodes, pods, health = random_cluster(rng)
    # when
    _first, second = _replan_after_applying(groups, nodes, pods, health)
    # then
    assert sum(s.to_desired - s.from_desired for s in second.scale_ups) <= 3
    assert second.backoffs == ()


@pytest.mark.parametrize("seed", range(40))
def test_packing_never_exceeds_what_a_node_holds(seed: int) -> None:
    # given: random rooms, groups with empty booting nodes, and random pending pods
    rng = random.Random(seed)
    groups, nodes, pods, _ = random_cluster(rng)
    demand = build_demand([p for p in pods if p.is_pending], job_regions={})
    rooms = [_room(rng, n) for n in nodes]
    options = [_option(rng, g) for g in groups]
    shapes = list(demand.free) + [s for g in demand.gangs for s in g.pods_by_shape]
    packer = Packer(rooms=rooms, options=options, shapes=shapes)
    # when
    for gang in demand.gangs:
        packer.place_gang(gang)
    placements = packer.place_free({shape: len(ps) for shape, ps in demand.free.items()})
    placed = {shape: count for shape, (count, _) in placements.items()}
    # then: nothing negative, and what nodes not up yet lost is exactly what was put on them
    assert all(min(room.free) >= 0 for room in rooms)
    for option in options:
        assert option.new_nodes <= option.group.max_size
        assert sum(option.bins.values()) == option.booting + option.new_nodes
        assert all(min(vector) >= 0 for vector in option.bins)
        taken = [sum((option.capacity[i] - v[i]) * n for v, n in option.bins.items()) for i in range(4)]
        requested = [sum(s.request[i] * n for s, n in option.placed.items()) for i in range(4)]
        assert taken == requested
    assert all(placed[s] <= len(ps) for s, ps in demand.free.items())


def _room(rng: random.Random, node: Node) -> Room:
    allocatable = node.allocatable
    used = Resources(cpu=rng.randint(0, allocatable.cpu), memory=rng.randint(0, allocatable.memory))
    return Room(
        kind=rng.choice(list(RoomKind)),
        name=node.name,
        group=None,
        region=node.labels.get(REGION_LABEL, ""),
        free=(
            allocatable.cpu - used.cpu,
            allocatable.memory - used.memory,
            allocatable.gpu,
            allocatable.pods,
        ),
        labels=node.labels,
        taints=node.taints,
    )


def _option(rng: random.Random, group: NodeGroup) -> GroupOption:
    option = GroupOption(
        group=group,
        capacity=group.allocatable.vector(),
        labels=group.template_labels(),
        taints=group.taints,
        headroom=rng.randint(0, group.max_size),
    )
    for _ in range(rng.randint(0, 3)):
        option.add_booting(option.capacity)
    return option
