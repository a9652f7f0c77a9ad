"""What admission reads the queue as: the teams' shares, replica Jobs and queued jobs. Pure.

Their own module, so that the queue's order (queue_order.py) and admission
(admission.py) both import them and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from squall.planner.model import Pod, require_aware


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
class TeamBudget:
    """A team's monthly budget in dollars, and what it has spent in this calendar month so far."""

    monthly: float
    spent: float = 0.0

    def __post_init__(self) -> None:
        if not self.monthly > 0:
            raise ValueError("a team's monthly budget must be positive")


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
    admitted_region: str | None = None  # a site: "<cluster>/<region>" when read for one of several clusters
    # Its declared run time (activeDeadlineSeconds: counted from its start); None: not declared.
    max_runtime: timedelta | None = None
    started_at: datetime | None = None  # status.startTime: when it was let go (admission resumes it)
    finished_at: datetime | None = None  # status.completionTime, or when its Failed condition came
    # The pod its template describes, as a pending pod named after the Job.
    pod: Pod

    def __post_init__(self) -> None:
        require_aware(f"job {self.name} submitted_at", self.submitted_at)
        require_aware(f"job {self.name} started_at", self.started_at)
        require_aware(f"job {self.name} finished_at", self.finished_at)

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
    gpus: int  # all replicas together
    max_runtime: timedelta | None = None  # declared; None: not known

    def order_key(self) -> tuple[bool, datetime, str]:
        return (not self.requeued, self.submitted_at or _EARLIEST, self.job_id)


_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
