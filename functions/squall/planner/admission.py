"""Admission: which queued jobs run now, and in what order the others wait. Pure.

The queue is read as replica Jobs: a queued job's are suspended (core/queue.py makes them
from its entry in the job table, as `squall.planner.kube.parse_replica_job` reads a suspended
Job), a job placed in a site but whose objects are not all made has its site as
`admitted_region`, and a running job's are the clusters' own Jobs. The scale check, the
single writer, asks `admit` each time which queued jobs to let run, and where:

- Order: priority (0..100, higher first); within a priority, a job back in the queue
  after losing its objects first, then fair share between teams (the team with the
  fewest admitted GPUs per unit of `weight` goes next), then submission time.
- Quota: a job that would take its team past its `gpuQuota` (counting what the team
  has admitted and what is ahead of it in the queue) waits with `QuotaExceeded`; it is
  neither admitted nor bought capacity for.
- Whole gangs, one region, ready room: a job is admitted only when every replica fits
  now on ready, schedulable nodes of one region, after the pods of jobs admitted
  earlier (pending, or not created yet) have taken theirs.
- No starvation: a job that does not fit keeps the room it could use now in its best
  region (a reservation), so the jobs behind it can only use room it cannot: the room
  freed by finishing jobs and bought for it goes to it. A job no region could ever hold
  (more than the groups' max sizes) reserves nothing and holds nobody up.
- Demand: the planner is given the queue's pods in this order, as pending pods, for
  the jobs it may still admit (not those a quota holds back), so Squall buys capacity
  for what it will admit next: no more than the groups each kind of job fits could
  hold (planner/demand_budget.py).

With more than one cluster, "region" above means a site (planner/sites.py): a region
of one cluster. A queued job's pods may go to any cluster; a gang is admitted whole in
one site, and its pods are pinned to that cluster and region.

docs/design.md ("Admission") says which guarantees hold.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from squall.conventions import CLUSTER_LABEL
from squall.planner.admission_plan import AdmissionPlan, Admitted, Waiting
from squall.planner.admission_time import Pricing, Timing
from squall.planner.demand import Gang, PodShape, shape_of
from squall.planner.demand_budget import MAX_DEMAND_JOBS, CapacityAtMaxSize, DemandBudget, free_by_group
from squall.planner.fleet_profile import FleetMemo
from squall.planner.inventory import Inventory, build_inventory
from squall.planner.model import (
    REGION_LABEL,
    Node,
    NodeGroup,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Policy,
    Vector,
)
from squall.planner.packing import Packer, RoomKind
from squall.planner.planning import rooms_on_nodes_up
from squall.planner.queue_order import in_admission_order
from squall.planner.queue_types import QueuedJob, ReplicaJob, TeamBudget, TeamShare
from squall.planner.sites import split_site
from squall.planner.timeline import Booking

# Waiting jobs described one by one (place, reason), head first; the rest are counted.
MAX_LISTED = 250


# Shapes of pods kept between calls at most; past it the memo starts afresh.
MAX_REMEMBERED_SHAPES = 10_000


@dataclass(slots=True)
class AdmissionCache:
    """What one `admit` call prepared for the next, in a process that admits again and again.

    A warm scale function reads the same suspended Jobs check after check, and its
    parse cache hands back the same ReplicaJob objects for those unchanged. The queue
    is kept between calls and brought up to date from the replica Jobs that came and
    went since the last call (by identity): only the jobs they belong to are looked at
    again, so a check costs what changed, not the length of the queue. Purely a memo:
    `admit` decides the same with or without it (tests/unit/planner/test_admission.py
    checks one against the other).
    """

    shapes: dict[tuple[object, ...], PodShape] = field(default_factory=dict)
    # The latest call's replica Jobs, and what gather made of them.
    listed: tuple[ReplicaJob, ...] = ()
    gathered: _Gathered | None = None
    by_identity: dict[int, ReplicaJob] = field(default_factory=dict)  # the latest call's, by id()
    groups: dict[str, list[ReplicaJob]] = field(default_factory=dict)  # job id -> its replica Jobs
    kinds: dict[str, str] = field(default_factory=dict)  # job id -> queued | admitted | incomplete | finished
    # The latest call's waiting jobs by their place: the same job in the same place is the same Waiting.
    waiting: dict[
        tuple[str, int, int, str | None, bool, bool, datetime | None, datetime | None],
        tuple[QueuedJob, Waiting],
    ] = field(default_factory=dict)
    fleet: FleetMemo = field(default_factory=FleetMemo)  # what the time profiles read of nodes and groups

    @property
    def jobs(self) -> dict[str, _Prepared]:
        """The queued jobs of the latest call, prepared, by job id."""
        return self.gathered.by_id if self.gathered is not None else {}


@dataclass(slots=True)
class _Gathered:
    """The replica Jobs read as a queue, with what admission looks up in it (kept up to date in place)."""

    admitted: dict[str, list[ReplicaJob]]  # job id -> its replica Jobs, some let go
    incomplete: set[str]
    by_id: dict[str, _Prepared]  # the queued jobs
    key_counts: Counter[tuple[tuple[int, int], ...]]
    shape_counts: Counter[PodShape]  # queued pods of each shape
    bands: dict[int, dict[str, list[QueuedJob]]]  # priority -> team -> its jobs in order
    totals: dict[str, tuple[int, int]]  # team -> (queued jobs, their GPUs)
    # What a check reads of the admitted jobs, kept with `admitted` (so a check costs
    # what changed, not a look at every running job):
    # team -> (its replica Jobs let go and unfinished, their GPUs)
    running: dict[str, tuple[int, int]] = field(default_factory=dict)
    resumed: dict[str, Admitted] = field(default_factory=dict)  # job id -> its admission left half done
    # Unfinished replica Jobs that may have no pod yet: (namespace, name) -> (job id,
    # place among the job's replica Jobs, its pod pinned to the job's region) for each.
    awaiting: dict[tuple[str, str], list[tuple[str, int, Pod]]] = field(default_factory=dict)

    def add_admitted(self, job_id: str, replicas: list[ReplicaJob]) -> None:
        """An admitted job: some (or all) of its replica Jobs let go, sorted by name."""
        self.admitted[job_id] = replicas
        region = next((r.admitted_region for r in replicas if r.admitted_region), None)
        suspended = tuple(r for r in replicas if r.suspended)
        if suspended and region is not None:
            first = replicas[0]
            self.resumed[job_id] = Admitted(
                job_id=job_id,
                team=first.team,
                namespace=first.namespace,
                region=region,
                gpus=sum(r.gpus for r in replicas),
                jobs=suspended,
                resumed=True,
            )
        for place, replica in enumerate(replicas):
            # Let go, or of a job placed in a site (its objects on their way): its GPUs are in use.
            if not replica.finished and (not replica.suspended or region is not None):
                count, gpus = self.running.get(replica.team, (0, 0))
                self.running[replica.team] = (count + 1, gpus + replica.gpus)
                entry = (job_id, place, _pinned(replica.pod, region))
                self.awaiting.setdefault((replica.namespace, replica.name), []).append(entry)

    def remove_admitted(self, job_id: str) -> None:
        replicas = self.admitted.pop(job_id)
        self.resumed.pop(job_id, None)
        region = next((r.admitted_region for r in replicas if r.admitted_region), None)
        for replica in replicas:
            if not replica.finished and (not replica.suspended or region is not None):
                count, gpus = self.running[replica.team]
                if count == 1:
                    del self.running[replica.team]
                else:
                    self.running[replica.team] = (count - 1, gpus - replica.gpus)
            key = (replica.namespace, replica.name)
            entries = [entry for entry in self.awaiting.get(key, ()) if entry[0] != job_id]
            if entries:
                self.awaiting[key] = entries
            else:
                self.awaiting.pop(key, None)

    @property
    def keys(self) -> frozenset[tuple[tuple[int, int], ...]]:
        return frozenset(self.key_counts)

    @property
    def shapes(self) -> frozenset[PodShape]:
        return frozenset(self.shape_counts)

    def add(self, prepared: _Prepared) -> None:
        job = prepared.job
        self.by_id[job.job_id] = prepared
        self.key_counts[prepared.key] += 1
        for shape, pods in prepared.by_shape.items():
            self.shape_counts[shape] += len(pods)
        count, gpus = self.totals.get(job.team, (0, 0))
        self.totals[job.team] = (count + 1, gpus + job.gpus)
        in_order = self.bands.setdefault(job.priority, {}).setdefault(job.team, [])
        bisect.insort(in_order, job, key=QueuedJob.order_key)

    def remove(self, job_id: str) -> None:
        prepared = self.by_id.pop(job_id)
        job = prepared.job
        _decrement(self.key_counts, prepared.key)
        for shape, pods in prepared.by_shape.items():
            _decrement(self.shape_counts, shape, len(pods))
        count, gpus = self.totals[job.team]
        if count == 1:
            del self.totals[job.team]
        else:
            self.totals[job.team] = (count - 1, gpus - job.gpus)
        by_team = self.bands[job.priority]
        in_order = by_team[job.team]
        # Found by its key (each job's is its own), not by a look along a queue that may be long.
        index = bisect.bisect_left(in_order, job.order_key(), key=QueuedJob.order_key)
        if index == len(in_order) or in_order[index] is not job:
            index = next(i for i, queued in enumerate(in_order) if queued is job)
        del in_order[index]
        if not in_order:
            del by_team[job.team]
            if not by_team:
                del self.bands[job.priority]


_K = TypeVar("_K")


def _decrement(counts: Counter[_K], key: _K, by: int = 1) -> None:
    if counts[key] <= by:
        del counts[key]
    else:
        counts[key] -= by


@dataclass(frozen=True, slots=True)
class _Prepared:
    job: QueuedJob
    by_shape: dict[PodShape, list[Pod]]
    key: tuple[tuple[int, int], ...]  # alike for jobs alike in shape
    # Its pods as demand, by the priority they were last given (one: the queue seldom moves).
    demand: dict[int, tuple[Pod, ...]] = field(default_factory=dict)

    def demand_at(self, priority: int) -> tuple[Pod, ...]:
        """Its replicas' pods as the planner's demand, at `priority` (its place in line)."""
        pods = self.demand.get(priority)
        if pods is None:
            self.demand.clear()
            pods = self.demand[priority] = tuple(r.pod.with_priority(priority) for r in self.job.replicas)
        return pods


def gather(jobs: Iterable[ReplicaJob], cache: AdmissionCache | None = None) -> _Gathered:
    """Replica Jobs by job: the queued jobs (prepared), the admitted ones (job id -> replica Jobs), the incomplete."""
    cache = cache if cache is not None else AdmissionCache()
    listed = tuple(jobs)
    if cache.gathered is not None and _same(listed, cache.listed):
        return cache.gathered  # the very same Jobs: the same queue
    current = dict(zip(map(id, listed), listed, strict=True))
    earlier = cache.by_identity
    came = [current[i] for i in current.keys() - earlier.keys()]
    went = [earlier[i] for i in earlier.keys() - current.keys()]
    if (
        cache.gathered is None
        or len(current) != len(listed)  # the same object twice: no identity to go by
        or len(cache.shapes) > MAX_REMEMBERED_SHAPES
        or len(came) + len(went) > len(listed) // 2
    ):
        return _gather_afresh(listed, current, cache)
    cache.listed, cache.by_identity = listed, current
    groups = cache.groups
    for replica in went:
        replicas = groups[replica.job_id]
        del replicas[next(i for i, r in enumerate(replicas) if r is replica)]
        if not replicas:
            del groups[replica.job_id]
    for replica in came:
        groups.setdefault(replica.job_id, []).append(replica)
    gathered = cache.gathered
    for job_id in {r.job_id for r in came} | {r.job_id for r in went}:
        kind = cache.kinds.pop(job_id, None)
        if kind == "queued":
            gathered.remove(job_id)
        elif kind == "admitted":
            gathered.remove_admitted(job_id)
        elif kind == "incomplete":
            gathered.incomplete.discard(job_id)
        if job_id in groups:
            _classify(job_id, groups[job_id], gathered, cache)
    return gathered


def _gather_afresh(
    listed: tuple[ReplicaJob, ...], current: dict[int, ReplicaJob], cache: AdmissionCache
) -> _Gathered:
    if len(cache.shapes) > MAX_REMEMBERED_SHAPES:
        cache.shapes.clear()
    groups: dict[str, list[ReplicaJob]] = {}
    for job in listed:
        groups.setdefault(job.job_id, []).append(job)
    gathered = _Gathered(
        admitted={},
        incomplete=set(),
        by_id={},
        key_counts=Counter(),
        shape_counts=Counter(),
        bands={},
        totals={},
    )
    cache.listed, cache.by_identity, cache.groups, cache.kinds = (
        listed,
        current if len(current) == len(listed) else {},
        groups,
        {},
    )
    for job_id, replicas in groups.items():
        _classify(job_id, replicas, gathered, cache)
    cache.gathered = gathered
    return gathered


def _classify(job_id: str, listed: list[ReplicaJob], gathered: _Gathered, cache: AdmissionCache) -> None:
    """File one job's replica Jobs under what they make it: queued, admitted, incomplete, or finished."""
    replicas = sorted(listed, key=lambda r: r.name)
    if not all(r.suspended for r in replicas) or any(r.admitted_region for r in replicas):
        # Let go in part, or placed in a site whose objects are not all made: finished there.
        gathered.add_admitted(job_id, replicas)
        kind = "admitted"
    elif any(r.finished for r in replicas):
        kind = "finished"  # a suspended Job that finished: nothing to admit
    elif len(replicas) < max(r.replicas for r in replicas):
        gathered.incomplete.add(job_id)
        kind = "incomplete"
    else:
        gathered.add(_prepare(job_id, replicas, shapes=cache.shapes))
        kind = "queued"
    cache.kinds[job_id] = kind


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    """The very same objects, in order: identity only, never a field-by-field comparison.

    (A tuple's `==` goes on to compare equal-looking objects field by field, and
    replica Jobs parsed again after a status change are equal-looking.)
    """
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _prepare(
    job_id: str, replicas: Sequence[ReplicaJob], *, shapes: dict[tuple[object, ...], PodShape]
) -> _Prepared:
    first = replicas[0]
    job = QueuedJob(
        job_id=job_id,
        team=first.team,
        namespace=first.namespace,
        priority=first.priority,
        submitted_at=first.submitted_at,
        requeued=first.requeued,
        replicas=tuple(replicas),
        gpus=sum(r.gpus for r in replicas),
        max_runtime=max((r.max_runtime for r in replicas if r.max_runtime is not None), default=None),
    )
    by_shape: dict[PodShape, list[Pod]] = {}
    for replica in replicas:
        by_shape.setdefault(shape_of(replica.pod, shapes), []).append(replica.pod)
    key = tuple(sorted((id(shape), len(pods)) for shape, pods in by_shape.items()))
    return _Prepared(job=job, by_shape=by_shape, key=key)


