"""Model services: a finished job's SavedModel served by TensorFlow Serving. Pure.

A model service is recorded like a job (see `core/jobs.py`): a record whose every
change is a transition yielding the new record and exactly one event, numbered by
the record's ``version`` so the store writes both under one condition.

States::

    DEPLOYING ──► SERVING ──► DEPLOYING (a replica lost: fewer ready than asked)
        │            │
        └──► FAILED ◄┘ (ModelNotFound, ModelLoadFailed, ImagePullBackOff, ProgressDeadlineExceeded, ...)
    any ──► STOPPED (squall unserve)
    STOPPED | FAILED ──► DEPLOYING (served again under the same name: the record goes on, its history kept)

A name is one service across the whole installation (`squall predict NAME` needs
nothing else); it is a DNS label, and names the Kubernetes Deployment, Service and
PodDisruptionBudget in the job's team namespace: ``<name>-model`` (`object_name`).

Those objects live in one cluster, the record's ``cluster`` (None on a record made
before there could be more than one: the first configured cluster). A new service's
cluster is chosen by `choose_serving_cluster`: where its replicas fit on ready room
now, else where its cluster's groups can buy the room, else the first cluster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from squall.core.errors import InvalidTransitionError
from squall.planner.demand import PodShape, shape_of
from squall.planner.fit import blocking_taints, fit_count, resource_shortfall
from squall.planner.inventory import free_of
from squall.planner.model import Node, NodeGroup, Pod, Vector


class ServiceStatus(StrEnum):
    DEPLOYING = "DEPLOYING"
    SERVING = "SERVING"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


# The states reconcile follows (it reads their Kubernetes objects on every run).
LIVE = frozenset({ServiceStatus.DEPLOYING, ServiceStatus.SERVING})

ALLOWED: dict[ServiceStatus, frozenset[ServiceStatus]] = {
    ServiceStatus.DEPLOYING: frozenset(
        {ServiceStatus.DEPLOYING, ServiceStatus.SERVING, ServiceStatus.FAILED, ServiceStatus.STOPPED}
    ),
    ServiceStatus.SERVING: frozenset(
        {ServiceStatus.DEPLOYING, ServiceStatus.SERVING, ServiceStatus.FAILED, ServiceStatus.STOPPED}
    ),
    ServiceStatus.FAILED: frozenset({ServiceStatus.DEPLOYING, ServiceStatus.STOPPED}),
    ServiceStatus.STOPPED: frozenset({ServiceStatus.DEPLOYING}),
}


class ServiceReason(StrEnum):
    """Reason codes on model service events; some take a suffix, e.g. ``Ready:2/2``."""

    REQUESTED = "Requested"  # the serve request was accepted, objects created
    SERVED_AGAIN = "ServedAgain"  # a STOPPED or FAILED name served again
    READY = "Ready"  # every asked replica is ready (``Ready:<ready>/<replicas>``)
    UNREADY = "Unready"  # fewer ready than asked (``Unready:<ready>/<replicas>``)
    OBJECTS_RECREATED = "ObjectsRecreated"  # reconcile found the Deployment (or Service, PDB) gone
    MODEL_NOT_FOUND = "ModelNotFound"  # no SavedModel at the model URI
    MODEL_LOAD_FAILED = "ModelLoadFailed"  # the server could not load it (crash loop)
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    CLUSTER_REFUSED = "ClusterRefused"  # the API server refused an object (PermanentError)
    UNSERVE_REQUESTED = "UnserveRequested"
    RECONCILE_ERROR = "ReconcileError"


@dataclass(frozen=True)
class ModelService:
    name: str
    team: str
    namespace: str
    job_id: str  # the job whose SavedModel is served
    model_uri: str  # s3://bucket/key of the SavedModel directory (the job's <outputUri>/<job id>)
    model_version: int  # the version TensorFlow Serving serves it as (/models/<name>/<version>)
    replicas: int
    gpus: int  # per replica (nvidia.com/gpu requests = limits)
    cpu: str  # per replica, a Kubernetes quantity as the serve request gave it
    memory: str  # per replica (requests = limits)
    status: ServiceStatus
    reason: str
    created_at: datetime
    updated_at: datetime
    version: int = 1  # the record's version: the number of its events
    message_id: str | None = None  # the queue message that asked for it (last serve)
    submitted_by: str | None = None
    ready_replicas: int = 0
    rest_url: str | None = None  # e.g. http://host:8501 (``/v1/models/<name>`` below it)
    grpc_target: str | None = None  # e.g. host:8500
    errors: tuple[dict[str, str], ...] = ()
    # the cluster its objects are in; None (a record from before clusters): the first configured
    cluster: str | None = None


@dataclass(frozen=True)
class ServiceEvent:
    name: str
    version: int
    at: datetime
    status: ServiceStatus
    previous: ServiceStatus | None
    reason: str
    message: str = ""


def new_service(*, name: str, at: datetime, **fields: Any) -> tuple[ModelService, ServiceEvent]:
    """A service's first record (DEPLOYING, version 1) and its first event.

    `fields` are the record's own (team, namespace, job_id, model_uri, model_version,
    replicas, gpus, cpu, memory, and optionally message_id, submitted_by).
    """
    service = ModelService(
        name=name,
        status=ServiceStatus.DEPLOYING,
        reason=ServiceReason.REQUESTED,
        created_at=at,
        updated_at=at,
        **fields,
    )
    event = ServiceEvent(
        name=name,
        version=1,
        at=at,
        status=ServiceStatus.DEPLOYING,
        previous=None,
        reason=ServiceReason.REQUESTED,
    )
    return service, event


def transition_service(
    service: ModelService,
    *,
    to: ServiceStatus,
    reason: str,
    at: datetime,
    message: str = "",
    **changes: Any,
) -> tuple[ModelService, ServiceEvent]:
    """Move a service to `to` (with field changes), or raise InvalidTransitionError naming both states."""
    if to not in ALLOWED[service.status]:
        raise InvalidTransitionError(f"model service {service.name}: {service.status} -> {to} is not allowed")
    updated = dataclasses.replace(
        service, status=to, reason=reason, updated_at=at, version=service.version + 1, **changes
    )
    event = ServiceEvent(
        name=service.name,
        version=updated.version,
        at=at,
        status=to,
        previous=service.status,
        reason=reason,
        message=message,
    )
    return updated, event


def object_name(name: str) -> str:
    """The name of a model service's Deployment, Service and PodDisruptionBudget: ``<name>-model``.

    A job's objects share the team namespace, named ``<job-id>-<type>-<index>``: they
    always end in a digit, these never do, so no job and model service can ever name
    the same Service (``model-<name>``, the name before, could: job ``model-x``'s
    worker 0 and service ``x-worker-0``). Objects made under that older name are still
    found, and removed, by their labels.
    """
    return f"{name}{OBJECT_SUFFIX}"


def model_path(*, name: str, model_version: int) -> str:
    """Where the serving pod keeps the SavedModel: TensorFlow Serving's base path plus the version."""
    return f"{MODEL_BASE_PATH}/{name}/{model_version}"


