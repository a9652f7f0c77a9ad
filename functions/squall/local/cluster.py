"""SimulatedCluster: an in-memory Kubernetes cluster for the local runtime.

It implements the `Cluster` port and behaves like Kubernetes wherever Squall's
services, the planner or the reconcile function depend on it, so a demo, an
end-to-end test or a replay of a 10,000-job trace exercises the same code paths as
a real cluster:

- Objects are API-shaped dicts (camelCase, ISO-8601 "Z" timestamps, uid,
  resourceVersion, a new one with every change); creating an existing name changes
  nothing (409), and lists return copies (or, with `lists="shared"`, read-only
  objects shared until they change, as client-go's informer listers do).
- The Job controller runs one pod per Job, applies the Job's podFailurePolicy
  rules in order (as Kubernetes does: the first rule that matches decides),
  counts failures against backoffLimit, re-creates pods after an exponential
  back-off, and fails Jobs on activeDeadlineSeconds; finished Jobs go after
  ttlSecondsAfterFinished.
- The scheduler binds pending pods to nodes where they fit: resources, node
  selectors, required node affinity, taints (the node lifecycle taints for
  not-ready and cordoned nodes included), required pod affinity (a gang in one
  region); among the nodes that fit it packs the most allocated one first.
- Disruptions: a removed node's pods fail with DisruptionTarget
  (DeletionByPodGC); an eviction honours PodDisruptionBudgets, and the evicted
  container exits with the code the job's behaviour says (143, the trainer's
  answer to SIGTERM, by default).

Time only moves through the injected clock: after moving it, call `advance()`;
`next_event_time()` says when something will happen on its own next, so a virtual
clock can jump straight there.

Not modelled: Deployments/DaemonSets, pod anti-affinity and preferred (scoring)
affinities, NoExecute evictions by the taint manager, termination grace periods
(a pod stops at once), namespaces as objects, and Jobs with more than one pod.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import json
import random
import uuid
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from squall.conventions import GPU_RESOURCE, JOB_ID_LABEL, MANAGED_BY_LABEL
from squall.core.errors import NotFoundError, PermanentError
from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes, parse_whole_count
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
_TERMINAL = frozenset({SUCCEEDED, FAILED})
_PORT_METHODS = frozenset(
    {
        "create",
        "delete_job_objects",
        "list_jobs",
        "list_pods",
        "list_nodes",
        "get_node",
        "patch_node",
        "evict",
    }
)
# generateName's alphabet in Kubernetes: no vowels, no look-alike characters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATE_PREFIX = 58
_DEFAULT_MAX_PODS = 110
_DEFAULT_BACKOFF_LIMIT = 6
# Kubernetes re-creates a failed Job's pod after 10 s, doubling up to 6 min.
_BACKOFF_CAP = timedelta(minutes=6)
# With run_for 0 and an Ignore rule a pod could fail and come back forever within
# one instant; Kubernetes would spin too, the simulator just moves on.
_MAX_ROUNDS_PER_ADVANCE = 100
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

Key = tuple[str, str]  # (namespace, name)
_Shape = tuple[int, int, int, int]  # allocatable cpu, memory, gpu, pods


_LIST_MODES = frozenset({"copies", "shared", "checked"})


# ---- public value types ------------------------------------------------------------


class SharedObjectChanged(AssertionError):
    """A shared list object differs from the cluster's own at the same resourceVersion."""

    def __init__(self, metadata: Mapping[str, Any], shared: KubeObject, fresh: KubeObject) -> None:
        changed = sorted(
            key for key in {*shared, *fresh} if shared.get(key) != fresh.get(key)
        )
        super().__init__(
            f"{metadata.get('namespace') or ''}/{metadata.get('name')} at resourceVersion "
            f"{metadata.get('resourceVersion')}: {', '.join(changed)} changed without a new resourceVersion "
            "(or a caller changed a shared list object)"
        )


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How the pods of one Squall job behave once their containers start."""

    run_for: timedelta
    exit_code: int = 0
    image_error: bool = False
    evicted_exit_code: int = SIGTERM_EXIT_CODE


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


# ---- parsed scheduling inputs ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Requirement:
    """One `matchExpressions` entry, of a node selector term or a label selector."""

    key: str
    operator: str
    values: tuple[str, ...]

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        # Gt / Lt: both sides must be integers, else the requirement does not hold.
        if value is None or len(self.values) != 1:
            return False
        try:
            actual, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return actual > bound if self.operator == "Gt" else actual < bound


@dataclass(frozen=True, slots=True)
class _Selector:
    match_labels: tuple[tuple[str, str], ...]
    expressions: tuple[_Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.holds(labels) for r in self.expressions
        )


@dataclass(frozen=True, slots=True)
class _NodeTerm:
    """A node selector term: every label and field requirement must hold."""

    labels: tuple[_Requirement, ...]
    fields: tuple[_Requirement, ...]

    def holds(self, node: _Node) -> bool:
        return all(r.holds(node.labels) for r in self.labels) and all(
            r.holds({"metadata.name": node.name}) for r in self.fields
        )


@dataclass(frozen=True, slots=True)
class _Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class _Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: _Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            # An empty key with Exists tolerates every taint.
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class _AffinityTerm:
    selector: _Selector
    topology_key: str
    namespaces: frozenset[str] | None  # None: every namespace


@dataclass(frozen=True, slots=True)
class _Template:
    """What every pod of one Job shares, parsed once when the Job is created."""

    cpu: int
    memory: int
    gpu: int
    priority: int
    node_selector: tuple[tuple[str, str], ...]
    node_terms: tuple[_NodeTerm, ...]  # any one must hold; none: no constraint
    tolerations: tuple[_Toleration, ...]
    pod_affinity: tuple[_AffinityTerm, ...]
    self_affine: bool  # the pod matches its own affinity terms (may start a gang)
    placement_key: str  # same key, same nodes pass the label/taint filters
    class_key: str  # same key and same pod-affinity domains: same answer from the scheduler


# ---- mutable state -----------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Node:
    name: str
    obj: KubeObject
    labels: dict[str, str]
    user_taints: list[dict[str, Any]]
    taints: tuple[_Taint, ...]
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
    empty_shape: _Shape | None = None  # where the node sits in the index of empty nodes
    view: KubeObject | None = None  # the shared list copy (lists="shared")


@dataclass(slots=True, eq=False)
class _Job:
    key: Key
    obj: KubeObject
    job_id: str | None
    managed: bool
    template: _Template
    pod_labels: dict[str, str]
    pod_spec: dict[str, Any]
    backoff_limit: int
    rules: list[dict[str, Any]]
    started_at: datetime
    deadline: datetime | None
    ttl: timedelta | None
    pods: dict[Key, None] = field(default_factory=dict)
    active: _Pod | None = None
    failed: int = 0
    succeeded: int = 0
    conditions: list[dict[str, Any]] = field(default_factory=list)
    finished: str | None = None  # "Complete" or "Failed"
    completed_at: datetime | None = None
    replacement_due: datetime | None = None
    deleted: bool = False
    view: KubeObject | None = None


@dataclass(slots=True, eq=False)
class _Pod:
    key: Key
    obj: KubeObject
    labels: dict[str, str]
    job: _Job
    seq: int
    phase: str = PENDING
    node: _Node | None = None
    holds_resources: bool = False
    behaviour: Behaviour | None = None
    ends_at: datetime | None = None
    image_blocked: bool = False
    deleted: bool = False
    view: KubeObject | None = None


@dataclass(frozen=True, slots=True)
class _Placement:
    names: frozenset[str]  # the nodes that pass the label and taint filters


@dataclass(frozen=True, slots=True)
class _Pdb:
    namespace: str
    selector: _Selector
    max_unavailable: int | None
    min_available: int | None


@dataclass(slots=True)
class _PlannedFailure:
    error: Exception
    times: int


_HeapEntry = tuple[datetime, int, str, "_Pod | _Job"]


class SimulatedCluster:
    """In-memory Kubernetes for what Squall uses; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Clock,
        default_run_for: timedelta = timedelta(seconds=60),
        seed: int = 0,
        pod_backoff: timedelta = timedelta(seconds=10),
        event_limit: int = 10_000,
        lists: str = "copies",
    ) -> None:
        """`lists` says what list_pods, list_jobs and list_nodes hand out:

        - "copies": objects the caller owns, as every API server response is;
        - "shared": an object unchanged since the last list is the same dict again
          until its resourceVersion changes, as client-go's informer listers share
          their cache; callers must not change it. The simulator uses this: a
          replay's scale checks list every node and pod each time, and copying
          them was most of the replay's time;
        - "checked": shared, and each object handed out again is first compared
          with a fresh copy: SharedObjectChanged if a caller changed it, or the
          cluster changed an object without giving it a new resourceVersion.
        """
        if lists not in _LIST_MODES:
            raise ValueError(f"lists must be one of {', '.join(sorted(_LIST_MODES))}, not {lists!r}")
        self._lists = lists
        self._whole_lists: dict[str, tuple[int, list[KubeObject]]] = {}
        self._clock = clock
        self._default = Behaviour(run_for=_non_negative("default_run_for", default_run_for))
        self._pod_backoff = _non_negative("pod_backoff", pod_backoff)
        self._rng = random.Random(seed)
        # Raised (once) by the next Cluster-port call, after that call is recorded.
        self.next_error: Exception | None = None
        self.calls: list[ClusterCall] = []
        self.events: deque[ClusterEvent] = deque(maxlen=event_limit)
        self._planned: dict[str, _PlannedFailure] = {}
        self._behaviours: dict[str, Behaviour] = {}

        self._nodes: dict[str, _Node] = {}
        self._jobs: dict[Key, _Job] = {}
        self._services: dict[Key, KubeObject] = {}
        self._pods: dict[Key, _Pod] = {}
        self._jobs_by_id: dict[str, dict[Key, None]] = {}
        self._services_by_id: dict[str, dict[Key, None]] = {}
        self._pods_by_id: dict[str, dict[Key, None]] = {}
        self._pdbs: list[_Pdb] = []

        self._pending: dict[Key, _Pod] = {}  # Pending and not bound to a node
        self._to_start: dict[Key, _Pod] = {}  # bound, containers not started yet
        self._heap: list[_HeapEntry] = []
        self._phases: Counter[str] = Counter()
        self._jobs_created = 0
        self._resource_version = 0
        self._seq = 0
        # The scheduler only runs a pass when something could have changed its answer.
        self._schedule_dirty = False
        self._placement_cache: dict[str, _Placement] = {}
        # Node indexes the scheduler scans instead of every node: nodes holding pods,
        # those of them with a GPU_RESOURCE free, and the empty ones by shape, sorted by name.
        self._busy: dict[str, _Node] = {}
        self._busy_gpu_free: dict[str, _Node] = {}
        self._empty: dict[_Shape, list[str]] = {}
        self._priorities: set[int] = set()

    # ==== the Cluster port ===========================================================

    def create(self, manifest: KubeObject) -> bool:
        body: Mapping[str, Any] = manifest if isinstance(manifest, Mapping) else {}
        metadata = body.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        kind, api_version = body.get("kind"), body.get("apiVersion")
        name, namespace = metadata.get("name"), metadata.get("namespace")
        self._call("create", kind=kind, namespace=namespace, name=name)
        if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
            raise PermanentError("metadata.name and metadata.namespace are required")
        key = (namespace, name)
        if kind == "Job" and api_version == "batch/v1":
            if key in self._jobs:
                return False
            self._create_job(key, body)
            return True
        if kind == "Service" and api_version == "v1":
            if key in self._services:
                return False
            self._create_service(key, body)
            return True
        raise PermanentError(f"the simulated cluster cannot create {api_version}/{kind}")

    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        self._call("delete_job_objects", namespace=namespace, job_id=job_id)
        deleted = 0
        for key in list(self._jobs_by_id.get(job_id, ())):
            if key[0] == namespace:
                self._delete_job(self._jobs[key], at=self._now(), reason="Deleted")
                deleted += 1
        for key in list(self._services_by_id.get(job_id, ())):
            if key[0] == namespace:
                del self._services[key]
                _discard(self._services_by_id, job_id, key)
                deleted += 1
        return deleted

    def list_jobs(self, *, namespace: str | None = None, job_id: str | None = None) -> list[KubeObject]:
        self._call("list_jobs", namespace=namespace, job_id=job_id)
        jobs: Iterable[_Job] = (
            [self._jobs[k] for k in self._jobs_by_id.get(job_id, ())]
            if job_id is not None
            else self._jobs.values()
        )
        return [
            self._view(job, _object_view)
            for job in jobs
            if job.managed and (namespace is None or job.key[0] == namespace)
        ]

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        job_id: str | None = None,
        node_name: str | None = None,
    ) -> list[KubeObject]:
        self._call("list_pods", namespace=namespace, job_id=job_id, node_name=node_name)
        if job_id is not None:
            keys: Iterable[Key] = self._pods_by_id.get(job_id, ())
        elif node_name is not None:
            node = self._nodes.get(node_name)
            keys = node.pods if node else ()
        else:
            if namespace is None:
                return self._whole_list("pods", lambda: [self._view(p, _object_view) for p in self._pods.values()])
            keys = self._pods
        views: list[KubeObject] = []
        for key in keys:
            pod = self._pods[key]
            if namespace is not None and key[0] != namespace:
                continue
            if node_name is not None and (pod.node is None or pod.node.name != node_name):
                continue
            views.append(self._view(pod, _object_view))
        return views

    def list_nodes(self) -> list[KubeObject]:
        self._call("list_nodes")
        return self._whole_list("nodes", lambda: [self._view(n, _json_copy) for n in self._nodes.values()])

    def _whole_list(self, kind: str, build: Callable[[], list[KubeObject]]) -> list[KubeObject]:
        """Every pod or node; with shared lists, the last answer again while nothing changed.

        Every change gives the cluster a new resourceVersion (a deletion too, as in
        etcd), so an answer given at the current one is still the answer.
        """
        if self._lists == "copies":
            return build()
        cached = self._whole_lists.get(kind)
        if cached is not None and cached[0] == self._resource_version:
            if self._lists == "checked":
                fresh = build()
                if len(fresh) != len(cached[1]) or any(a is not b for a, b in zip(fresh, cached[1], strict=False)):
                    raise SharedObjectChanged(
                        {"name": f"list of {kind}", "resourceVersion": str(self._resource_version)},
                        {"items": cached[1]},
                        {"items": fresh},
                    )
            return list(cached[1])
        views = build()
        self._whole_lists[kind] = (self._resource_version, views)
        return list(views)

    def get_node(self, name: str) -> KubeObject | None:
        self._call("get_node", name=name)
        node = self._nodes.get(name)
        return _json_copy(node.obj) if node else None

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        self._call("patch_node", name=name, patch=_thaw(patch))
        node = self._nodes.get(name)
        if node is None:
            raise NotFoundError(f"node {name} not found")
        if not isinstance(patch, Mapping):
            raise PermanentError("a node patch must be an object")
        metadata = patch.get("metadata") or {}
        spec = patch.get("spec") or {}
        if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
            raise PermanentError("metadata and spec of a node patch must be objects")
        for section in ("labels", "annotations"):
            changes = metadata.get(section)
            if changes is None:
                continue
            if not isinstance(changes, Mapping) or not all(
                isinstance(v, str) or v is None for v in changes.values()
            ):
                raise PermanentError(f"metadata.{section} must map names to strings (or null to delete)")
            target = node.obj["metadata"].setdefault(section, {})
            _merge(target, changes)
        if "unschedulable" in spec:
            value = spec["unschedulable"]
            if value is not None and not isinstance(value, bool):
                raise PermanentError("spec.unschedulable must be a boolean")
            node.unschedulable = bool(value)
        if "taints" in spec:
            taints = spec["taints"] or []
            # The lifecycle controller owns its own taints and puts them back anyway.
            node.user_taints = [
                dict(t)
                for t in _taint_dicts(taints)
                if t["key"] not in (NOT_READY_TAINT, UNSCHEDULABLE_TAINT)
            ]
        # A strategic merge leaves the rest of spec alone; providerID and podCIDR are
        # immutable, so anything else is stored as sent.
        for key, value in spec.items():
            if key not in ("unschedulable", "taints", "providerID"):
                _merge(node.obj["spec"], {key: value})
        node.labels = node.obj["metadata"]["labels"]
        self._refresh_node(node)
        return _json_copy(node.obj)

    def evict(self, *, namespace: str, name: str) -> bool:
        self._call("evict", namespace=namespace, name=name)
        pod = self._pods.get((namespace, name))
        if pod is None:
            return True
        now = self._now()
        if pod.phase in _TERMINAL:
            # A finished pod holds nothing a budget protects: the API just deletes it.
            self._remove_pod(pod)
            return True
        if not self._budgets_allow(pod):
            return False
        running = pod.phase == RUNNING
        exit_code = (pod.behaviour or self._behaviour(pod.job.job_id)).evicted_exit_code if running else None
        self._disrupt(
            pod,
            at=now,
            reason=EVICTED_BY_API,
            message="Eviction API: evicting",
            exit_code=exit_code,
        )
        return True

    # ==== nodes ======================================================================

    def add_node(
        self,
        *,
        name: str,
        allocatable: Mapping[str, str | int],
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] | None = None,
        provider_id: str | None = None,
        ready: bool = True,
        gpus_ready: bool = True,
    ) -> KubeObject:
        """Register a node, as a kubelet does when an instance joins the cluster."""
        if name in self._nodes:
            raise ValueError(f"node {name} exists already")
        cpu = parse_cpu_millicores(allocatable.get("cpu", 0))
        memory = parse_memory_bytes(allocatable.get("memory", 0))
        gpus = parse_whole_count(allocatable.get(GPU_RESOURCE, 0))
        max_pods = parse_whole_count(allocatable.get("pods", _DEFAULT_MAX_PODS))
        now = self._now()
        node_labels = {HOSTNAME_LABEL: name, **dict(labels or {})}
        resources = {k: str(v) for k, v in allocatable.items()}
        resources.setdefault("pods", str(max_pods))
        obj: KubeObject = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": self._new_metadata(name=name, namespace=None, at=now, labels=node_labels),
            "spec": {"providerID": provider_id} if provider_id else {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [],
            },
        }
        node = _Node(
            name=name,
            obj=obj,
            labels=obj["metadata"]["labels"],
            user_taints=[dict(t) for t in _taint_dicts(list(taints or []))],
            taints=(),
            cpu=cpu,
            memory=memory,
            gpu_installed=gpus,
            gpu=0,
            free_cpu=cpu,
            free_memory=memory,
            free_gpu=0,
            free_pods=max_pods,
            max_pods=max_pods,
            ready=ready,
            unschedulable=False,
        )
        self._nodes[name] = node
        self._set_ready_condition(node, ready=ready, at=now)
        self._set_gpus(node, ready=gpus_ready)
        self._refresh_node(node)
        self._event(now, "Node", "", name, "RegisteredNode", f"Node {name} joined the cluster")
        return _json_copy(obj)

    def remove_node(self, name: str, *, reason: str = "instance terminated") -> int:
        """The node object goes (its instance is gone); its pods fail as PodGC fails them.

        Returns how many running or waiting pods were disrupted.
        """
        node = self._nodes.get(name)
        if node is None:
            raise NotFoundError(f"node {name} not found")
        now = self._now()
        disrupted = 0
        for key in list(node.pods):
            pod = self._pods[key]
            if pod.phase in _TERMINAL:
                # PodGC deletes orphaned pods, finished ones included.
                self._remove_pod(pod)
                continue
            # The kubelet is gone with the node: no container reports an exit code.
            self._disrupt(
                pod,
                at=now,
                reason=DELETED_BY_POD_GC,
                message="PodGC: node no longer exists",
                exit_code=None,
            )
            disrupted += 1
        node.holding = 0
        self._set_empty_shape(node, None)
        self._busy.pop(name, None)
        self._busy_gpu_free.pop(name, None)
        del self._nodes[name]
        self._next_resource_version()
        self._placement_cache.clear()
        self._event(now, "Node", "", name, "RemovingNode", f"Node {name} removed: {reason}")
        return disrupted

    def set_ready(self, name: str, ready: bool) -> None:
        node = self._node(name)
        if node.ready != ready:
            node.ready = ready
            now = self._now()
            self._set_ready_condition(node, ready=ready, at=now)
            self._refresh_node(node)
            self._event(now, "Node", "", name, "NodeReady" if ready else "NodeNotReady")

    def set_gpus_ready(self, name: str, ready: bool = True) -> None:
        """The NVIDIA device plugin registered (or lost) the node's GPUs."""
        node = self._node(name)
        self._set_gpus(node, ready=ready)
        self._touch(node.obj)
        self._schedule_dirty = True

    def add_pdb(
        self,
        namespace: str,
        selector_labels: Mapping[str, str],
        max_unavailable: int | None = None,
        *,
        min_available: int | None = None,
    ) -> None:
        """A PodDisruptionBudget over the pods with these labels; evictions honour it."""
        if (max_unavailable is None) == (min_available is None):
            raise ValueError("give exactly one of max_unavailable and min_available")
        selector = _Selector(match_labels=tuple(sorted(selector_labels.items())), expressions=())
        self._pdbs.append(_Pdb(namespace, selector, max_unavailable, min_available))

    # ==== behaviour and faults =======================================================

    def set_behaviour(
        self,
        job_id: str,
        *,
        run_for: timedelta | None = None,
        exit_code: int = 0,
        image_error: bool = False,
        evicted_exit_code: int = SIGTERM_EXIT_CODE,
    ) -> None:
        """How the pods of Squall job `job_id` behave; pods read it when they start."""
        self._behaviours[job_id] = Behaviour(
            run_for=_non_negative("run_for", run_for if run_for is not None else self._default.run_for),
            exit_code=exit_code,
            image_error=image_error,
            evicted_exit_code=evicted_exit_code,
        )

    def fail_calls(self, method_name: str, error: Exception, *, times: int = 1) -> None:
        """The next `times` calls of one port method raise `error`."""
        if method_name not in _PORT_METHODS:
            raise ValueError(f"{method_name!r} is not a Cluster port method: {sorted(_PORT_METHODS)}")
        if times < 1:
            raise ValueError("times must be at least 1")
        self._planned[method_name] = _PlannedFailure(error=error, times=times)

    # ==== time =======================================================================

    def advance(self) -> AdvanceSummary:
        """Catch up with the clock: due events in time order, then schedule and start pods."""
        now = self._now()
        counts: Counter[str] = Counter()
        for _ in range(_MAX_ROUNDS_PER_ADVANCE):
            self._process_due(now, counts)
            counts["scheduled"] += self._schedule(now)
            counts["started"] += self._start_pods(now)
            upcoming = self.next_event_time()
            if upcoming is None or upcoming > now:
                break
        return AdvanceSummary(
            scheduled=counts["scheduled"],
            started=counts["started"],
            finished=counts["finished"],
            jobs_finished=counts["jobs_finished"],
        )

    def next_event_time(self) -> datetime | None:
        """When a pod finishes, a deadline or a TTL passes, or a pod is re-created next.

        Scheduling and starting pods happen on every `advance()`; this is only what
        would happen with nothing else going on.
        """
        while self._heap:
            at, _, kind, target = self._heap[0]
            if self._still_due(at, kind, target):
                return at
            heapq.heappop(self._heap)
        return None

    # ==== reading state ==============================================================

    def stats(self) -> dict[str, int]:
        """Counts for a live view; cheap enough to call on every frame."""
        nodes = self._nodes.values()
        jobs = Counter(job.finished or "Active" for job in self._jobs.values())
        return {
            "nodes": len(self._nodes),
            "nodes_ready": sum(1 for n in nodes if n.ready),
            "nodes_cordoned": sum(1 for n in nodes if n.unschedulable),
            "pods_pending": self._phases[PENDING],
            "pods_unscheduled": len(self._pending),
            "pods_running": self._phases[RUNNING],
            "pods_succeeded": self._phases[SUCCEEDED],
            "pods_failed": self._phases[FAILED],
            "gpus_allocatable": sum(n.gpu for n in nodes),
            "gpus_in_use": sum(n.gpu - n.free_gpu for n in nodes),
            "jobs_created": self._jobs_created,
            "jobs_active": jobs["Active"],
            "jobs_complete": jobs["Complete"],
            "jobs_failed": jobs["Failed"],
        }

    def gpus(self) -> tuple[int, int]:
        """(allocatable, in use) over all nodes: what stats() says, without counting the rest."""
        allocatable = in_use = 0
        for node in self._nodes.values():
            allocatable += node.gpu
            in_use += node.gpu - node.free_gpu
        return allocatable, in_use

    def list_services(self, *, namespace: str | None = None) -> list[KubeObject]:
        return [
            _json_copy(obj) for key, obj in self._services.items() if namespace is None or key[0] == namespace
        ]

    # ==== port plumbing ==============================================================

    def _call(self, method: str, **args: object) -> None:
        self.calls.append(ClusterCall(method=method, args=args))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        planned = self._planned.get(method)
        if planned is not None:
            planned.times -= 1
            if planned.times <= 0:
                del self._planned[method]
            raise planned.error

    def _now(self) -> datetime:
        now = self._clock.now()
        if now.utcoffset() is None:
            raise ValueError("the clock must return timezone-aware datetimes")
        return now

    def _new_metadata(
        self, *, name: str, namespace: str | None, at: datetime, labels: dict[str, str]
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        metadata.update(
            uid=str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
            resourceVersion=self._next_resource_version(),
            creationTimestamp=_timestamp(at),
            labels=labels,
        )
        return metadata

    def _next_resource_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _view(self, holder: _Node | _Job | _Pod, copy: Callable[[KubeObject], KubeObject]) -> KubeObject:
        """What a list hands out for one object; see `lists` in __init__."""
        if self._lists == "copies":
            return copy(holder.obj)
        view = holder.view
        if view is not None and view["metadata"].get("resourceVersion") == holder.obj["metadata"]["resourceVersion"]:
            if self._lists == "checked" and view != (fresh := copy(holder.obj)):
                raise SharedObjectChanged(holder.obj["metadata"], view, fresh)
            return view
        holder.view = copy(holder.obj)
        return holder.view

    def _touch(self, obj: KubeObject) -> None:
        obj["metadata"]["resourceVersion"] = self._next_resource_version()

    def _event(
        self, at: datetime, kind: str, namespace: str, name: str, reason: str, message: str = ""
    ) -> None:
        self.events.append(ClusterEvent(at, kind, namespace, name, reason, message))

    def _push(self, at: datetime, kind: str, target: _Pod | _Job) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, target))

    # ==== Services ===================================================================

    def _create_service(self, key: Key, manifest: Mapping[str, Any]) -> None:
        obj = _thaw_manifest(manifest)
        labels = dict(obj["metadata"].get("labels") or {})
        obj["metadata"].update(
            self._new_metadata(name=key[1], namespace=key[0], at=self._now(), labels=labels)
        )
        obj.setdefault("spec", {}).setdefault("type", "ClusterIP")
        obj.setdefault("status", {"loadBalancer": {}})
        self._services[key] = obj
        if (job_id := labels.get(JOB_ID_LABEL)) is not None:
            self._services_by_id.setdefault(job_id, {})[key] = None

    # ==== the Job controller =========================================================

    def _create_job(self, key: Key, manifest: Mapping[str, Any]) -> None:
        obj = _thaw_manifest(manifest)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise PermanentError("spec is required")
        for count in ("parallelism", "completions"):
            if spec.get(count, 1) != 1:
                raise PermanentError(f"the simulated cluster runs one pod per Job; spec.{count} must be 1")
        template = spec.get("template")
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            raise PermanentError("spec.template.spec is required")
        pod_spec: dict[str, Any] = template["spec"]
        if not pod_spec.get("containers"):
            raise PermanentError("spec.template.spec.containers is required")
        policy = spec.get("podFailurePolicy")
        if policy is not None and pod_spec.get("restartPolicy") != "Never":
            raise PermanentError("spec.podFailurePolicy needs spec.template.spec.restartPolicy Never")
        backoff_limit = spec.get("backoffLimit")
        if backoff_limit is None:
            backoff_limit = _DEFAULT_BACKOFF_LIMIT
        deadline_seconds = spec.get("activeDeadlineSeconds")
        ttl_seconds = spec.get("ttlSecondsAfterFinished")
        for label, value in (
            ("backoffLimit", backoff_limit),
            ("activeDeadlineSeconds", deadline_seconds),
            ("ttlSecondsAfterFinished", ttl_seconds),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise PermanentError(f"spec.{label} must be a non-negative integer")

        now = self._now()
        labels = dict(obj["metadata"].get("labels") or {})
        obj["metadata"].update(self._new_metadata(name=key[1], namespace=key[0], at=now, labels=labels))
        uid = obj["metadata"]["uid"]
        controller_labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": key[1],
            "controller-uid": uid,
            "job-name": key[1],
        }
        template.setdefault("metadata", {})
        pod_labels = {**(template["metadata"].get("labels") or {}), **controller_labels}
        template["metadata"]["labels"] = pod_labels
        spec.update(
            parallelism=1,
            completions=1,
            backoffLimit=backoff_limit,
            completionMode=spec.get("completionMode", "NonIndexed"),
            suspend=spec.get("suspend", False),
            podReplacementPolicy="Failed" if policy is not None else "TerminatingOrFailed",
            selector={"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            manualSelector=False,
        )
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        # Parsing can refuse the Job (bad quantities): do it before anything is stored.
        parsed = _parse_template(pod_spec, namespace=key[0], labels=pod_labels)

        job = _Job(
            key=key,
            obj=obj,
            job_id=labels.get(JOB_ID_LABEL),
            managed=labels.get(MANAGED_BY_LABEL) == "squall",
            template=parsed,
            pod_labels=pod_labels,
            pod_spec=pod_spec,
            backoff_limit=backoff_limit,
            rules=list((policy or {}).get("rules") or []),
            started_at=now,
            deadline=now + timedelta(seconds=deadline_seconds) if deadline_seconds is not None else None,
            ttl=timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None,
        )
        self._jobs[key] = job
        self._jobs_created += 1
        self._priorities.add(parsed.priority)
        if job.job_id is not None:
            self._jobs_by_id.setdefault(job.job_id, {})[key] = None
        if job.deadline is not None:
            self._push(job.deadline, "deadline", job)
        # The Job controller reacts within milliseconds: the pod exists once create returns.
        self._create_pod(job, at=now)

    def _create_pod(self, job: _Job, *, at: datetime) -> _Pod:
        prefix = f"{job.key[1]}-"[:_MAX_GENERATE_PREFIX]
        while True:
            name = prefix + "".join(self._rng.choice(_NAME_ALPHABET) for _ in range(5))
            if (job.key[0], name) not in self._pods:
                break
        key = (job.key[0], name)
        labels = dict(job.pod_labels)
        metadata = self._new_metadata(name=name, namespace=key[0], at=at, labels=labels)
        metadata["generateName"] = prefix
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job.key[1],
                "uid": job.obj["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        metadata["finalizers"] = ["batch.kubernetes.io/job-tracking"]
        obj: KubeObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            # Pods share their Job's template spec read-only; views copy the top level.
            "spec": dict(job.pod_spec),
            "status": {"phase": PENDING, "qosClass": "Burstable"},
        }
        self._seq += 1
        pod = _Pod(key=key, obj=obj, labels=labels, job=job, seq=self._seq)
        self._pods[key] = pod
        job.pods[key] = None
        job.active = pod
        job.replacement_due = None
        if job.job_id is not None:
            self._pods_by_id.setdefault(job.job_id, {})[key] = None
        self._phases[PENDING] += 1
        self._pending[key] = pod
        self._schedule_dirty = True
        self._write_job_status(job)
        self._event(at, "Job", job.key[0], job.key[1], "SuccessfulCreate", f"Created pod: {name}")
        return pod

    def _on_pod_terminal(self, pod: _Pod, *, at: datetime, counts: Counter[str] | None = None) -> None:
        """The Job controller's answer to one of its pods reaching Succeeded or Failed."""
        job = pod.job
        if job.active is pod:
            job.active = None
        if job.finished is not None or job.deleted:
            self._write_job_status(job)
            return
        if pod.phase == SUCCEEDED:
            job.succeeded += 1
            self._finish_job(
                job,
                "Complete",
                reason="CompletionsReached",
                message="Reached expected number of succeeded pods",
                at=at,
                counts=counts,
            )
            return
        action, message = _policy_action(job.rules, pod)
        if action == "FailJob":
            job.failed += 1
            self._finish_job(job, "Failed", reason="PodFailurePolicy", message=message, at=at, counts=counts)
        elif action == "Ignore":
            self._replace(job, at=at, delay=timedelta(0))
        else:
            job.failed += 1
            if job.failed > job.backoff_limit:
                self._finish_job(
                    job,
                    "Failed",
                    reason="BackoffLimitExceeded",
                    message="Job has reached the specified backoff limit",
                    at=at,
                    counts=counts,
                )
            else:
                delay = min(self._pod_backoff * (2 ** (job.failed - 1)), _BACKOFF_CAP)
                self._replace(job, at=at, delay=delay)

    def _replace(self, job: _Job, *, at: datetime, delay: timedelta) -> None:
        if delay <= timedelta(0):
            self._create_pod(job, at=at)
            return
        job.replacement_due = at + delay
        self._push(job.replacement_due, "replace", job)
        self._write_job_status(job)

    def _finish_job(
        self,
        job: _Job,
        kind: str,
        *,
        reason: str,
        message: str,
        at: datetime,
        counts: Counter[str] | None = None,
    ) -> None:
        job.finished = kind
        job.replacement_due = None
        if kind == "Complete":
            job.completed_at = at
        stamp = _timestamp(at)
        job.conditions.append(
            {
                "type": kind,
                "status": "True",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
                "reason": reason,
                "message": message,
            }
        )
        # A finished Job deletes its pods that still run; Kubernetes counts them as failed.
        for key in list(job.pods):
            pod = self._pods[key]
            if pod.phase not in _TERMINAL:
                job.failed += 1
                self._remove_pod(pod)
        job.active = None
        self._write_job_status(job)
        if job.ttl is not None:
            self._push(at + job.ttl, "ttl", job)
        if counts is not None:
            counts["jobs_finished"] += 1
        self._event(
            at,
            "Job",
            job.key[0],
            job.key[1],
            "Completed" if kind == "Complete" else reason,
            message,
        )

    def _write_job_status(self, job: _Job) -> None:
        # Zero counts are left out, as the API server's JSON leaves them out.
        status: dict[str, Any] = {"startTime": _timestamp(job.started_at)}
        active = job.active is not None and job.active.phase not in _TERMINAL
        if active:
            status["active"] = 1
        status["ready"] = 1 if active and job.active is not None and job.active.phase == RUNNING else 0
        if job.failed:
            status["failed"] = job.failed
        if job.succeeded:
            status["succeeded"] = job.succeeded
        if job.completed_at is not None:
            status["completionTime"] = _timestamp(job.completed_at)
        if job.conditions:
            status["conditions"] = [dict(c) for c in job.conditions]
        status["uncountedTerminatedPods"] = {}
        job.obj["status"] = status
        self._touch(job.obj)

    def _delete_job(self, job: _Job, *, at: datetime, reason: str) -> None:
        for key in list(job.pods):
            self._remove_pod(self._pods[key])
        job.deleted = True
        job.active = None
        del self._jobs[job.key]
        if job.job_id is not None:
            _discard(self._jobs_by_id, job.job_id, job.key)
        self._event(at, "Job", job.key[0], job.key[1], reason)

    # ==== pods =======================================================================

    def _set_phase(self, pod: _Pod, phase: str) -> None:
        self._phases[pod.phase] -= 1
        self._phases[phase] += 1
        pod.phase = phase
        pod.obj["status"]["phase"] = phase

    def _release(self, pod: _Pod) -> None:
        node = pod.node
        if node is None or not pod.holds_resources:
            return
        template = pod.job.template
        node.free_cpu += template.cpu
        node.free_memory += template.memory
        node.free_gpu += template.gpu
        node.free_pods += 1
        node.holding -= 1
        pod.holds_resources = False
        self._index_node(node)
        self._schedule_dirty = True

    def _remove_pod(self, pod: _Pod) -> None:
        self._release(pod)
        self._next_resource_version()  # a deletion moves the cluster's version on too
        pod.deleted = True
        self._phases[pod.phase] -= 1
        del self._pods[pod.key]
        self._pending.pop(pod.key, None)
        self._to_start.pop(pod.key, None)
        pod.job.pods.pop(pod.key, None)
        if pod.job.active is pod:
            pod.job.active = None
        if pod.node is not None:
            pod.node.pods.pop(pod.key, None)
        if pod.job.job_id is not None:
            _discard(self._pods_by_id, pod.job.job_id, pod.key)

    def _disrupt(self, pod: _Pod, *, at: datetime, reason: str, message: str, exit_code: int | None) -> None:
        """A pod stops because of its node or an eviction; the Job controller decides what next."""
        stamp = _timestamp(at)
        status = pod.obj["status"]
        status.setdefault("conditions", []).append(
            {
                "type": DISRUPTION_TARGET,
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": stamp,
                "reason": reason,
                "message": message,
            }
        )
        pod.obj["metadata"]["deletionTimestamp"] = stamp
        pod.obj["metadata"]["deletionGracePeriodSeconds"] = 0
        if exit_code is not None:
            self._terminate_containers(pod, exit_code=exit_code, at=at)
        self._release(pod)
        self._pending.pop(pod.key, None)
        self._to_start.pop(pod.key, None)
        # A container that exits 0 on SIGTERM leaves a Succeeded pod, even when evicted.
        self._set_phase(pod, SUCCEEDED if exit_code == 0 else FAILED)
        self._event(at, "Pod", pod.key[0], pod.key[1], reason, message)
        self._on_pod_terminal(pod, at=at)
        # The pod was being deleted: once terminal (and counted), it is gone.
        self._remove_pod(pod)

    def _terminate_containers(self, pod: _Pod, *, exit_code: int, at: datetime) -> None:
        started = pod.obj["status"].get("startTime")
        statuses = []
        for container in pod.obj["spec"]["containers"]:
            statuses.append(
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": "Completed" if exit_code == 0 else "Error",
                            "startedAt": started,
                            "finishedAt": _timestamp(at),
                        }
                    },
                }
            )
        status = pod.obj["status"]
        status["containerStatuses"] = statuses
        _set_condition(status, "Ready", "False", at, reason="PodCompleted" if exit_code == 0 else "PodFailed")
        _set_condition(
            status,
            "ContainersReady",
            "False",
            at,
            reason="PodCompleted" if exit_code == 0 else "PodFailed",
        )
        self._touch(pod.obj)

    def _finish_pod(self, pod: _Pod, *, at: datetime, counts: Counter[str]) -> None:
        behaviour = pod.behaviour or self._default
        self._terminate_containers(pod, exit_code=behaviour.exit_code, at=at)
        self._release(pod)
        self._set_phase(pod, SUCCEEDED if behaviour.exit_code == 0 else FAILED)
        counts["finished"] += 1
        self._event(
            at,
            "Pod",
            pod.key[0],
            pod.key[1],
            "Completed" if behaviour.exit_code == 0 else "Error",
            f"container exited with code {behaviour.exit_code}",
        )
        self._on_pod_terminal(pod, at=at, counts=counts)

    def _behaviour(self, job_id: str | None) -> Behaviour:
        if job_id is None:
            return self._default
        return self._behaviours.get(job_id, self._default)

    def _start_pods(self, now: datetime) -> int:
        """The kubelet's part: pull the image, start the containers."""
        started = 0
        for pod in list(self._to_start.values()):
            behaviour = self._behaviour(pod.job.job_id)
            status = pod.obj["status"]
            status.setdefault("startTime", _timestamp(now))
            if behaviour.image_error:
                if not pod.image_blocked:
                    pod.image_blocked = True
                    status["containerStatuses"] = [
                        _waiting_status(
                            c,
                            reason="ImagePullBackOff",
                            message=f'Back-off pulling image "{c.get("image", "")}"',
                        )
                        for c in pod.obj["spec"]["containers"]
                    ]
                    self._touch(pod.obj)
                    self._event(now, "Pod", pod.key[0], pod.key[1], "BackOff", "Back-off pulling image")
                continue
            pod.image_blocked = False
            del self._to_start[pod.key]
            pod.behaviour = behaviour
            pod.ends_at = now + behaviour.run_for
            stamp = _timestamp(now)
            status["containerStatuses"] = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": stamp}},
                }
                for c in pod.obj["spec"]["containers"]
            ]
            for kind in ("Initialized", "ContainersReady", "Ready"):
                _set_condition(status, kind, "True", now)
            self._set_phase(pod, RUNNING)
            self._touch(pod.obj)
            self._push(pod.ends_at, "finish", pod)
            self._write_job_status(pod.job)
            self._event(now, "Pod", pod.key[0], pod.key[1], "Started", "Started container")
            started += 1
        return started

    # ==== time-driven events =========================================================

    def _still_due(self, at: datetime, kind: str, target: _Pod | _Job) -> bool:
        if isinstance(target, _Pod):
            return not target.deleted and target.phase == RUNNING and target.ends_at == at
        if target.deleted:
            return False
        if kind == "deadline":
            return target.finished is None
        if kind == "replace":
            return target.finished is None and target.replacement_due == at and target.active is None
        return target.finished is not None  # ttl

    def _process_due(self, now: datetime, counts: Counter[str]) -> None:
        while self._heap and self._heap[0][0] <= now:
            at, _, kind, target = heapq.heappop(self._heap)
            if not self._still_due(at, kind, target):
                continue
            if isinstance(target, _Pod):
                self._finish_pod(target, at=at, counts=counts)
            elif kind == "deadline":
                self._finish_job(
                    target,
                    "Failed",
                    reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline",
                    at=at,
                    counts=counts,
                )
            elif kind == "replace":
                self._create_pod(target, at=at)
            else:
                self._delete_job(target, at=at, reason="TTLExpired")

    # ==== the scheduler ==============================================================

    def _schedule(self, now: datetime) -> int:
        if not self._pending or not self._schedule_dirty:
            return 0
        self._schedule_dirty = False
        # Resources only shrink during a pass, so a class of pods that found no node
        # once in this pass finds none later in it either.
        unschedulable: set[Hashable] = set()
        bound = 0
        pending = list(self._pending.values())
        if len(self._priorities) > 1:
            # kube-scheduler's queue: higher priority first, then oldest first.
            pending.sort(key=lambda p: (-p.job.template.priority, p.seq))
        for pod in pending:
            template = pod.job.template
            domains = self._affinity_domains(pod)
            scheduling_class: Hashable = (
                template.class_key
                if domains is None
                else (template.class_key, tuple((k, frozenset(v)) for k, v in domains))
            )
            node = None if scheduling_class in unschedulable else self._pick_node(pod, domains)
            if node is None:
                unschedulable.add(scheduling_class)
                self._mark_unschedulable(pod, now)
                continue
            self._bind(pod, node, now)
            bound += 1
        return bound

    def _pick_node(self, pod: _Pod, domains: list[tuple[str, set[str]]] | None) -> _Node | None:
        """The node kube-scheduler would pick: the most allocated that fits, ties by name.

        Partly used nodes are looked at one by one (for a GPU_RESOURCE pod only those with a
        GPU_RESOURCE free); empty nodes of one shape all score the same, so only the first
        of each shape (by name) that passes the filters is looked at.
        """
        template = pod.job.template
        if domains is not None and any(not values for _, values in domains):
            return None
        cpu, memory, gpu = template.cpu, template.memory, template.gpu
        names = self._placement(template).names
        best: _Node | None = None
        best_score = -1.0

        def consider(node: _Node) -> None:
            nonlocal best, best_score
            score = _most_allocated(node, cpu=cpu, memory=memory, gpu=gpu)
            if score > best_score or (score == best_score and best is not None and node.name < best.name):
                best, best_score = node, score

        for node in (self._busy_gpu_free if gpu else self._busy).values():
            if node.free_gpu < gpu or node.free_cpu < cpu or node.free_memory < memory or node.free_pods < 1:
                continue
            if node.name in names and (domains is None or _in_domains(node, domains)):
                consider(node)
        for (shape_cpu, shape_memory, shape_gpu, shape_pods), empty in self._empty.items():
            if shape_gpu < gpu or shape_cpu < cpu or shape_memory < memory or shape_pods < 1:
                continue
            for name in empty:
                node = self._nodes[name]
                if name in names and (domains is None or _in_domains(node, domains)):
                    consider(node)
                    break
        return best

    def _placement(self, template: _Template) -> _Placement:
        """Nodes that pass the label and taint filters; cached until a node changes."""
        cached = self._placement_cache.get(template.placement_key)
        if cached is not None:
            return cached
        placement = _Placement(
            names=frozenset(node.name for node in self._nodes.values() if _placement_fits(template, node))
        )
        self._placement_cache[template.placement_key] = placement
        return placement

    def _affinity_domains(self, pod: _Pod) -> list[tuple[str, set[str]]] | None:
        """Per required pod-affinity term, the topology values the pod may go to; None: anywhere."""
        template = pod.job.template
        if not template.pod_affinity:
            return None
        domains: list[tuple[str, set[str]]] = []
        for term in template.pod_affinity:
            values: set[str] = set()
            for other in self._pods_matching(term.selector, term.namespaces):
                if other.node is not None and other.phase not in _TERMINAL:
                    value = other.node.labels.get(term.topology_key)
                    if value is not None:
                        values.add(value)
            domains.append((term.topology_key, values))
        # The first pod of a gang may go anywhere, as kube-scheduler lets it.
        if template.self_affine and all(not values for _, values in domains):
            return None
        return domains

    def _pods_matching(self, selector: _Selector, namespaces: frozenset[str] | None) -> Iterator[_Pod]:
        job_id = dict(selector.match_labels).get(JOB_ID_LABEL)
        keys: Iterable[Key] = self._pods_by_id.get(job_id, ()) if job_id is not None else self._pods
        for key in keys:
            if namespaces is not None and key[0] not in namespaces:
                continue
            pod = self._pods[key]
            if selector.matches(pod.labels):
                yield pod

    def _mark_unschedulable(self, pod: _Pod, now: datetime) -> None:
        status = pod.obj["status"]
        if any(c.get("type") == "PodScheduled" for c in status.get("conditions") or ()):
            return
        _set_condition(
            status,
            "PodScheduled",
            "False",
            now,
            reason="Unschedulable",
            message=f"0/{len(self._nodes)} nodes are available to schedule the pod.",
        )
        self._touch(pod.obj)

    def _bind(self, pod: _Pod, node: _Node, now: datetime) -> None:
        template = pod.job.template
        node.free_cpu -= template.cpu
        node.free_memory -= template.memory
        node.free_gpu -= template.gpu
        node.free_pods -= 1
        node.holding += 1
        self._index_node(node)
        node.pods[pod.key] = None
        pod.node = node
        pod.holds_resources = True
        pod.obj["spec"]["nodeName"] = node.name
        pod.obj["status"]["hostIP"] = _host_ip(node.name)
        _set_condition(pod.obj["status"], "PodScheduled", "True", now)
        self._touch(pod.obj)
        del self._pending[pod.key]
        self._to_start[pod.key] = pod
        self._event(
            now,
            "Pod",
            pod.key[0],
            pod.key[1],
            "Scheduled",
            f"Successfully assigned {pod.key[0]}/{pod.key[1]} to {node.name}",
        )

    def _budgets_allow(self, pod: _Pod) -> bool:
        """policy/v1 Eviction: every budget covering the pod must allow one more disruption."""
        for pdb in self._pdbs:
            if pdb.namespace != pod.key[0] or not pdb.selector.matches(pod.labels):
                continue
            covered = [
                p
                for p in self._pods_matching(pdb.selector, frozenset({pdb.namespace}))
                if p.phase not in _TERMINAL
            ]
            healthy = sum(1 for p in covered if _healthy(p))
            if pdb.max_unavailable is not None:
                desired = max(len(covered) - pdb.max_unavailable, 0)
            else:
                desired = pdb.min_available or 0
            # An unhealthy pod may go while the budget is met (IfHealthyBudget).
            allowed = healthy - desired >= 1 if _healthy(pod) else healthy >= desired
            if not allowed:
                return False
        return True

    # ==== node bookkeeping ===========================================================

    def _node(self, name: str) -> _Node:
        node = self._nodes.get(name)
        if node is None:
            raise NotFoundError(f"node {name} not found")
        return node

    def _index_node(self, node: _Node) -> None:
        """Keep the scheduler's node indexes in step after a node's use or size changed."""
        name = node.name
        if node.holding:
            self._set_empty_shape(node, None)
            self._busy[name] = node
            if node.free_gpu > 0:
                self._busy_gpu_free[name] = node
            else:
                self._busy_gpu_free.pop(name, None)
        else:
            self._busy.pop(name, None)
            self._busy_gpu_free.pop(name, None)
            self._set_empty_shape(node, (node.cpu, node.memory, node.gpu, node.max_pods))

    def _set_empty_shape(self, node: _Node, shape: _Shape | None) -> None:
        if node.empty_shape == shape:
            return
        if node.empty_shape is not None:
            names = self._empty[node.empty_shape]
            del names[bisect.bisect_left(names, node.name)]
            if not names:
                del self._empty[node.empty_shape]
        if shape is not None:
            bisect.insort(self._empty.setdefault(shape, []), node.name)
        node.empty_shape = shape

    def _set_ready_condition(self, node: _Node, *, ready: bool, at: datetime) -> None:
        stamp = _timestamp(at)
        node.obj["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "kubelet is posting ready status" if ready else "container runtime not ready",
            }
        ]

    def _set_gpus(self, node: _Node, *, ready: bool) -> None:
        allocatable = node.gpu_installed if ready else 0
        node.free_gpu += allocatable - node.gpu
        node.gpu = allocatable
        self._index_node(node)
        if node.gpu_installed:
            # Until the device plugin registers, the node reports no GPUs at all.
            for section in ("capacity", "allocatable"):
                node.obj["status"][section][GPU_RESOURCE] = str(allocatable)

    def _refresh_node(self, node: _Node) -> None:
        """Re-derive the lifecycle taints and what the scheduler caches about nodes."""
        system: list[dict[str, Any]] = []
        if not node.ready:
            system.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
        if node.unschedulable:
            system.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        taints = node.user_taints + system
        spec = node.obj["spec"]
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        else:
            spec.pop("taints", None)
        if node.unschedulable:
            spec["unschedulable"] = True
        else:
            spec.pop("unschedulable", None)
        node.taints = tuple(_Taint(t["key"], t.get("value", ""), t["effect"]) for t in taints)
        self._touch(node.obj)
        self._placement_cache.clear()
        self._schedule_dirty = True