def admit(
    *,
    jobs: Iterable[ReplicaJob],
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    groups: Sequence[NodeGroup],
    teams: Mapping[str, TeamShare],
    policy: Policy,
    now: datetime,
    cache: AdmissionCache | None = None,
    inventory: Inventory | None = None,
    unseen: Mapping[str, int] | None = None,
    run_ratios: Mapping[str, float] | None = None,
    budgets: Mapping[str, TeamBudget] | None = None,
) -> AdmissionPlan:
    """Decide which queued jobs run now (whole, in one region) and where the rest stand.

    `unseen`: team -> GPUs its jobs hold where no replica Job of theirs could be read (a
    cluster that cannot be reached now): in use all the same, for the quotas.

    `budgets`: team -> its monthly budget and what it spent this month: a job whose worst
    case (its declared run time on the dearest group it fits) would take its team past it
    waits with `BudgetExceeded` (never bought for); running jobs are never stopped.
    `run_ratios`: team -> how long its jobs really run, as a share of their declared
    maxRuntime (learned from finished jobs; 1 when unknown): for `likelyStart`.
    `cache`: kept by a caller that admits again and again (see AdmissionCache).
    `inventory`: build_inventory's of these nodes, pods and groups, where the caller
    has it already (as for `plan`).
    """
    cache = cache if cache is not None else AdmissionCache()
    gathered = gather(jobs, cache)
    admitted_jobs = gathered.admitted
    pods = list(pods)
    if inventory is None:
        inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=policy, now=now)
    in_use = {team: gpus for team, (_, gpus) in gathered.running.items()}
    for team, gpus in (unseen or {}).items():
        in_use[team] = in_use.get(team, 0) + gpus

    # Admitted jobs: their replicas with no pod yet (the Job controller creates it in a
    # moment) wait like their pending pods; an admission begun earlier is finished.
    with_pods = {(pod.namespace, _owner_name(pod)) for pod in pods if pod.job_id is not None}
    admitted = [gathered.resumed[job_id] for job_id in sorted(gathered.resumed)]
    awaiting = gathered.awaiting
    missing = [entry for key in awaiting.keys() - with_pods for entry in awaiting[key]]
    not_created = [pod for _, _, pod in sorted(missing, key=lambda entry: entry[:2])]  # as read job by job

    waiting_before = [pod for pod in inventory.pending if pod.job_id in admitted_jobs or pod.job_id is None]
    interned = cache.shapes
    earlier = [*waiting_before, *not_created]
    shapes_used = set(gathered.shapes)
    shapes_used.update(shape_of(pod, interned) for pod in earlier)
    # Ready room too small for the least of each resource these shapes ask for holds no
    # pod of theirs: admission packs without it (at the peak of a burst, most nodes).
    least = _least_request(shapes_used)
    rooms = [room for room in rooms_on_nodes_up(inventory, least=least) if room.kind is RoomKind.READY]
    packer = Packer(rooms=rooms, options=[], shapes=shapes_used)
    _place_earlier(packer, earlier, interned, job_regions=inventory.job_regions)

    capacity = CapacityAtMaxSize(groups)
    team_rank: dict[str, int] = {}
    waiting: list[Waiting] = []
    held_back: list[Waiting] = []  # listed after those in line
    # Room only shrinks within a check: a shape of job that did not fit will not fit
    # later in the check either, and what it could reserve the first such job reserved.
    failed: set[tuple[tuple[int, int], ...]] = set()
    every_key = gathered.keys
    ever_fits: dict[tuple[tuple[int, int], ...], bool] = {}
    unserved: dict[tuple[tuple[int, int], ...], tuple[str, ...]] = {}  # of the never-fitting keys
    served = tuple(sorted({group.region for group in groups}))
    clusters = any(group.cluster for group in groups)
    demand: list[Pod] = [*not_created]
    budget = DemandBudget(capacity, free=free_by_group(inventory), keys=every_key)
    position = 0
    places: dict[
        tuple[str, int, int, str | None, bool, bool, datetime | None, datetime | None],
        tuple[QueuedJob, Waiting],
    ] = {}
    # Once a job does not fit, the rest are booked on the fleet's time profile (backfill: a
    # job runs now only where it delays nobody ahead of it; each gets its start estimates).
    timing: Timing | None = None
    pricing = Pricing(groups)
    spending: dict[str, float] = {}  # team -> spent, with the worst case of what this check admitted
    held_by_budget: dict[str, int] = {}
    aged_before = _aged_before(now, policy)
    for job, held in in_admission_order(
        (), in_use=in_use, teams=teams, bands=gathered.bands, aged_before=aged_before
    ):
        exhausted = len(failed) == len(every_key) if timing is None else timing.exhausted
        if exhausted and len(waiting) >= MAX_LISTED and budget.spent:
            break  # no job further on can be admitted, reserve or be bought for: counted below
        team_rank[job.team] = team_rank.get(job.team, 0) + 1
        if held is not None:
            if len(held_back) < MAX_LISTED:
                quota = teams[job.team].quota if job.team in teams else None
                held_back.append(_held(job, used=held, quota=quota, team_position=team_rank[job.team]))
            continue
        ready = gathered.by_id[job.job_id]
        budget_of = budgets.get(job.team) if budgets else None
        if budget_of is not None:
            worst = pricing.worst_case(ready.job, ready.by_shape)
            if spending.get(job.team, budget_of.spent) + worst > budget_of.monthly:
                if len(held_back) < MAX_LISTED:
                    held_back.append(
                        _over_budget(job, budget=budget_of, worst=worst, team_position=team_rank[job.team])
                    )
                held_by_budget[job.team] = held_by_budget.get(job.team, 0) + 1
                continue
        by_shape, key = ready.by_shape, ready.key
        reserved = None
        estimate: tuple[datetime | None, datetime | None] = (None, None)
        booked: Booking | None = None
        first_miss = key not in failed
        if timing is not None:
            first_miss = False
            ever = ever_fits.get(key)
            if ever is None:
                ever = ever_fits[key] = capacity.could_hold(
                    [(shape, len(pods)) for shape, pods in by_shape.items()]
                )
                budget.learn(key, by_shape, ever=ever)
            booked = timing.book(job, by_shape) if ever else None
            if booked is not None and booked.start <= 0:
                admitted.append(
                    Admitted(
                        job_id=job.job_id,
                        team=job.team,
                        namespace=job.namespace,
                        region=booked.site,
                        gpus=job.gpus,
                        jobs=job.replicas,
                        backfilled=True,
                    )
                )
                in_use[job.team] = in_use.get(job.team, 0) + job.gpus
                if budget_of is not None:
                    spending[job.team] = spending.get(job.team, budget_of.spent) + pricing.worst_case(
                        ready.job, ready.by_shape
                    )
                demand.extend(_pinned(replica.pod, booked.site) for replica in job.replicas)
                team_rank[job.team] -= 1
                continue
            reserved = booked.site if booked is not None else None
            estimate = timing.estimate(booked)
        elif first_miss:
            gang = Gang(job_id=job.job_id, pods_by_shape=by_shape, priority=job.priority)
            if packer.place_gang(gang) is None:
                region = packer.placed_regions[job.job_id]
                admitted.append(
                    Admitted(
                        job_id=job.job_id,
                        team=job.team,
                        namespace=job.namespace,
                        region=region,
                        gpus=job.gpus,
                        jobs=job.replicas,
                    )
                )
                in_use[job.team] = in_use.get(job.team, 0) + job.gpus
                if budget_of is not None:
                    spending[job.team] = spending.get(job.team, budget_of.spent) + pricing.worst_case(
                        ready.job, ready.by_shape
                    )
                demand.extend(_pinned(replica.pod, region) for replica in job.replicas)
                team_rank[job.team] -= 1
                continue
            failed.add(key)
        ever = ever_fits.get(key)
        if ever is None:
            ever = ever_fits[key] = capacity.could_hold(
                [(shape, len(pods)) for shape, pods in by_shape.items()]
            )
            budget.learn(key, by_shape, ever=ever)
        if not ever and key not in unserved:
            unserved[key] = _regions_no_group_is_in(by_shape, served=served)
        if ever and timing is None and first_miss and policy.backfill:
            # The first job that does not fit: from here on, the time profile decides.
            timing = Timing.start(
                inventory=inventory,
                pods=pods,
                running=gathered.admitted,
                admitted_now=[
                    (gathered.by_id[a.job_id].job, gathered.by_id[a.job_id].by_shape, a.region)
                    for a in admitted
                    if a.job_id in gathered.by_id and not a.resumed
                ],
                earlier=earlier,
                interned=interned,
                now=now,
                run_ratios=run_ratios or {},
                shapes=shapes_used,
                queued_pods=gathered.shape_counts,
                memo=cache.fleet,
            )
            first_miss = False
            booked = timing.book(job, by_shape)
            reserved = booked.site if booked is not None else None
            estimate = timing.estimate(booked)
        if timing is not None:
            # Bought for only when it waits for nodes to come, not for running jobs to end
            # (nodes bought now would stand idle until then).
            # Not pinned to that site: the planner may still buy elsewhere (a group in backoff).
            if booked is not None and booked.waits_for_nodes and timing.bought < MAX_DEMAND_JOBS:
                timing.bought += 1
                demand.extend(ready.demand_at(MAX_DEMAND_JOBS - timing.bought))
        elif ever:
            if first_miss:
                reserved = packer.hold_room(Gang(job_id=job.job_id, pods_by_shape=by_shape))
            if budget.take(key):
                demand.extend(ready.demand_at(MAX_DEMAND_JOBS - budget.jobs))
        if len(waiting) < MAX_LISTED:
            position += 1
            place = (job.job_id, position, team_rank[job.team], reserved, not ever, clusters, *estimate)
            known = cache.waiting.get(place)
            if known is None or known[0] is not job:
                known = (
                    job,
                    Waiting(
                        job_id=job.job_id,
                        team=job.team,
                        priority=job.priority,
                        gpus=job.gpus,
                        replicas=len(job.replicas),
                        cpu_millis=_cpu_millis(job),
                        memory_bytes=_memory_bytes(job),
                        position=position,
                        team_position=team_rank[job.team],
                        reason="Queued",
                        reserved_region=reserved,
                        never_fits=not ever,
                        unserved_regions=() if ever else unserved.get(key, ()),
                        served_regions=() if ever else served,
                        clusters=clusters,
                        starts_by=estimate[0],
                        likely_start=estimate[1],
                    ),
                )
            places[place] = known
            waiting.append(known[1])
    cache.waiting = places
    queued_by_team = dict(gathered.totals)
    for a in admitted:
        if a.job_id in gathered.by_id:  # admitted from the queue now, not resumed
            jobs_count, gpus = queued_by_team[a.team]
            queued_by_team[a.team] = (jobs_count - 1, gpus - a.gpus)
    queued_by_team = {team: counts for team, counts in queued_by_team.items() if counts[0]}
    return AdmissionPlan(
        admitted=tuple(admitted),
        waiting=(*waiting, *held_back),
        demand=tuple(demand),
        in_use=in_use,
        incomplete=tuple(sorted(gathered.incomplete)),
        queued=queued_by_team,
        held_by_budget=held_by_budget,
    )


