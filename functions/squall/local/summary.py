"""What a simulated run comes to: the summary object and the invariants behind it.

`squall local run` and `squall simulate` end with one JSON object built here:

- ``jobs``: job records by the state they ended in (trials and rejected specs included).
- ``queueWaitSeconds``: ``p50``/``p90``/``p99``/``max`` of submitted-to-started over the job
  records that started (the record's ``started_at``: when its containers really
  started, not when reconcile noticed; nearest-rank percentiles; sweep parents left out), and
  ``byTeam``: the same four per team, for each team with a record that started.
- ``estimates``: how good admission's first start estimates were (see `estimate_stats`):
  ``judged`` jobs, the share of them that started by their first ``startsBy``
  (``startedByStartsBy``), and the median absolute error in seconds of their first
  ``likelyStart`` (``likelyStartMedianError``); null while no job is judged.
- ``gpuHours``: ``busy`` is the integral over virtual time of the GPUs pods hold,
  ``idle`` of the GPUs allocatable on nodes but held by no pod.
- ``cost``: instance-hours of every launched instance (booting ones included, as EC2
  bills them) times its group's ``pricePerHour``.
- ``costs``: that fleet cost split (see `cost_stats`): ``jobs``, the sum of the job
  records' ``cost``; ``overhead``, the fleet's cost less that sum (what no job held:
  booting, idle and draining nodes, the unheld part of partly used ones); ``fleet``, the
  ``cost`` above; ``byTeam``, each team's jobs' dollars. Where the run's cost ledger was
  read (a simulation's), ``overheadByTeam`` (team -> the overhead it caused) and
  ``overheadUnattributed``: ``overhead`` split in the proportions the ledger put down to
  each team (core/costs.py attribute_overhead), so the two add up to ``overhead``.
- ``peakNodes``: region -> the most nodes that region had at once.
- ``clusters``: cluster -> ``peakNodes`` (the most nodes it had at once) and
  ``peakGpusBusy`` (the most GPUs its pods held at once).
- ``scaleUps``, ``fallbacks``, ``scaleDowns``: totals of the scale function's metrics.
- ``gangsReleased``: GangReleased events on the job records (a gang bound part way in a
  region that could not take the rest, deleted to start over).
- ``drains``, ``hooksCompleted``: from the simulated fleet's lifecycle hooks.
- ``invariants``: see `invariants`; every one must be zero.

The Recorder samples the simulation after every step; the state is constant between
steps (nothing changes unless the clock is moved and the runtime stepped), so
integrating the sample taken at one step over the time to the next is exact.

Each cluster is observed on its own (`ObservedCluster`, one per configured cluster); a
`PlacementWatch` shared by them notices a job whose objects are created in one cluster
while another still holds some (the ``jobsInTwoClusters`` invariant).

`job_rows` and `write_jobs_csv` are the per-job report (`--jobs-out FILE.csv`): one
row per job record, sweep parents included (gpus and replicas 0: their GPUs are their
trials', each of which has its own row), so the rows' gpus add up to what ran. Beside
the times, each row has the job's first start estimates (``starts_by_s``,
``likely_start_s``, seconds from the run's start) and its ``cost`` in dollars, empty
when the record has none.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
import os
import statistics
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from squall.conventions import JOB_ID_LABEL
from squall.core.costs import GroupOverhead
from squall.core.jobs import Job, JobEvent, Reason, is_terminal
from squall.core.telemetry import Metric, RecordingMetrics
from squall.local.cluster import SimulatedCluster
from squall.local.fleet import LocalFleet
from squall.local.lambda_events import InvocationKilled
from squall.planner import NodeGroup
from squall.ports import Clock, KubeObject

# Cluster port methods that change something: where a function can die half way.
MUTATING_CALLS = ("create", "delete_job_objects", "patch_node", "evict")


# ---- the cluster, watched ------------------------------------------------------------


@dataclass(frozen=True)
class ObjectChange:
    """A Kubernetes Job that Squall created, or every object of a job that Squall deleted."""

    at: datetime
    kind: str  # "created" | "deleted"
    namespace: str
    job_id: str | None
    name: str = ""  # the Job's name, for "created"


@dataclass
class PlacementWatch:
    """The observed clusters of one run, and the jobs whose objects two of them held at once.

    A job's objects are its Kubernetes Jobs and its Services. Checked when one of them is
    created, against the other clusters' objects at that moment: a look per creation and
    cluster, nothing per event.
    """

    clusters: list[ObservedCluster] = field(default_factory=list)
    jobs_in_two_clusters: set[str] = field(default_factory=set)

    def created(self, cluster: ObservedCluster, job_id: str) -> None:
        if job_id in self.jobs_in_two_clusters:
            return
        if any(other is not cluster and other.holds_objects(job_id) for other in self.clusters):
            self.jobs_in_two_clusters.add(job_id)


class ObservedCluster(SimulatedCluster):
    """SimulatedCluster that logs the Jobs Squall creates and deletes, and can kill a caller.

    It changes no behaviour: every call goes to the simulated cluster as it is. The
    log is what `duplicate_kubernetes_jobs` reads; `kill_at` arms the fault that
    kills the function making a given call; `watch`, shared by a run's clusters, is
    told of every Job created.
    """

    def __init__(self, *, clock: Clock, watch: PlacementWatch | None = None, **kwargs: Any) -> None:
        super().__init__(clock=clock, **kwargs)
        self._observed_clock = clock
        self.changes: list[ObjectChange] = []
        self._kills: dict[str, int] = {}  # method -> calls to let through before the kill
        self.watch = watch if watch is not None else PlacementWatch()
        self.watch.clusters.append(self)

    def kill_at(self, method: str, *, after: int = 0) -> None:
        """The invocation making the (after+1)-th `method` call from now dies at that call."""
        if method not in MUTATING_CALLS:
            raise ValueError(f"{method!r}: a function can be killed at {', '.join(MUTATING_CALLS)}")
        self._kills[method] = after

    def _maybe_kill(self, method: str) -> None:
        left = self._kills.get(method)
        if left is None:
            return
        if left > 0:
            self._kills[method] = left - 1
            return
        del self._kills[method]
        raise InvocationKilled(f"killed at {method}")

    def holds_objects(self, job_id: str) -> bool:
        """Whether a Kubernetes Job or a Service of Squall job `job_id` exists here now; not a port call."""
        return self.holds_job(job_id) or bool(self._state.services_by_id.get(job_id))

    def create(self, manifest: KubeObject) -> bool:
        self._maybe_kill("create")
        created = super().create(manifest)
        if created and manifest.get("kind") == "Service":
            job_id = ((manifest.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL)
            if job_id is not None:
                self.watch.created(self, job_id)
        if created and manifest.get("kind") == "Job":
            metadata = manifest.get("metadata") or {}
            job_id = (metadata.get("labels") or {}).get(JOB_ID_LABEL)
            self.changes.append(
                ObjectChange(
                    at=self._observed_clock.now(),
                    kind="created",
                    namespace=str(metadata.get("namespace")),
                    job_id=job_id,
                    name=str(metadata.get("name")),
                )
            )
            if job_id is not None:
                self.watch.created(self, job_id)
        return created

    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        self._maybe_kill("delete_job_objects")
        deleted = super().delete_job_objects(namespace=namespace, job_id=job_id)
        self.changes.append(
            ObjectChange(at=self._observed_clock.now(), kind="deleted", namespace=namespace, job_id=job_id)
        )
        return deleted

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        self._maybe_kill("patch_node")
        return super().patch_node(name, patch)

    def patch_job(self, *, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        self._maybe_kill("patch_job")
        return super().patch_job(namespace=namespace, name=name, patch=patch)

    def evict(self, *, namespace: str, name: str) -> bool:
        self._maybe_kill("evict")
        return super().evict(namespace=namespace, name=name)


# ---- the fleet, read -------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    instance_id: str
    group: str  # the Auto Scaling group's name
    region: str
    node: str | None  # set once it joined the cluster
    launched: bool  # False: beyond the region's capacity, never runs
    first_seen: datetime
    cluster: str = ""  # the cluster its node joins


def instances(fleet: LocalFleet) -> list[Instance]:
    """Every instance the simulated fleet tracks (the one place that reads its bookkeeping)."""
    return [
        Instance(
            instance_id=t.instance_id,
            group=t.group,
            region=t.region,
            node=t.node,
            launched=t.launched,
            first_seen=t.first_seen,
            cluster=fleet.cluster_of(t.cluster).name,
        )
        for t in fleet.tracked.values()
    ]


def hook_stats(fleet: LocalFleet | None) -> dict[str, int]:
    """drains, hooksCompleted, hooksLeftOpen from the fleet's lifecycle hooks (zeros until it has them)."""
    stats = getattr(fleet, "hook_stats", None)
    found = stats() if callable(stats) else {}
    return {key: int(found.get(key, 0)) for key in ("drains", "hooksCompleted", "hooksLeftOpen")}


