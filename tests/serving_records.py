"""A model service's first record for tests: one replica of a job's model under its team's prefix."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from squall.core.serving import ModelService, ServiceEvent, new_service


def first_record(
    name: str,
    *,
    at: datetime,
    team: str = "research",
    job_id: str = "train-1",
    bucket: str = "squall-artifacts",
    **fields: Any,
) -> tuple[ModelService, ServiceEvent]:
    """DEPLOYING, version 1, serving s3://<bucket>/teams/<team>/outputs/<job id>; `fields` override the rest."""
    record: dict[str, Any] = {
        "team": team,
        "namespace": f"team-{team}",
        "job_id": job_id,
        "model_uri": f"s3://{bucket}/teams/{team}/outputs/{job_id}",
        "model_version": 1,
        "replicas": 1,
        "gpus": 0,
        "cpu": "1",
        "memory": "2Gi",
    }
    return new_service(name=name, at=at, **(record | fields))