@dataclass(frozen=True)
class ClusterRoom:
    """One cluster as `choose_serving_cluster` sees it: its nodes and pods, its groups (planner models).

    ``reachable`` False: its API did not answer; it is chosen only when no cluster did.
    """

    name: str
    nodes: Sequence[Node] = ()
    pods: Sequence[Pod] = ()
    groups: Sequence[NodeGroup] = ()  # the groups whose nodes join this cluster
    reachable: bool = True


def choose_serving_cluster(replica: Pod, *, replicas: int, clusters: Sequence[ClusterRoom]) -> str:
    """The cluster a new model service goes to, its clusters given in configuration order.

    The first reachable one where all `replicas` pods like `replica` fit on ready,
    schedulable nodes now; else the first whose ready room and whose groups' room to
    grow (up to their max size) together hold them; else the first reachable one, else
    the first. Capacity being bought is counted without the groups' health: the scale
    check, not this choice, decides which group grows.
    """
    if not clusters:
        raise ValueError("choose a serving cluster among none")
    shape = shape_of(replica, {})
    reachable = [c for c in clusters if c.reachable]
    ready = {c.name: ready_room(shape, nodes=c.nodes, pods=c.pods) for c in reachable}
    for cluster in reachable:
        if ready[cluster.name] >= replicas:
            return cluster.name
    for cluster in reachable:
        if ready[cluster.name] + room_to_grow(shape, groups=cluster.groups) >= replicas:
            return cluster.name
    return (reachable or clusters)[0].name


_NOTHING: Vector = (0, 0, 0, 0)


def ready_room(shape: PodShape, *, nodes: Sequence[Node], pods: Sequence[Pod]) -> int:
    """How many pods of the shape fit now on the ready, schedulable nodes, beside the pods bound there."""
    used: dict[str, Vector] = {}
    for pod in pods:
        if pod.is_active and pod.node_name is not None:
            cpu, memory, gpu, count = used.get(pod.node_name, _NOTHING)
            took = pod.requests
            used[pod.node_name] = (cpu + took.cpu, memory + took.memory, gpu + took.gpu, count + 1)
    room = 0
    for node in nodes:
        if not node.ready or node.unschedulable:
            continue
        if shape.placement_mismatch(node.labels, blocking_taints(node.taints, ignore_transient=False)):
            continue
        free = free_of(node.allocatable.vector(), used.get(node.name, _NOTHING))
        room += fit_count(free, shape.request)
    return room


def room_to_grow(shape: PodShape, *, groups: Sequence[NodeGroup]) -> int:
    """How many pods of the shape the nodes the groups may still add (max size less desired) would hold."""
    room = 0
    for group in groups:
        taints = blocking_taints(group.taints, ignore_transient=True)
        if shape.placement_mismatch(group.template_labels(), taints) is not None:
            continue
        if resource_shortfall(shape.request, group.allocatable.vector()) is not None:
            continue
        room += max(0, group.max_size - group.desired) * fit_count(group.allocatable.vector(), shape.request)
    return room


# What a record observed of its objects: cleared when they go (STOPPED, FAILED) or are made anew.
CLEARED_OBSERVATIONS: Mapping[str, Any] = MappingProxyType(
    {"ready_replicas": 0, "rest_url": None, "grpc_target": None}
)
OBJECT_SUFFIX = "-model"  # ends in a letter: never the end of a job's object name
# The objects' names before OBJECT_SUFFIX (``model-<name>``): a service made then keeps
# them until something of it is made again (services/serving.py), found by its labels.
LEGACY_OBJECT_PREFIX = "model-"
MAX_NAME_LENGTH = 40  # object_name and the pods' generated names stay within Kubernetes' 63
MODEL_BASE_PATH = "/models"
REST_PORT = 8501
GRPC_PORT = 8500