# ---- sampling ------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Integrates GPU use and cost over virtual time, and remembers peaks and faults."""

    clock: Clock
    cluster: SimulatedCluster  # the first (or only) cluster
    fleet: LocalFleet | None
    groups: Sequence[NodeGroup]
    # every cluster by name, in configuration order (empty: `cluster` is the only one)
    clusters: Mapping[str, SimulatedCluster] = field(default_factory=dict)
    gpu_busy_seconds: float = 0.0
    gpu_idle_seconds: float = 0.0
    cost: float = 0.0
    peak_nodes: dict[str, int] = field(default_factory=dict)
    # cluster -> the most nodes it had at once, and the most GPUs its pods held at once
    peak_cluster_nodes: dict[str, int] = field(default_factory=dict)
    peak_cluster_gpus_busy: dict[str, int] = field(default_factory=dict)
    reclaimed_nodes: set[str] = field(default_factory=set)  # taken by a fault, not by Squall
    _last: datetime | None = None
    _gpus_busy: int = 0
    _gpus_idle: int = 0
    _price_per_second: float = 0.0
    _fleet_revision: int = -1

    def __post_init__(self) -> None:
        self._prices = {
            (g.region, g.asg_name or g.name): (g.price_per_hour or 0.0) / 3600 for g in self.groups
        }
        self.peak_nodes = {region: 0 for region in sorted({g.region for g in self.groups})}
        if not self.clusters:
            self.clusters = {self.cluster.name: self.cluster}
        self._clusters = list(self.clusters.items())
        self.peak_cluster_nodes = dict.fromkeys(self.clusters, 0)
        self.peak_cluster_gpus_busy = dict.fromkeys(self.clusters, 0)

    def observe(self) -> None:
        """Account for the time since the last sample, then sample the state as it is now."""
        now = self.clock.now()
        if self._last is not None and now > self._last:
            seconds = (now - self._last).total_seconds()
            self.gpu_busy_seconds += self._gpus_busy * seconds
            self.gpu_idle_seconds += self._gpus_idle * seconds
            self.cost += self._price_per_second * seconds
        self._last = now
        allocatable = in_use = 0
        for name, cluster in self._clusters:
            has, held = cluster.gpus()
            allocatable += has
            in_use += held
            if held > self.peak_cluster_gpus_busy[name]:
                self.peak_cluster_gpus_busy[name] = held
        self._gpus_busy, self._gpus_idle = in_use, max(0, allocatable - in_use)
        if self.fleet is None:
            return
        if self.fleet.revision == self._fleet_revision:
            return  # no instance came or went: the same price and nodes as last time
        self._fleet_revision = self.fleet.revision
        rate = 0.0
        nodes: Counter[str] = Counter()
        cluster_nodes: Counter[str] = Counter()
        # Read the fleet's bookkeeping directly: this runs after every step of a replay.
        for tracked in self.fleet.tracked.values():
            if tracked.launched:
                rate += self._prices.get((tracked.region, tracked.group), 0.0)
            if tracked.node is not None:
                nodes[tracked.region] += 1
                cluster_nodes[tracked.cluster] += 1
        self._price_per_second = rate
        for region, count in nodes.items():
            if count > self.peak_nodes.get(region, 0):
                self.peak_nodes[region] = count
        for named, count in cluster_nodes.items():
            name = self.fleet.cluster_of(named).name  # a group naming none joins the default cluster
            if count > self.peak_cluster_nodes.get(name, 0):
                self.peak_cluster_nodes[name] = count

    def cluster_gpus(self) -> tuple[int, int]:
        """(allocatable, in use) over every cluster's nodes."""
        allocatable = in_use = 0
        for _, cluster in self._clusters:
            has, held = cluster.gpus()
            allocatable += has
            in_use += held
        return allocatable, in_use

    def cluster_peaks(self) -> dict[str, dict[str, int]]:
        """cluster -> its peakNodes and peakGpusBusy, in configuration order."""
        return {
            name: {
                "peakNodes": self.peak_cluster_nodes[name],
                "peakGpusBusy": self.peak_cluster_gpus_busy[name],
            }
            for name in self.clusters
        }