def _aged_before(now: datetime, policy: Policy) -> datetime | None:
    """Backfill's guard against starvation: jobs submitted before this go ahead of the fair share."""
    if not policy.backfill:
        return None
    try:
        return now - policy.aged_after
    except OverflowError:  # before the first year: no job has waited that long
        return None


def _least_request(shapes: Iterable[PodShape]) -> Vector | None:
    """The least of each resource that any of the shapes asks for (None: no shapes)."""
    requests = [shape.request for shape in shapes]
    if not requests:
        return None
    return (
        min(r[0] for r in requests),
        min(r[1] for r in requests),
        min(r[2] for r in requests),
        min(r[3] for r in requests),
    )


def _regions_no_group_is_in(
    by_shape: Mapping[PodShape, Sequence[Pod]], *, served: Sequence[str]
) -> tuple[str, ...]:
    """The regions a job's pods are held to, when some pod of it may go to no region a group is in.

    Empty when every pod may go to some group's region (the job is then too large, or
    asks for what no group has, not held elsewhere).
    """
    for shape in by_shape:
        asked = _regions_of(shape)
        if asked is not None and not asked & set(served):
            return tuple(sorted(asked))
    return ()


def _regions_of(shape: PodShape) -> set[str] | None:
    """The regions a pod of the shape may run in by its node selector and affinity; None: any."""
    allowed: set[str] | None = None
    for key, value in shape.node_selector:
        if key == REGION_LABEL:
            allowed = {value}
    if shape.affinity:
        by_term: set[str] = set()
        for term in shape.affinity:
            regions = [
                set(r.values) for r in term.match_expressions if r.key == REGION_LABEL and r.operator == "In"
            ]
            if not regions:
                return allowed  # a term open to every region
            by_term |= set.intersection(*regions)
        allowed = by_term if allowed is None else allowed & by_term
    return allowed


