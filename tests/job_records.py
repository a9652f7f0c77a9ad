"""Job records as the store holds them, for the tests that need one without running a job there."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from squall.core.jobs import Job, JobStatus, new_job


def job_record(job_id: str, *, status: JobStatus, reason: str, at: datetime, **fields: Any) -> Job:
    """The research team's "mnist" in its namespace, submitted and last updated `at`, put straight in
    `status` (no transitions, so no start or finish time); `fields` set the rest."""
    first, _ = new_job(job_id=job_id, name="mnist", team="research", namespace="team-research", at=at)
    return dataclasses.replace(first, status=status, reason=reason, **fields)


@dataclass
class StepReport:
    """Where a scale check's step says what it did (services/admission.py's Report), for tests
    that run admission alone."""

    done: dict[str, list[Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
