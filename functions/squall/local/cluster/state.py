"""The simulated cluster's records and the state every part of it shares.

Models: the objects Squall touches (nodes, Jobs, Deployments, pods, Services, PodDisruptionBudgets)
as API-shaped dicts plus the parsed fields the controllers read, the cluster-wide
resourceVersion (a new one with every change, a deletion too, as in etcd), the event
log, and the queue of things due at a later time (a pod finishing, a deadline, a TTL, a
pod re-created after its back-off).

Leaves out: namespaces as objects, watches, and anything but the one API server the
local runtime talks to.
"""

from __future__ import annotations

import functools
import heapq
import random
import uuid
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from squall.local.cluster.parsing import Selector, Template
from squall.planner.model import Taint
from squall.ports import Clock, KubeObject

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DISRUPTION_TARGET = "DisruptionTarget"
EVICTED_BY_API = "EvictionByEvictionAPI"
DELETED_BY_POD_GC = "DeletionByPodGC"
# What the trainer exits with on SIGTERM (worker_images/tf_trainer/trainer/exits.py).
SIGTERM_EXIT_CODE = 143

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL = frozenset({SUCCEEDED, FAILED})

Key = tuple[str, str]  # (namespace, name)
Shape = tuple[int, int, int, int]  # allocatable cpu, memory, gpu, pods


# ---- public value types ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How the pods of one Squall job behave once their containers start."""

    run_for: timedelta
    exit_code: int = 0
    image_error: bool = False
    evicted_exit_code: int = SIGTERM_EXIT_CODE
    # A checkpoint that often while it runs: a run after one stopped early resumes from it.
    checkpoint_every: timedelta | None = None


@dataclass(frozen=True, slots=True)
class ClusterCall:
    """One call of the Cluster port, as the fake recorded it."""

    method: str
    args: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """Something the cluster did, in the spirit of `kubectl get events`."""

    at: datetime
    kind: str
    namespace: str
    name: str
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class AdvanceSummary:
    scheduled: int = 0
    started: int = 0
    finished: int = 0
    jobs_finished: int = 0


# ---- mutable records -----------------------------------------------------------------


@dataclass(slots=True, eq=False, kw_only=True)
class Stored:
    """An object as the cluster keeps it, and the copy shared lists hand out (lists="shared")."""

    obj: KubeObject
    view: KubeObject | None = None


@dataclass(slots=True, eq=False, kw_only=True)
class StoredNode(Stored):
    name: str
    labels: dict[str, str]
    user_taints: list[dict[str, Any]]
    taints: tuple[Taint, ...]
    cpu: int
    memory: int
    gpu_installed: int
    gpu: int  # allocatable now: 0 until the device plugin reports the GPUs
    free_cpu: int
    free_memory: int
    free_gpu: int
    free_pods: int
    max_pods: int
    ready: bool
    unschedulable: bool
    pods: dict[Key, None] = field(default_factory=dict)
    holding: int = 0  # pods bound here that still hold their requests
    empty_shape: Shape | None = None  # where the node sits in the index of empty nodes


@dataclass(slots=True, eq=False, kw_only=True)
class Owner(Stored):
    """What owns pods and makes them from a template: a Job, or a Deployment (its ReplicaSet)."""

    key: Key
    job_id: str | None
    managed: bool
    template: Template
    pod_labels: dict[str, str]
    pod_spec: dict[str, Any]
    pods: dict[Key, None] = field(default_factory=dict)
    deleted: bool = False


@dataclass(slots=True, eq=False, kw_only=True)
class StoredJob(Owner):
    backoff_limit: int
    rules: list[dict[str, Any]]
    suspended: bool
    started_at: datetime | None  # status.startTime: unset while suspended, reset on every resume
    deadline_seconds: int | None
    deadline: datetime | None  # counted from started_at
    ttl: timedelta | None
    active: StoredPod | None = None
    failed: int = 0
    succeeded: int = 0
    conditions: list[dict[str, Any]] = field(default_factory=list)
    finished: str | None = None  # "Complete" or "Failed"
    completed_at: datetime | None = None
    replacement_due: datetime | None = None