def _cpu_millis(job: QueuedJob) -> int:
    return sum(replica.pod.requests.cpu for replica in job.replicas)


def _memory_bytes(job: QueuedJob) -> int:
    return sum(replica.pod.requests.memory for replica in job.replicas)


def _held(job: QueuedJob, *, used: int, quota: int | None, team_position: int) -> Waiting:
    return _held_back(
        job,
        team_position=team_position,
        reason=f"QuotaExceeded:{used}/{quota} GPUs",
        in_use=used,
        quota=quota,
    )


def _over_budget(job: QueuedJob, *, budget: TeamBudget, worst: float, team_position: int) -> Waiting:
    return _held_back(
        job,
        team_position=team_position,
        reason="BudgetExceeded",
        spent=budget.spent,
        budget=budget.monthly,
        worst_case=worst,
    )


def _held_back(job: QueuedJob, *, team_position: int, reason: str, **why: Any) -> Waiting:
    """A job its team's quota or budget holds back: listed after the line, at no position."""
    return Waiting(
        job_id=job.job_id,
        team=job.team,
        priority=job.priority,
        gpus=job.gpus,
        replicas=len(job.replicas),
        cpu_millis=_cpu_millis(job),
        memory_bytes=_memory_bytes(job),
        position=0,
        team_position=team_position,
        reason=reason,
        **why,
    )


