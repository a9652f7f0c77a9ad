"""One inventory per scale check: admission, the plan and the timers decide the same on it as afresh."""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime
from typing import Any

import pytest

from squall.planner import plan
from squall.planner.admission import admit
from squall.planner.inventory import InstanceStatus, Inventory, build_inventory
from squall.planner.kube import parse_replica_jobs
from squall.planner.model import Node, NodeGroup, Pod
from squall.planner.planning import rooms_on_nodes_up
from squall.planner.timers import next_timer

from .builders import NOW, POLICY, ago, group, instance, node_of, pod
from .test_admission import job_objects, p4d


def _cluster() -> tuple[list[NodeGroup], list[Node], list[Pod]]:
    groups = [
        p4d(nodes=2),
        p4d("p4d-use1", "us-east-1", nodes=1),
        group("g5-usw2", instances=[instance("i-g5-0"), instance("i-g5-boot", "Pending", ago(minutes=2))]),
    ]
    nodes = [
        node_of(g, i.instance_id) for g in groups for i in g.instances if i.lifecycle_state == "InService"
    ]
    pods = [
        pod("run-0", gpu=4, job="run", node=nodes[0].name),
        pod("run-1", gpu=4, job="run", node=nodes[2].name),  # a gang across regions
        pod("done-0", gpu=8, job="done", node=nodes[1].name, phase="Succeeded", finished_at=ago(minutes=3)),
        pod("waits-0", gpu=1, job="waits"),
        pod("loose", cpu="2"),
    ]
    return groups, nodes, pods


def _same_inventory(a: Inventory, b: Inventory) -> None:
    assert [(v.node, v.used, v.busy, v.idle_since, v.region, v.instance) for v in a.nodes] == [
        (v.node, v.used, v.busy, v.idle_since, v.region, v.instance) for v in b.nodes
    ]
    assert {n: [(i.instance, i.status) for i in v.instances] for n, v in a.groups.items()} == {
        n: [(i.instance, i.status) for i in v.instances] for n, v in b.groups.items()
    }
    assert a.pending == b.pending
    assert a.job_regions == b.job_regions


def test_adding_unbound_pods_is_the_inventory_of_all_of_them() -> None:
    groups, nodes, pods = _cluster()
    extra = [
        pod("queued-0", gpu=8, job="queued"),
        pod("queued-1", gpu=8, job="queued"),
        pod("gone", phase="Failed"),
    ]
    inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=POLICY, now=NOW)

    added = inventory.with_pending(extra)

    _same_inventory(
        added, build_inventory(nodes=nodes, pods=[*pods, *extra], groups=groups, policy=POLICY, now=NOW)
    )
    assert [p.name for p in added.pending] == ["waits-0", "loose", "queued-0", "queued-1"]
    assert [p.name for p in inventory.pending] == ["waits-0", "loose"]  # the one added to is unchanged


def test_a_bound_pod_is_not_added_to_an_inventory() -> None:
    groups, nodes, pods = _cluster()
    inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=POLICY, now=NOW)
    with pytest.raises(ValueError, match="bound"):
        inventory.with_pending([pod("late", gpu=1, node=nodes[0].name)])


def test_plan_and_timers_decide_the_same_on_an_inventory_given() -> None:
    groups, nodes, pods = _cluster()
    queue = [pod(f"q-{i}", gpu=8, job=f"q{i // 2}") for i in range(6)]
    inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=POLICY, now=NOW)
    args = {"nodes": nodes, "groups": groups, "health": {}, "policy": POLICY, "now": NOW}

    given = plan(pods=[*pods, *queue], inventory=inventory.with_pending(queue), **args)  # type: ignore[arg-type]
    afresh = plan(pods=[*pods, *queue], **args)  # type: ignore[arg-type]

    assert given == afresh
    assert given.scale_ups  # the queue's pods were planned for
    assert next_timer(pods=pods, inventory=inventory, **args) == next_timer(pods=pods, **args)  # type: ignore[arg-type]


def test_admission_decides_the_same_on_an_inventory_given() -> None:
    groups, nodes, pods = _cluster()
    jobs = parse_replica_jobs(
        [
            o
            for i, gpus in enumerate([8, 4, 8, 1])
            for o in job_objects(f"j{i}", gpus=gpus, minute=i, replicas=1 + i % 2)
        ]
    )
    inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=POLICY, now=NOW)
    args = {
        "jobs": jobs,
        "nodes": nodes,
        "pods": pods,
        "groups": groups,
        "teams": {},
        "policy": POLICY,
        "now": NOW,
    }

    given = admit(inventory=inventory, **args)  # type: ignore[arg-type]
    afresh = admit(**args)  # type: ignore[arg-type]

    assert given == afresh
    assert given.admitted and given.waiting


