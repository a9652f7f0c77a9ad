"""Job records as the store holds them, for the tests that need one without running a job there."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from squall.core.jobs import Job, JobStatus


def job_record(job_id: str, *, status: JobStatus, reason: str, at: datetime, **fields: Any) -> Job:
    """The research team's "mnist" in its namespace, submitted and last updated `at`; `fields` set the rest."""
    return Job(
        id=job_id,
        name="mnist",
        team="research",
        namespace="team-research",
        status=status,
        reason=reason,
        submitted_at=at,
        updated_at=at,
        **fields,
    )
