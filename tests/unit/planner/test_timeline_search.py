"""The time profile's search for a gang's earliest start, against a plain search written out here. Pure.

`Timeline.schedule` counts, for a gang of one kind of pod, what each node holds at the first
start it tries and then, at each later start, only for the nodes whose room in the window
changed. These tests hold it to the plain search: at each step time, every node's room over
the whole window, counted afresh.
"""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from squall.planner.demand import PodShape, shape_of
from squall.planner.model import Vector
from squall.planner.timeline import Slot, Timeline

from .builders import pod

_SHAPES: dict[tuple[object, ...], PodShape] = {}


def gpu_shape(gpus: int) -> PodShape:
    return shape_of(pod(f"g{gpus}", gpu=gpus), _SHAPES)


def plain_earliest(slots: list[Slot], request: Vector, count: int, duration: float) -> float | None:
    """The first step time (or now) when `count` pods of `request` fit for `duration`, counted afresh."""
    times = sorted({0.0, *(t for slot in slots for t in slot.times if t >= 0.0)})
    for start in times:
        end = start + duration
        room = 0
        for slot in slots:
            if start < slot.up_at:
                continue
            steps = [
                free
                for i, (t, free) in enumerate(zip(slot.times, slot.frees, strict=True))
                if t < end and (i + 1 == len(slot.times) or slot.times[i + 1] > start)
            ]
            room += min(
                min(have // need for have, need in zip(free, request, strict=True) if need) for free in steps
            )
        if room >= count:
            return start
    return None


nodes = st.lists(
    st.tuples(st.sampled_from([0.0, 0.0, 300.0, 900.0]), st.sampled_from([4, 8])), min_size=1, max_size=6
)
releases = st.lists(st.tuples(st.integers(0, 5), st.sampled_from([60.0, 600.0, 3600.0, 7200.0])), max_size=6)
gangs = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4, 8]),
        st.integers(1, 4),
        st.sampled_from([600.0, 1800.0, 3600.0, 5400.0, 9000.0]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(nodes=nodes, releases=releases, gangs=gangs)
def test_each_gang_is_booked_at_the_first_time_the_plain_search_finds(
    nodes: list[tuple[float, int]], releases: list[tuple[int, float]], gangs: list[tuple[int, int, float]]
) -> None:
    # given: nodes up now or to come, some with a running pod whose room comes back later
    slots = [
        Slot.up(name=f"n{i}", site="r", labels={}, taints=(), free=(64_000, 1 << 40, gpus, 110), at=up_at)
        for i, (up_at, gpus) in enumerate(nodes)
    ]
    busy = (1000, 1 << 30, 2, 1)
    running: list[tuple[Slot, float]] = []
    for index, at in releases:
        slot = slots[index % len(slots)]
        if slot.up_at == 0.0 and slot.fits(0.0, 0.0, busy):
            slot.change(0.0, math.inf, busy, -1)
            running.append((slot, at))
    timeline = Timeline(slots)
    for slot, at in running:
        timeline.release(slot, busy, 1, at)
    for gpus, count, duration in gangs:
        shape = gpu_shape(gpus)
        # when
        expected = plain_earliest(slots, shape.request, count, duration)
        booking = timeline.schedule([(shape, count)], duration)
        # then
        assert (booking.start if booking else None) == expected
        if booking is not None:
            assert sum(taken for _, _, taken in booking.placed) == count
        # and no node's room is ever booked below nothing
        assert all(have >= 0 for slot in slots for free in slot.frees for have in free)


def test_a_later_start_is_found_when_room_frees_beyond_the_first_window() -> None:
    # given: two 8-GPU nodes; one is busy until 2 h, the other is booked from 1 h to 3 h
    first = Slot.up(name="a", site="r", labels={}, taints=(), free=(64_000, 1 << 40, 8, 110), at=0.0)
    second = Slot.up(name="b", site="r", labels={}, taints=(), free=(64_000, 1 << 40, 8, 110), at=0.0)
    first.change(0.0, math.inf, (0, 0, 8, 1), -1)
    timeline = Timeline([first, second])
    timeline.release(first, (0, 0, 8, 1), 1, 7200.0)
    shape = gpu_shape(8)
    assert timeline.schedule([(shape, 1)], 7200.0, book=False) is not None
    held = timeline.schedule([(shape, 1)], 7200.0)  # the second node, now to 2 h
    assert held is not None and held.start == 0.0
    # when: a gang needs both nodes for an hour
    booking = timeline.schedule([(shape, 2)], 3600.0)
    # then: it starts once both are free, at 2 h
    assert booking is not None and booking.start == 7200.0


def room_by_node(timeline: Timeline) -> dict[str, list[list[tuple[float, Vector]]]]:
    """Each site's nodes in order, each node's room as (time, free) steps, a step kept only
    where the room changes: what is left to book, however the slots hold it."""
    found: dict[str, list[list[tuple[float, Vector]]]] = {}
    for name, site in timeline._sites.items():
        nodes: list[list[tuple[float, Vector]]] = []
        for slot in site.slots:
            steps: list[tuple[float, Vector]] = []
            for t, free in zip(slot.times, slot.frees, strict=True):
                if not steps or steps[-1][1] != free:
                    steps.append((t, free))
            nodes.extend([steps] * slot.nodes)
        found[name] = nodes
    return found


def node_rows(rows: list[tuple[int, int, float]], *, runs: bool) -> list[Slot]:
    """Nodes in rows of alike ones (kind: 4 or 8 GPUs, how many, when up), as the profile has
    them: a slot per row (runs) or a slot per node. Two sites, every other row in the second."""
    slots = []
    for index, (gpus, count, up_at) in enumerate(rows):
        site = "r1" if index % 2 else "r0"
        for copy in range(1 if runs else count):
            slot = Slot.up(
                name=f"n{index}-{copy}",
                site=site,
                labels={},
                taints=(),
                free=(64_000, 1 << 40, gpus, 110),
                at=up_at,
            )
            slot.kind = gpus
            slot.nodes = count if runs else 1
            slots.append(slot)
    return slots


rows = st.lists(
    st.tuples(st.sampled_from([4, 8]), st.integers(1, 5), st.sampled_from([0.0, 0.0, 300.0, 900.0])),
    min_size=1,
    max_size=6,
)
steps = st.lists(
    st.tuples(
        st.sampled_from(["schedule", "schedule", "now", "two kinds now", "two kinds"]),
        st.sampled_from([1, 2, 3, 4, 8]),
        st.integers(1, 9),
        st.sampled_from([600.0, 1800.0, 3600.0, 9000.0]),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(rows=rows, steps=steps)
# a row searched for one kind of pod, then split for a gang of two kinds: every list of its slots grows
@example(rows=[(8, 4, 0.0)], steps=[("schedule", 8, 1, 600.0), ("two kinds now", 8, 2, 600.0)])
def test_alike_nodes_held_as_one_slot_are_booked_as_node_by_node(
    rows: list[tuple[int, int, float]], steps: list[tuple[str, int, int, float]]
) -> None:
    # given the same nodes, in one profile a slot per row of alike nodes, in the other one per node
    runs = Timeline(node_rows(rows, runs=True), site_order=["r0", "r1"])
    singles = Timeline(node_rows(rows, runs=False), site_order=["r0", "r1"])
    for what, gpus, count, duration in steps:
        parts = [(gpu_shape(gpus), count)]
        if what.startswith("two kinds"):
            parts.append((gpu_shape(1), 2))  # a gang of two kinds of pod is placed node by node
        # when both book the same gang
        if what.endswith("now"):
            got = [timeline.place_now(parts, duration, "r0") for timeline in (runs, singles)]
        else:
            got = [timeline.schedule(parts, duration) for timeline in (runs, singles)]
        # then at the same time, in the same site, with as many pods on nodes to come
        by_runs, by_singles = got
        assert (by_runs is None) == (by_singles is None)
        if by_runs is not None and by_singles is not None:
            assert (by_runs.site, by_runs.start, by_runs.end, by_runs.to_come) == (
                by_singles.site,
                by_singles.start,
                by_singles.end,
                by_singles.to_come,
            )
            assert by_runs.waits_for_nodes == by_singles.waits_for_nodes
        # and each node is left the same room, node by node
        assert room_by_node(runs) == room_by_node(singles)
