"""How much of the queue admission hands the planner as demand: what can still be bought for. Pure.

Admission (planner/admission.py) walks the queue in order; each job that does not fit
now joins the demand while its kind of job (the node groups its pods fit) has budget
left: what those groups could hold at their max sizes, plus the room free on their
nodes and on nodes of no group. `CapacityAtMaxSize` also answers whether a gang could
ever fit in one region (a job larger than that reserves nothing and is never demand).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from squall.planner.demand import PodShape
from squall.planner.fit import blocking_taints, fit_count, resource_shortfall
from squall.planner.inventory import Inventory
from squall.planner.model import NodeGroup, Pod, Vector

# The planner is given at most this many queued jobs as demand, head first, and no
# more than the groups they fit could hold at their max sizes (DemandBudget).
MAX_DEMAND_JOBS = 5000


def free_by_group(inventory: Inventory) -> dict[tuple[str, str] | None, list[int]]:
    """The room free now on the schedulable nodes that are up, by group (None: of no group)."""
    free: dict[tuple[str, str] | None, list[int]] = {}
    for up in inventory.nodes_up():
        if not up.cordoned:
            group = up.view.group
            totals = free.setdefault((group.region, group.name) if group is not None else None, [0, 0, 0, 0])
            for i in range(4):
                totals[i] += up.free[i]
    return free


_Key = tuple[tuple[int, int], ...]  # a job's shapes and their counts (by shape identity)


class DemandBudget:
    """How much of the queue the planner is given as demand: what can still be bought for.

    A job's pods join the demand while, in every resource they ask for, the demand of
    its kind (the jobs whose pods fit the same node groups) is short of what those
    groups could hold at their max sizes plus the room free now on their nodes and on
    nodes of no group, and fewer than MAX_DEMAND_JOBS jobs are in it. Kinds count apart: CPU jobs behind more GPU
    jobs than the GPU groups can hold are still bought for on their own groups, as are
    1-GPU jobs behind 8-GPU ones. A job no region could ever hold is never demand.
    """

    def __init__(
        self,
        capacity: CapacityAtMaxSize,
        *,
        free: Mapping[tuple[str, str] | None, Sequence[int]],
        keys: Iterable[_Key],
    ) -> None:
        self._capacity = capacity
        self._free = free
        self.jobs = 0
        self._left: dict[frozenset[int], list[int]] = {}  # kind -> what it may still ask, each resource
        self._kind: dict[_Key, tuple[frozenset[int], tuple[int, ...], Vector]] = {}
        self._by_kind: dict[frozenset[int], list[_Key]] = {}
        self._open = set(keys)  # the keys that may still take some: unknown, or known with budget left

    @property
    def spent(self) -> bool:
        """No job further on can join the demand (each key learned, as when every one has failed)."""
        return self.jobs >= MAX_DEMAND_JOBS or not self._open

    def learn(self, key: _Key, by_shape: Mapping[PodShape, Sequence[Pod]], *, ever: bool) -> None:
        """Note a key's kind, its requests and which resources they use (once per key)."""
        if not ever:
            self._open.discard(key)
            return
        kind = frozenset(i for shape in by_shape for i in self._capacity.groups_for(shape))
        asked = [0, 0, 0, 0]
        for shape, pods in by_shape.items():
            for i in range(4):
                asked[i] += shape.request[i] * len(pods)
        uses = tuple(i for i in range(4) if asked[i] > 0)
        self._kind[key] = (kind, uses, (asked[0], asked[1], asked[2], asked[3]))
        if kind not in self._left:
            left = list(self._capacity.held_by(kind))
            for where in (None, *self._capacity.names(kind)):
                for i, amount in enumerate(self._free.get(where, ())):
                    left[i] += amount
            self._left[kind] = left
        self._by_kind.setdefault(kind, []).append(key)
        if not self._fits(key):
            self._open.discard(key)

    def take(self, key: _Key) -> bool:
        """Count the job into the demand if its kind has budget left; False: it is not demand."""
        if self.jobs >= MAX_DEMAND_JOBS or key not in self._open:  # a learned key is open while it fits
            return False
        kind, _, asked = self._kind[key]
        left = self._left[kind]
        ran_out = False
        for i in range(4):
            ran_out = ran_out or 0 < left[i] <= asked[i]
            left[i] -= asked[i]
        self.jobs += 1
        if ran_out:  # some of the kind's keys can take no more (once per resource and kind)
            self._open.difference_update(other for other in self._by_kind[kind] if not self._fits(other))
        return True

    def _fits(self, key: _Key) -> bool:
        kind, uses, _ = self._kind[key]
        left = self._left[kind]
        return all(left[i] > 0 for i in uses)


class CapacityAtMaxSize:
    """What each site's groups could hold at their max sizes: can a gang ever fit?

    A site is a region, of one cluster when there are several (planner/sites.py): a gang
    never spans two clusters, even in one region.
    """

    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self._groups = groups
        self._per_region: dict[tuple[PodShape, str], int] = {}
        self._regions = sorted({g.site for g in groups})
        self._fits: dict[PodShape, tuple[int, ...]] = {}

    def groups_for(self, shape: PodShape) -> tuple[int, ...]:
        """The groups (by index) a pod of the shape fits on, in any region."""
        fits = self._fits.get(shape)
        if fits is None:
            fits = self._fits[shape] = tuple(i for i, g in enumerate(self._groups) if _fits_group(shape, g))
        return fits

    def names(self, groups: Iterable[int]) -> list[tuple[str, str]]:
        """The groups (by index) as (region, name)."""
        return [(self._groups[i].region, self._groups[i].name) for i in groups]

    def held_by(self, groups: Iterable[int]) -> Vector:
        """What the groups (by index) hold at their max sizes, in each resource."""
        held = [0, 0, 0, 0]
        for i in groups:
            group = self._groups[i]
            capacity = group.allocatable.vector()
            for r in range(4):
                held[r] += group.max_size * capacity[r]
        return (held[0], held[1], held[2], held[3])

    def could_hold(self, parts: Sequence[tuple[PodShape, int]]) -> bool:
        return any(
            all(count <= self._most(shape, region) for shape, count in parts) for region in self._regions
        )

    def _most(self, shape: PodShape, region: str) -> int:
        key = (shape, region)
        most = self._per_region.get(key)
        if most is None:
            most = 0
            for group in self._groups:
                if group.site == region and _fits_group(shape, group):
                    most += group.max_size * fit_count(group.allocatable.vector(), shape.request)
            self._per_region[key] = most
        return most


def _fits_group(shape: PodShape, group: NodeGroup) -> bool:
    """Does a pod of the shape fit a node of the group (labels, taints, resources)?"""
    taints = blocking_taints(group.taints, ignore_transient=True)
    return shape.placement_mismatch(group.template_labels(), taints) is None and (
        resource_shortfall(shape.request, group.allocatable.vector()) is None
    )
