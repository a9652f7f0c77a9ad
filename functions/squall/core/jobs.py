"""Job records and their state machine. Pure: no I/O, time is passed in.

Every change to a job is a transition (or a note, which keeps the state) that
yields the new record and exactly one event. The record's ``version`` numbers the
events, so the store can write both under one condition: a lost race or a
duplicate delivery can neither create a second job nor drop or repeat an event.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from squall.core.errors import InvalidTransitionError
from squall.core.metrics import JobMetrics


class JobStatus(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.REJECTED})

# QUEUED -> QUEUED and RUNNING -> QUEUED happen when a pod is lost with a node and
# Kubernetes runs it again: the job waits for capacity once more.
ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset(
        {JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.RUNNING: frozenset(
        {JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
    JobStatus.REJECTED: frozenset(),
}


class Reason(StrEnum):
    """Reason codes on job events. Some take a suffix, e.g. ``GangReleased:us-west-2``."""

    SUBMITTED = "Submitted"
    SWEEP_SUBMITTED = "SweepSubmitted"
    INVALID_SPEC = "InvalidSpec"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    WAITING_FOR_TRIAL_SLOT = "WaitingForTrialSlot"
    REGION_FALLBACK = "RegionFallback"
    STARTED = "Started"
    COMPLETED = "Completed"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = (
        "DeadlineExceeded"  # Kubernetes' own (activeDeadlineSeconds), passed through by kubestatus
    )
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    APPLICATION_ERROR = "ApplicationError"
    NODE_LOST = "NodeLost"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    OBJECTS_MISSING = "ObjectsMissing"
    CLUSTER_REFUSED = "ClusterRefused"
    # the cluster its record names is no longer in the configuration
    CLUSTER_NOT_CONFIGURED = "ClusterNotConfigured"
    CANCEL_REQUESTED = "CancelRequested"
    TRIALS_FINISHED = "TrialsFinished"
    GANG_RELEASED = "GangReleased"
    SENDER_NOT_ALLOWED = "SenderNotAllowed"
    INVALID_STORED_SPEC = "InvalidStoredSpec"
    RECONCILE_ERROR = "ReconcileError"
    SCALE_CHECK_ERROR = "ScaleCheckError"
    # admission: waiting in the queue (with its position), held by the team's quota, let run
    QUEUED = "Queued"
    QUOTA_EXCEEDED = "QuotaExceeded"
    BUDGET_EXCEEDED = "BudgetExceeded"  # held: its team's spend this month plus its worst case passes the budget
    PREEMPTED = "Preempted"  # Preempted:by <job>: back in the queue to make room for a job far above it
    # placed: the record says where (cluster, region) before its objects are made there
    PLACED = "Placed"
    ADMITTED = "Admitted"
    # a sweep's trial stopped by its early stopping rule (it ends SUCCEEDED)
    EARLY_STOPPED = "EarlyStopped"
    BEST_TRIAL = "BestTrial"  # a sweep's best trial changed (a note: the sweep's state stays)


def is_terminal(status: JobStatus) -> bool:
    return status in TERMINAL


@dataclass(frozen=True)
class Job:
    id: str
    name: str
    team: str
    namespace: str
    status: JobStatus
    reason: str
    submitted_at: datetime
    updated_at: datetime
    version: int = 1
    spec: dict[str, Any] = field(default_factory=dict)
    errors: tuple[dict[str, str], ...] = ()
    parent_id: str | None = None
    trial_ids: tuple[str, ...] = ()
    message_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    gpus: int = 0
    replicas: int = 0
    retries_used: int = 0
    max_retries: int = 0
    # The SQS SenderId of the message that submitted it (the principal's unique id and session).
    submitted_by: str | None = None
    # Where admission placed it (set together; None while it waits in the queue).
    cluster: str | None = None
    region: str | None = None
    priority: int = 0
    # Back in the queue after its pods were lost (admission keeps its place and says so).
    requeued: bool = False
    # The scheduling part of its replicas, compact JSON (core/queue.py queue_shape); "" for none.
    queue_shape: str = ""
    # Admission created its Kubernetes objects in `cluster` (a PLACED entry until then).
    objects_created: bool = False
    # While queued, when it will start at the latest (from declared maxRuntimes, if nothing
    # of higher priority arrives) and most likely (from how long its team's jobs really
    # run); the first estimate made after submission is kept beside the latest.
    starts_by: datetime | None = None
    likely_start: datetime | None = None
    first_starts_by: datetime | None = None
    first_likely_start: datetime | None = None
    # What it cost in dollars (so far while running, final once it ended), its rate while
    # running (dollars per hour) and what spot capacity saved against on-demand prices.
    cost: float | None = None
    cost_rate: float | None = None
    spot_savings: float | None = None
    # Run time of earlier runs it was preempted from (kept: it resumes from its checkpoint),
    # and when its trainer last reported a checkpoint.
    ran_seconds: float = 0.0
    checkpoint_at: datetime | None = None
    # What its code reported in `squall-metric` lines (core/metrics.py), written by reconcile
    # without a new version (JobStore.set_metrics); a sweep's best trial so far.
    metrics: JobMetrics | None = None
    best_trial: str | None = None

    @property
    def is_sweep(self) -> bool:
        return bool(self.trial_ids)


@dataclass(frozen=True)
class JobEvent:
    job_id: str
    version: int
    at: datetime
    status: JobStatus
    previous: JobStatus | None
    reason: str
    message: str = ""


def reason_code(reason: Reason, detail: str | None = None) -> str:
    return f"{reason.value}:{detail}" if detail else reason.value


def new_job(
    *,
    job_id: str,
    name: str,
    team: str,
    namespace: str,
    at: datetime,
    status: JobStatus = JobStatus.QUEUED,
    reason: str = Reason.SUBMITTED,
    message: str = "",
    **fields: Any,
) -> tuple[Job, JobEvent]:
    """A job's first record and its first event (version 1)."""
    if status not in (JobStatus.QUEUED, JobStatus.REJECTED, JobStatus.RUNNING):
        raise InvalidTransitionError(f"a job cannot start in {status}")
    job = Job(
        id=job_id,
        name=name,
        team=team,
        namespace=namespace,
        status=status,
        reason=reason,
        submitted_at=at,
        updated_at=at,
        finished_at=at if status in TERMINAL else None,
        **fields,
    )
    return job, JobEvent(
        job_id=job_id, version=1, at=at, status=status, previous=None, reason=reason, message=message
    )


