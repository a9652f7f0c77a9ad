"""What the Kubernetes objects of one Squall job say about it. Pure.

The reconcile function lists Jobs and pods once, groups them by job id, and asks
`observe` for each job; the answer is turned into a state transition.

It also says when the job's run really began and ended, as Kubernetes recorded
them, for the record, its events and the metrics (a reconcile run notices a change
up to a minute late). A job runs once every replica runs: its start is the latest
of its replicas' starts, each replica's the earliest start of its pods' containers
(`state.running.startedAt`, `state.terminated.startedAt`, `lastState.terminated.startedAt`),
or, for a replica Job that completed with no pod left, the Job's `status.startTime`.
Not the Job's startTime first: Squall's Jobs are created suspended, and a resumed
Job's startTime is when it was let go, before its pod is bound and its image pulled.
Its end: the deciding Job's `status.completionTime` (or its Complete condition's
lastTransitionTime), or its Failed condition's lastTransitionTime.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from squall.conventions import JOB_ID_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from squall.core.jobs import JobStatus, Reason

IMAGE_ERRORS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"})


@dataclass(frozen=True)
class Observation:
    """The state the cluster implies, with the reason code and how many retries were used."""

    status: JobStatus | None  # None: no Kubernetes objects at all
    reason: str
    message: str = ""
    retries_used: int = 0
    running_replicas: int = 0
    # When the run began (every replica running) and ended, as Kubernetes recorded them;
    # None: it has not (or the objects do not say).
    started_at: datetime | None = None
    finished_at: datetime | None = None


def job_id_of(obj: dict[str, Any]) -> str | None:
    labels = obj.get("metadata", {}).get("labels") or {}
    value = labels.get(JOB_ID_LABEL)
    return value if isinstance(value, str) else None


def _conditions(k8s_job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        c.get("type", ""): c
        for c in (k8s_job.get("status", {}).get("conditions") or [])
        if c.get("status") == "True"
    }


def _reruns(k8s_job: dict[str, Any]) -> int:
    failed = int(k8s_job.get("status", {}).get("failed") or 0)
    if "Failed" in _conditions(k8s_job) and failed > 0:
        failed -= 1
    return failed


def _is_primary(k8s_job: dict[str, Any], *, has_chief: bool) -> bool:
    labels = k8s_job.get("metadata", {}).get("labels") or {}
    kind = labels.get(REPLICA_TYPE_LABEL)
    if has_chief:
        return kind == "chief"
    return kind == "worker" and labels.get(REPLICA_INDEX_LABEL) == "0"


def _waiting_reason(pod: dict[str, Any]) -> str | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_ERRORS:
            return str(waiting["reason"])
    return None


def _is_running(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod.get("metadata", {}).get(
        "deletionTimestamp"
    )


def observe(
    *, expected_replicas: int, k8s_jobs: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]
) -> Observation:
    """Derive a job's state from its replica Jobs and their pods.

    Success: the chief's Job completes, else worker 0's. Failure: any replica Job
    fails. Running: every replica has a running pod (or its Job completed).
    """
    if not k8s_jobs:
        return Observation(status=None, reason=Reason.OBJECTS_MISSING)
    has_chief = any(
        (j.get("metadata", {}).get("labels") or {}).get(REPLICA_TYPE_LABEL) == "chief" for j in k8s_jobs
    )
    # Each replica's Job re-runs its own pod up to backoffLimit (the spec's retries):
    # the job has used as many retries as its most re-run replica. A node lost under
    # two replicas is one loss, not two. The pod that failed a Job was not re-run.
    retries_used = max((_reruns(j) for j in k8s_jobs), default=0)

    for k8s_job in k8s_jobs:
        failed = _conditions(k8s_job).get("Failed")
        if failed:
            reason = str(failed.get("reason") or Reason.BACKOFF_LIMIT_EXCEEDED)
            if reason == "PodFailurePolicy":
                reason = Reason.APPLICATION_ERROR
            elif reason == Reason.BACKOFF_LIMIT_EXCEEDED and retries_used:
                reason = Reason.RETRIES_EXHAUSTED
            return Observation(
                status=JobStatus.FAILED,
                reason=reason,
                message=f"{k8s_job['metadata']['name']}: {failed.get('message', '')}".strip(),
                retries_used=retries_used,
                started_at=run_started(k8s_jobs, pods),
                finished_at=parse_time(failed.get("lastTransitionTime")),
            )
    primary = [j for j in k8s_jobs if _is_primary(j, has_chief=has_chief)]
    if primary and (complete := _conditions(primary[0]).get("Complete")):
        return Observation(
            status=JobStatus.SUCCEEDED,
            reason=Reason.COMPLETED,
            retries_used=retries_used,
            started_at=run_started(k8s_jobs, pods),
            finished_at=parse_time((primary[0].get("status") or _NONE).get("completionTime"))
            or parse_time(complete.get("lastTransitionTime")),
        )

    for pod in pods:
        waiting = _waiting_reason(pod)
        if waiting:
            name = pod.get("metadata", {}).get("name", "?")
            return Observation(
                status=JobStatus.QUEUED,
                reason=Reason.IMAGE_PULL_BACK_OFF,
                message=f"{name}: {waiting}",
                retries_used=retries_used,
            )

    completed = sum(1 for j in k8s_jobs if "Complete" in _conditions(j))
    running = completed + sum(1 for p in pods if _is_running(p))
    if len(k8s_jobs) < expected_replicas:
        return Observation(
            status=JobStatus.QUEUED,
            reason=Reason.OBJECTS_MISSING,
            message=f"{len(k8s_jobs)} of {expected_replicas} replica Jobs exist",
            retries_used=retries_used,
            running_replicas=running,
        )
    if running >= expected_replicas:
        return Observation(
            status=JobStatus.RUNNING,
            reason=Reason.STARTED,
            retries_used=retries_used,
            running_replicas=running,
            started_at=run_started(k8s_jobs, pods),
        )
    return Observation(
        status=JobStatus.QUEUED,
        reason=Reason.WAITING_FOR_CAPACITY,
        retries_used=retries_used,
        running_replicas=running,
    )


# ---- when the run began and ended ------------------------------------------------------------

_NONE: Mapping[str, Any] = {}


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time as the API server writes it (``2026-05-01T09:30:00Z``), in UTC; None for anything else.

    Another offset is turned to UTC: the time goes on the record beside times kept in UTC.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _replica_of(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    labels = (obj.get("metadata") or _NONE).get("labels") or _NONE
    kind, index = labels.get(REPLICA_TYPE_LABEL), labels.get(REPLICA_INDEX_LABEL)
    return (str(kind), str(index)) if kind is not None and index is not None else None


def _container_starts(pod: Mapping[str, Any]) -> Iterable[datetime]:
    for entry in (pod.get("status") or _NONE).get("containerStatuses") or ():
        if not isinstance(entry, Mapping):
            continue
        for state in (entry.get("state"), entry.get("lastState")):
            if not isinstance(state, Mapping):
                continue
            for kind in ("running", "terminated"):
                found = state.get(kind)
                if isinstance(found, Mapping) and (at := parse_time(found.get("startedAt"))) is not None:
                    yield at


def run_started(k8s_jobs: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]) -> datetime | None:
    """When every replica had started (the latest replica's first container start); None: one has not.

    A replica Job that completed with no pod left to say when it ran counts from its
    ``status.startTime``.
    """
    first: dict[tuple[str, str], datetime] = {}
    for pod in pods:
        replica = _replica_of(pod)
        if replica is None:
            continue
        for at in _container_starts(pod):
            if replica not in first or at < first[replica]:
                first[replica] = at
    starts: list[datetime] = []
    for k8s_job in k8s_jobs:
        replica = _replica_of(k8s_job)
        start = first.get(replica) if replica is not None else None
        if start is None and "Complete" in _conditions(k8s_job):
            start = parse_time((k8s_job.get("status") or _NONE).get("startTime"))
        if start is None:
            return None
        starts.append(start)
    return max(starts, default=None)
