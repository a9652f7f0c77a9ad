"""Preemption: which running jobs give their room to a waiting job of much higher priority. Pure.

Off unless the policy enables it. Admission (planner/admission.py) never takes room
from a running job; this module is asked after it, once per scale check, and chooses
at most one preemptor and its victims:

- The preemptor: the first waiting job in admission order that is in line ("Queued":
  not held back by its quota or budget), for which no capacity can be bought (every
  node group that could hold one of its pods is at its max size, or failing to
  launch, and none has nodes on their way), and that does not fit already (in the
  room of ready nodes, once the pods being deleted are gone and the pods of jobs
  admitted before it have taken theirs). Only the first MAX_PREEMPTORS in line are
  looked at, and a job needing more than MAX_CANDIDATES victims is not preempted for.
- Its victims: running jobs at least `min_priority_gap` below it, all in one site
  (a gang is admitted whole in one site), whose pods, once gone, leave room for every
  pod of the preemptor there. Taken in the order that loses the least work: the
  least run time since the job's latest checkpoint (all its run time without one),
  then the lowest priority, then the fewest GPUs; then as many as the fit allows are
  given back, most work lost first, so no victim is taken that is not needed. Of the
  sites where that works, the one that loses the least work in all wins.

A job that fits already waits for admission; one waiting for capacity being bought
waits for it; neither preempts. The room freed goes by admission order at the next
check: to the preemptor, or to a job ahead of it in line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from squall.conventions import CLUSTER_LABEL, REGION_LABEL
from squall.planner.demand import PodShape, shape_of
from squall.planner.fit import fit_count
from squall.planner.model import Node, NodeGroup, Pod, Vector
from squall.planner.sites import site

# Running jobs considered as victims for one preemptor in one site, least work lost first
# (a job that would need more victims than this in every site is not preempted for).
MAX_CANDIDATES = 64
# Waiting jobs looked at for a preemptor, head of the queue first.
MAX_PREEMPTORS = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionPolicy:
    """Whether a waiting job may take room from running jobs `min_priority_gap` or more below it,
    and how long a victim is given to checkpoint (its pods' termination grace)."""

    enabled: bool = False
    min_priority_gap: int = 30
    grace: timedelta = timedelta(seconds=120)

    def __post_init__(self) -> None:
        if not 1 <= self.min_priority_gap <= 100:
            raise ValueError("preemption minPriorityGap must be from 1 to 100")
        if self.grace < timedelta(0):
            raise ValueError("preemption graceSeconds must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingJob:
    """A queued job as preemption reads it: its place in line and its pods (unpinned)."""

    job_id: str
    priority: int
    pods: tuple[Pod, ...]
    in_line: bool = True  # False: held back (by its quota or budget): it would not be admitted


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningJob:
    """A running job as its record says: how much work it would lose if stopped now."""

    job_id: str
    priority: int
    started_at: datetime
    checkpoint_at: datetime | None = None

    def work_lost(self, now: datetime) -> timedelta:
        """Run time since its latest checkpoint of this run (all of this run without one)."""
        since = self.started_at
        if self.checkpoint_at is not None and self.checkpoint_at > since:
            since = self.checkpoint_at
        return max(now - since, timedelta(0))


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    job_id: str
    priority: int
    gpus: int
    work_lost: timedelta


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """Stop `victims` (all in `site`) so that `job_id` can be admitted there."""

    job_id: str
    priority: int
    site: str
    victims: tuple[Victim, ...]

    @property
    def work_lost(self) -> timedelta:
        return sum((v.work_lost for v in self.victims), timedelta(0))


@dataclass(slots=True)
class _Room:
    name: str
    site: str
    labels: Mapping[str, str]
    node: Node
    free: Vector


def buyable(job: WaitingJob, *, groups: Sequence[NodeGroup], nodes: Sequence[Node]) -> bool:
    """Whether capacity for the job can still be bought or is on its way: some group that
    could hold one of its pods is below its max size, or has nodes not up yet (neither
    while it fails to launch)."""
    ready = {node.instance_id for node in nodes if node.ready and node.instance_id}
    interned: dict[tuple[object, ...], PodShape] = {}
    shapes = {shape_of(pod, interned) for pod in job.pods}
    for group in groups:
        if group.failures:
            continue
        up = sum(1 for instance in group.instances if instance.instance_id in ready)
        if group.desired >= group.max_size and group.desired <= up:
            continue
        capacity = group.allocatable.vector()
        labels = group.template_labels()
        for shape in shapes:
            if fit_count(capacity, shape.request) and shape.placement_mismatch(labels, group.taints) is None:
                return True
    return False


def may_preempt(
    waiting: Iterable[WaitingJob],
    *,
    groups: Sequence[NodeGroup],
    nodes: Sequence[Node],
    policy: PreemptionPolicy,
) -> list[WaitingJob]:
    """The waiting jobs that could preempt, were there victims: in line, with a priority a
    victim could be `min_priority_gap` below, and no capacity to buy for them."""
    if not policy.enabled:
        return []
    found: list[WaitingJob] = []
    for count, job in enumerate(waiting):
        if count >= MAX_PREEMPTORS:
            break
        eligible = job.in_line and job.priority >= policy.min_priority_gap and job.pods
        if eligible and not buyable(job, groups=groups, nodes=nodes):
            found.append(job)
    return found


def choose(
    *,
    waiting: Sequence[WaitingJob],
    running: Sequence[RunningJob],
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    groups: Sequence[NodeGroup],
    policy: PreemptionPolicy,
    now: datetime,
    earlier: Sequence[tuple[Pod, str | None]] = (),
) -> Preemption | None:
    """The one preemption to make now, if any (see the module docstring).

    `waiting`: the queue in admission order, those admission did not admit;
    `running`: the running jobs' records; `earlier`: pods of jobs admitted but not yet
    bound, each with the site it must go to (None: its own affinity says), which take
    their room before any waiting job does.
    """
    if not policy.enabled:
        return None
    rooms = _rooms(nodes, pods, groups)
    interned: dict[tuple[object, ...], PodShape] = {}
    for pod, where in earlier:
        _place(rooms, [pod], interned, where=where)  # what does not fit waits for nodes on their way
    records = {job.job_id: job for job in running}
    lowest = min((job.priority for job in running), default=101)
    held = _held_by_job(pods, rooms)
    for count, job in enumerate(waiting):
        if count >= MAX_PREEMPTORS:
            break
        if not job.in_line or not job.pods:
            continue
        where = _fit_site(rooms, job.pods, interned)
        if where is not None:
            # It starts once admission sees the room (or once the pods being deleted go):
            # it takes that room first, and preempts nothing.
            _place(rooms, job.pods, interned, where=where)
            continue
        if job.priority - policy.min_priority_gap < lowest:
            continue  # no running job is far enough below it
        if buyable(job, groups=groups, nodes=nodes):
            continue
        best = _best_victims(
            job, rooms=rooms, held=held, records=records, policy=policy, now=now, interned=interned
        )
        if best is not None:
            return best
    return None


def _rooms(nodes: Sequence[Node], pods: Sequence[Pod], groups: Sequence[NodeGroup]) -> dict[str, _Room]:
    """Free room on each ready, schedulable node; pods being deleted hold none (they are leaving)."""
    site_of_instance = {i.instance_id: g.site for g in groups for i in g.instances}
    rooms: dict[str, _Room] = {}
    for node in nodes:
        if not node.ready or node.unschedulable:
            continue
        where = site_of_instance.get(node.instance_id or "")
        if where is None:
            where = site(node.labels.get(REGION_LABEL, ""), node.labels.get(CLUSTER_LABEL, ""))
        rooms[node.name] = _Room(
            name=node.name, site=where, labels=node.labels, node=node, free=node.allocatable.vector()
        )
    for pod in pods:
        room = rooms.get(pod.node_name or "")
        if room is not None and pod.is_active and not pod.deleting:
            room.free = _minus(room.free, _held(pod))
    return rooms


def _held_by_job(pods: Sequence[Pod], rooms: Mapping[str, _Room]) -> dict[str, tuple[str, list[Pod]]]:
    """Job id -> (its site, its pods holding room): the jobs running wholly in one site."""
    held: dict[str, tuple[str, list[Pod]]] = {}
    split: set[str] = set()
    for pod in pods:
        if pod.job_id is None or not pod.is_active or pod.deleting:
            continue
        room = rooms.get(pod.node_name or "")
        if room is None:
            split.add(pod.job_id)  # on a node not ready: its room would not come back
            continue
        where, listed = held.setdefault(pod.job_id, (room.site, []))
        if where != room.site:
            split.add(pod.job_id)
        listed.append(pod)
    return {job_id: entry for job_id, entry in held.items() if job_id not in split}


def _best_victims(
    job: WaitingJob,
    *,
    rooms: dict[str, _Room],
    held: Mapping[str, tuple[str, list[Pod]]],
    records: Mapping[str, RunningJob],
    policy: PreemptionPolicy,
    now: datetime,
    interned: dict[tuple[object, ...], PodShape],
) -> Preemption | None:
    by_site: dict[str, list[tuple[tuple[timedelta, int, int, str], Victim, list[Pod]]]] = {}
    for job_id, (where, job_pods) in held.items():
        record = records.get(job_id)
        if record is None or record.priority > job.priority - policy.min_priority_gap:
            continue
        gpus = sum(p.requests.gpu for p in job_pods)
        lost = record.work_lost(now)
        victim = Victim(job_id=job_id, priority=record.priority, gpus=gpus, work_lost=lost)
        by_site.setdefault(where, []).append(((lost, record.priority, gpus, job_id), victim, job_pods))
    best: tuple[tuple[timedelta, int, str], Preemption] | None = None
    wanted = _least(job.pods)
    needed = sum(p.requests.gpu for p in job.pods)
    for where in sorted(by_site):
        candidates = sorted(by_site[where], key=lambda entry: entry[0])[:MAX_CANDIDATES]
        # Only rooms that could take one of its pods now, and the victims' nodes, can matter.
        on_victims = {p.node_name for _, _, victim_pods in candidates for p in victim_pods}
        site_rooms = {
            name: room
            for name, room in rooms.items()
            if room.site == where and (name in on_victims or fit_count(room.free, wanted))
        }
        freed = sum(room.free[2] for room in site_rooms.values())  # GPUs it could have, at most
        chosen: list[tuple[Victim, list[Pod]]] = []
        fitted = False
        for _, victim, victim_pods in candidates:
            chosen.append((victim, victim_pods))
            freed += victim.gpus
            if freed >= needed and _fits_without(site_rooms, chosen, job.pods, interned):
                fitted = True
                break
        if not fitted:
            continue
        # Give back the victims the fit does not need, most work lost first.
        for entry in sorted(chosen, key=lambda e: (-e[0].work_lost, -e[0].priority, e[0].job_id)):
            rest = [other for other in chosen if other is not entry]
            if rest and _fits_without(site_rooms, rest, job.pods, interned):
                chosen = rest
        victims = tuple(sorted((v for v, _ in chosen), key=lambda v: v.job_id))
        found = Preemption(job_id=job.job_id, priority=job.priority, site=where, victims=victims)
        key = (found.work_lost, len(victims), where)
        if best is None or key < best[0]:
            best = (key, found)
    return best[1] if best is not None else None


def _least(pods: Sequence[Pod]) -> Vector:
    """The least of each resource any of the pods asks for (what a room must have to take one)."""
    return (
        min(p.requests.cpu for p in pods),
        min(p.requests.memory for p in pods),
        min(p.requests.gpu for p in pods),
        1,
    )


def _fits_without(
    rooms: Mapping[str, _Room],
    victims: Sequence[tuple[Victim, list[Pod]]],
    wanted: Sequence[Pod],
    interned: dict[tuple[object, ...], PodShape],
) -> bool:
    """Whether every pod of `wanted` fits in these rooms once the victims' pods are gone."""
    trial = {name: _Room(r.name, r.site, r.labels, r.node, r.free) for name, r in rooms.items()}
    for _, victim_pods in victims:
        for pod in victim_pods:
            room = trial.get(pod.node_name or "")
            if room is not None:
                room.free = _plus(room.free, _held(pod))
    return _place(trial, wanted, interned, where=None)


def _fit_site(
    rooms: Mapping[str, _Room], wanted: Sequence[Pod], interned: dict[tuple[object, ...], PodShape]
) -> str | None:
    """The first site (by name) where every pod of `wanted` fits now; None: none."""
    least = _least(wanted)
    usable: dict[str, dict[str, _Room]] = {}
    for name, room in rooms.items():
        if fit_count(room.free, least):  # a room too small for its least pod takes none of them
            usable.setdefault(room.site, {})[name] = _Room(
                room.name, room.site, room.labels, room.node, room.free
            )
    for where in sorted(usable):
        if _place(usable[where], wanted, interned, where=None):
            return where
    return None


def _place(
    rooms: Mapping[str, _Room],
    wanted: Iterable[Pod],
    interned: dict[tuple[object, ...], PodShape],
    *,
    where: str | None,
) -> bool:
    """First fit, largest pods first, into `rooms` (in `where` only, when given); True when all
    fit. The rooms keep what was placed even when some pod did not fit."""
    ordered = sorted(wanted, key=lambda p: (-p.requests.gpu, -p.requests.cpu, -p.requests.memory, p.name))
    names = sorted(rooms)
    placed_all = True
    for pod in ordered:
        shape = shape_of(pod, interned)
        request = shape.request
        for name in names:
            room = rooms[name]
            if where is not None and room.site != where:
                continue
            if not fit_count(room.free, request):
                continue
            if shape.placement_mismatch(room.labels, room.node.taints) is not None:
                continue
            room.free = _minus(room.free, request)
            break
        else:
            placed_all = False
    return placed_all


def _held(pod: Pod) -> Vector:
    """What a pod holds of its node: its requests and one of the node's pods."""
    return (pod.requests.cpu, pod.requests.memory, pod.requests.gpu, 1)


def _minus(free: Vector, request: Vector) -> Vector:
    return (free[0] - request[0], free[1] - request[1], free[2] - request[2], free[3] - request[3])


def _plus(free: Vector, request: Vector) -> Vector:
    return (free[0] + request[0], free[1] + request[1], free[2] + request[2], free[3] + request[3])
