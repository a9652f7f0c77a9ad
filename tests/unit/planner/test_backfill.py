"""Backfill by declared run time and start estimates: admission on the fleet's time profile. Pure.

The fleet in these tests is at its max size: 2 nodes of 8 GPUs in one region. A running
job holds one node until its declared maxRuntime ends, two hours from now.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any

from squall.core.manifests import admission_patch, render
from squall.core.spec import JobSpec
from squall.planner.admission import AdmissionPlan, admit
from squall.planner.fleet_profile import timelines_of
from squall.planner.kube import parse_replica_jobs
from squall.planner.model import NodeGroup, Pod
from squall.planner.timeline import Slot, Timeline

from .builders import NOW, POLICY, group, instance, node_of, pod, resources

HOUR = timedelta(hours=1)


def p4d(*, nodes: int = 2, max_size: int = 2, region: str = "us-west-2", name: str = "p4d") -> NodeGroup:
    return group(
        name,
        region=region,
        allocatable=resources("95", "1100Gi", 8, 110),
        instances=[instance(f"i-{name}-{i}") for i in range(nodes)],
        max_size=max_size,
    )


def jobs_of(
    job_id: str, *, gpus: int = 8, replicas: int = 1, runtime: str = "4h", minute: int = 0, priority: int = 50
) -> list[dict[str, Any]]:
    body: dict[str, Any] = {
        "name": "train",
        "team": "research",
        "image": "reg.example.com/tf:1",
        "priority": priority,
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
        "maxRuntime": runtime,
    }
    if replicas > 1:
        body["replicas"] = {"worker": replicas}
    objects = render(
        JobSpec.model_validate(body),
        job_id=job_id,
        namespace="team-research",
        submitted_at=NOW - HOUR + timedelta(minutes=minute),
    )
    return [o for o in objects if o["kind"] == "Job"]


def running(
    job_id: str, *, started: timedelta, runtime: str, node: str, gpus: int = 8
) -> tuple[list[dict[str, Any]], Pod]:
    """A job let go `started` ago, its one pod on `node`."""
    [obj] = jobs_of(job_id, gpus=gpus, runtime=runtime, minute=-120)
    patch = admission_patch(obj, region="us-west-2")
    obj["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    obj["spec"] = dict(obj["spec"], suspend=False)
    obj["status"] = {"startTime": (NOW - started).isoformat().replace("+00:00", "Z")}
    bound = dataclasses.replace(
        pod(f"{obj['metadata']['name']}-x", gpu=gpus, job=job_id, node=node), namespace="team-research"
    )
    return [obj], bound


def admit_on(
    groups: list[NodeGroup], jobs: list[dict[str, Any]], pods: list[Pod], *, backfill: bool = True
) -> AdmissionPlan:
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    return admit(
        jobs=parse_replica_jobs(jobs),
        nodes=nodes,
        pods=pods,
        groups=groups,
        teams={},
        policy=dataclasses.replace(POLICY, backfill=backfill),
        now=NOW,
    )


def fleet_with_one_node_busy() -> tuple[list[NodeGroup], list[dict[str, Any]], Pod]:
    fleet = p4d()
    busy, bound = running("old", started=2 * HOUR, runtime="4h", node="node-i-p4d-0")
    return [fleet], busy, bound


def test_a_short_job_backfills_before_a_reserved_gang_without_delaying_it() -> None:
    # given: the head needs both nodes (one frees in 2 h); a 1-hour job and a 3-hour one wait behind it
    groups, busy, bound = fleet_with_one_node_busy()
    queue = jobs_of("head", replicas=2, minute=0) + jobs_of("short", runtime="1h", minute=1)
    queue += jobs_of("long", runtime="3h", minute=2)
    # when
    result = admit_on(groups, busy + queue, [bound])
    # then: the short job runs now on the free node (it ends before the head can start), the long one waits
    assert {a.job_id: (a.region, a.backfilled) for a in result.admitted} == {"short": ("us-west-2", True)}
    waiting = {w.job_id: w for w in result.waiting}
    assert set(waiting) == {"head", "long"}
    # and the head still starts when the running job's declared run time ends
    assert waiting["head"].starts_by == NOW + 2 * HOUR
    assert waiting["long"].starts_by == NOW + 2 * HOUR + 4 * HOUR  # after the head's declared 4 hours


def test_without_backfill_the_head_keeps_its_room_and_the_short_job_waits() -> None:
    groups, busy, bound = fleet_with_one_node_busy()
    queue = jobs_of("head", replicas=2, minute=0) + jobs_of("short", runtime="1h", minute=1)
    result = admit_on(groups, busy + queue, [bound], backfill=False)
    assert result.admitted == ()
    assert all(w.starts_by is None for w in result.waiting)


def test_a_job_as_long_as_the_wait_for_the_head_does_not_backfill() -> None:
    # A job declaring exactly the two hours until the head starts ends in time; a second more does not.
    groups, busy, bound = fleet_with_one_node_busy()
    queue = jobs_of("head", replicas=2, minute=0) + jobs_of("exact", runtime="2h", minute=1)
    assert [a.job_id for a in admit_on(groups, busy + queue, [bound]).admitted] == ["exact"]
    queue = jobs_of("head", replicas=2, minute=0) + jobs_of("over", runtime="7201s", minute=1)
    assert admit_on(groups, busy + queue, [bound]).admitted == ()


def test_likely_start_uses_how_long_the_team_really_runs() -> None:
    groups, busy, bound = fleet_with_one_node_busy()
    queue = jobs_of("head", replicas=2)
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    result = admit(
        jobs=parse_replica_jobs(busy + queue),
        nodes=nodes,
        pods=[bound],
        groups=groups,
        teams={},
        policy=POLICY,
        now=NOW,
        run_ratios={"research": 0.75},
    )
    [head] = result.waiting
    # declared: 4 h from a start 2 h ago; likely: 3 h of it, so one hour from now
    assert (head.starts_by, head.likely_start) == (NOW + 2 * HOUR, NOW + HOUR)
    entry = head.entry()
    assert entry["startsBy"] == (NOW + 2 * HOUR).isoformat()
    assert entry["likelyStart"] == (NOW + HOUR).isoformat()


def test_nodes_still_to_buy_arrive_after_the_groups_boot_time() -> None:
    # given: no node yet, a group that may grow: the job starts once a node has booted
    fleet = dataclasses.replace(p4d(nodes=0, max_size=4), boot_time=timedelta(minutes=7))
    result = admit_on([fleet], jobs_of("first"), [])
    [first] = result.waiting
    assert first.starts_by == NOW + timedelta(minutes=7)


def test_a_job_too_large_for_the_fleet_has_no_estimate_and_holds_nobody_up() -> None:
    groups, busy, bound = fleet_with_one_node_busy()
    queue = jobs_of("huge", replicas=3) + jobs_of("small", runtime="30m", minute=1)
    result = admit_on(groups, busy + queue, [bound])
    assert [a.job_id for a in result.admitted] == ["small"]
    [huge] = result.waiting
    assert huge.never_fits and huge.starts_by is None


def test_a_slot_counts_pods_that_fit_for_the_whole_window() -> None:
    slot = Slot.up(name="n", site="r", labels={}, taints=(), free=(8000, 100, 8, 10), at=0.0)
    slot.change(10.0, 20.0, (0, 0, 6, 1), -1)  # 6 GPUs taken from 10 s to 20 s
    assert slot.fits(0.0, 10.0, (1000, 1, 2, 1)) == 4
    assert slot.fits(0.0, 11.0, (1000, 1, 2, 1)) == 1
    assert slot.fits(20.0, math.inf, (1000, 1, 8, 1)) == 1
    late = Slot.up(name="m", site="r", labels={}, taints=(), free=(8000, 100, 8, 10), at=300.0)
    assert late.fits(0.0, 10.0, (1, 1, 1, 1)) == 0


def test_the_timeline_books_gangs_in_line_and_never_into_room_booked_ahead() -> None:
    fleet = p4d(nodes=2)
    nodes = [node_of(fleet, i.instance_id) for i in fleet.instances]
    from squall.planner.demand import shape_of
    from squall.planner.inventory import build_inventory

    busy = dataclasses.replace(pod("busy", gpu=8, job="old", node=nodes[0].name), namespace="x")
    inventory = build_inventory(nodes=nodes, pods=[busy], groups=[fleet], policy=POLICY, now=NOW)
    [timeline] = timelines_of(inventory=inventory, pods=[busy], now=NOW, ends=[{"old": 3600.0}])
    shape = shape_of(pod("g", gpu=8), {})
    whole = timeline.schedule([(shape, 2)], 7200.0)
    assert whole is not None and whole.start == 3600.0
    # one node is free now: a job ending by 3600 fits; one that would run into the gang's time does not
    assert timeline.schedule([(shape, 1)], 3600.0, latest=0.0) is not None
    assert timeline.schedule([(shape, 1)], 3601.0, latest=0.0) is None
    assert isinstance(timeline, Timeline)


def test_past_the_booked_part_of_the_line_no_job_passes_one_that_cannot_start(monkeypatch: Any) -> None:
    import squall.planner.admission_time as admission_time

    # given: only the head is booked (a line of one); a gang behind it cannot start now, and a
    # short job behind that would fit now on the free node
    monkeypatch.setattr(admission_time, "MAX_SCHEDULED", 1)
    groups, busy, bound = fleet_with_one_node_busy()
    queue = jobs_of("head", replicas=2, minute=0) + jobs_of("big", replicas=2, minute=1)
    queue += jobs_of("short", runtime="30m", minute=2)
    # when
    result = admit_on(groups, busy + queue, [bound])
    # then: the short job waits behind the gang that has no booking to protect it
    assert result.admitted == ()
    # (with the gang out of the way, the short job behind the booked head runs now)
    queue = jobs_of("head", replicas=2, minute=0) + jobs_of("short", runtime="30m", minute=2)
    assert [a.job_id for a in admit_on(groups, busy + queue, [bound]).admitted] == ["short"]


def test_a_group_adds_no_more_nodes_to_come_than_the_queued_pods_that_fit_them() -> None:
    from squall.planner.demand import shape_of
    from squall.planner.inventory import build_inventory

    # given: an empty group that may grow to 40 nodes, and a queue of three 8-GPU pods
    fleet = p4d(nodes=0, max_size=40)
    inventory = build_inventory(nodes=[], pods=[], groups=[fleet], policy=POLICY, now=NOW)
    shape = shape_of(pod("g", gpu=8), {})
    half = shape_of(pod("h", gpu=4), {})
    cpu_only = shape_of(pod("c", gpu=0), {})  # no GPU: it does not tolerate the GPU nodes' taint
    capped, whole = (
        timelines_of(inventory=inventory, pods=[], now=NOW, ends=[{}], to_place=to_place)[0]
        for to_place in ({shape: 3}, None)
    )
    assert sum(len(site.slots) for site in capped._sites.values()) == 3
    assert sum(len(site.slots) for site in whole._sites.values()) == 40
    # the same start for what the queue holds, and a larger gang finds no room, as it could never be placed
    ahead = whole.schedule([(shape, 3)], 3600.0, book=False)
    assert ahead is not None and capped.schedule([(shape, 3)], 3600.0, book=False) == ahead
    assert capped.schedule([(shape, 4)], 3600.0) is None
    # pods of every shape that fits the group's nodes count, and only they
    [both] = timelines_of(
        inventory=inventory, pods=[], now=NOW, ends=[{}], to_place={shape: 3, half: 2, cpu_only: 7}
    )
    assert sum(len(site.slots) for site in both._sites.values()) == 5


def test_running_pods_give_their_room_back_in_steps_at_their_jobs_ends() -> None:
    fleet = p4d(nodes=1)
    [node] = [node_of(fleet, i.instance_id) for i in fleet.instances]
    from squall.planner.inventory import build_inventory

    pods = [
        dataclasses.replace(pod(f"{job}-{i}", gpu=2, job=job, node=node.name), namespace="x")
        for job in ("a", "b")
        for i in range(2)
    ]
    inventory = build_inventory(nodes=[node], pods=pods, groups=[fleet], policy=POLICY, now=NOW)
    declared, likely = timelines_of(
        inventory=inventory, pods=pods, now=NOW, ends=[{"a": 600.0, "b": 1200.0}, {"a": 300.0, "b": 300.0}]
    )
    [slot] = [s for site in declared._sites.values() for s in site.slots if s.up_at == 0.0]
    assert slot.times == [0.0, 600.0, 1200.0]
    assert [free[2] for free in slot.frees] == [0, 4, 8]
    [slot] = [s for site in likely._sites.values() for s in site.slots if s.up_at == 0.0]
    assert slot.times == [0.0, 300.0] and [free[2] for free in slot.frees] == [0, 8]


def test_alike_nodes_in_a_row_are_one_slot_until_a_booking_sets_some_apart() -> None:
    from squall.planner.demand import shape_of
    from squall.planner.inventory import build_inventory

    # given: four idle nodes, the second of them running a pod until its job ends in an hour,
    # and a group that may add six more
    fleet = p4d(nodes=4, max_size=10)
    nodes = [node_of(fleet, i.instance_id) for i in fleet.instances]
    busy = dataclasses.replace(pod("old-0", gpu=8, job="old", node=nodes[1].name), namespace="x")
    inventory = build_inventory(nodes=nodes, pods=[busy], groups=[fleet], policy=POLICY, now=NOW)
    shape = shape_of(pod("g", gpu=8), {})
    # when the profile is made for the queue's shapes
    [timeline] = timelines_of(
        inventory=inventory, pods=[busy], now=NOW, ends=[{"old": 3600.0}], shapes=[shape]
    )
    # then alike nodes in a row are one slot: the first, the busy one, the last two, the six to come
    [site] = timeline._sites.values()
    assert [(slot.nodes, slot.up_at > 0, len(slot.times)) for slot in site.slots] == [
        (1, False, 1),
        (1, False, 2),
        (2, False, 1),
        (6, True, 1),
    ]
    # when a gang of three books the idle nodes now, and another of two the nodes to come
    now = timeline.schedule([(shape, 3)], 7200.0)
    later = timeline.schedule([(shape, 2)], 7200.0)
    # then as node by node: the first idle node and the last two (the busy one has no room now)
    # for two hours from now, then the first two nodes to come from their boot, set apart from
    # the four left alike
    assert now is not None and now.start == 0.0
    assert later is not None and later.start == 300.0 and later.waits_for_nodes
    assert [(slot.nodes, slot.times, [free[2] for free in slot.frees]) for slot in site.slots] == [
        (1, [0.0, 7200.0], [0, 8]),
        (1, [0.0, 3600.0], [0, 8]),
        (2, [0.0, 7200.0], [0, 8]),
        (2, [300.0, 7500.0], [0, 8]),
        (4, [300.0], [8]),
    ]


def test_a_likely_start_is_looked_for_in_the_site_the_job_is_booked_in() -> None:
    from squall.planner.admission_time import Timing
    from squall.planner.demand import shape_of
    from squall.planner.queue_types import QueuedJob

    # given one busy 8-GPU node in each of two regions: by declared run times region a's
    # frees first (4 h against 5 h), by likely ones region b's (1 h against 2 h)
    def busy_nodes(frees: dict[str, float]) -> Timeline:
        slots = []
        for region, at in frees.items():
            slot = Slot.up(
                name=region, site=region, labels={}, taints=(), free=(64_000, 1 << 40, 8, 110), at=0.0
            )
            slot.change(0.0, at, (64_000, 1 << 40, 8, 110), -1)
            slots.append(slot)
        return Timeline(slots, site_order=["a", "b"])

    timing = Timing(
        declared=busy_nodes({"a": 4 * 3600.0, "b": 5 * 3600.0}),
        likely=busy_nodes({"a": 2 * 3600.0, "b": 3600.0}),
        now=NOW,
        ratios={},
    )
    shape = shape_of(pod("g", gpu=8), {})
    job = QueuedJob(
        job_id="j", team="research", namespace="x", priority=50, submitted_at=NOW, requeued=False,
        replicas=(), gpus=8, max_runtime=HOUR,
    )  # fmt: skip
    # when it is booked
    booking = timing.book(job, {shape: [pod("j-0", gpu=8, job="j")]})
    # then its startsBy is region a's, and so is its likelyStart: where its room is reserved
    assert booking is not None and booking.site == "a"
    assert timing.estimate(booking) == (NOW + 4 * HOUR, NOW + 2 * HOUR)


def _profile(timeline: Timeline) -> list[tuple[object, ...]]:
    """A profile's slots as a search sees them (kinds by which slots share one, not by number)."""
    firsts: dict[int | None, int] = {}
    return [
        (
            name,
            slot.nodes,
            slot.up_at,
            slot.times,
            slot.frees,
            firsts.setdefault(slot.kind, i) if slot.kind is not None else None,
        )
        for name, site in sorted(timeline._sites.items())
        for i, slot in enumerate(site.slots)
    ]