def transition(
    job: Job,
    *,
    to: JobStatus,
    reason: str,
    at: datetime,
    message: str = "",
    happened_at: datetime | None = None,
    **changes: Any,
) -> tuple[Job, JobEvent]:
    """Move a job to `to`, or raise InvalidTransitionError naming both states.

    `at`: when it is recorded (the record's ``updated_at``); `happened_at`: when the
    change really happened, if earlier (a job's run starting or ending, as Kubernetes
    recorded it): the event's time, and the job's ``started_at`` or ``finished_at``.
    """
    if to not in ALLOWED[job.status]:
        raise InvalidTransitionError(f"job {job.id}: {job.status} -> {to} is not allowed")
    when = at if happened_at is None else happened_at
    updates: dict[str, Any] = {"status": to, "reason": reason, "updated_at": at, "version": job.version + 1}
    if to is JobStatus.RUNNING and job.started_at is None:
        updates["started_at"] = when
    if to in TERMINAL:
        updates["finished_at"] = when
    updates.update(changes)
    updated = dataclasses.replace(job, **updates)
    event = JobEvent(
        job_id=job.id,
        version=updated.version,
        at=when,
        status=to,
        previous=job.status,
        reason=reason,
        message=message,
    )
    return updated, event


def note(job: Job, *, reason: str, at: datetime, message: str = "") -> tuple[Job, JobEvent]:
    """An event that explains where a job is without changing its state.

    Notes on finished jobs are refused like any transition out of a final state.
    """
    if is_terminal(job.status):
        raise InvalidTransitionError(f"job {job.id} is {job.status}; no further events")
    return transition(job, to=job.status, reason=reason, at=at, message=message)