@dataclass(slots=True, eq=False, kw_only=True)
class StoredDeployment(Owner):
    """An apps/v1 Deployment with its one ReplicaSet (the simulator never rolls a template out)."""

    model_service: str | None
    replicas: int
    progress_deadline: timedelta
    replica_set: str  # <name>-<pod-template-hash>
    replica_set_uid: str
    conditions: list[dict[str, Any]] = field(default_factory=list)
    progress_at: datetime | None = None  # the Progressing condition's lastUpdateTime


@dataclass(slots=True, eq=False, kw_only=True)
class StoredPod(Stored):
    key: Key
    labels: dict[str, str]
    owner: Owner
    seq: int
    phase: str = PENDING
    node: StoredNode | None = None
    holds_resources: bool = False
    behaviour: Behaviour | None = None
    ends_at: datetime | None = None
    image_blocked: bool = False
    deleted: bool = False
    ready: bool = False  # the Ready condition: what a PodDisruptionBudget counts as healthy
    # restartPolicy Always (a Deployment's pods): a container that exits is started again.
    restart_always: bool = False
    probed: bool = False  # a container has a readinessProbe
    restarts: int = 0
    restart_due: datetime | None = None


@dataclass(frozen=True, slots=True)
class Pdb:
    """A PodDisruptionBudget: a whole number, or a percentage of the covered pods ("50%")."""

    namespace: str
    selector: Selector
    max_unavailable: int | str | None
    min_available: int | str | None
    name: str | None = None  # a budget created from a manifest; None for add_pdb's
    # unhealthyPodEvictionPolicy AlwaysAllow: a pod that is not Ready may always go.
    always_allow_unhealthy: bool = False


HeapEntry = tuple[datetime, int, str, "StoredPod | Owner"]


_K = TypeVar("_K")
_V = TypeVar("_V")


class Versioned(dict[_K, _V]):
    """A dict that counts the times an entry was added, replaced or removed.

    Only `[]=` and `del` count: the cluster's object stores change by those alone.
    """

    version = 0

    def __setitem__(self, key: _K, value: _V) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: _K) -> None:
        self.version += 1
        super().__delitem__(key)