def test_a_fleet_memo_reads_a_node_or_group_once_and_profiles_as_a_fresh_read() -> None:
    from squall.planner.demand import shape_of
    from squall.planner.fleet_profile import FleetMemo
    from squall.planner.inventory import build_inventory

    # given: three nodes, one busy for an hour, a group that may add two more, and a memo kept
    # from one check to the next
    fleet = p4d(nodes=3, max_size=5)
    nodes = [node_of(fleet, i.instance_id) for i in fleet.instances]
    busy = dataclasses.replace(pod("old-0", gpu=8, job="old", node=nodes[1].name), namespace="x")
    shape = shape_of(pod("g", gpu=8), {})
    memo = FleetMemo()

    def both(nodes: list[Any], groups: list[NodeGroup], shapes: list[Any]) -> tuple[Any, Any]:
        inventory = build_inventory(nodes=nodes, pods=[busy], groups=groups, policy=POLICY, now=NOW)
        kept, fresh = (
            timelines_of(
                inventory=inventory, pods=[busy], now=NOW, ends=[{"old": 3600.0}], shapes=shapes, memo=m
            )[0]
            for m in (memo, None)
        )
        return _profile(kept), _profile(fresh)

    # when the same fleet is profiled twice
    first = both(nodes, [fleet], [shape])
    read = dict(memo.nodes)
    again = both(nodes, [fleet], [shape])
    # then the nodes were read once, and each profile is what a fresh read makes
    assert first[0] == first[1] and again[0] == again[1] == first[1]
    assert all(memo.nodes[key] is entry for key, entry in read.items())
    # when a node is parsed anew (cordoned by Squall) and the group grows, then the same as fresh
    cordoned = dataclasses.replace(nodes[0], unschedulable=True, cordoned_by_squall=True)
    grown = dataclasses.replace(fleet, max_size=7)
    changed = both([cordoned, *nodes[1:]], [grown], [shape])
    assert changed[0] == changed[1] != first[1]
    assert id(nodes[0]) not in memo.nodes  # only the latest fleet's nodes are kept
    # when the queue's shapes change (a pod that fits no node here), then read afresh for them
    other = shape_of(pod("c", gpu=0), {})
    assert both(nodes, [fleet], [shape, other]) == (first[1], first[1])


