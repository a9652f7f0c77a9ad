"""The small interfaces the services depend on.

Production adapters (DynamoDB, the official kubernetes client, Auto Scaling,
EventBridge, EMF) and the local runtime's simulated ones implement these; the type
checker holds both to the same shape. Kubernetes objects cross this boundary as
plain dicts in the API's JSON shape (camelCase keys), exactly what
``kubectl get -o json`` prints, so the pure code parses one format only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from squall.jobs import Job, JobEvent, JobStatus
from squall.planner import GroupHealth

KubeObject = dict[str, Any]


class Clock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC now."""
        ...


class Cluster(Protocol):
    """What Squall asks of a Kubernetes cluster.

    Errors: RetryableError for 429/5xx/connection problems, PermanentError for the
    rest (NotFoundError for 404). Creating an object that exists already is success.
    """

    def create(self, manifest: KubeObject) -> bool:
        """Create a Job or Service; False when it existed already (idempotent)."""
        ...

    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        """Delete every Job and Service of a Squall job (pods go with their Jobs).

        Returns how many objects were deleted; 0 when nothing was left.
        """
        ...

    def list_jobs(self, *, namespace: str | None = None, job_id: str | None = None) -> list[KubeObject]:
        """batch/v1 Jobs managed by Squall, optionally of one namespace or one Squall job."""
        ...

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        job_id: str | None = None,
        node_name: str | None = None,
    ) -> list[KubeObject]:
        """Pods; with job_id only those of that Squall job, with node_name those bound to it."""
        ...

    def list_nodes(self) -> list[KubeObject]: ...

    def get_node(self, name: str) -> KubeObject | None: ...

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Strategic-merge patch of a node (cordon marker, unschedulable)."""
        ...

    def evict(self, *, namespace: str, name: str) -> bool:
        """Evict a pod through policy/v1 Eviction.

        True when the eviction was accepted or the pod is gone already; False when
        a PodDisruptionBudget refused it for now (HTTP 429): try again later.
        """
        ...


class ScaleRequests(Protocol):
    """Asks for a scale check soon (an EventBridge custom event in AWS)."""

    def request_scale_check(self, *, reason: str, job_ids: Sequence[str] = ()) -> None: ...


class MetricsSink(Protocol):
    """Metrics as the functions emit them (EMF in Lambda)."""

    def add(
        self, name: str, value: float, *, unit: str = "Count", dimensions: Mapping[str, str] | None = None
    ) -> None: ...


class JobStore(Protocol):
    """Jobs and their events (DynamoDB in AWS).

    Writes are conditional: ``create`` raises DuplicateJobError when the id exists,
    ``save`` raises ConflictError when the stored version is not the one the caller
    read. Either way nothing is half-written.
    """

    def create(self, job: Job, event: JobEvent) -> None: ...

    def save(self, job: Job, event: JobEvent) -> None:
        """Store `job` (version n+1) and its event if the stored version is still n."""
        ...

    def get(self, job_id: str) -> Job | None: ...

    def events(self, job_id: str) -> list[JobEvent]: ...

    def list_by_status(self, status: JobStatus, *, limit: int = 1000) -> list[Job]:
        """Jobs in one state, oldest submission first."""
        ...


class ScaleState(Protocol):
    """The autoscaler's lease, group health and decision log (DynamoDB in AWS)."""

    def acquire_lease(self, *, name: str, holder: str, now: datetime, duration: timedelta) -> bool: ...

    def release_lease(self, *, name: str, holder: str) -> None: ...

    def load_health(self) -> dict[str, GroupHealth]: ...

    def save_health(self, group: str, health: GroupHealth) -> None: ...

    def record_decision(
        self, *, at: datetime, trigger: str, dry_run: bool, plan: dict[str, Any], acted: dict[str, Any]
    ) -> str: ...