class ClusterState:
    """The objects, their indexes by Squall job id, and the clock, version and event log."""

    def __init__(self, *, clock: Clock, seed: int, event_limit: int) -> None:
        self.clock = clock
        self.rng = random.Random(seed)
        self.events: deque[ClusterEvent] = deque(maxlen=event_limit)
        # Versioned: with `kind_version`, whether a list of the kind can be handed out again.
        self.nodes: Versioned[str, StoredNode] = Versioned()
        self.jobs: Versioned[Key, StoredJob] = Versioned()
        self.services: dict[Key, KubeObject] = {}
        self.pods: Versioned[Key, StoredPod] = Versioned()
        self.deployments: Versioned[Key, StoredDeployment] = Versioned()
        self.deployments_by_service: dict[str, dict[Key, None]] = {}
        self.pdb_objects: dict[Key, KubeObject] = {}
        self._stores: dict[str, Versioned[Any, Any]] = {
            "Job": self.jobs,
            "Pod": self.pods,
            "Deployment": self.deployments,
        }
        self.jobs_by_id: dict[str, dict[Key, None]] = {}
        self.services_by_id: dict[str, dict[Key, None]] = {}
        self.pods_by_id: dict[str, dict[Key, None]] = {}
        self.pods_by_service: dict[str, dict[Key, None]] = {}  # by MODEL_SERVICE_LABEL
        self.pdbs: list[Pdb] = []
        self.pending: dict[Key, StoredPod] = {}  # Pending and not bound to a node
        self.to_start: dict[Key, StoredPod] = {}  # bound, containers not started yet
        self.heap: list[HeapEntry] = []
        self.phases: Counter[str] = Counter()
        self.priorities: set[int] = set()
        self.jobs_created = 0
        self.resource_version = 0
        self.touched: Counter[str | None] = Counter()  # changes to stored objects, by their kind
        self.seq = 0
        # The scheduler only runs a pass when something could have changed its answer.
        self.schedule_dirty = False

    def now(self) -> datetime:
        now = self.clock.now()
        if now.utcoffset() is None:
            raise ValueError("the clock must return timezone-aware datetimes")
        return now

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def next_resource_version(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def touch(self, stored: Stored) -> None:
        """A change to a stored object: a new resourceVersion, and its shared view made anew."""
        obj = stored.obj
        obj["metadata"]["resourceVersion"] = self.next_resource_version()
        stored.view = None
        self.touched[obj.get("kind")] += 1

    def kind_version(self, kind: str) -> tuple[int, int, int]:
        """Moves on with every change to an object of `kind` (or of no kind), and every one added or removed."""
        stored = self._stores.get(kind, self.nodes)
        return (stored.version, self.touched[kind], self.touched[None])

    def new_metadata(
        self, *, name: str, namespace: str | None, at: datetime, labels: dict[str, str]
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        metadata.update(
            uid=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            resourceVersion=self.next_resource_version(),
            creationTimestamp=timestamp(at),
            labels=labels,
        )
        return metadata

    def event(
        self, at: datetime, kind: str, namespace: str, name: str, reason: str, message: str = ""
    ) -> None:
        self.events.append(ClusterEvent(at, kind, namespace, name, reason, message))

    def push(self, at: datetime, kind: str, target: StoredPod | Owner) -> None:
        heapq.heappush(self.heap, (at, self.next_seq(), kind, target))

    def set_phase(self, pod: StoredPod, phase: str) -> None:
        self.phases[pod.phase] -= 1
        self.phases[phase] += 1
        pod.phase = phase
        pod.obj["status"]["phase"] = phase

    def write_job_status(self, job: StoredJob) -> None:
        # Zero counts are left out, as the API server's JSON leaves them out.
        status: dict[str, Any] = {}
        if job.started_at is not None:
            status["startTime"] = timestamp(job.started_at)
        active = job.active is not None and job.active.phase not in TERMINAL
        if active:
            status["active"] = 1
        status["ready"] = 1 if active and job.active is not None and job.active.phase == RUNNING else 0
        if job.failed:
            status["failed"] = job.failed
        if job.succeeded:
            status["succeeded"] = job.succeeded
        if job.completed_at is not None:
            status["completionTime"] = timestamp(job.completed_at)
        if job.conditions:
            status["conditions"] = [dict(c) for c in job.conditions]
        status["uncountedTerminatedPods"] = {}
        job.obj["status"] = status
        self.touch(job)


def discard(index: dict[str, dict[Key, None]], job_id: str, key: Key) -> None:
    keys = index.get(job_id)
    if keys is not None:
        keys.pop(key, None)
        if not keys:
            del index[job_id]


@functools.lru_cache(maxsize=256)  # many objects change at one instant: format it once
def timestamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    status: dict[str, Any],
    kind: str,
    value: str,
    at: datetime,
    *,
    reason: str | None = None,
    message: str | None = None,
) -> None:
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    condition: dict[str, Any] = {
        "type": kind,
        "status": value,
        "lastProbeTime": None,
        "lastTransitionTime": timestamp(at),
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    for index, existing in enumerate(conditions):
        if existing.get("type") == kind:
            if existing.get("status") == value:
                condition["lastTransitionTime"] = existing.get("lastTransitionTime")
            conditions[index] = condition
            return
    conditions.append(condition)


def non_negative(name: str, value: timedelta) -> timedelta:
    if value < timedelta(0):
        raise ValueError(f"{name} must not be negative")
    return value