def test_an_instance_launched_after_now_comes_after_the_nodes_a_group_adds() -> None:
    from squall.planner.inventory import build_inventory

    # given: a group with one instance launched a minute after now (a clock ahead) and room for one more
    fleet = p4d(nodes=0, max_size=2)
    fleet = dataclasses.replace(
        fleet, instances=(instance("i-late", launched=NOW + timedelta(minutes=1)),), desired=1
    )
    inventory = build_inventory(nodes=[], pods=[], groups=[fleet], policy=POLICY, now=NOW)
    # when
    [timeline] = timelines_of(inventory=inventory, pods=[], now=NOW, ends=[{}])
    # then the node it adds is up after its boot time, the late instance a minute after that
    boot = fleet.boot_time.total_seconds()
    assert [slot.up_at for site in timeline._sites.values() for slot in site.slots] == [boot, boot + 60.0]


def test_a_fleet_memo_starts_afresh_past_its_most_kinds(monkeypatch: Any) -> None:
    from squall.planner import fleet_profile
    from squall.planner.demand import shape_of

    # given: a memo that keeps one kind of node at most, and the same queue's shapes at each check
    monkeypatch.setattr(fleet_profile, "MAX_KINDS", 1)
    shapes = [shape_of(pod("g", gpu=8), {})]
    memo = fleet_profile.FleetMemo()
    useful = memo.useful(shapes)
    assert memo.useful(shapes) is useful  # kept while it knows no more kinds than that
    # when nodes of two kinds (sizes) were read with it
    useful((8000, 1 << 30, 8, 110), {}, ())
    useful((16000, 1 << 30, 8, 110), {}, ())
    # then the next check starts afresh (nodes come and go; what it knows stays bounded)
    assert memo.useful(shapes) is not useful