def test_the_nodes_up_are_worked_out_once_and_shared_with_pods_added() -> None:
    groups, nodes, pods = _cluster()
    cordoned = node_of(groups[0], "i-cordoned", cordoned_by_squall=True)
    inventory = build_inventory(nodes=[*nodes, cordoned], pods=pods, groups=groups, policy=POLICY, now=NOW)

    up = inventory.nodes_up()

    assert up is inventory.nodes_up() is inventory.with_pending([pod("late", gpu=1)]).nodes_up()
    assert [(u.view.node.name, u.cordoned) for u in up] == [(n.name, False) for n in nodes] + [
        (cordoned.name, True)
    ]
    assert up[0].free == (95_000 - 1000, 1100 * 2**30 - 2**30, 4, 109)  # run-0 takes its share
    rooms = rooms_on_nodes_up(inventory)
    assert rooms_on_nodes_up(inventory) is not rooms  # a packer changes its rooms: new ones each time
    assert [r.free for r in rooms] == [u.free for u in up]


def _copies(objects: list[Any]) -> list[Any]:
    """Equal objects that are not the same ones: what a build makes of them is made afresh."""
    return [copy.copy(o) for o in objects]


def _same_rooms(a: Inventory, b: Inventory) -> None:
    assert [(u.view.node, u.view.used, u.free, u.cordoned, u.taints) for u in a.nodes_up()] == [
        (u.view.node, u.view.used, u.free, u.cordoned, u.taints) for u in b.nodes_up()
    ]


def test_a_build_of_the_same_objects_again_or_of_some_others_is_what_a_fresh_build_makes() -> None:
    # given a cluster, and a history of what the next check sees: some objects the same, some not
    groups, nodes, pods = _cluster()
    later = NOW + POLICY.provision_timeout  # the booting instance has timed out by then
    finished = dataclasses.replace(pods[0], phase="Succeeded", finished_at=ago(minutes=1))
    moved = pod("moved", gpu=2, job="waits", node=nodes[3].name)
    cordoned = dataclasses.replace(nodes[1], unschedulable=True, cordoned_by_squall=True)
    leaving = dataclasses.replace(
        groups[0],
        instances=(dataclasses.replace(groups[0].instances[0], lifecycle_state="Terminating"),),
    )
    history: list[tuple[list[NodeGroup], list[Node], list[Pod], datetime]] = [
        (groups, nodes, pods, NOW),
        (groups, nodes, pods, NOW),  # the very same objects
        (groups, nodes, list(pods), later),  # the same ones in another list, later
        (groups, nodes, [*reversed(pods)], later),  # reordered: the gang's other region first
        (groups, nodes, [finished, *pods[1:]], later),  # a pod replaced
        (groups, nodes, [finished, *pods[2:]], later),  # one gone
        (groups, nodes, [finished, *pods[2:], moved], later),  # one added
        (groups, nodes, [*reversed(pods[1:]), finished], later),  # reordered: the gang's other region first
        (groups, [nodes[0], cordoned, *nodes[2:]], [*reversed(pods[1:]), finished], later),  # a node replaced
        (groups, [*reversed(nodes)], [*reversed(pods[1:]), finished], later),  # nodes reordered
        ([leaving, *groups[1:]], [*reversed(nodes)], [*reversed(pods[1:]), finished], later),  # a group's
        ([leaving, *groups[1:]], [*reversed(nodes)], [*reversed(pods[1:]), finished], later),
        (groups, nodes, pods, NOW),  # back to the first
    ]
    previous: tuple[list[Any], Inventory] | None = None
    made: list[Inventory] = []
    for step_groups, step_nodes, step_pods, now in history:
        # when the next check builds its inventory, after the last check's
        inventory = build_inventory(
            nodes=step_nodes, pods=step_pods, groups=step_groups, policy=POLICY, now=now
        )
        # then it is what a build of equal objects never seen makes
        fresh = build_inventory(
            nodes=_copies(step_nodes),
            pods=_copies(step_pods),
            groups=_copies(step_groups),
            policy=POLICY,
            now=now,
        )
        _same_inventory(inventory, fresh)
        _same_rooms(inventory, fresh)
        assert [v.group for v in inventory.nodes] == [v.group for v in fresh.nodes]
        objects = [*step_groups, None, *step_nodes, None, *step_pods]
        if previous is not None and _same_objects(objects, previous[0]):
            # the very same objects: the nodes up are worked out once, for both
            assert inventory.nodes_up() is previous[1].nodes_up()
        made.append(inventory)
        # (the build of copies came between: built again, the next build follows these)
        again = build_inventory(nodes=step_nodes, pods=step_pods, groups=step_groups, policy=POLICY, now=now)
        previous = (objects, again)
    # and what differs by step is seen: the booting instance timed out later, the gang's region
    # is that of its first pod listed, a finished pod leaves its node
    assert [_status(i, "i-g5-boot") for i in made[:3]] == [
        InstanceStatus.BOOTING,
        InstanceStatus.BOOTING,
        InstanceStatus.TIMED_OUT,
    ]
    assert [i.job_regions["run"] for i in made[2:4]] == ["us-west-2", "us-east-1"]
    assert made[3].nodes[0].used != made[4].nodes[0].used == (0, 0, 0, 0)
    assert made[-1].nodes_up() is not made[0].nodes_up()  # other objects came between


def _same_objects(these: list[Any], those: list[Any]) -> bool:
    return len(these) == len(those) and all(a is b for a, b in zip(these, those, strict=True))


def _status(inventory: Inventory, instance_id: str) -> InstanceStatus:
    return next(
        i.status
        for v in inventory.groups.values()
        for i in v.instances
        if i.instance.instance_id == instance_id
    )
