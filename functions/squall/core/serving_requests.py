"""Whether a serve request can be met, and how: the one check intake and the CLI share. Pure.

A job's model is where its trainer exported it, ``<outputUri>/<job id>`` (the worker's
``SQUALL_OUTPUT_URI`` joined with ``SQUALL_JOB_ID``). The serving pod reads it under the
team's Pod Identity role, which reads only ``teams/<team>/`` of a bucket, so a model
elsewhere is refused here, before anything is created, rather than failing in the pod.

`plan_serve` raises SpecError naming the field (``job`` or ``name``) and why, or says
what to do: create a new service, serve an ended name again, or recognise a redelivered
message. Team rules (who may send for the job's team) stay with intake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from squall.core.job_outputs import split_s3_uri
from squall.core.jobs import Job, JobStatus
from squall.core.serving import (
    CLEARED_OBSERVATIONS,
    LIVE,
    ModelService,
    ServiceEvent,
    ServiceReason,
    ServiceStatus,
    new_service,
    transition_service,
)
from squall.core.spec import Issue, ServeCommand, SpecError

SAVED_MODEL_FILE = "saved_model.pb"


class ServeAction(StrEnum):
    CREATE = "create"  # no service of this name yet
    SERVE_AGAIN = "serve-again"  # the name is STOPPED or FAILED: its record goes on
    REDELIVERY = "redelivery"  # this very message made the service already: nothing to do


@dataclass(frozen=True)
class ServePlan:
    action: ServeAction
    command: ServeCommand
    job_id: str
    team: str
    namespace: str
    model_uri: str
    existing: ModelService | None = None

    @property
    def name(self) -> str:
        return self.command.name


def team_prefix(team: str) -> str:
    """The key prefix of a bucket that a team's role reads and writes."""
    return f"teams/{team}/"


def model_uri(*, output_uri: str, job_id: str) -> str:
    """Where a job's trainer exported its SavedModel: ``<outputUri>/<job id>``."""
    return f"{output_uri.rstrip('/')}/{job_id}"


def in_team_prefix(uri: str, *, team: str) -> bool:
    """Whether an s3:// URI lies under ``teams/<team>/`` of its bucket, with nothing that could climb out.

    S3 keys are not paths, but the tools that copy them may treat them so: an empty,
    ``.`` or ``..`` component is refused, as is anything but the prefix and a name below it.
    """
    try:
        _, key = split_s3_uri(uri)
    except ValueError:
        return False
    prefix = team_prefix(team)
    rest = key.removeprefix(prefix)
    if rest == key or not rest.strip("/"):
        return False
    return all(part not in ("", ".", "..") for part in rest.rstrip("/").split("/"))


def job_model_uri(job: Job) -> str | None:
    """The model URI of a job, from its recorded spec's outputUri; None when it has none."""
    output_uri = job.spec.get("outputUri")
    if not isinstance(output_uri, str) or not output_uri:
        return None
    return model_uri(output_uri=output_uri, job_id=job.id)


def plan_serve(
    command: ServeCommand,
    *,
    job: Job | None,
    existing: ModelService | None,
    message_id: str | None,
    has_saved_model: Callable[[str], bool],
) -> ServePlan:
    """What serving `command` takes, or SpecError naming why it cannot be served.

    `job` is the record of ``command.job`` (None when there is none), `existing` the
    record of ``command.name``. `has_saved_model(uri)` asks whether ``<uri>/saved_model.pb``
    exists; it is asked last, once every check on the records has passed.
    """
    if existing is not None and message_id is not None and existing.message_id == message_id:
        # The same message again (SQS delivers at least once): what it asked for exists.
        return ServePlan(
            action=ServeAction.REDELIVERY,
            command=command,
            job_id=existing.job_id,
            team=existing.team,
            namespace=existing.namespace,
            model_uri=existing.model_uri,
            existing=existing,
        )
    if job is None:
        raise _refused("job", f"no job {command.job}")
    if job.status is not JobStatus.SUCCEEDED:
        raise _refused("job", f"{job.id} is {job.status}; only a SUCCEEDED job's model can be served")
    if job.is_sweep or job.spec.get("sweep") is not None:
        raise _refused(
            "job", f"{job.id} is a sweep; serve one of its trials (squall describe {job.id} lists them)"
        )
    uri = job_model_uri(job)
    if uri is None:
        raise _refused("job", f"{job.id} has no outputUri: its trainer exported no model to serve")
    if not in_team_prefix(uri, team=job.team):
        raise _refused(
            "job",
            f"its model {uri} is outside the team's prefix {team_prefix(job.team)} of its bucket; "
            f"team {job.team}'s role reads only there",
        )
    if existing is not None and existing.status in LIVE:
        raise _refused(
            "name", f"{existing.name} is already serving job {existing.job_id} ({existing.status})"
        )
    if existing is not None and existing.team != job.team:
        # A name stays with its team: serving it again from another team's namespace
        # would leave the old namespace's objects out of the reconciler's sight.
        raise _refused("name", f"{existing.name} belongs to team {existing.team}; choose another name")
    if not has_saved_model(uri):
        raise _refused("job", f"no SavedModel at {uri} ({uri}/{SAVED_MODEL_FILE} does not exist)")
    return ServePlan(
        action=ServeAction.CREATE if existing is None else ServeAction.SERVE_AGAIN,  # not LIVE: ended
        command=command,
        job_id=job.id,
        team=job.team,
        namespace=job.namespace,
        model_uri=uri,
        existing=existing,
    )


def serve_record(
    plan: ServePlan, *, at: datetime, message_id: str | None, submitted_by: str | None
) -> tuple[ModelService, ServiceEvent]:
    """The record a CREATE or SERVE_AGAIN plan writes (DEPLOYING) and its event.

    Serving a name again keeps its record and history: the transition back to
    DEPLOYING replaces what the request decides and clears what the last run observed.
    """
    command = plan.command
    # What the request decides, on a new record and on one served again alike.
    requested: dict[str, Any] = {
        "team": plan.team,
        "namespace": plan.namespace,
        "job_id": plan.job_id,
        "model_uri": plan.model_uri,
        "model_version": command.model_version,
        "replicas": command.replicas,
        "gpus": command.resources.gpu,
        "cpu": command.resources.cpu,
        "memory": command.resources.memory,
        "message_id": message_id,
        "submitted_by": submitted_by,
    }
    if plan.action is ServeAction.CREATE:
        return new_service(name=command.name, at=at, **requested)
    if plan.action is ServeAction.SERVE_AGAIN and plan.existing is not None:
        # ... and what the last run observed, cleared.
        return transition_service(
            plan.existing,
            to=ServiceStatus.DEPLOYING,
            reason=ServiceReason.SERVED_AGAIN,
            at=at,
            message=f"job {plan.job_id}, model version {command.model_version}",
            **requested,
            **CLEARED_OBSERVATIONS,
            errors=(),
        )
    raise ValueError(f"a {plan.action} plan writes no record")


def _refused(field: str, message: str) -> SpecError:
    return SpecError([Issue(field, message)])