# ---- parsing (once per Job) ------------------------------------------------------------


def _parse_template(pod_spec: Mapping[str, Any], *, namespace: str, labels: Mapping[str, str]) -> _Template:
    try:
        cpu, memory, gpu = _requests(pod_spec)
    except (ValueError, TypeError, AttributeError) as exc:
        raise PermanentError(f"invalid resource requests: {exc}") from exc
    try:
        node_selector = tuple(
            sorted((str(k), str(v)) for k, v in (pod_spec.get("nodeSelector") or {}).items())
        )
        tolerations = tuple(
            _Toleration(
                key=t.get("key", ""),
                operator=t.get("operator", "Equal"),
                value=t.get("value", ""),
                effect=t.get("effect", ""),
            )
            for t in pod_spec.get("tolerations") or []
        )
        affinity = pod_spec.get("affinity") or {}
        node_affinity = (affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        node_terms = tuple(
            _NodeTerm(
                labels=tuple(_requirement(r) for r in term.get("matchExpressions") or []),
                fields=tuple(_requirement(r) for r in term.get("matchFields") or []),
            )
            for term in (node_affinity or {}).get("nodeSelectorTerms") or []
        )
        pod_affinity = tuple(
            _affinity_term(term, namespace=namespace)
            for term in (affinity.get("podAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or []
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise PermanentError(f"invalid pod scheduling constraints: {exc}") from exc
    priority = pod_spec.get("priority", 0)
    self_affine = all(
        (term.namespaces is None or namespace in term.namespaces) and term.selector.matches(labels)
        for term in pod_affinity
    )
    placement_key = json.dumps(
        [node_selector, pod_spec.get("tolerations") or [], node_affinity or {}],
        sort_keys=True,
        default=str,
    )
    # Pod affinity is left out: the scheduler adds the domains it resolved, so a gang
    # that may still go anywhere shares its class with any pod of the same shape.
    class_key = json.dumps([cpu, memory, gpu, placement_key])
    return _Template(
        cpu=cpu,
        memory=memory,
        gpu=gpu,
        priority=priority if isinstance(priority, int) else 0,
        node_selector=node_selector,
        node_terms=node_terms,
        tolerations=tolerations,
        pod_affinity=pod_affinity,
        self_affine=self_affine,
        placement_key=placement_key,
        class_key=class_key,
    )


def _requests(pod_spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """What the scheduler reserves: the containers' sum, or the largest init container."""

    def of(container: Mapping[str, Any]) -> tuple[int, int, int]:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}

        def amount(name: str, parse: Callable[[str | int | float], int]) -> int:
            # A limit without a request is the request, as the API server defaults it.
            value = requests.get(name, limits.get(name))
            return 0 if value is None else parse(value)

        return (
            amount("cpu", parse_cpu_millicores),
            amount("memory", parse_memory_bytes),
            amount(GPU_RESOURCE, parse_whole_count),
        )

    main = [of(c) for c in pod_spec.get("containers") or []]
    init = [of(c) for c in pod_spec.get("initContainers") or []]
    total = tuple(sum(values) for values in zip(*main, strict=True)) if main else (0, 0, 0)
    cpu, memory, gpu = (max([total[i], *(c[i] for c in init)]) for i in range(3))
    return cpu, memory, gpu


def _requirement(raw: Mapping[str, Any]) -> _Requirement:
    return _Requirement(
        key=raw["key"],
        operator=raw["operator"],
        values=tuple(str(v) for v in raw.get("values") or ()),
    )


def _affinity_term(raw: Mapping[str, Any], *, namespace: str) -> _AffinityTerm:
    selector = raw.get("labelSelector") or {}
    namespaces: frozenset[str] | None
    if raw.get("namespaceSelector") == {}:
        namespaces = None  # an empty namespace selector means every namespace
    else:
        namespaces = frozenset(raw.get("namespaces") or [namespace])
    return _AffinityTerm(
        selector=_Selector(
            match_labels=tuple(sorted((selector.get("matchLabels") or {}).items())),
            expressions=tuple(_requirement(r) for r in selector.get("matchExpressions") or []),
        ),
        topology_key=raw["topologyKey"],
        namespaces=namespaces,
    )


def _taint_dicts(raw: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    taints: list[dict[str, Any]] = []
    for taint in raw:
        if (
            not isinstance(taint, Mapping)
            or not taint.get("key")
            or taint.get("effect")
            not in (
                "NoSchedule",
                "PreferNoSchedule",
                "NoExecute",
            )
        ):
            raise ValueError(
                f"a taint needs a key and an effect NoSchedule|PreferNoSchedule|NoExecute: {taint!r}"
            )
        entry: dict[str, Any] = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value"):
            entry["value"] = str(taint["value"])
        taints.append(entry)
    return taints


# ---- small pure helpers ----------------------------------------------------------------


def _in_domains(node: _Node, domains: list[tuple[str, set[str]]]) -> bool:
    return all(node.labels.get(key) in values for key, values in domains)


def _placement_fits(template: _Template, node: _Node) -> bool:
    for taint in node.taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in template.tolerations):
            return False
    if not all(node.labels.get(k) == v for k, v in template.node_selector):
        return False
    return not template.node_terms or any(term.holds(node) for term in template.node_terms)


def _policy_action(rules: list[dict[str, Any]], pod: _Pod) -> tuple[str, str]:
    """The podFailurePolicy rule that decides a failed pod's fate: first match wins."""
    status = pod.obj["status"]
    namespace, name = pod.key
    for index, rule in enumerate(rules):
        action = str(rule.get("action", "Count"))
        on_exit = rule.get("onExitCodes")
        if on_exit is not None:
            for container in status.get("containerStatuses") or []:
                terminated = (container.get("state") or {}).get("terminated")
                if not terminated or terminated.get("exitCode", 0) == 0:
                    continue
                if on_exit.get("containerName") not in (None, container.get("name")):
                    continue
                code = terminated["exitCode"]
                listed = code in (on_exit.get("values") or [])
                if listed == (on_exit.get("operator") == "In"):
                    return action, (
                        f"Container {container.get('name')} for pod {namespace}/{name} failed with exit code "
                        f"{code} matching {action} rule at index {index}"
                    )
        elif rule.get("onPodConditions") is not None:
            for wanted in rule["onPodConditions"]:
                for condition in status.get("conditions") or []:
                    if condition.get("type") == wanted.get("type") and condition.get("status") == wanted.get(
                        "status", "True"
                    ):
                        return action, (
                            f"Pod {namespace}/{name} has condition {wanted.get('type')} matching {action} "
                            f"rule at index {index}"
                        )
    return "Count", ""


def _healthy(pod: _Pod) -> bool:
    return pod.phase == RUNNING and "deletionTimestamp" not in pod.obj["metadata"]


def _most_allocated(node: _Node, *, cpu: int, memory: int, gpu: int) -> float:
    """kube-scheduler's MostAllocated score: how full the node would be with the pod.

    GPUs count only for pods that ask for them, so CPU-only pods do not crowd onto GPU_RESOURCE nodes.
    """
    score = _used_fraction(node.cpu, node.free_cpu - cpu) + _used_fraction(
        node.memory, node.free_memory - memory
    )
    if gpu:
        score += _used_fraction(node.gpu, node.free_gpu - gpu)
    return score


def _used_fraction(total: int, free_after: int) -> float:
    return (total - free_after) / total if total > 0 else 1.0


def _set_condition(
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
        "lastTransitionTime": _timestamp(at),
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


def _waiting_status(container: Mapping[str, Any], *, reason: str, message: str) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": reason, "message": message}},
    }


def _host_ip(node_name: str) -> str:
    # A stable made-up address per node: enough for anything that only displays it.
    digest = sum(node_name.encode()) * 2654435761 % (1 << 16)
    return f"10.0.{digest >> 8}.{digest & 0xFF}"


@functools.lru_cache(maxsize=256)  # many objects change at one instant: format it once
def _timestamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _non_negative(name: str, value: timedelta) -> timedelta:
    if value < timedelta(0):
        raise ValueError(f"{name} must not be negative")
    return value


def _merge(target: dict[str, Any], changes: Mapping[str, Any]) -> None:
    """JSON merge patch: null deletes, objects merge, anything else replaces."""
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = _thaw(value)


def _discard(index: dict[str, dict[Key, None]], job_id: str, key: Key) -> None:
    keys = index.get(job_id)
    if keys is not None:
        keys.pop(key, None)
        if not keys:
            del index[job_id]


_NESTED = (dict, list)


def _json_copy(value: Any) -> Any:
    """A deep copy of the cluster's own JSON data (dicts, lists, scalars only).

    Several times faster than copy.deepcopy: lists are copied on every list call.
    """
    if type(value) is dict:
        copied = value.copy()
        for key, item in copied.items():
            if type(item) in _NESTED:
                copied[key] = _json_copy(item)
        return copied
    if type(value) is list:
        return [_json_copy(v) if type(v) in _NESTED else v for v in value]
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _thaw_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A caller's manifest as the cluster's own plain data; JSON's C codec does it fastest."""
    try:
        copied = json.loads(json.dumps(manifest))
    except (TypeError, ValueError):  # not JSON as it is (a Mapping that is not a dict, say)
        copied = _thaw(manifest)
    return copied if isinstance(copied, dict) else {}


def _thaw(value: Any) -> Any:
    """A deep copy of a caller's JSON-like data as plain dicts and lists."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _thaw(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [v if type(v) in _SCALARS else _thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def _object_view(obj: KubeObject) -> KubeObject:
    """A copy of a pod or Job that a caller may change without changing the cluster.

    Metadata and status are copied whole, by their known shape (flat maps, lists of
    flat maps, and the container states one level deeper), which is about twice as
    fast as a generic deep copy; lists copy every pod on every reconcile. The spec
    is copied one level deep: its nested parts (containers, affinity) never change
    after creation and are shared read-only, since copying them for every pod on
    every list would dominate a 10,000-job replay.
    """
    status = _copy_two_levels(obj.get("status") or {})
    container_statuses = status.get("containerStatuses")
    if container_statuses:
        status["containerStatuses"] = [
            {**entry, "state": {k: dict(v) for k, v in (entry.get("state") or {}).items()}}
            for entry in container_statuses
        ]
    return {
        **obj,
        "metadata": _copy_two_levels(obj["metadata"]),
        "spec": dict(obj.get("spec") or {}),
        "status": status,
    }


def _copy_two_levels(value: dict[str, Any]) -> dict[str, Any]:
    """Copy a map, its maps and lists, and the maps in those lists; deeper values are shared."""
    copied = value.copy()
    for key, item in copied.items():
        kind = type(item)
        if kind is dict:
            copied[key] = _json_copy(item)
        elif kind is list:
            copied[key] = [entry.copy() if type(entry) is dict else entry for entry in item]
    return copied
