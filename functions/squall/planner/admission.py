"""Admission: which queued jobs run now, and in what order the others wait. Pure.

Squall creates every replica Job suspended, so the queue is the cluster's suspended
Jobs (`squall.planner.kube.parse_replica_job` reads them). The scale check, the single
writer, asks `admit` each time which of them to let run:

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
  for what it will admit next.

docs/design.md ("Admission") says which guarantees hold.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from squall.planner.demand import Gang, PodShape, shape_of
from squall.planner.fit import blocking_taints, fit_count, resource_shortfall
from squall.planner.inventory import build_inventory
from squall.planner.model import (
    REGION_LABEL,
    GroupHealth,
    Node,
    NodeGroup,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Policy,
    require_aware,
)
from squall.planner.packing import Packer, RoomKind
from squall.planner.planning import rooms_on_nodes_up

# The planner is given at most this many queued jobs as demand, head first: beyond
# what every group at its max size could hold nothing more can be bought anyway.
MAX_DEMAND_JOBS = 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamShare:
    """A team's share of the GPUs: at most `quota` admitted at once (None: no limit), by `weight`."""

    quota: int | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.quota is not None and self.quota < 0:
            raise ValueError("a team's GPU quota must not be negative")
        if not self.weight > 0:
            raise ValueError("a team's weight must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaJob:
    """One replica's batch/v1 Job, as admission reads it."""

    name: str
    namespace: str
    job_id: str
    team: str
    priority: int = 0
    submitted_at: datetime | None = None
    requeued: bool = False
    replicas: int = 1  # how many replica Jobs the whole job has
    suspended: bool = False
    started: bool = False  # status.startTime is set: it has run (its scheduling directives are fixed)
    finished: bool = False  # Complete or Failed
    admitted_region: str | None = None
    # The pod its template describes, as a pending pod named after the Job.
    pod: Pod

    def __post_init__(self) -> None:
        require_aware(f"job {self.name} submitted_at", self.submitted_at)

    @property
    def gpus(self) -> int:
        return self.pod.requests.gpu


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedJob:
    """A job all of whose replica Jobs exist and are suspended: it waits for admission."""

    job_id: str
    team: str
    namespace: str
    priority: int
    submitted_at: datetime | None
    requeued: bool
    replicas: tuple[ReplicaJob, ...]

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.replicas)

    def order_key(self) -> tuple[bool, str, str]:
        submitted = self.submitted_at.isoformat() if self.submitted_at is not None else ""
        return (not self.requeued, submitted, self.job_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Admitted:
    """Let the job run in `region`: pin every replica Job there and unsuspend it."""

    job_id: str
    team: str
    namespace: str
    region: str
    gpus: int
    # The replica Jobs still to unsuspend (all of them, or those a half-done admission left).
    jobs: tuple[ReplicaJob, ...]
    resumed: bool = False  # an admission an earlier check began, finished now


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A queued job that stays queued, with its place in the queue and why."""

    job_id: str
    team: str
    priority: int
    gpus: int
    replicas: int
    position: int  # 1-based, in admission order over every team (0: held by its quota)
    team_position: int  # 1-based within its team
    reason: str  # "Queued", or "QuotaExceeded:8/8 GPUs" (held back by the team's quota)
    message: str
    reserved_region: str | None = None  # where it keeps the room it can use now

    @property
    def held_by_quota(self) -> bool:
        return self.reason.startswith("QuotaExceeded")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionPlan:
    admitted: tuple[Admitted, ...] = ()
    waiting: tuple[Waiting, ...] = ()  # admission order, then those held by quota
    # Pods for the planner: those of admitted jobs not created yet (pinned to their
    # region), then the queue's, head first (a higher priority means earlier).
    demand: tuple[Pod, ...] = ()
    # GPUs of admitted, unfinished jobs by team, this check's admissions included.
    in_use: Mapping[str, int] = field(default_factory=dict)
    incomplete: tuple[str, ...] = ()  # jobs whose replica Jobs are not all created yet

    def to_dict(self, *, most: int = 200) -> dict[str, object]:
        """For the decision record and `squall queue`: the first `most` waiting jobs."""
        return {
            "admitted": [
                {"job": a.job_id, "team": a.team, "region": a.region, "gpus": a.gpus} for a in self.admitted
            ],
            "waiting": [
                {
                    "job": w.job_id,
                    "team": w.team,
                    "priority": w.priority,
                    "gpus": w.gpus,
                    "position": w.position,
                    "teamPosition": w.team_position,
                    "reason": w.reason,
                    "message": w.message,
                }
                for w in self.waiting[:most]
            ],
            "waitingTotal": len(self.waiting),
            "inUse": dict(sorted(self.in_use.items())),
        }


def gather(jobs: Iterable[ReplicaJob]) -> tuple[list[QueuedJob], dict[str, list[ReplicaJob]], list[str]]:
    """Replica Jobs by job: the queued jobs, the admitted ones (job id -> replica Jobs), the incomplete."""
    by_job: dict[str, list[ReplicaJob]] = {}
    for job in jobs:
        by_job.setdefault(job.job_id, []).append(job)
    queued: list[QueuedJob] = []
    admitted: dict[str, list[ReplicaJob]] = {}
    incomplete: list[str] = []
    for job_id, replicas in by_job.items():
        replicas.sort(key=lambda r: r.name)
        if not all(r.suspended for r in replicas):
            admitted[job_id] = replicas
        elif any(r.finished for r in replicas):
            continue  # a suspended Job that finished: nothing to admit
        elif len(replicas) < max(r.replicas for r in replicas):
            incomplete.append(job_id)
        else:
            first = replicas[0]
            queued.append(
                QueuedJob(
                    job_id=job_id,
                    team=first.team,
                    namespace=first.namespace,
                    priority=first.priority,
                    submitted_at=first.submitted_at,
                    requeued=first.requeued,
                    replicas=tuple(replicas),
                )
            )
    return queued, admitted, sorted(incomplete)


def admit(
    *,
    jobs: Iterable[ReplicaJob],
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    groups: Sequence[NodeGroup],
    teams: Mapping[str, TeamShare],
    policy: Policy,
    now: datetime,
    health: Mapping[str, GroupHealth] | None = None,
) -> AdmissionPlan:
    """Decide which queued jobs run now (whole, in one region) and where the rest stand."""
    del health  # ready room does not depend on group health; kept for a symmetric call with plan()
    queued, admitted_jobs, incomplete = gather(jobs)
    pods = list(pods)
    inventory = build_inventory(nodes=nodes, pods=pods, groups=groups, policy=policy, now=now)
    in_use: dict[str, int] = {}
    for replicas in admitted_jobs.values():
        for replica in replicas:
            if not replica.suspended and not replica.finished:
                in_use[replica.team] = in_use.get(replica.team, 0) + replica.gpus

    # Admitted jobs: their replicas with no pod yet (the Job controller creates it in a
    # moment) wait like their pending pods; an admission begun earlier is finished.
    with_pods = {(pod.namespace, _owner_name(pod)) for pod in pods if pod.job_id is not None}
    admitted: list[Admitted] = []
    not_created: list[Pod] = []
    for job_id, replicas in sorted(admitted_jobs.items()):
        region = next((r.admitted_region for r in replicas if r.admitted_region), None)
        suspended = tuple(r for r in replicas if r.suspended)
        if suspended and region is not None:
            first = replicas[0]
            admitted.append(
                Admitted(
                    job_id=job_id,
                    team=first.team,
                    namespace=first.namespace,
                    region=region,
                    gpus=sum(r.gpus for r in replicas),
                    jobs=suspended,
                    resumed=True,
                )
            )
        for replica in replicas:
            if replica.finished or (replica.namespace, replica.name) in with_pods:
                continue
            if not replica.suspended or region is not None:
                not_created.append(_pinned(replica.pod, region))

    waiting_before = [pod for pod in inventory.pending if pod.job_id in admitted_jobs or pod.job_id is None]
    interned: dict[tuple[object, ...], PodShape] = {}
    queue_shapes = {job.job_id: _shapes(job.replicas, interned) for job in queued}
    earlier = [*waiting_before, *not_created]
    for pod in earlier:
        shape_of(pod, interned)
    rooms = [room for room in rooms_on_nodes_up(inventory) if room.kind is RoomKind.READY]
    packer = Packer(rooms=rooms, options=[], shapes=list(interned.values()))
    _place_earlier(packer, earlier, interned, job_regions=inventory.job_regions)

    order, held = order_queue(queued, in_use=in_use, teams=teams)
    capacity = _RegionCapacity(groups)
    team_rank: dict[str, int] = {}
    waiting: list[Waiting] = []
    failed: set[tuple[object, ...]] = set()
    demand: list[Pod] = [*not_created]
    demand_gpus = 0
    demand_jobs = 0
    most_gpus = capacity.total_gpus + sum(room.free[2] for room in rooms)
    for position, job in enumerate(order, start=1):
        team_rank[job.team] = team_rank.get(job.team, 0) + 1
        parts = queue_shapes[job.job_id]
        key = tuple(sorted((id(shape), count) for shape, count in parts))
        gang = Gang(job_id=job.job_id, pods_by_shape={shape: [] for shape, _ in parts}, priority=job.priority)
        for replica, (shape, _) in zip(
            job.replicas, _per_replica_shapes(job.replicas, interned), strict=True
        ):
            gang.pods_by_shape[shape].append(replica.pod)
        reason = None if key in failed else packer.place_gang(gang)
        if reason is None and key not in failed:
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
            demand.extend(_pinned(replica.pod, region) for replica in job.replicas)
            team_rank[job.team] -= 1
            continue
        failed.add(key)
        reserved = None
        ever = capacity.could_hold(parts)
        if ever:
            reserved = packer.hold_room(gang)
            if demand_jobs < MAX_DEMAND_JOBS and demand_gpus < most_gpus:
                demand_jobs += 1
                demand_gpus += job.gpus
                demand.extend(
                    dataclasses.replace(replica.pod, priority=MAX_DEMAND_JOBS - demand_jobs)
                    for replica in job.replicas
                )
        waiting.append(
            Waiting(
                job_id=job.job_id,
                team=job.team,
                priority=job.priority,
                gpus=job.gpus,
                replicas=len(job.replicas),
                position=position,
                team_position=team_rank[job.team],
                reason="Queued",
                message=_needs(job)
                + (
                    ""
                    if ever
                    else "; no region can ever hold it: it is larger than the node groups at max size"
                ),
                reserved_region=reserved,
            )
        )
    for job, used in held:
        team_rank[job.team] = team_rank.get(job.team, 0) + 1
        quota = teams[job.team].quota if job.team in teams else None
        waiting.append(
            Waiting(
                job_id=job.job_id,
                team=job.team,
                priority=job.priority,
                gpus=job.gpus,
                replicas=len(job.replicas),
                position=0,
                team_position=team_rank[job.team],
                reason=f"QuotaExceeded:{used}/{quota} GPUs",
                message=f"{used}/{quota} GPUs of {job.team} in use or ahead of it; {_needs(job)}",
            )
        )
    _renumber(waiting)
    return AdmissionPlan(
        admitted=tuple(admitted),
        waiting=tuple(waiting),
        demand=tuple(demand),
        in_use=in_use,
        incomplete=tuple(incomplete),
    )


def order_queue(
    queued: Sequence[QueuedJob], *, in_use: Mapping[str, int], teams: Mapping[str, TeamShare]
) -> tuple[list[QueuedJob], list[tuple[QueuedJob, int]]]:
    """Admission order, and the jobs a quota holds back (with the GPUs in use or ahead of them).

    Priority bands, highest first. Within a band, each team's jobs in their own order
    (re-queued first, then by submission), and the teams interleaved by fair share: the
    next job is the head of the team with the fewest GPUs in use or ordered ahead, per
    unit of weight. A job that would take its team past its quota is held back; the
    team's later, smaller jobs may still fit under it.
    """
    prospective = dict(in_use)
    order: list[QueuedJob] = []
    held: list[tuple[QueuedJob, int]] = []
    bands: dict[int, dict[str, list[QueuedJob]]] = {}
    for job in queued:
        bands.setdefault(job.priority, {}).setdefault(job.team, []).append(job)
    for priority in sorted(bands, reverse=True):
        by_team = bands[priority]
        heap: list[tuple[float, str, int]] = []
        for team, jobs in by_team.items():
            jobs.sort(key=QueuedJob.order_key)
            heap.append((_share(team, prospective, teams), team, 0))
        heapq.heapify(heap)
        while heap:
            _, team, index = heapq.heappop(heap)
            job = by_team[team][index]
            share = teams.get(team)
            used = prospective.get(team, 0)
            if share is not None and share.quota is not None and used + job.gpus > share.quota:
                held.append((job, used))
            else:
                order.append(job)
                prospective[team] = used + job.gpus
            if index + 1 < len(by_team[team]):
                heapq.heappush(heap, (_share(team, prospective, teams), team, index + 1))
    return order, held


def _share(team: str, used: Mapping[str, int], teams: Mapping[str, TeamShare]) -> float:
    share = teams.get(team)
    return used.get(team, 0) / (share.weight if share is not None else 1.0)


def _renumber(waiting: list[Waiting]) -> None:
    """Positions among the jobs still waiting: 1, 2, 3 overall and within each team."""
    overall = 0
    by_team: dict[str, int] = {}
    for index, item in enumerate(waiting):
        team_position = by_team[item.team] = by_team.get(item.team, 0) + 1
        position = 0
        if not item.held_by_quota:
            overall += 1
            position = overall
        waiting[index] = dataclasses.replace(item, position=position, team_position=team_position)


def _needs(job: QueuedJob) -> str:
    if len(job.replicas) > 1:
        return f"needs {job.gpus} GPUs over {len(job.replicas)} replicas in one region"
    return f"needs {job.gpus} GPU{'s' if job.gpus != 1 else ''}"


def _owner_name(pod: Pod) -> str:
    """The Job a pod belongs to: its name without the Job controller's random suffix."""
    return pod.name.rsplit("-", 1)[0] if "-" in pod.name else pod.name


def _pinned(pod: Pod, region: str | None) -> Pod:
    """The pod with its job's region added to its required node affinity."""
    if not region or region == "unknown":
        return pod  # ready room on nodes without a region label: nothing to pin
    requirement = NodeSelectorRequirement(key=REGION_LABEL, operator="In", values=(region,))
    terms = pod.required_affinity or (NodeSelectorTerm(),)
    return dataclasses.replace(
        pod,
        required_affinity=tuple(
            NodeSelectorTerm(match_expressions=(*term.match_expressions, requirement)) for term in terms
        ),
    )


def _shapes(
    replicas: Sequence[ReplicaJob], interned: dict[tuple[object, ...], PodShape]
) -> list[tuple[PodShape, int]]:
    counts: dict[PodShape, int] = {}
    for shape, _ in _per_replica_shapes(replicas, interned):
        counts[shape] = counts.get(shape, 0) + 1
    return list(counts.items())


def _per_replica_shapes(
    replicas: Sequence[ReplicaJob], interned: dict[tuple[object, ...], PodShape]
) -> list[tuple[PodShape, ReplicaJob]]:
    return [(shape_of(replica.pod, interned), replica) for replica in replicas]


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


class _RegionCapacity:
    """What each region's groups could hold at their max sizes: can a gang ever fit?"""

    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self._groups = groups
        self._per_region: dict[tuple[PodShape, str], int] = {}
        self._regions = sorted({g.region for g in groups})
        self.total_gpus = sum(g.max_size * g.allocatable.gpu for g in groups)

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
                if group.region != region:
                    continue
                capacity = group.allocatable.vector()
                taints = blocking_taints(group.taints, ignore_transient=True)
                if shape.placement_mismatch(group.template_labels(), taints) is None and (
                    resource_shortfall(shape.request, capacity) is None
                ):
                    most += group.max_size * fit_count(capacity, shape.request)
            self._per_region[key] = most
        return most
