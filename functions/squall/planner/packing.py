"""Packing pending pods: existing room first, then nodes on their way, then new nodes.

Space, in the order it is used:

1. Rooms: free space on ready nodes, then on nodes Squall cordoned (ready now, so
   uncordoning one starts pods soonest). One room per node, first fit.
2. Nodes of a group that are not up yet but already hold something (a booting node
   with its DaemonSet pods, a node this plan opened for earlier pods): first fit.
3. Empty nodes that are not up yet: booting, or desired but not launched yet.
4. New nodes of the best group with headroom, within its max size.

Nodes of a group that are not up yet look alike, so they are kept as bins with a count
("12 nodes with this much free"): packing 10,000 pods is work per shape of pod and per
distinct node, not per pod or per node.

Pods free to go anywhere: each shape, largest first, takes 1 and 2; the rest is spread
over 3 and then 4, group by group, one balanced mix per node (cpu-heavy pods next to
memory-heavy ones, in the proportions of the whole) repeated over as many nodes as it
fits; what is still left goes first fit, shape by shape. Steps 3 and 4 fill nodes the
same way, which keeps plans stable: the next check sees this check's new nodes as
empty booting nodes and fills them as this check did, instead of launching again.

A gang (one job's pods) must land in one region, so it is placed tentatively: every
change is logged, and undone when the region cannot hold the whole gang. With more than
one cluster a "region" here is a site (planner/sites.py), one cluster's region: a gang
never spans two clusters, even two in one region.

Where the outcome depends on whose booting nodes are filled first, the plan packs with
the shape's preferred groups first and, if that launches anything, again the other way
round, and keeps the packing that launches less: a greedy packer can otherwise strand
a booting node of a less preferred group while it opens one in a preferred group.

Each shape remembers, per scope (all regions or one region), the first room that might
still hold it: room only shrinks, so rooms before that cursor need no second look.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import Any

from squall.planner.demand import Gang, PodShape
from squall.planner.fit import fit_count, resource_shortfall
from squall.planner.model import NodeGroup, Taint, Vector
from squall.planner.sites import split_site

_LISTED_NAMES = 3  # how many names a reason lists before "(+N more)"

# A group passed over for new nodes, and why: ("p3-usw2", "at max size 16").
Skip = tuple[str, str]


class RoomKind(IntEnum):
    """Order in which existing room is used."""

    READY = 0
    CORDONED = 1


@dataclass(slots=True, eq=False, kw_only=True)
class Room:
    kind: RoomKind
    name: str  # the node's
    group: str | None
    region: str  # the node's site: its region, of its cluster when there are several
    free: Vector
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]  # only those that can block a pod
    placed: int = 0
    signature: int = 0


@dataclass(slots=True, eq=False, kw_only=True)
class GroupOption:
    """A group as a source of nodes that are not up yet: booting ones, and new ones."""

    group: NodeGroup
    capacity: Vector
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    headroom: int
    blocked: str | None = None  # why it must not grow now (backoff)
    # free space of its nodes not up yet -> how many nodes have exactly that
    bins: dict[Vector, int] = field(default_factory=dict)
    booting: int = 0
    new_nodes: int = 0
    placed: dict[PodShape, int] = field(default_factory=dict)
    gangs: list[str] = field(default_factory=list)
    # preferred groups passed over for new nodes -> why
    spilled_from: dict[str, str] = field(default_factory=dict)
    # The group's site: its region, of its cluster when there are several (read in the hot loops).
    region: str = field(init=False)

    def __post_init__(self) -> None:
        self.region = self.group.site

    @property
    def name(self) -> str:
        return self.group.name


    def add_booting(self, free: Vector, count: int = 1) -> None:
        """`count` nodes on their way with this much free room each."""
        if count > 0:
            self.bins[free] = self.bins.get(free, 0) + count
            self.booting += count


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    option: GroupOption
    per_node: int  # pods of the shape one empty node holds
    preference: tuple[int, float, float, str]  # priority, waste, price per pod, name


@dataclass(frozen=True, slots=True, kw_only=True)
class ShapeFit:
    candidates: tuple[Candidate, ...]  # groups whose template fits, best first
    rejections: dict[str, str]  # group -> why its template does not fit
    fits_signature: tuple[bool, ...]  # by room signature


@dataclass(slots=True, eq=False)
class _Scan:
    """The rooms one shape tries within one scope, and how far it got."""

    rooms: list[Room]
    cursor: int = 0
    _positions: dict[Room, int] | None = None

    def position(self, room: Room) -> int | None:
        if self._positions is None:
            self._positions = {r: i for i, r in enumerate(self.rooms)}
        return self._positions.get(room)


# Undo-log entry tags.
_ROOM, _CURSOR, _BINS, _GROW, _PLACED, _SPILL = range(6)


class Packer:
    """Mutable packing state for one plan; the plan itself stays a pure function."""

    def __init__(
        self,
        *,
        rooms: Sequence[Room],
        options: Sequence[GroupOption],
        shapes: Iterable[PodShape],
        preferred_bins_first: bool = True,
    ) -> None:
        self._preferred_bins_first = preferred_bins_first
        self.rooms = sorted(rooms, key=lambda r: (r.kind, r.name))
        self.options = list(options)
        self._rooms_by_scope: dict[str | None, list[Room]] = {None: self.rooms}
        for room in self.rooms:
            self._rooms_by_scope.setdefault(room.region, []).append(room)
        # Where a gang must be whole, as its reasons say it: one cluster's region when sites name clusters.
        sites = self._rooms_by_scope.keys() | {option.region for option in self.options}
        self.one_site = (
            "one cluster and region"
            if any(split_site(s)[0] for s in sites if s is not None)
            else "one region"
        )
        keys: set[str] = set()
        for shape in shapes:
            keys |= shape.label_keys()
        self._label_keys = sorted(keys)
        self._signature_rooms: list[Room] = []
        self._signature_ids: dict[tuple[object, ...], int] = {}
        for room in self.rooms:
            room.signature = self._signature_of(room)
        self._fits: dict[PodShape, ShapeFit] = {}
        self._size_keys: dict[PodShape, tuple[object, ...]] = {}
        self._scans: dict[tuple[PodShape, str | None], _Scan] = {}
        self._log: list[tuple[Any, ...]] | None = None
        self._gang_options: set[GroupOption] | None = None
        # Gangs held in a region that cannot take the rest, while another region could.
        self.stranded: list[str] = []
        # Where each gang placed so far went.
        self.placed_regions: dict[str, str] = {}
        # Why gangs of these shapes and counts (free to go to any region) did not fit.
        self._failed_gangs: dict[tuple[tuple[int, int], ...], tuple[str, str]] = {}

    # --- what fits where -------------------------------------------------------------

    def fit_of(self, shape: PodShape) -> ShapeFit:
        fit = self._fits.get(shape)
        if fit is None:
            fit = self._compute_fit(shape)
            self._fits[shape] = fit
        return fit

    def _compute_fit(self, shape: PodShape) -> ShapeFit:
        candidates: list[Candidate] = []
        rejections: dict[str, str] = {}
        for option in self.options:
            reason = shape.placement_mismatch(option.labels, option.taints) or resource_shortfall(
                shape.request, option.capacity
            )
            if reason is not None:
                rejections[option.name] = reason
                continue
            per_node = fit_count(option.capacity, shape.request)
            preference = _preference(option, shape, per_node)
            candidates.append(Candidate(option=option, per_node=per_node, preference=preference))
        candidates.sort(key=lambda c: c.preference)
        fits_signature = tuple(
            shape.placement_mismatch(room.labels, room.taints) is None for room in self._signature_rooms
        )
        return ShapeFit(candidates=tuple(candidates), rejections=rejections, fits_signature=fits_signature)

    def _signature_of(self, room: Room) -> int:
        """Rooms alike in every label a pending pod asks about, and in taints, fit alike."""
        key = (tuple(room.labels.get(k) for k in self._label_keys), room.taints)
        signature = self._signature_ids.get(key)
        if signature is None:
            signature = len(self._signature_rooms)
            self._signature_ids[key] = signature
            self._signature_rooms.append(room)
        return signature

    def size_key(self, shape: PodShape) -> tuple[object, ...]:
        """Sort key putting the largest shape first: its dominant share of its best node."""
        key = self._size_keys.get(shape)
        if key is None:
            key = self._size_keys[shape] = self._size_key(shape)
        return key

    def _size_key(self, shape: PodShape) -> tuple[object, ...]:
        candidates = self.fit_of(shape).candidates
        dominant = 0.0
        if candidates:
            capacity = candidates[0].option.capacity
            dominant = max(need / have for need, have in zip(shape.request, capacity, strict=True) if have)
        cpu, memory, gpu, _ = shape.request
        return (
            -dominant,
            -gpu,
            -cpu,
            -memory,
            shape.node_selector,
            repr(shape.affinity),
            repr(shape.tolerations),
        )

    # --- placing ---------------------------------------------------------------------

    def place_free(self, counts: Mapping[PodShape, int]) -> dict[PodShape, tuple[int, list[Skip]]]:
        """Place pods free to go anywhere; per shape, how many were placed and the groups passed over.

        Largest shape first: existing room and nodes not up yet that hold something, first
        fit. Then the rest is spread over empty nodes not up yet, and then over new nodes,
        each group's share balanced so that a node holds a mix of shapes in about the
        proportions of the whole (cpu-heavy pods next to memory-heavy ones). What is left
        after that goes first fit, shape by shape.
        """
        order = sorted(counts, key=self.size_key)
        remaining = dict(counts)
        for shape in order:
            remaining[shape] -= self._fill_rooms(shape, remaining[shape], None)
            remaining[shape] -= self._fill_bins(shape, remaining[shape], None, empty_too=False)
        skipped: dict[PodShape, list[Skip]] = {shape: [] for shape in order}
        self._spread_rounds(order, remaining, skipped, new=False)
        self._spread_rounds(order, remaining, skipped, new=True)
        for shape in order:
            remaining[shape] -= self._fill_bins(shape, remaining[shape], None)
            opened, skips = self._open_nodes(shape, remaining[shape], None)
            remaining[shape] -= opened
            skipped[shape].extend(skip for skip in skips if skip not in skipped[shape])
        return {shape: (counts[shape] - remaining[shape], skipped[shape]) for shape in order}

    def _spread_rounds(
        self,
        order: Sequence[PodShape],
        remaining: dict[PodShape, int],
        skipped: dict[PodShape, list[Skip]],
        *,
        new: bool,
    ) -> None:
        """Round by round, each shape's rest goes to one group, spread over its empty (or new) nodes."""
        for _ in range(len(self.options) + 1):
            assignment: dict[GroupOption, list[PodShape]] = {}
            for shape in order:
                if remaining[shape] > 0:
                    option = (
                        self._new_group_for(shape, skipped[shape]) if new else self._empty_group_for(shape)
                    )
                    if option is not None:
                        assignment.setdefault(option, []).append(shape)
            placed = sum(
                self._spread(option, shapes, remaining, new=new) for option, shapes in assignment.items()
            )
            if not placed:
                return
            if new:
                for option, shapes in assignment.items():
                    for shape in shapes:
                        for skip in skipped[shape]:
                            self._note_spill(option, skip)

    def _empty_group_for(self, shape: PodShape) -> GroupOption | None:
        candidates = self.fit_of(shape).candidates
        for candidate in candidates if self._preferred_bins_first else reversed(candidates):
            if candidate.option.bins.get(candidate.option.capacity):
                return candidate.option
        return None

    def _new_group_for(self, shape: PodShape, skipped: list[Skip]) -> GroupOption | None:
        for candidate in self.fit_of(shape).candidates:
            option = candidate.option
            if option.blocked is None and option.headroom > 0:
                return option
            skip = (option.name, option.blocked or f"at max size {option.group.max_size}")
            if skip not in skipped:
                skipped.append(skip)
        return None

    def _spread(
        self, option: GroupOption, shapes: Sequence[PodShape], remaining: dict[PodShape, int], *, new: bool
    ) -> int:
        """Fill empty (or new) nodes of the group with a balanced mix of the shapes' rest.

        One node's mix is chosen at a time and repeated on as many nodes as the counts allow,
        so the work grows with the number of distinct mixes, not of nodes.
        """
        capacity = option.capacity
        available = option.headroom if new else option.bins.get(capacity, 0)
        placed = 0
        scale = [1.0 / have if have else 0.0 for have in capacity]
        scaled = {shape: [need * k for need, k in zip(shape.request, scale, strict=True)] for shape in shapes}
        totals = [sum(remaining[s] * s.request[i] for s in shapes) for i in range(4)]
        while available > 0:
            mix, nodes = _balanced_mix(capacity, shapes, remaining, scaled=scaled, totals=totals)
            if not mix:
                break
            # Half the nodes still needed at most, then look again: the proportions drift as
            # the mix rounds each share, and a fresh look keeps the last nodes balanced too.
            most = max(1, nodes // 2)
            repeat = min(available, most, *(remaining[shape] // count for shape, count in mix.items()))
            if new:
                self._grow(option, repeat)
            else:
                self._change_bins(option, capacity, -repeat)
            free = capacity
            for shape, count in mix.items():
                free = _minus(free, shape.request, count)
                self._count_placed(option, shape, count * repeat)
                remaining[shape] -= count * repeat
                placed += count * repeat
                for i in range(4):
                    totals[i] -= count * repeat * shape.request[i]
            self._change_bins(option, free, repeat)
            available -= repeat
        return placed

    def place_gang(self, gang: Gang) -> str | None:
        """Place every pod of the gang in one region, or none of them; returns why not.

        The region is the one where the fewest of the gang's pods must wait for nodes
        that are not up yet, then where the fewest new nodes are needed, then the
        preferred one. The first rule makes the next check choose the same region (its
        pods then wait for the same nodes, booting by then); the second keeps a gang on
        what is already booting for it (say, where it spilled during a backoff) rather
        than launching again in a region it prefers.

        Room only shrinks as gangs are placed, so a gang free to go to any region with
        the same shapes and counts as one that did not fit does not fit either: it is
        given that gang's reason without being tried (a long queue's demand is mostly
        such gangs).
        """
        key = None
        if gang.region is None:
            key = tuple(sorted((id(shape), len(pods)) for shape, pods in gang.pods_by_shape.items()))
            if (failed := self._failed_gangs.get(key)) is not None:
                first, why = failed
                named = f"job {first} "  # the reason names the gang it was found for
                return f"job {gang.job_id} {why[len(named) :]}" if why.startswith(named) else why
        parts = sorted(
            ((shape, len(pods)) for shape, pods in gang.pods_by_shape.items()),
            key=lambda part: self.size_key(part[0]),
        )
        reason = self._place_parts(gang, parts)
        if key is not None and reason is not None:
            self._failed_gangs[key] = (gang.job_id, reason)
        return reason

    def _place_parts(self, gang: Gang, parts: Sequence[tuple[PodShape, int]]) -> str | None:
        for shape, _ in parts:
            fit = self.fit_of(shape)
            if not fit.candidates and not any(fit.fits_signature):
                return f"a replica ({shape.describe()}) {self.no_room_reason(shape, [])}"
        regions = [gang.region] if gang.region is not None else self._regions_for(parts[0][0])
        best: tuple[tuple[int, int, int], str] | None = None
        problems: list[str] = []
        for rank, region in enumerate(regions):
            problem: list[str] = []
            outcome = self._attempt(partial(self._fill_region, parts, region, problem), keep=False)
            if outcome is None:
                problems.append(f"{region or 'unknown region'}: {problem[0] if problem else 'no room'}")
                continue
            cost = (*outcome, rank)
            if best is None or cost < best[0]:
                best = (cost, region)
            if outcome == (0, 0):
                break  # ready room in the most preferred region left: nothing can beat it
        if best is None:
            where = "; ".join(problems) if problems else "no region has a node or node group it fits"
            if gang.region is not None and self._fits_elsewhere(parts, gang.region):
                self.stranded.append(gang.job_id)
            return f"job {gang.job_id} needs all {gang.size} pods in {self.one_site}: {where}"
        self._gang_options = set()
        self._attempt(partial(self._fill_region, parts, best[1], []), keep=True)
        for option in self._gang_options:
            option.gangs.append(gang.job_id)
        self._gang_options = None
        self.placed_regions[gang.job_id] = best[1]
        return None

    def hold_room(self, gang: Gang) -> str | None:
        """Keep for a gang that does not fit whole the existing room it can use, in one region.

        The region is the one where the most of its GPUs (then pods) fit now; returns it,
        or None when no room fits any of its pods. Admission uses it so that the room a
        waiting job will need is not taken by the jobs behind it.
        """
        parts = sorted(
            ((shape, len(pods)) for shape, pods in gang.pods_by_shape.items()),
            key=lambda part: self.size_key(part[0]),
        )
        regions = [gang.region] if gang.region is not None else sorted({room.region for room in self.rooms})
        best: tuple[tuple[int, int], str] | None = None
        for region in regions:
            held: list[tuple[int, int]] = []
            self._attempt(partial(self._fill_rooms_partly, parts, region, held), keep=False)
            score = (sum(h[0] for h in held), sum(h[1] for h in held))
            if score[1] and (best is None or score > best[0]):
                best = (score, region)
        if best is None:
            return None
        self._attempt(partial(self._fill_rooms_partly, parts, best[1], []), keep=True)
        return best[1]

    def _fill_rooms_partly(
        self, parts: Sequence[tuple[PodShape, int]], region: str, held: list[tuple[int, int]]
    ) -> bool:
        for shape, count in parts:
            placed = self._fill_rooms(shape, count, region)
            held.append((placed * shape.request[2], placed))
        return True

    def _fits_elsewhere(self, parts: Sequence[tuple[PodShape, int]], region: str) -> bool:
        """Could the waiting pods go to another region now, were the gang let go of this one?

        Only then is starting the gang over worth it: where every region is full, it
        waits where it is for running jobs to finish. (The replicas already bound are
        not counted: they free room where they are when the gang is let go.)
        """
        return any(
            self._attempt(partial(self._fill_region, parts, other, []), keep=False) is not None
            for other in self._regions_for(parts[0][0])
            if other != region
        )

    def no_room_reason(self, shape: PodShape, skipped: Sequence[Skip]) -> str:
        fit = self.fit_of(shape)
        if fit.candidates:
            unavailable = describe_skips(skipped) or "all at max size or in backoff"
            return f"every node group it fits is unavailable: {unavailable}"
        summary = summarize_rejections(fit.rejections) or "no node groups configured"
        if any(fit.fits_signature):
            return f"the existing nodes it fits are full, and it fits no node group: {summary}"
        return f"fits no node and no node group: {summary}"

    def _fill_region(self, parts: Sequence[tuple[PodShape, int]], region: str, problem: list[str]) -> bool:
        for shape, count in parts:
            placed = self._fill_rooms(shape, count, region)
            placed += self._fill_bins(shape, count - placed, region)
            opened, skipped = self._open_nodes(shape, count - placed, region)
            if placed + opened < count:
                why = describe_skips(skipped) or "no node group there fits"
                problem.append(
                    f"{count - placed - opened} of {count} replicas ({shape.describe()}) left over: {why}"
                )
                return False
        return True

    def _regions_for(self, shape: PodShape) -> list[str]:
        """Every region, those whose best open group suits the shape best first."""
        best: dict[str, tuple[object, ...]] = {}
        for candidate in self.fit_of(shape).candidates:
            option = candidate.option
            if option.blocked is None and option.headroom > 0 and option.region not in best:
                best[option.region] = (0, *candidate.preference)
        regions = {room.region for room in self.rooms} | {option.region for option in self.options}
        return sorted(regions, key=lambda r: (best.get(r, (1,)), r))

    def _fill_rooms(self, shape: PodShape, count: int, scope: str | None) -> int:
        """First fit into existing room, from the shape's cursor on."""
        if count <= 0:
            return 0
        scan = self._scans.get((shape, scope))
        if scan is None:
            scan = self._scans[(shape, scope)] = _Scan(rooms=self._rooms_by_scope.get(scope, []))
        rooms = scan.rooms
        fits_signature = self.fit_of(shape).fits_signature
        request = shape.request
        cpu, memory, gpu, _ = request
        start = index = scan.cursor
        placed = 0
        end = len(rooms)
        while index < end:
            room = rooms[index]
            free = room.free
            # The comparisons first: with thousands of distinct shapes, most rooms a shape
            # passes are too full for it, and this loop runs shapes x rooms times.
            if (
                free[0] >= cpu
                and free[1] >= memory
                and free[2] >= gpu
                and free[3] > 0
                and fits_signature[room.signature]
            ):
                room_fit = fit_count(free, request)
                if room_fit:
                    take = min(room_fit, count - placed)
                    self._use_room(room, request, take)
                    placed += take
                    if placed == count:
                        if take == room_fit:
                            index += 1
                        break
            index += 1
        if index != start:
            self._log_append((_CURSOR, scan, start))
            scan.cursor = index
        return placed

    def _fill_bins(self, shape: PodShape, count: int, region: str | None, *, empty_too: bool = True) -> int:
        """First fit onto nodes not up yet: booting ones, and those opened for earlier shapes."""
        placed = 0
        candidates = self.fit_of(shape).candidates
        for candidate in candidates if self._preferred_bins_first else reversed(candidates):
            if placed >= count:
                break
            option = candidate.option
            if not option.bins or (region is not None and option.region != region):
                continue
            # Fullest first, so that empty nodes stay empty for as long as possible: then
            # it makes no difference whether an empty node is booting or about to be opened.
            for vector in sorted(option.bins, key=_fullest_first):
                if not empty_too and vector == option.capacity:
                    continue
                per_bin = fit_count(vector, shape.request)
                if per_bin:
                    placed += self._put_into_bins(option, vector, shape, per_bin, count - placed)
                    if placed == count:
                        break
        return placed

    def _open_nodes(self, shape: PodShape, count: int, region: str | None) -> tuple[int, list[Skip]]:
        """Open new nodes in the best groups with headroom; say which groups were passed over."""
        placed = 0
        skipped: list[Skip] = []
        if count <= 0:
            return 0, skipped
        for candidate in self.fit_of(shape).candidates:
            option = candidate.option
            if region is not None and option.region != region:
                continue
            if option.blocked is not None:
                skipped.append((option.name, option.blocked))
                continue
            if option.headroom <= 0:
                skipped.append((option.name, f"at max size {option.group.max_size}"))
                continue
            remaining = count - placed
            nodes = min(-(-remaining // candidate.per_node), option.headroom)
            self._grow(option, nodes)
            self._change_bins(option, option.capacity, nodes)
            placed += self._put_into_bins(option, option.capacity, shape, candidate.per_node, remaining)
            for skip in skipped:
                self._note_spill(option, skip)
            if placed >= count:
                break
            skipped.append((option.name, f"at max size {option.group.max_size}"))
        return placed, skipped

    def _put_into_bins(
        self, option: GroupOption, vector: Vector, shape: PodShape, per_bin: int, count: int
    ) -> int:
        """Fill the nodes that have `vector` free: whole nodes first, then one partly."""
        bins = option.bins.get(vector, 0)
        request = shape.request
        full = min(bins, count // per_bin)
        placed = 0
        if full:
            self._change_bins(option, vector, -full)
            self._change_bins(option, _minus(vector, request, per_bin), full)
            placed = full * per_bin
        rest = count - placed
        if rest and full < bins:
            self._change_bins(option, vector, -1)
            self._change_bins(option, _minus(vector, request, rest), 1)
            placed += rest
        if placed:
            self._count_placed(option, shape, placed)
        return placed

    def _count_placed(self, option: GroupOption, shape: PodShape, placed: int) -> None:
        self._log_append((_PLACED, option, shape, option.placed.get(shape, 0)))
        option.placed[shape] = option.placed.get(shape, 0) + placed
        if self._gang_options is not None:
            self._gang_options.add(option)

    # --- changes, logged so that a gang's tentative placement can be undone ----------

    def _use_room(self, room: Room, request: Vector, count: int) -> None:
        self._log_append((_ROOM, room, room.free, room.placed))
        room.free = _minus(room.free, request, count)
        room.placed += count

    def _change_bins(self, option: GroupOption, vector: Vector, delta: int) -> None:
        before = option.bins.get(vector, 0)
        self._log_append((_BINS, option, vector, before))
        _set_bins(option, vector, before + delta)

    def _grow(self, option: GroupOption, nodes: int) -> None:
        self._log_append((_GROW, option, option.headroom, option.new_nodes))
        option.headroom -= nodes
        option.new_nodes += nodes

    def _note_spill(self, option: GroupOption, skip: Skip) -> None:
        name, why = skip
        if name not in option.spilled_from:
            self._log_append((_SPILL, option, name))
            option.spilled_from[name] = why

    def _log_append(self, entry: tuple[Any, ...]) -> None:
        if self._log is not None:
            self._log.append(entry)

    def _attempt(self, attempt: Callable[[], bool], *, keep: bool) -> tuple[int, int] | None:
        """Run attempt(); undo its changes unless it succeeded and keep is set.

        Returns None when it failed, else (pods put on nodes not up yet, new nodes opened).
        """
        self._log = []
        try:
            succeeded = attempt()
        finally:
            log, self._log = self._log, None
        outcome = _outcome(log) if succeeded else None
        if not (succeeded and keep):
            self._undo(log)
        return outcome

    def _undo(self, log: list[tuple[Any, ...]]) -> None:
        touched: list[Room] = []
        cursors: dict[_Scan, int] = {}
        for entry in reversed(log):
            tag = entry[0]
            if tag == _ROOM:
                _, room, free, placed = entry
                room.free, room.placed = free, placed
                touched.append(room)
            elif tag == _CURSOR:
                cursors[entry[1]] = entry[2]  # reversed: the oldest start wins
            elif tag == _BINS:
                _set_bins(entry[1], entry[2], entry[3])
            elif tag == _GROW:
                entry[1].headroom, entry[1].new_nodes = entry[2], entry[3]
            elif tag == _PLACED:
                _, option, shape, before = entry
                if before:
                    option.placed[shape] = before
                else:
                    option.placed.pop(shape, None)
            elif tag == _SPILL:
                entry[1].spilled_from.pop(entry[2], None)
        for scan, start in cursors.items():
            scan.cursor = _restored_cursor(scan, start, touched)


def _outcome(log: list[tuple[Any, ...]]) -> tuple[int, int]:
    """From an attempt's log: pods it put on nodes not up yet, and new nodes it opened."""
    placed_before: dict[tuple[GroupOption, PodShape], int] = {}
    grown_before: dict[GroupOption, int] = {}
    for entry in log:
        if entry[0] == _PLACED:
            placed_before.setdefault((entry[1], entry[2]), entry[3])
        elif entry[0] == _GROW:
            grown_before.setdefault(entry[1], entry[3])
    placed = sum(option.placed.get(shape, 0) - before for (option, shape), before in placed_before.items())
    opened = sum(option.new_nodes - before for option, before in grown_before.items())
    return placed, opened


def _restored_cursor(scan: _Scan, start: int, touched: list[Room]) -> int:
    """Rooms skipped during an undone attempt stay skipped, unless the attempt filled them."""
    positions = (scan.position(room) for room in touched)
    return min((p for p in positions if p is not None and start <= p < scan.cursor), default=scan.cursor)


def _balanced_mix(
    capacity: Vector,
    shapes: Sequence[PodShape],
    remaining: Mapping[PodShape, int],
    *,
    scaled: Mapping[PodShape, Sequence[float]],
    totals: Sequence[int],
) -> tuple[dict[PodShape, int], int]:
    """What one node should hold, and how many nodes the shapes' rest needs at least.

    The ideal node holds 1/N of everything left, N being that least number of nodes.
    Pods are added one at a time, each time the one that best fills what the node still
    lacks of that ideal (its request times the shortfall, resource by resource, as shares
    of the node), so cpu-heavy and memory-heavy pods end up side by side. Past the ideal,
    the largest pod that fits goes next.

    `scaled` holds each shape's request in shares of the node and `totals` what the
    shapes' rest requests in all: the caller keeps both, so that a call costs a look at
    each shape per pod it adds and nothing more.
    """
    scale = [1.0 / have if have else 0.0 for have in capacity]
    shares = [totals[i] * scale[i] for i in range(4)]
    nodes = max(1.0, *shares)
    target = [share / nodes for share in shares]
    mix: dict[PodShape, int] = {}
    free = capacity
    left = {shape: remaining[shape] for shape in shapes if remaining[shape] > 0}
    while left:
        best: PodShape | None = None
        best_score = -1.0
        shortfall = [
            max(0.0, want - (1.0 - room * k)) for want, room, k in zip(target, free, scale, strict=True)
        ]
        cpu, memory, gpu, pods = free
        for shape in left:  # largest first: ties go to the larger pod
            request = shape.request
            if request[0] <= cpu and request[1] <= memory and request[2] <= gpu and request[3] <= pods:
                share = scaled[shape]
                score = share[0] * shortfall[0] + share[1] * shortfall[1] + share[2] * shortfall[2]
                score += share[3] * shortfall[3]
                if score > best_score:
                    best, best_score = shape, score
        if best is None:
            break
        mix[best] = mix.get(best, 0) + 1
        left[best] -= 1
        if not left[best]:
            del left[best]
        free = _minus(free, best.request, 1)
    return mix, math.ceil(nodes)


def _fullest_first(free: Vector) -> tuple[int, int, int, int]:
    return (free[2], free[0], free[1], free[3])


def _set_bins(option: GroupOption, vector: Vector, count: int) -> None:
    if count:
        option.bins[vector] = count
    else:
        option.bins.pop(vector, None)


def _minus(free: Vector, request: Vector, count: int) -> Vector:
    return (
        free[0] - request[0] * count,
        free[1] - request[1] * count,
        free[2] - request[2] * count,
        free[3] - request[3] * count,
    )


def _preference(option: GroupOption, shape: PodShape, per_node: int) -> tuple[int, float, float, str]:
    """Priority first, then least waste, then price per pod."""
    price = option.group.price_per_hour
    price_per_pod = price / per_node if price is not None else math.inf
    waste = round(waste_share(option.capacity, shape.request, per_node), 6)
    return (option.group.priority, waste, price_per_pod, option.name)


def waste_share(capacity: Vector, request: Vector, per_node: int) -> float:
    """Mean share of cpu, memory and GPUs left unused on a node full of this shape."""
    shares = [
        1.0 - per_node * need / have for need, have in zip(request[:3], capacity[:3], strict=True) if have > 0
    ]
    return sum(shares) / len(shares) if shares else 0.0


def summarize_rejections(rejections: Mapping[str, str]) -> str:
    """'insufficient nvidia.com/gpu (...): a, b, c (+2 more); node selector ...: d'"""
    by_reason: dict[str, list[str]] = {}
    for group, reason in rejections.items():
        by_reason.setdefault(reason, []).append(group)
    return "; ".join(f"{reason}: {names(groups)}" for reason, groups in by_reason.items())


def describe_skips(skipped: Sequence[Skip]) -> str:
    return "; ".join(f"{name} {why}" for name, why in skipped)


def names(items: Sequence[str]) -> str:
    listed = ", ".join(items[:_LISTED_NAMES])
    more = len(items) - _LISTED_NAMES
    return f"{listed} (+{more} more)" if more > 0 else listed
