"""The fleet as the time profiles see it: `timelines_of` builds planner/timeline.py's profiles. Pure.

Nodes up, with their running pods' room coming back at their jobs' ends, and nodes to
come (booting instances, and what each group may still add up to its max size). Alike
nodes in a row of a site are one slot. A caller that profiles the fleet check after
check keeps a `FleetMemo` of what was read of each node and group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from squall.planner.demand import PodShape
from squall.planner.fit import blocking_taints
from squall.planner.inventory import InstanceStatus, Inventory
from squall.planner.model import Node, NodeGroup, Pod, Taint, Vector
from squall.planner.sites import site as site_of
from squall.planner.timeline import NO_ROOM, Slot, Timeline, could_fit, plus, seconds_until, sites_in_order

# Nodes a group may still add that a profile counts, at most (a gang has at most 82 pods;
# past them, estimates wait for nodes to free instead: later, never earlier, than the truth).
MAX_NODES_TO_COME = 96
# Kinds of node a FleetMemo keeps, at most (a shape selecting a hostname makes every node its
# own kind, and nodes come and go); past it the memo starts afresh.
MAX_KINDS = 10_000


class _Useful:
    """Could any of the shapes ever fit a node of this size, labels and taints? (All: no shapes given.)

    The answer depends only on the size, the taints and the labels the shapes look at, so
    it is worked out once for each such kind of node, and each kind is numbered (a slot
    compares and hashes the number at each search).
    """

    def __init__(self, shapes: Iterable[PodShape] | None) -> None:
        self._shapes = None if shapes is None else tuple(shapes)
        keys: set[str] = set()
        for shape in self._shapes or ():
            keys |= shape.label_keys()
        self._keys = sorted(keys)
        self._known: dict[tuple[object, ...], tuple[bool, int]] = {}

    def __len__(self) -> int:
        """The kinds of node worked out so far."""
        return len(self._known)

    def kind(self, size: Vector, labels: Mapping[str, str], taints: tuple[Taint, ...]) -> tuple[object, ...]:
        """What placement reads of a node: nodes of one kind fit the same shapes."""
        return (size, taints, *map(labels.get, self._keys))

    def __call__(
        self, size: Vector, labels: Mapping[str, str], taints: tuple[Taint, ...]
    ) -> tuple[bool, int | None]:
        """(Whether any shape could fit it, its kind's number); no shapes given: (True, None), its own kind."""
        if self._shapes is None:
            return True, None
        kind = self.kind(size, labels, taints)
        known = self._known.get(kind)
        if known is None:
            fits = any(could_fit(shape, size, labels, taints) for shape in self._shapes)
            known = self._known[kind] = (fits, len(self._known))
        return known


def _pods_fitting(
    to_place: Mapping[PodShape, int], size: Vector, labels: Mapping[str, str], taints: tuple[Taint, ...]
) -> int:
    """How many of the pods could each go on an empty node of this size, labels and taints."""
    return sum(count for shape, count in to_place.items() if could_fit(shape, size, labels, taints))


# What timelines_of reads of a node (the node, its taints, size, whether any shape could fit it,
# its kind) and of a group (the group, its site, labels, taints, size, fits, kind).
_NodeRead = tuple[Node, tuple[Taint, ...], Vector, bool, int | None]
_GroupRead = tuple[NodeGroup, str, Mapping[str, str], tuple[Taint, ...], Vector, bool, int | None]


class FleetMemo:
    """What `timelines_of` read of each node and group, kept by a caller that profiles the fleet
    check after check (admission's cache): the parse caches hand back the very same Node and
    NodeGroup objects while they are unchanged, and with the same shapes in the queue each is
    read once, not at every check. Purely a memo: the profiles are the same with or without it;
    it holds the latest call's nodes and groups only."""

    def __init__(self) -> None:
        self._shapes: frozenset[PodShape] | None = None
        self._useful: _Useful | None = None
        self.nodes: dict[int, _NodeRead] = {}  # id(node) ->
        self.groups: dict[int, _GroupRead] = {}  # id(group) ->

    def useful(self, shapes: Iterable[PodShape] | None) -> _Useful:
        """The kinds of node for these shapes: the last call's while the shapes are the same
        (its kind numbers and what was read with them kept), else new."""
        key = None if shapes is None else frozenset(shapes)
        if self._useful is None or key is None or key != self._shapes or len(self._useful) > MAX_KINDS:
            self._shapes, self._useful = key, _Useful(key)
            self.nodes, self.groups = {}, {}
        return self._useful


# A node as a profile reads it: name, site, labels, taints, room now, when up, size, kind.
_Node = tuple[str, str, Mapping[str, str], tuple[Taint, ...], Vector, float, Vector, int | None]


@dataclass(slots=True)
class _Row:
    """Alike nodes in a row of a site: one slot in every profile, whatever its jobs' ends."""

    first: _Node
    held: tuple[tuple[str, Vector], ...]  # (job, the room its pods hold on each node), by job
    nodes: int = 1


def timelines_of(
    *,
    inventory: Inventory,
    pods: Iterable[Pod],
    now: datetime,
    ends: Sequence[Mapping[str, float | None]],
    shapes: Iterable[PodShape] | None = None,
    to_place: Mapping[PodShape, int] | None = None,
    memo: FleetMemo | None = None,
) -> list[Timeline]:
    """Profiles of the fleet as it stands, one for each of `ends`: nodes up, with their running
    pods' room coming back at their jobs' ends (job id -> seconds from now; None or absent:
    never), and nodes to come.

    Nodes to come: each group's booting instances, up once booted (launch time plus the
    group's boot time, at least now), and the nodes it may still add up to its max size,
    up after its boot time from now. Cordoned nodes are left out (admission does not place
    on them), and with `shapes` (the queue's), so are nodes and groups none of them could
    ever fit: they would only cost each search a look. With `to_place` (the pods of each
    shape that bookings may place), a group's nodes to come are at most the pods that fit
    them: a booking takes a group's earliest nodes first, so one more would never be used.
    The fleet is read once for all. Alike nodes in a row of a site, the same kind with the
    same room over time, are one slot (`Slot.nodes`); with no `shapes`, every node is its own.
    `memo`: kept by a caller that profiles the fleet again and again (see FleetMemo).
    """
    kinds: list[_Node] = []
    preference: dict[str, int] = {}
    memo = memo if memo is not None else FleetMemo()
    useful = memo.useful(shapes)
    pods_fitting: dict[int | None, int] = {}  # kind -> how many of to_place fit a node of it
    up_now: set[str] = set()
    nodes_read: dict[int, _NodeRead] = {}
    for up in inventory.nodes_up():
        if up.cordoned:
            continue
        node, taints = up.view.node, up.taints
        read = memo.nodes.get(id(node))
        if read is None or read[0] is not node or (read[1] is not taints and read[1] != taints):
            size = node.allocatable.vector()
            read = (node, taints, size, *useful(size, node.labels, taints))
        nodes_read[id(node)] = read
        _, _, size, fits, number = read
        if not fits:
            continue
        kinds.append((node.name, up.view.region, node.labels, taints, up.free, 0.0, size, number))
        up_now.add(node.name)
    groups_read: dict[int, _GroupRead] = {}
    for view in inventory.groups.values():
        group = view.group
        known = memo.groups.get(id(group))
        if known is None or known[0] is not group:
            template: Mapping[str, str] = group.template_labels()
            blocking = blocking_taints(group.taints, ignore_transient=True)
            size = group.allocatable.vector()
            where = site_of(group.region, group.cluster)
            known = (group, where, template, blocking, size, *useful(size, template, blocking))
        groups_read[id(group)] = known
        _, where, labels, taints, free, fits, number = known
        preference[where] = min(preference.get(where, group.priority), group.priority)
        if not fits:
            continue
        boot = group.boot_time.total_seconds()
        most = MAX_NODES_TO_COME
        if to_place is not None:
            fitting = pods_fitting.get(number)
            if fitting is None or number is None:  # (None: a kind of its own)
                fitting = pods_fitting[number] = _pods_fitting(to_place, free, labels, taints)
            most = min(most, fitting)
        coming = sorted(
            max(0.0, (i.instance.launch_time - now).total_seconds() + boot)
            for i in view.instances
            if i.status is InstanceStatus.BOOTING
        )
        to_add = max(0, group.max_size - view.size)
        if coming and coming[-1] > boot:  # launched after now (a clock ahead): in time order
            coming = sorted(coming + [boot] * to_add)
        else:  # booted by `boot` from now, as every node it adds is
            coming += [boot] * min(to_add, max(0, most - len(coming)))
        for count, at in enumerate(coming[:most]):
            kinds.append((f"{group.name}#{count}", where, labels, taints, free, at, free, number))
    memo.nodes, memo.groups = nodes_read, groups_read  # those of this fleet only: bounded by it
    for kind in kinds:
        preference.setdefault(kind[1], 1 << 30)
    order = sites_in_order(preference)
    # Node up now -> job -> the room that job's running pods hold on it.
    holds: dict[str, dict[str, Vector]] = {}
    for pod in pods:
        if pod.is_active and pod.node_name in up_now and pod.job_id is not None:
            on = holds.setdefault(pod.node_name, {})
            on[pod.job_id] = plus(on.get(pod.job_id, NO_ROOM), pod.requests.vector())
    # Alike nodes in a row of a site (the same kind, room now, and jobs holding the same room
    # on each) have the same profile whatever the jobs' ends: worked out once, for all of them.
    rows: list[_Row] = []
    last_row: dict[str, _Row] = {}  # site -> its last row so far
    for entry in kinds:
        name, where, _, _, free, at, _, number = entry
        jobs_on = holds.get(name)
        held = tuple(sorted(jobs_on.items())) if jobs_on else ()
        previous = last_row.get(where)
        if previous is not None and number is not None and previous.held == held:
            _, _, _, _, its_free, its_at, _, its_number = previous.first
            if (its_number, its_at, its_free) == (number, at, free):
                previous.nodes += 1
                continue
        row = last_row[where] = _Row(entry, held)
        rows.append(row)
    timelines = []
    for job_ends in ends:
        slots = []
        in_a_row: dict[str, Slot] = {}  # site -> its last slot so far
        for row in rows:
            name, where, on_labels, on_taints, free, at, size, number = row.first
            times, frees = [at], [free]
            if len(row.held) == 1:  # most nodes: one job's pods, its room back at its end
                [(job_id, room)] = row.held
                end = seconds_until(job_ends.get(job_id))
                if end != math.inf:
                    times.append(end)
                    frees.append(plus(free, room))
            elif row.held:  # the room comes back in steps, all after now (seconds_until)
                given_back: dict[float, Vector] = {}
                for job_id, room in row.held:
                    end = seconds_until(job_ends.get(job_id))
                    if end != math.inf:
                        given_back[end] = plus(given_back.get(end, NO_ROOM), room)
                for t in sorted(given_back):
                    times.append(t)
                    frees.append(plus(frees[-1], given_back[t]))
            last = in_a_row.get(where)
            if (
                last is not None
                and number is not None
                and last.kind == number
                and last.up_at == at
                and last.times == times
                and last.frees == frees
            ):
                last.nodes += row.nodes  # more nodes like the last of its site: the same slot
                continue
            # Slot's fields in order
            slot = Slot(name, where, on_labels, on_taints, times, frees, at, size, number, row.nodes)
            in_a_row[where] = slot
            slots.append(slot)
        timelines.append(Timeline(slots, site_order=order))
    return timelines