# ---- the summary ---------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (the smallest value with at least `fraction` of values at or below)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def queue_waits(jobs: Iterable[Job]) -> list[float]:
    return [
        (job.started_at - job.submitted_at).total_seconds()
        for job in jobs
        if job.started_at is not None and not job.is_sweep
    ]


def wait_stats(waits: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99 and max of queue waits, in seconds to a tenth."""
    return {
        "p50": round(percentile(waits, 0.5), 1),
        "p90": round(percentile(waits, 0.9), 1),
        "p99": round(percentile(waits, 0.99), 1),
        "max": round(max(waits, default=0.0), 1),
    }


def queue_waits_by_team(jobs: Iterable[Job]) -> dict[str, dict[str, float]]:
    """team -> wait_stats of its records that started; a team none of whose jobs started is left out."""
    by_team: dict[str, list[Job]] = {}
    for job in jobs:
        by_team.setdefault(job.team, []).append(job)
    return {
        team: wait_stats(waits)
        for team, records in sorted(by_team.items())
        if (waits := queue_waits(records))
    }


@dataclass(frozen=True)
class Estimate:
    """A started job's first estimates, beside when it really started."""

    job_id: str
    started: datetime
    starts_by: datetime
    likely_start: datetime | None


def judged_estimates(jobs: Iterable[Job]) -> list[Estimate]:
    """The first estimates that can be held against their job's start, in submission order.

    A job is judged when it started, had a first ``startsBy``, and no job of higher
    priority was submitted after it and started before it: such an arrival is what
    ``startsBy`` does not promise to beat. Jobs of equal or lower priority that start
    first (backfilled into room the job could not use yet) do not excuse it. Read in
    one pass from the latest submission back, keeping the earliest start seen per
    priority, so a replay of thousands of jobs costs no pairwise comparison.
    """
    started = sorted(
        (
            (job.submitted_at, job.started_at, _job_priority(job), job)
            for job in jobs
            if job.started_at is not None and not job.is_sweep
        ),
        key=lambda entry: entry[0],
        reverse=True,
    )
    earliest: dict[int, datetime] = {}  # priority -> the earliest start of a job submitted later
    judged: list[Estimate] = []
    # Jobs submitted at the same instant are not "after" one another: judge them all, then count them.
    for _, group in itertools.groupby(started, key=lambda entry: entry[0]):
        same = list(group)
        for _, at, level, job in same:
            overtaken = any(first < at for p, first in earliest.items() if p > level)
            if job.first_starts_by is not None and not overtaken:
                judged.append(Estimate(job.id, at, job.first_starts_by, job.first_likely_start))
        for _, at, level, _ in same:
            if level not in earliest or at < earliest[level]:
                earliest[level] = at
    judged.reverse()
    return judged


def estimate_stats(jobs: Iterable[Job]) -> dict[str, float | int | None]:
    """judged, startedByStartsBy (a share, 0..1) and likelyStartMedianError (seconds) over `judged_estimates`."""
    judged = judged_estimates(jobs)
    on_time = sum(1 for e in judged if e.started <= e.starts_by)
    errors = [abs((e.started - e.likely_start).total_seconds()) for e in judged if e.likely_start is not None]
    return {
        "startedByStartsBy": round(on_time / len(judged), 4) if judged else None,
        "judged": len(judged),
        "likelyStartMedianError": round(statistics.median(errors), 1) if errors else None,
    }


def cost_stats(
    jobs: Iterable[Job], *, fleet: float, overhead: Sequence[GroupOverhead] | None = None
) -> dict[str, Any]:
    """jobs, overhead, fleet and byTeam in dollars (to the cent); sweep parents left out, their trials counted.

    With the ledger's `overhead` rows, also overheadByTeam and overheadUnattributed (overhead_split).
    """
    by_team: dict[str, float] = {}
    for job in jobs:
        if job.cost is not None and not job.is_sweep:
            by_team[job.team] = by_team.get(job.team, 0.0) + job.cost
    held, total = round(sum(by_team.values(), 0.0), 2), round(fleet, 2)
    stats: dict[str, Any] = {
        "jobs": held,
        "overhead": round(total - held, 2),  # of the rounded two, so that the three add up to the cent
        "fleet": total,
        "byTeam": {team: round(dollars, 2) for team, dollars in sorted(by_team.items())},
    }
    if overhead is not None:
        stats |= overhead_split(stats["overhead"], overhead)
    return stats


def overhead_split(overhead: float, rows: Sequence[GroupOverhead]) -> dict[str, Any]:
    """overheadByTeam and overheadUnattributed: `overhead` (the fleet's cost less the jobs', as
    the recorder integrated it) in the proportions the ledger's rows put down to each team (the
    meter counts at its checks, so its own sum differs a little); to the cent, adding up."""
    counted = sum(row.dollars for row in rows)
    caused: dict[str, float] = {}
    for row in rows:
        if row.team is not None:
            caused[row.team] = caused.get(row.team, 0.0) + row.dollars
    if counted <= 0 or overhead <= 0:
        return {"overheadByTeam": {}, "overheadUnattributed": overhead}
    by_team = {team: round(overhead * dollars / counted, 2) for team, dollars in sorted(caused.items())}
    return {
        "overheadByTeam": by_team,
        "overheadUnattributed": round(overhead - sum(by_team.values()), 2),
    }


def _job_priority(job: Job) -> int:
    """The priority its spec gives it (the record's own field when the spec has none)."""
    found = _priority(job.spec)
    return job.priority if found is None else found


def gangs_released(jobs: Iterable[Job], *, events: Callable[[str], Sequence[JobEvent]]) -> int:
    """GangReleased events over the job records (`events`: a job id's history, as the store keeps it).

    Only a job of more than one replica can be bound part way, so only those
    histories are read: one read per distributed job, none for the rest.
    """
    released = 0
    for job in jobs:
        if job.replicas > 1:
            released += sum(1 for e in events(job.id) if _reason_of(e.reason) == Reason.GANG_RELEASED)
    return released


def _reason_of(reason: str) -> str:
    """The code of a reason, without its detail (``GangReleased:us-west-2`` -> ``GangReleased``)."""
    return reason.split(":", 1)[0]


def lost_jobs(expected_ids: Iterable[str], jobs_by_id: Mapping[str, Job]) -> list[str]:
    """Valid submissions that have no record, or whose record never reached a final state."""
    return sorted(
        job_id
        for job_id in set(expected_ids)
        if (job := jobs_by_id.get(job_id)) is None or not is_terminal(job.status)
    )


def duplicate_kubernetes_jobs(changes: Sequence[ObjectChange], jobs_by_id: Mapping[str, Job]) -> int:
    """Kubernetes Jobs that Squall made once too often.

    Names are deterministic (``<job>-<type>-<index>``), so the API refuses a second
    object under a live name; a replica runs twice only when Squall makes it again
    after the first object went without Squall deleting it. Counted, in the order
    Squall's calls happened:

    - a Job created under a name Squall created before and has not deleted since
      (its object vanished another way, e.g. the TTL, and the replica ran again);
    - a Job created for a job id that has no record (made for no job);
    - a Job created after its job's record reached a final state (a finished job run again).

    Deleting a job's objects and creating them afresh (a gang released, objects
    re-created after they went missing) starts a new run and counts nothing.
    """
    duplicates = 0
    made: set[tuple[str, str]] = set()  # (namespace, name) created and not deleted by Squall since
    by_job: dict[tuple[str, str | None], set[str]] = {}  # (namespace, job id) -> those names
    for change in changes:
        owner = (change.namespace, change.job_id)
        if change.kind == "deleted":
            for name in by_job.pop(owner, set()):
                made.discard((change.namespace, name))
            continue
        key = (change.namespace, change.name)
        record = jobs_by_id.get(change.job_id or "")
        if (
            key in made
            or record is None
            or (record.finished_at is not None and change.at > record.finished_at)
        ):
            duplicates += 1
        made.add(key)
        by_job.setdefault(owner, set()).add(change.name)
    return duplicates


@dataclass(frozen=True)
class Invariants:
    lost_jobs: list[str]
    duplicate_kubernetes_jobs: int
    busy_nodes_terminated: list[str]
    hooks_left_open: int
    # jobs whose objects were created in one cluster while another still held some
    jobs_in_two_clusters: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {
            "lostJobs": len(self.lost_jobs),
            "duplicateKubernetesJobs": self.duplicate_kubernetes_jobs,
            "busyNodesTerminated": len(self.busy_nodes_terminated),
            "hooksLeftOpen": self.hooks_left_open,
            "jobsInTwoClusters": len(self.jobs_in_two_clusters),
        }

    @property
    def hold(self) -> bool:
        return not any(self.as_dict().values())


def invariants(
    *,
    jobs: Sequence[Job],
    expected_ids: Iterable[str],
    cluster: ObservedCluster | Sequence[ObservedCluster],
    fleet: LocalFleet | None,
    recorder: Recorder,
) -> Invariants:
    """`cluster`: the run's observed cluster, or every one of them."""
    by_id = {job.id: job for job in jobs}
    terminated_busy = list(fleet.terminated_busy) if fleet is not None else []
    observed = [cluster] if isinstance(cluster, ObservedCluster) else list(cluster)
    in_two: set[str] = set()
    for each in observed:
        in_two |= each.watch.jobs_in_two_clusters
    return Invariants(
        lost_jobs=lost_jobs(expected_ids, by_id),
        # Names are deterministic per cluster: each API refuses only its own live names.
        duplicate_kubernetes_jobs=sum(duplicate_kubernetes_jobs(c.changes, by_id) for c in observed),
        jobs_in_two_clusters=sorted(in_two),
        # A node a fault took (spot reclaim, a failed host) goes busy by its nature;
        # only Squall's own scale-down must never take one.
        busy_nodes_terminated=[n for n in terminated_busy if n not in recorder.reclaimed_nodes],
        hooks_left_open=hook_stats(fleet)["hooksLeftOpen"],
    )


def build_summary(
    *,
    jobs: Sequence[Job],
    metrics: RecordingMetrics,
    recorder: Recorder,
    fleet: LocalFleet | None,
    checks: Invariants,
    gangs_released: int = 0,
    overhead: Sequence[GroupOverhead] | None = None,  # the run's cost ledger's rows (cost_stats)
) -> dict[str, Any]:
    waits = queue_waits(jobs)
    hooks = hook_stats(fleet)
    return {
        "jobs": dict(sorted(Counter(job.status.value for job in jobs).items())),
        "queueWaitSeconds": wait_stats(waits) | {"byTeam": queue_waits_by_team(jobs)},
        "estimates": estimate_stats(jobs),
        "gpuHours": {
            "busy": round(recorder.gpu_busy_seconds / 3600, 2),
            "idle": round(recorder.gpu_idle_seconds / 3600, 2),
        },
        "cost": round(recorder.cost, 2),
        "costs": cost_stats(jobs, fleet=recorder.cost, overhead=overhead),
        "peakNodes": dict(sorted(recorder.peak_nodes.items())),
        "clusters": recorder.cluster_peaks(),
        "scaleUps": int(metrics.total(Metric.SCALE_UPS)),
        "fallbacks": int(metrics.total(Metric.FALLBACKS)),
        "scaleDowns": int(metrics.total(Metric.SCALE_DOWNS)),
        "gangsReleased": gangs_released,
        "drains": hooks["drains"],
        "hooksCompleted": hooks["hooksCompleted"],
        "invariants": checks.as_dict(),
    }


# ---- the jobs, one row each ------------------------------------------------------------------

JOBS_CSV_COLUMNS = (
    "id", "team", "priority", "gpus", "replicas", "submitted_s", "started_s", "finished_s", "state", "reason",
    "cluster", "starts_by_s", "likely_start_s", "cost",
)  # fmt: skip


@dataclass(frozen=True)
class JobRow:
    """One job record as `--jobs-out` writes it; times in seconds from the run's start."""

    id: str
    team: str
    priority: int | None  # None: the record holds no valid spec (a rejected submission)
    gpus: int  # the job's total, every replica together; 0 for a sweep parent
    replicas: int
    submitted_s: float
    started_s: float | None  # when its run began (its containers started), however short the run
    finished_s: float | None  # when it reached a final state (a run: when its Job completed or failed)
    state: str
    reason: str
    cluster: str = ""  # where admission placed it (the record's cluster); empty until it is placed
    # its first estimates after submission (seconds from the run's start); None: it had none
    starts_by_s: float | None = None
    likely_start_s: float | None = None
    cost: float | None = None  # dollars, as its record has it; None: not counted (yet)

    def cells(self) -> list[str]:
        return [
            self.id,
            self.team,
            "" if self.priority is None else str(self.priority),
            str(self.gpus),
            str(self.replicas),
            _seconds(self.submitted_s),
            "" if self.started_s is None else _seconds(self.started_s),
            "" if self.finished_s is None else _seconds(self.finished_s),
            self.state,
            self.reason,
            self.cluster,
            "" if self.starts_by_s is None else _seconds(self.starts_by_s),
            "" if self.likely_start_s is None else _seconds(self.likely_start_s),
            "" if self.cost is None else _dollars(self.cost),
        ]


def job_rows(jobs: Iterable[Job], *, start: datetime) -> list[JobRow]:
    """A row per job record, in submission order (then by id)."""

    def since(at: datetime | None) -> float | None:
        return None if at is None else (at - start).total_seconds()

    rows = [
        JobRow(
            id=job.id,
            team=job.team,
            priority=_priority(job.spec),
            gpus=job.gpus,
            replicas=job.replicas,
            submitted_s=(job.submitted_at - start).total_seconds(),
            started_s=since(job.started_at),
            finished_s=since(job.finished_at) if is_terminal(job.status) else None,
            state=job.status.value,
            reason=job.reason,
            cluster=job.cluster or "",
            starts_by_s=since(job.first_starts_by),
            likely_start_s=since(job.first_likely_start),
            cost=job.cost,
        )
        for job in jobs
    ]
    return sorted(rows, key=lambda r: (r.submitted_s, r.id))


def _priority(spec: Mapping[str, Any]) -> int | None:
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds(value: float) -> str:
    """Seconds as few digits as say them exactly to the millisecond: 120, 0.5, 3600.25."""
    rounded = round(value, 3)
    return str(int(rounded)) if rounded.is_integer() else f"{rounded:.3f}".rstrip("0")


def _dollars(value: float) -> str:
    """Dollars to a hundredth of a cent, without trailing zeros: 12.5, 0.0042, 310."""
    rounded = round(value, 4)
    return str(int(rounded)) if rounded.is_integer() else f"{rounded:.4f}".rstrip("0")


class JobsOutError(Exception):
    """The jobs file cannot be written where it was asked for."""


def check_jobs_out(path: str | Path) -> Path:
    """The path `--jobs-out` names, once a file can be made beside it; JobsOutError says why not.

    Checked before a run, so that an hours-long replay never ends unable to report.
    """
    file = Path(path)
    if file.is_dir():
        raise JobsOutError(f"{file} is a directory")
    folder = file.parent
    if not folder.is_dir():
        raise JobsOutError(f"{folder} is not an existing directory")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{file.name}.", suffix=".check"):
            pass
    except OSError as exc:
        raise JobsOutError(f"cannot write in {folder}: {exc.strerror or exc}") from exc
    return file


def write_jobs_csv(path: str | Path, rows: Iterable[JobRow]) -> None:
    """Write the rows under JOBS_CSV_COLUMNS atomically: a reader sees the old file or the whole new one."""
    file = Path(path)
    if file.is_dir():
        raise JobsOutError(f"{file} is a directory")
    try:
        descriptor, temporary = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
    except OSError as exc:
        raise JobsOutError(f"cannot write in {file.parent}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(descriptor, "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out, lineterminator="\n")  # lines as Unix tools read them
            writer.writerow(JOBS_CSV_COLUMNS)
            writer.writerows(row.cells() for row in rows)
            out.flush()
            os.fsync(out.fileno())
        # mkstemp makes the file owner-only; a report is as readable as other files written here.
        os.chmod(temporary, 0o644)
        os.replace(temporary, file)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise JobsOutError(f"cannot write {file}: {exc.strerror or exc}") from exc
        raise
