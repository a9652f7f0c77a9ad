"""When can a queued gang start? A time profile of each site's room, for backfill and estimates. Pure.

Every job declares `maxRuntime`, and Squall buys its capacity itself, so it knows when
the room on each node frees up: a running pod's room comes back when its job's declared
run time ends (counted from the job's start, as `activeDeadlineSeconds` is), a booting
instance becomes a node after its group's boot time, and a group below its max size can
add nodes that arrive after that boot time. A `Timeline` holds, for every node up and
every node to come in each site (a region, of one cluster when there are several), its
free room as a step function of time from now on.

Admission walks the queue in its order and asks `schedule` for each job: the earliest
time its whole gang fits in one site for its whole declared run time, without touching
room any job ahead of it was given at its own time (its reservation). That time is the
job's `startsBy`, the latest it starts if nothing of higher priority arrives and every
job runs to its limit. A job whose time is now runs now: it fits in room that is free
for as long as it declares, so it can delay nobody ahead of it (conservative backfill,
as Slurm's; docs/design.md says what holds).

Bounded work: the caller schedules at most its first jobs in line, and each search looks
at no more than MAX_CANDIDATES start times per site (later, the job has no estimate
and reserves nothing). Alike nodes in a row (a gang's nodes, a group's nodes to come)
are one slot until a booking sets some of them apart, so a search counts each kind of
room once, not once per node, and finds what it would node by node. Times are seconds
from now, floats; `math.inf`: never.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from squall.planner.demand import PodShape
from squall.planner.fit import fit_count
from squall.planner.model import Taint, Vector

# Start times a search tries in one site before it gives up on the job (no estimate).
MAX_CANDIDATES = 400
# A running job past its declared end is ending: its room comes back in about this many seconds.
ENDING_SOON = 60.0
NO_ROOM: Vector = (0, 0, 0, 0)
_NO_LIMIT = 1 << 62


def plus(a: Vector, b: Vector, times: int = 1) -> Vector:
    """a + times x b."""
    return (a[0] + times * b[0], a[1] + times * b[1], a[2] + times * b[2], a[3] + times * b[3])


@dataclass(slots=True)
class Slot:
    """A node's free room over time: `frees[i]` from `times[i]` until `times[i + 1]` (the last for ever).

    Before `up_at` the node is not up (nothing fits); a node up now is up at 0. `nodes`
    such nodes in a row, alike in every respect but their names (the nodes of one gang, a
    group's nodes to come), are one slot: `times` and `frees` are each node's. A booking
    on some of them splits the slot (`Timeline._split`), so that a search looks at each
    kind of room once, not once per node, and still finds what it would node by node.
    """

    name: str
    site: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    times: list[float]
    frees: list[Vector]
    up_at: float = 0.0  # when it is up: 0 for a node up now
    size: Vector = (0, 0, 0, 0)  # the most it ever has free (its allocatable): a pod larger never fits
    # What placement reads of it (size, taints, the labels pods look at), numbered: slots of
    # one kind fit the same pods. None: its own kind.
    kind: int | None = None
    nodes: int = 1

    @classmethod
    def up(
        cls,
        *,
        name: str,
        site: str,
        labels: Mapping[str, str],
        taints: tuple[Taint, ...],
        free: Vector,
        at: float,
        size: Vector | None = None,
    ) -> Slot:
        return cls(
            name=name,
            site=site,
            labels=labels,
            taints=taints,
            times=[at],
            frees=[free],
            up_at=at,
            size=size or free,
        )

    def alike(self, name: str, nodes: int) -> Slot:
        """As many nodes with the same room over time as this slot's, under another name."""
        return Slot(
            name,
            self.site,
            self.labels,
            self.taints,
            list(self.times),
            list(self.frees),
            self.up_at,
            self.size,
            self.kind,
            nodes,
        )

    def _at(self, t: float) -> tuple[int, bool]:
        """The index of the step that starts at `t`, made when there is none; and whether it is new."""
        i = bisect.bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return i, False
        self.times.insert(i, t)
        self.frees.insert(i, self.frees[i - 1] if i > 0 else NO_ROOM)
        return i, True

    def change(self, start: float, end: float, delta: Vector, times: int) -> list[float]:
        """Add `times` x `delta` to the room in [start, end); returns the step times it made."""
        made: list[float] = []
        first, new = self._at(start)
        if new:
            made.append(start)
        last = len(self.times)
        if end != math.inf:
            last, new = self._at(end)
            if new:
                made.append(end)
        d0, d1, d2, d3 = times * delta[0], times * delta[1], times * delta[2], times * delta[3]
        frees = self.frees
        for i in range(first, last):
            f = frees[i]
            frees[i] = (f[0] + d0, f[1] + d1, f[2] + d2, f[3] + d3)
        return made

    def fits(self, start: float, end: float, request: Vector) -> int:
        """How many pods of `request` fit here for all of [start, end)."""
        if start < self.up_at:
            return 0
        times = self.times
        i = bisect.bisect_right(times, start) - 1
        frees = self.frees
        count = _fit(frees[i], request)
        last = len(times)
        i += 1
        while count and i < last and times[i] < end:
            more = _fit(frees[i], request)
            if more < count:
                count = more
            i += 1
        return count


def could_fit(shape: PodShape, size: Vector, labels: Mapping[str, str], taints: tuple[Taint, ...]) -> bool:
    """Whether a pod of the shape fits an empty node of this size, labels and taints."""
    return (
        all(need <= most for need, most in zip(shape.request, size, strict=True))
        and shape.placement_mismatch(labels, taints) is None
    )


def _fit(free: Vector, request: Vector) -> int:
    """fit_count, written out (one resource after another, no loop): this runs millions of
    times a check on a long queue."""
    count = _NO_LIMIT
    need = request[0]
    if need > 0:
        have = free[0]
        if have < need:
            return 0
        count = have // need
    need = request[1]
    if need > 0:
        have = free[1]
        if have < need:
            return 0
        many = have // need
        if many < count:
            count = many
    need = request[2]
    if need > 0:
        have = free[2]
        if have < need:
            return 0
        many = have // need
        if many < count:
            count = many
    need = request[3]
    if need > 0:
        have = free[3]
        if have < need:
            return 0
        many = have // need
        if many < count:
            count = many
    return count


@dataclass(slots=True)
class _Site:
    slots: list[Slot]
    times: list[float] = field(default_factory=list)  # every step time of its slots, sorted, no repeats
    # Step time -> the slots with a step there: a search moving its start from one time to
    # the next looks again only at the slots whose room in its window changed.
    at: dict[float, list[Slot]] = field(default_factory=dict)
    log: list[Slot] = field(default_factory=list)  # the slots in the order their room changed

    def note(self, made: Iterable[float], slot: Slot) -> None:
        """The slot's room changed (and these step times are new to it)."""
        self.log.append(slot)
        for t in made:
            on = self.at.get(t)
            if on is None:
                self.at[t] = [slot]
                bisect.insort(self.times, t)
            else:
                on.append(slot)

    def changed(
        self, window: tuple[float, float], other: tuple[float, float], found: dict[int, Slot]
    ) -> None:
        """Add to `found` the slots whose room over one window ([start, end)) may differ from theirs
        over the other: those with a step between the two starts (the step each starts in differs)
        or between the two ends (steps one reaches and the other does not)."""
        times, at = self.times, self.at
        (start, end), (other_start, other_end) = window, other
        if other_start < start:
            start, other_start = other_start, start
        if other_end < end:
            end, other_end = other_end, end
        # the steps in (start, other_start], then those in [end, other_end)
        for i in range(bisect.bisect_right(times, start), bisect.bisect_right(times, other_start)):
            for slot in at[times[i]]:
                found[id(slot)] = slot
        for i in range(bisect.bisect_left(times, end), bisect.bisect_left(times, other_end)):
            for slot in at[times[i]]:
                found[id(slot)] = slot


@dataclass(frozen=True, slots=True)
class Booking:
    """Where and when a gang runs: its site, start and end (seconds from now), and its pods' slots."""

    site: str
    start: float
    end: float
    placed: tuple[tuple[Slot, Vector, int], ...]  # (slot, a pod's request, how many pods)

    @property
    def to_come(self) -> int:
        """Its pods on nodes not up yet: of two sites where it starts as soon, the one with
        fewer keeps the next check's choice the same (and buys no more than it must)."""
        return sum(count for slot, _, count in self.placed if slot.up_at > 0)

    @property
    def waits_for_nodes(self) -> bool:
        """It starts once nodes not up yet are: those nodes are what it waits for (buy them)."""
        coming = [slot.up_at for slot, _, count in self.placed if slot.up_at > 0 and count]
        return bool(coming) and self.start <= max(coming)


class Timeline:
    """Every site's room over time; `schedule` books gangs into it (earliest start, whole run)."""

    def __init__(self, slots: Iterable[Slot], *, site_order: Sequence[str] = ()) -> None:
        self._sites: dict[str, _Site] = {}
        for slot in slots:  # each slot noted (_Site.note), the step times sorted once at the end
            site = self._sites.get(slot.site)
            if site is None:
                site = self._sites[slot.site] = _Site(slots=[])
            site.slots.append(slot)
            site.log.append(slot)
            at = site.at
            for t in slot.times:
                on = at.get(t)
                if on is None:
                    at[t] = [slot]
                else:
                    on.append(slot)
        for site in self._sites.values():
            site.times = sorted(site.at)
        rank = {name: i for i, name in enumerate(site_order)}
        self.site_order = sorted(self._sites, key=lambda s: (rank.get(s, len(rank)), s))
        self._fitting: dict[tuple[PodShape, str], list[Slot]] = {}
        self._places: dict[tuple[PodShape, str], dict[int, int]] = {}  # id(slot) -> its place in _fitting's
        # (shape, site) -> the last window a search counted: (start, end), how many pods each slot
        # held over it, their sum, and how far the site's log of changes was then. The next search
        # for the shape starts from it, counting again only what changed since or differs between windows.
        self._counted: dict[tuple[PodShape, str], tuple[tuple[float, float], list[int], int, int]] = {}
        # Searches start no earlier than a job alike (same pods, no shorter) found last time:
        # room only ever gets taken, so it cannot start earlier either.
        self._found: dict[tuple[tuple[int, int], ...], list[tuple[float, float]]] = {}
        # A booking later than now was made: room no longer only grows with time.
        self._scheduled = False
        # (shape, site) -> how many of its slots, from the first, have no room for it now.
        self._full_now: dict[tuple[PodShape, str], int] = {}
        # The shortest run of each kind of gang that could not start now.
        self._not_now: dict[tuple[tuple[int, int], ...], float] = {}

    def release(self, slot: Slot, request: Vector, count: int, at: float) -> None:
        """A running pod's room (`count` x `request`) comes back to its node at `at` (on each of
        the slot's nodes)."""
        if at != math.inf:
            self._sites[slot.site].note(slot.change(at, math.inf, request, count), slot)

    def _slots_for(self, shape: PodShape, site: str) -> list[Slot]:
        key = (shape, site)
        slots = self._fitting.get(key)
        if slots is None:
            kinds: dict[int, bool] = {}
            slots = []
            for s in self._sites[site].slots:
                kind = s.kind
                fits = kinds.get(kind) if kind is not None else None
                if fits is None:
                    fits = could_fit(shape, s.size, s.labels, s.taints)
                    if kind is not None:
                        kinds[kind] = fits
                if fits:
                    slots.append(s)
            self._fitting[key] = slots
            self._places[key] = {id(s): place for place, s in enumerate(slots)}
        return slots

    def schedule(
        self,
        parts: Sequence[tuple[PodShape, int]],
        duration: float,
        *,
        sites: Sequence[str] | None = None,
        book: bool = True,
        latest: float = math.inf,
    ) -> Booking | None:
        """The earliest start of the gang (its `parts`: pods of each shape) for `duration` seconds in one site.

        `sites`: where it may go (its pinned site, say); every site by default. Booked (its
        room taken for that time) unless `book` is False. `latest`: no later start is looked
        for (0: only whether it can start now). None: no start within the search.
        """
        if not parts:
            return None
        key = tuple(sorted((id(shape), count) for shape, count in parts))
        if duration >= self._not_now.get(key, math.inf) and latest <= 0:
            return None  # one alike and no longer could not start now: room only gets taken
        floor = max((start for start, d in self._found.get(key, ()) if d <= duration), default=0.0)
        if floor > latest:
            return None
        ordered = sorted(parts, key=lambda part: part[0].request, reverse=True)
        best: Booking | None = None
        for site in sites if sites is not None else self.site_order:
            if site not in self._sites:
                continue
            before = min(
                math.nextafter(best.start, math.inf) if best else math.inf, math.nextafter(latest, math.inf)
            )
            found = self._earliest(ordered, duration, site, floor=floor, before=before)
            if found is not None and (
                best is None or (found.start, found.to_come) < (best.start, best.to_come)
            ):
                best = found
                if found.start <= floor and not found.to_come:
                    break  # nothing can start earlier, nor on more of the room there is now
        if best is None or best.start > 0:
            self._not_now[key] = min(self._not_now.get(key, math.inf), duration)
        if best is None:
            return None
        found_alike = self._found.setdefault(key, [])
        found_alike.append((best.start, duration))
        if len(found_alike) > 8:
            del found_alike[0]
        if book:
            self.book(best)
        return best

    def book(self, booking: Booking) -> None:
        """Take the booking's room: one just found, on the profile as it was found on."""
        self._scheduled = self._scheduled or booking.start > 0
        site = self._sites[booking.site]
        start, end = booking.start, booking.end
        for slot, request, count in booking.placed:
            if slot.nodes == 1:
                site.note(slot.change(start, end, request, -count), slot)
                continue
            # As node by node: the first nodes take as many pods as each holds, the next the rest.
            each = slot.fits(start, end, request)
            if not each:
                raise ValueError(f"booking {count} pods on {slot.name}, which has no room for them now")
            full, rest = divmod(count, each)
            after: Slot | None = slot
            if full:
                after = self._split(slot, full, booking.site) if full < slot.nodes else None
                site.note(slot.change(start, end, request, -each), slot)
            if rest and after is not None:  # there is a node after the full ones: count <= each x nodes
                if after.nodes > 1:
                    self._split(after, 1, booking.site)
                site.note(after.change(start, end, request, -rest), after)

    def _split(self, slot: Slot, nodes: int, site_name: str) -> Slot:
        """Keep the first `nodes` of the slot's nodes in it; the others become a slot right after it
        (in every list of slots), returned. Searches count both again (the site's log)."""
        rest = slot.alike(f"{slot.name}+{nodes}", slot.nodes - nodes)
        slot.nodes = nodes
        site = self._sites[site_name]
        site.slots.insert(next(i for i, s in enumerate(site.slots) if s is slot) + 1, rest)
        for t in rest.times:
            site.at[t].append(rest)
        site.log.append(slot)
        site.log.append(rest)
        for key, slots in self._fitting.items():
            if key[1] != site_name:
                continue
            places = self._places[key]
            place = places.get(id(slot))
            if place is None:
                continue
            slots.insert(place + 1, rest)
            self._places[key] = {id(s): i for i, s in enumerate(slots)}
            counted = self._counted.get(key)
            if counted is not None:
                counted[1].insert(place + 1, 0)  # counted again from the log, as a slot that changed
            if place < self._full_now.get(key, 0):
                self._full_now[key] += 1  # part of a slot with no room now has none either
        return rest

    def _singles(self, site_name: str) -> None:
        """Every slot of the site one node (a gang of several kinds of pod is placed node by node):
        each row's other nodes become slots right after it, every list of slots made again once."""
        site = self._sites[site_name]
        copies: dict[int, list[Slot]] = {}
        for slot in site.slots:
            if slot.nodes > 1:
                more = copies[id(slot)] = [slot.alike(f"{slot.name}+{i}", 1) for i in range(1, slot.nodes)]
                slot.nodes = 1
                site.log.append(slot)
                for copy in more:
                    site.log.append(copy)
                    for t in copy.times:
                        site.at[t].append(copy)
        if not copies:
            return
        site.slots = [s for slot in site.slots for s in (slot, *copies.get(id(slot), ()))]
        for key in [key for key in self._fitting if key[1] == site_name]:
            slots = self._fitting[key] = [
                s for slot in self._fitting[key] for s in (slot, *copies.get(id(slot), ()))
            ]
            self._places[key] = {id(s): i for i, s in enumerate(slots)}
            self._counted.pop(key, None)  # counted afresh at its next search
            self._full_now.pop(key, None)

    def place_now(self, parts: Sequence[tuple[PodShape, int]], duration: float, site: str) -> Booking | None:
        """Book a gang that runs from now (admitted, its pods not bound yet) wherever it fits in its site."""
        if site not in self._sites:
            return None
        ordered = sorted(parts, key=lambda part: part[0].request, reverse=True)
        if len(ordered) == 1:
            booking = self._fit_now(ordered[0], duration, site)
        else:
            self._singles(site)
            booking = self._fit_at(ordered, 0.0, duration, site)
        if booking is not None:
            self.book(booking)
        return booking

    def _fit_now(self, part: tuple[PodShape, int], duration: float, site: str) -> Booking | None:
        """`_fit_one` from now for pods placed before any booking, passing the slots found with
        no room for the shape now: room only gets taken now, so a slot full for it stays so."""
        shape, left = part
        request = shape.request
        slots = self._slots_for(shape, site)
        key = (shape, site)
        first = self._full_now.get(key, 0)
        placed: list[tuple[Slot, Vector, int]] = []
        for index in range(first, len(slots)):
            slot = slots[index]
            now = slot.fits(0.0, 0.0, request) * slot.nodes if slot.up_at <= 0 else 0
            if not now:
                if index == first:
                    first += 1
                continue
            # Before any booking a node's room only grows with time (releases): what fits now
            # fits for any run from now.
            fits = slot.fits(0.0, duration, request) * slot.nodes if self._scheduled else now
            if fits:
                take = fits if fits < left else left
                placed.append((slot, request, take))
                left -= take
                if not left:
                    break
        self._full_now[key] = first
        if left:
            return None
        return Booking(site=site, start=0.0, end=duration, placed=tuple(placed))

    def _earliest(
        self,
        parts: Sequence[tuple[PodShape, int]],
        duration: float,
        site: str,
        *,
        floor: float,
        before: float,
    ) -> Booking | None:
        times = self._sites[site].times
        candidates = times[bisect.bisect_left(times, floor) : bisect.bisect_left(times, before)]
        if not candidates or candidates[0] > floor:
            candidates = [floor, *candidates]
        if len(parts) == 1:
            return self._earliest_one(parts[0], duration, site, candidates[:MAX_CANDIDATES], before=before)
        self._singles(site)
        for tried, start in enumerate(candidates):
            if start >= before or tried >= MAX_CANDIDATES:
                return None
            booking = self._fit_at(parts, start, duration, site)
            if booking is not None:
                return booking
        return None

    def _earliest_one(
        self,
        part: tuple[PodShape, int],
        duration: float,
        site: str,
        candidates: Sequence[float],
        *,
        before: float,
    ) -> Booking | None:
        """`_earliest` for a gang of one kind of pod (most gangs): how many of its pods each slot
        holds is counted once at the first start tried, then, at each later one, again only for
        the slots whose room in the window changed (most have a step or two in all). The same
        starts are tried and the same booking found as by `_fit_one` at each."""
        shape, count = part
        request = shape.request
        key = (shape, site)
        slots = self._slots_for(shape, site)
        places = self._places[key]
        where = self._sites[site]
        counted = self._counted.get(key)
        window = (0.0, 0.0)
        counts: list[int] = []
        total = 0
        for start in candidates:
            if start >= before:
                break
            end = start + duration
            again: dict[int, Slot] = {}
            if counted is not None:
                window, counts, total, seen = counted
                for slot in where.log[seen:]:
                    again[id(slot)] = slot
                counted = None
            if counts:
                where.changed(window, (start, end), again)
            if not counts or len(again) > len(slots):
                counts = [slot.fits(start, end, request) * slot.nodes for slot in slots]
                total = sum(counts)
            else:
                for slot_id, slot in again.items():
                    place = places.get(slot_id)
                    if place is not None:
                        fits = slot.fits(start, end, request) * slot.nodes
                        total += fits - counts[place]
                        counts[place] = fits
            window = (start, end)
            if total >= count:
                left = count
                placed: list[tuple[Slot, Vector, int]] = []
                for slot, fits in zip(slots, counts, strict=True):
                    if fits:
                        take = fits if fits < left else left
                        placed.append((slot, request, take))
                        left -= take
                        if not left:
                            break
                self._counted[key] = (window, counts, total, len(where.log))
                return Booking(site=site, start=start, end=end, placed=tuple(placed))
        if counts:
            self._counted[key] = (window, counts, total, len(where.log))
        return None

    def _fit_one(self, part: tuple[PodShape, int], start: float, end: float, site: str) -> Booking | None:
        shape, left = part
        request = shape.request
        placed: list[tuple[Slot, Vector, int]] = []
        for slot in self._slots_for(shape, site):
            fits = slot.fits(start, end, request) * slot.nodes
            if fits:
                take = fits if fits < left else left
                placed.append((slot, request, take))
                left -= take
                if not left:
                    return Booking(site=site, start=start, end=end, placed=tuple(placed))
        return None

    def _fit_at(
        self, parts: Sequence[tuple[PodShape, int]], start: float, duration: float, site: str
    ) -> Booking | None:
        end = start + duration
        if len(parts) == 1:  # most gangs: one kind of pod, no slot shared between parts
            return self._fit_one(parts[0], start, end, site)
        taken: dict[int, Vector] = {}  # id(slot) -> what earlier parts of this gang took of it
        placed: list[tuple[Slot, Vector, int]] = []
        for shape, count in parts:
            request = shape.request
            left = count
            for slot in self._slots_for(shape, site):
                fits = slot.fits(start, end, request)
                if not fits:
                    continue
                used = taken.get(id(slot))
                if used is not None:
                    fits = _fewer(slot, start, end, request, used)
                    if not fits:
                        continue
                take = min(fits, left)
                placed.append((slot, request, take))
                taken[id(slot)] = plus(used or NO_ROOM, request, take)
                left -= take
                if not left:
                    break
            if left:
                return None
        return Booking(site=site, start=start, end=end, placed=tuple(placed))


def _fewer(slot: Slot, start: float, end: float, request: Vector, used: Vector) -> int:
    """How many pods of `request` fit on the slot for [start, end) besides `used` (this gang's other pods)."""
    times = slot.times
    i = bisect.bisect_right(times, start) - 1
    count = None
    while i < len(times) and (times[i] < end or count is None):
        free = slot.frees[i]
        left = (free[0] - used[0], free[1] - used[1], free[2] - used[2], free[3] - used[3])
        fit = fit_count(left, request) if min(left) >= 0 else 0
        count = fit if count is None else min(count, fit)
        i += 1
    return count or 0


def seconds_until(end: float | None) -> float:
    """A job's end as the profile takes it: never for none, soon for one already past its end."""
    if end is None:
        return math.inf
    return max(end, ENDING_SOON)


def sites_in_order(groups_by_site: Mapping[str, int]) -> list[str]:
    """Sites by their most preferred group (lower priority first), then by name."""
    return sorted(groups_by_site, key=lambda s: (groups_by_site[s], s))