def _owner_name(pod: Pod) -> str:
    """The Job a pod belongs to: its name without the Job controller's random suffix."""
    return pod.name.rsplit("-", 1)[0] if "-" in pod.name else pod.name


def _pinned(pod: Pod, where: str | None) -> Pod:
    """The pod with its job's site (region, and cluster when named) added to its required node affinity."""
    cluster, region = split_site(where or "")
    requirements: tuple[NodeSelectorRequirement, ...] = ()
    if region and region != "unknown":  # ready room on nodes without a region label: no region to pin
        requirements = (NodeSelectorRequirement(key=REGION_LABEL, operator="In", values=(region,)),)
    if cluster:
        requirements = (
            *requirements,
            NodeSelectorRequirement(key=CLUSTER_LABEL, operator="In", values=(cluster,)),
        )
    if not requirements:
        return pod
    terms = pod.required_affinity or (NodeSelectorTerm(),)
    return dataclasses.replace(
        pod,
        required_affinity=tuple(
            NodeSelectorTerm(match_expressions=(*term.match_expressions, *requirements)) for term in terms
        ),
    )


def _place_earlier(
    packer: Packer,
    pods: Sequence[Pod],
    interned: dict[tuple[object, ...], PodShape],
    *,
    job_regions: Mapping[str, str],
) -> None:
    """Let the pods of admitted jobs take their room first, as kube-scheduler will."""
    gangs: dict[str, Gang] = {}
    free: dict[PodShape, int] = {}
    for pod in pods:
        shape = shape_of(pod, interned)
        if pod.job_id is None:
            free[shape] = free.get(shape, 0) + 1
            continue
        gang = gangs.setdefault(
            pod.job_id, Gang(job_id=pod.job_id, pods_by_shape={}, region=job_regions.get(pod.job_id))
        )
        gang.pods_by_shape.setdefault(shape, []).append(pod)
    for gang in gangs.values():
        if packer.place_gang(gang) is not None:
            packer.hold_room(gang)  # what is there is theirs; the rest waits for booting nodes
    if free:
        packer.place_free(free)
