"""Intake: one queue message in, one job (or model service) recorded; a job's record is its queue entry.

Order matters for "nothing lost, nothing twice": the job record is written first
under a condition (so a second delivery finds it), with what admission needs of it
(its queue shape, core/queue.py), which puts it in the job table's queue index; then a
scale check is requested. No Kubernetes object is made here: admission (the scale
check) chooses a cluster and a region for the whole gang and creates them there. A
redelivery of the same message finds the record and asks for the check again; a
different message reusing a client id is reported as a duplicate and records nothing.
A cancel deletes a placed job's objects in the cluster its record names.

A serve message goes the same way (`core/serving_requests.plan_serve` decides whether
it can be met): the model service's record first, then its Deployment, Service and
PodDisruptionBudget. A refused request records no service and creates no object; it is
a rejected message like an invalid spec. A name that is STOPPED or FAILED is served again
on its record, so its history goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from aws_lambda_powertools import Logger

from squall.core import manifests
from squall.core.errors import ConflictError, DuplicateJobError, ItemTooLargeError, PermanentError
from squall.core.jobs import Job, JobStatus, Reason, is_terminal, new_job, note, transition
from squall.core.queue import queue_shape
from squall.core.search import choose_parameters
from squall.core.serving import (
    CLEARED_OBSERVATIONS,
    LIVE,
    ModelService,
    ServiceReason,
    ServiceStatus,
    transition_service,
)
from squall.core.serving_requests import ServeAction, plan_serve, serve_record
from squall.core.settings import may_submit, names_no_submitters
from squall.core.spec import (
    DEFAULT_MAX_RUNTIME_LIMIT,
    DNS_LABEL,
    CancelCommand,
    Issue,
    JobSpec,
    ServeCommand,
    SpecError,
    UnserveCommand,
    decode_body,
    derive_job_id,
    expand_sweep,
    format_parameter,
    parse_message,
    recorded,
    with_parameters,
)
from squall.core.telemetry import SERVICE, Metric
from squall.ports import Clock, Cluster, JobStore, MetricsSink
from squall.services.costs import JobCosting, unpriced
from squall.services.serving import ModelServing
from squall.services.versioned import CONFLICT_RETRIES, update_record

logger = Logger(service=SERVICE, child=True)

# A rejected body is kept for the user, as JSON text of at most this many bytes; with
# the bounded issues (spec.MAX_ISSUES_JSON_BYTES) a REJECTED record stays far inside
# DynamoDB's 400 KB item limit.
MAX_RECORDED_BODY = 32 * 1024
MAX_EVENT_MESSAGE = 2000
MAX_NOTE = 1000  # a reason's message noted by the scale check
# SQS's largest message body; nothing larger can come from the queue, and the work
# spent on a body is bounded by its size.
MAX_BODY_CHARS = 1024 * 1024


class MalformedMessage(PermanentError):
    """A body that is not JSON at all: it goes to the dead-letter queue, not to the job table."""


class IntakeOutcome(StrEnum):
    CREATED = "created"
    REDELIVERED = "redelivered"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not-found"
    ALREADY_FINISHED = "already-finished"
    FAILED = "failed"
    STOPPED = "stopped"  # a model service unserved


@dataclass(frozen=True)
class IntakeResult:
    outcome: IntakeOutcome
    job_id: str  # for a serve: the job served; for an unserve: ""
    errors: tuple[dict[str, str], ...] = ()
    name: str | None = None  # the model service a serve or unserve was about


@dataclass(frozen=True)
class IntakeConfig:
    teams: Mapping[str, str]  # team -> namespace
    registries: Sequence[str]
    ttl_after_finished: timedelta = manifests.DEFAULT_TTL_AFTER_FINISHED
    max_runtime_limit: timedelta = DEFAULT_MAX_RUNTIME_LIMIT
    # team -> unique ids of the principals (SQS SenderId, before any ':') that may
    # submit, cancel, serve or unserve for it. Empty: every team is open to every
    # sender; otherwise a team not listed here takes nobody (core/settings.py may_submit).
    submitters: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass
class Intake:
    store: JobStore
    # cluster name -> its API: cancels delete a job's objects in the one its record names
    clusters: Mapping[str, Cluster]
    clock: Clock
    metrics: MetricsSink
    config: IntakeConfig
    # jobs put in the queue in this batch (and model services, by name, whose objects were
    # created) that wait for capacity: the handler asks for one scale check for them all
    waiting: list[str] = field(default_factory=list)
    # model services: None where this runtime has none (serve requests are then refused)
    serving: ModelServing | None = None
    # a cancelled running job's cost (recorded, added to its team's month); None: not counted
    costs: JobCosting | None = None

    def handle(self, *, body: str, message_id: str, sender_id: str | None = None) -> IntakeResult:
        """Process one queue message. Raises RetryableError when it should be redelivered.

        `sender_id` is the message's SQS SenderId: for a team with configured
        submitters it must be one of them (the part before any ':').
        """
        sender_id = sender_id[:256] if sender_id else None  # SQS's are short; no other text is kept
        if len(body) > MAX_BODY_CHARS:
            error = SpecError(
                [Issue("(body)", f"has {len(body)} characters; a message body is at most 1 MiB")]
            )
            return self._reject(data=None, body=body, message_id=message_id, error=error, sender_id=sender_id)
        try:
            data, repeated_keys = decode_body(body)
        except (ValueError, RecursionError) as exc:
            # JSONDecodeError, Python's int-string limit, or nesting deeper than the decoder goes.
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:200]
            raise MalformedMessage(f"message {message_id} is not JSON: {why}") from exc
        try:
            if repeated_keys:
                raise SpecError(repeated_keys)
            message = parse_message(
                data,
                teams=list(self.config.teams),
                registries=self.config.registries,
                max_runtime_limit=self.config.max_runtime_limit,
            )
        except SpecError as exc:
            return self._reject(data=data, body=body, message_id=message_id, error=exc, sender_id=sender_id)
        if isinstance(message, CancelCommand):
            return self.cancel(job_id=message.id, reason=message.reason, sender_id=sender_id)
        if isinstance(message, ServeCommand):
            return self._serve(message, message_id=message_id, body=body, data=data, sender_id=sender_id)
        if isinstance(message, UnserveCommand):
            return self.unserve(name=message.name, reason=message.reason, sender_id=sender_id)
        forbidden = self._sender_refused(team=message.team, sender_id=sender_id, what="submit")
        if forbidden is not None:
            return self._reject(
                data=data,
                body=body,
                message_id=message_id,
                error=forbidden,
                sender_id=sender_id,
                reason=Reason.SENDER_NOT_ALLOWED,
            )
        return self._submit(message, message_id=message_id, body=body, data=data, sender_id=sender_id)

    def may_send(self, *, team: str, sender_id: str | None) -> bool:
        """Whether a sender may submit, cancel, serve or unserve for a team: no team names
        submitters, or this one names the sender."""
        return may_submit(self.config.submitters, team=team, principal=principal_of(sender_id))

    def _sender_refused(self, *, team: str, sender_id: str | None, what: str) -> SpecError | None:
        if self.may_send(team=team, sender_id=sender_id):
            return None
        return SpecError([Issue("team", self._not_allowed(team=team, sender_id=sender_id, what=what))])

    def _not_allowed(self, *, team: str, sender_id: str | None, what: str) -> str:
        sender = principal_of(sender_id) or "(no SenderId)"
        if names_no_submitters(self.config.submitters, team=team):
            # Open, it would take every other team's submitters: the queue lets only them send.
            why = "the team names no submitters while other teams do, so it accepts no sender"
        else:
            why = "it is not one of the team's submitters"
        return f"sender {sender[:128]} may not {what} for team {team!r}: {why}"

    # ---- submit --------------------------------------------------------

    def _submit(
        self, spec: JobSpec, *, message_id: str, body: str, data: Any, sender_id: str | None
    ) -> IntakeResult:
        job_id = derive_job_id(spec, message_id=message_id)
        trials = expand_sweep(spec, job_id=job_id)
        namespace = self.config.teams[spec.team]
        job, event = new_job(
            job_id=job_id,
            name=spec.name,
            team=spec.team,
            namespace=namespace,
            at=self.clock.now(),
            reason=Reason.SWEEP_SUBMITTED if trials else Reason.SUBMITTED,
            message=f"{len(trials)} trials" if trials else "",
            spec=recorded(spec),
            message_id=message_id,
            trial_ids=tuple(t for t, _ in trials),
            gpus=0 if trials else spec.total_gpus(),
            replicas=0 if trials else len(spec.replica_list()),
            max_retries=spec.retries,
            submitted_by=sender_id,
            priority=spec.priority,
            queue_shape="" if trials else queue_shape(spec, job_id=job_id, namespace=namespace),
        )
        try:
            self.store.create(job, event)
        except DuplicateJobError:
            existing = self.store.get(job_id)
            if existing is None or existing.message_id != message_id:
                logger.info(
                    "duplicate job id",
                    job_id=job_id,
                    message_id=message_id,
                )
                self.metrics.add(Metric.JOBS_DUPLICATE, 1)
                return IntakeResult(outcome=IntakeOutcome.DUPLICATE, job_id=job_id)
            # Our own earlier delivery: finish what it may have left half done.
            self._start(existing, spec=spec, trials=trials)
            return IntakeResult(outcome=IntakeOutcome.REDELIVERED, job_id=job_id)
        except ItemTooLargeError as exc:
            # The spec's own bound keeps records far below this; should the store still
            # refuse one, the sender is told, and the message is not retried in vain.
            logger.warning("job record too large", job_id=job_id, error=str(exc))
            error = SpecError([Issue("(body)", "the job record is larger than the job table takes")])
            return self._reject(data=data, body=body, message_id=message_id, error=error, sender_id=sender_id)
        self.metrics.add(Metric.JOBS_SUBMITTED, 1)
        self._start(job, spec=spec, trials=trials)
        logger.info("job submitted", job_id=job_id, team=spec.team, gpus=job.gpus)
        return IntakeResult(outcome=IntakeOutcome.CREATED, job_id=job_id)

    def _start(self, job: Job, *, spec: JobSpec, trials: list[tuple[str, JobSpec]]) -> None:
        """The job's record is its queue entry: ask for a scale check (a sweep: its trials' records)."""
        if not trials:
            if not is_terminal(job.status):
                self.waiting.append(job.id)
            return
        parallelism = spec.sweep.parallelism if spec.sweep else len(trials)
        for number, (trial_id, trial_spec) in enumerate(trials):
            start_now = number < parallelism
            if start_now and spec.sweep is not None and spec.sweep.strategy == "tpe":
                # The first trials start at once: chosen from no history (the same on a redelivery).
                values = choose_parameters(spec.sweep, (), number=number)
                trial_spec = with_parameters(trial_spec, values, args=trial_spec.args)
            trial, trial_event = new_job(
                job_id=trial_id,
                name=trial_spec.name,
                team=trial_spec.team,
                namespace=job.namespace,
                at=self.clock.now(),
                reason=Reason.SUBMITTED if start_now else Reason.WAITING_FOR_TRIAL_SLOT,
                message=f"trial {number + 1}/{len(trials)} of {job.id}",
                spec=recorded(trial_spec),
                message_id=job.message_id,
                parent_id=job.id,
                gpus=trial_spec.total_gpus(),
                replicas=len(trial_spec.replica_list()),
                max_retries=trial_spec.retries,
                submitted_by=job.submitted_by,
                priority=trial_spec.priority,
                queue_shape=queue_shape(trial_spec, job_id=trial_id, namespace=job.namespace),
            )
            try:
                self.store.create(trial, trial_event)
            except DuplicateJobError:
                existing = self.store.get(trial_id)
                if existing is None or existing.reason == Reason.WAITING_FOR_TRIAL_SLOT:
                    continue
                start_now = not is_terminal(existing.status)
            if start_now:
                self.waiting.append(trial_id)

    def enqueue(self, job: Job, spec: JobSpec) -> Job | None:
        """Put a waiting trial in the queue (its slot came): its record says Submitted, with its shape
        and `spec` (a tpe trial's, with the parameters chosen for it now).

        Returns the stored job, or None when it was in the queue or done already: only the
        move out of WaitingForTrialSlot records a spec, so a trial is never chosen twice.
        """
        shape = job.queue_shape or queue_shape(spec, job_id=job.id, namespace=job.namespace)
        chosen: dict[str, Any] = recorded(spec)
        parameters = ", ".join(f"{k}={format_parameter(v)}" for k, v in (spec.trial_parameters or {}).items())
        queued = update_job(
            self.store,
            job,
            lambda current: (
                None
                if current.status is not JobStatus.QUEUED or current.reason != Reason.WAITING_FOR_TRIAL_SLOT
                else transition(
                    current,
                    to=JobStatus.QUEUED,
                    reason=Reason.SUBMITTED,
                    at=self.clock.now(),
                    message=f"a trial slot of {current.parent_id} is free"
                    + (f"; parameters {parameters}"[:MAX_EVENT_MESSAGE] if chosen != current.spec else ""),
                    queue_shape=shape,
                    priority=spec.priority,
                    spec=chosen,
                )
            ),
        )
        if queued is not None:
            self.waiting.append(job.id)
        return queued

    # ---- reject --------------------------------------------------------

    def _reject(
        self,
        *,
        data: Any,
        body: str,
        message_id: str,
        error: SpecError,
        sender_id: str | None,
        reason: str = Reason.INVALID_SPEC,
    ) -> IntakeResult:
        # A rejected spec never takes the client's id: a corrected resubmission must be free to use it.
        job_id = "rejected-" + hashlib.sha256(message_id.encode()).hexdigest()[:12]
        errors = tuple(issue.to_dict() for issue in error.issues)  # bounded by SpecError
        job, event = new_job(
            job_id=job_id,
            name=_kept(data, "name", lambda v: len(v) <= 63 and DNS_LABEL.fullmatch(v) is not None),
            team=_kept(data, "team", lambda v: v in self.config.teams),
            namespace="",
            at=self.clock.now(),
            status=JobStatus.REJECTED,
            reason=reason,
            message="; ".join(f"{e['field']}: {e['message']}" for e in errors)[:MAX_EVENT_MESSAGE],
            spec={"body": recorded_body(body)},
            errors=errors,
            message_id=message_id,
            submitted_by=sender_id,
        )
        try:
            self.store.create(job, event)
            self.metrics.add(Metric.JOBS_REJECTED, 1)
        except DuplicateJobError:
            pass  # the same message delivered again: it was rejected already
        logger.info("job rejected", job_id=job_id, reason=reason, issues=error.total, errors=list(errors))
        return IntakeResult(outcome=IntakeOutcome.REJECTED, job_id=job_id, errors=errors)

    # ---- cancel --------------------------------------------------------

    def cancel(self, *, job_id: str, reason: str, sender_id: str | None = None) -> IntakeResult:
        job = self.store.get(job_id)
        if job is None:
            logger.info("cancel for unknown job", job_id=job_id)
            return IntakeResult(outcome=IntakeOutcome.NOT_FOUND, job_id=job_id)
        if not self.may_send(team=job.team, sender_id=sender_id):
            logger.warning(
                "cancel refused",
                job_id=job_id,
                team=job.team,
                sender_id=sender_id,
                reason=self._not_allowed(team=job.team, sender_id=sender_id, what="cancel"),
            )
            return IntakeResult(outcome=IntakeOutcome.FORBIDDEN, job_id=job_id)
        return self._cancel(job, reason=reason)

    def _cancel(self, job: Job, *, reason: str) -> IntakeResult:
        job_id = job.id
        for trial_id in job.trial_ids:
            trial = self.store.get(trial_id)
            if trial is not None:
                self._cancel(trial, reason=f"sweep {job_id} cancelled")
        if job.namespace and job.cluster is not None and job.cluster in self.clusters:
            # Placed by admission: its objects are in that cluster (an unreachable one: the
            # message comes back and the cancel is tried again).
            self.clusters[job.cluster].delete_job_objects(namespace=job.namespace, job_id=job_id)
        cancelled = update_job(
            self.store,
            job,
            lambda current: (
                transition(
                    current,
                    to=JobStatus.CANCELLED,
                    reason=Reason.CANCEL_REQUESTED,
                    at=self.clock.now(),
                    message=reason,
                    **(
                        self.costs.on_transition(
                            current, to=JobStatus.CANCELLED, at=self.clock.now(), rate=unpriced
                        )
                        if self.costs is not None
                        else {}
                    ),
                )
                if not is_terminal(current.status)
                else None
            ),
        )
        if cancelled is None:
            return IntakeResult(outcome=IntakeOutcome.ALREADY_FINISHED, job_id=job_id)
        self.metrics.add(Metric.JOBS_CANCELLED, 1)
        return IntakeResult(outcome=IntakeOutcome.CANCELLED, job_id=job_id)

    # ---- serve and unserve -------------------------------------------------

    def _serve(
        self, command: ServeCommand, *, message_id: str, body: str, data: Any, sender_id: str | None
    ) -> IntakeResult:
        """Record a model service for a succeeded job's SavedModel, then create its objects.

        Refused (a rejected message, no service recorded, no object created): serving
        not configured, a sender the job's team does not list, and whatever plan_serve
        refuses. Losing a race for the name decides again on the name's fresh record.
        """

        def refused(error: SpecError, reason: str = Reason.INVALID_SPEC) -> IntakeResult:
            result = self._reject(
                data=data, body=body, message_id=message_id, error=error, sender_id=sender_id, reason=reason
            )
            return dataclasses.replace(result, name=command.name)

        serving = self.serving
        if serving is None:
            why = "serving is not available here: there is no store for model services or SavedModels"
            return refused(SpecError([Issue("action", why)]))
        if serving.settings.not_configured is not None:
            return refused(SpecError([Issue("action", serving.settings.not_configured)]))
        job = self.store.get(command.job)
        if job is not None:
            forbidden = self._sender_refused(team=job.team, sender_id=sender_id, what="serve")
            if forbidden is not None:
                return refused(forbidden, Reason.SENDER_NOT_ALLOWED)
        for _ in range(CONFLICT_RETRIES):
            existing = serving.store.get(command.name)
            try:
                plan = plan_serve(
                    command,
                    job=job,
                    existing=existing,
                    message_id=message_id,
                    has_saved_model=functools.partial(_has_saved_model, serving),
                )
            except SpecError as exc:
                return refused(exc)
            if plan.action is ServeAction.REDELIVERY:
                assert plan.existing is not None  # a redelivery is recognised by its record
                return self._deploy(plan.existing, outcome=IntakeOutcome.REDELIVERED)
            if plan.existing is not None:
                # An ended name: whatever of its objects is left (an unserve that could not
                # delete them) must not stand in for the new ones, which are created alike.
                serving.delete_objects(plan.existing)
            service, event = serve_record(
                plan, at=self.clock.now(), message_id=message_id, submitted_by=sender_id
            )
            service = serving.placed(service)  # its cluster, recorded before any object is made
            try:
                if plan.action is ServeAction.CREATE:
                    serving.store.create(service, event)
                else:
                    serving.store.save(service, event)
            except ConflictError:
                continue  # another message took the name, or changed its record, meanwhile
            logger.info("model service requested", model_service=service.name, job_id=service.job_id)
            return self._deploy(service, outcome=IntakeOutcome.CREATED)
        raise ConflictError(
            f"model service {command.name}: gave up after {CONFLICT_RETRIES} conflicting writes"
        )

    def _deploy(self, service: ModelService, *, outcome: IntakeOutcome) -> IntakeResult:
        """Create the objects of a recorded service (those there already are kept); ask for room.

        A PermanentError from the cluster fails the service (ClusterRefused) and deletes
        what was created: nothing is left half made. A retryable one leaves the message
        to come back, and the redelivery finishes the work.
        """
        assert self.serving is not None
        result = IntakeResult(outcome=outcome, job_id=service.job_id, name=service.name)
        if service.status not in LIVE:
            return result  # a redelivery of a service that has ended since
        try:
            self.serving.create_objects(service)
        except PermanentError as exc:
            logger.warning(
                "cluster refused model service objects", model_service=service.name, error=str(exc)
            )
            self.serving.fail(
                service,
                reason=ServiceReason.CLUSTER_REFUSED,
                message=str(exc)[:MAX_EVENT_MESSAGE],
                at=self.clock.now(),
            )
            return dataclasses.replace(result, outcome=IntakeOutcome.FAILED)
        self.waiting.append(service.name)
        return result

    def unserve(self, *, name: str, reason: str, sender_id: str | None = None) -> IntakeResult:
        """STOPPED (UnserveRequested), then the objects deleted; again on a redelivery."""
        record = self.serving.store.get(name) if self.serving is not None else None
        if self.serving is None or record is None:
            logger.info("unserve for unknown model service", model_service=name)
            return IntakeResult(outcome=IntakeOutcome.NOT_FOUND, job_id="", name=name)
        if not self.may_send(team=record.team, sender_id=sender_id):
            logger.warning(
                "unserve refused",
                model_service=name,
                team=record.team,
                reason=self._not_allowed(team=record.team, sender_id=sender_id, what="unserve"),
            )
            return IntakeResult(outcome=IntakeOutcome.FORBIDDEN, job_id=record.job_id, name=name)
        now = self.clock.now()
        stopped = update_record(
            self.serving.store,
            record,
            key=name,
            what=f"model service {name}",
            change=lambda current: (
                None
                if current.status is ServiceStatus.STOPPED
                else transition_service(
                    current,
                    to=ServiceStatus.STOPPED,
                    reason=ServiceReason.UNSERVE_REQUESTED,
                    at=now,
                    message=reason,
                    **CLEARED_OBSERVATIONS,
                )
            ),
        )
        # Also when it was STOPPED already: a redelivery after a crash finishes the delete.
        self.serving.delete_objects(stopped or record)
        outcome = IntakeOutcome.STOPPED if stopped is not None else IntakeOutcome.ALREADY_FINISHED
        return IntakeResult(outcome=outcome, job_id=record.job_id, name=name)


def principal_of(sender_id: str | None) -> str | None:
    """The principal's unique id in an SQS SenderId ("AROA...:session" for a role)."""
    return sender_id.split(":", 1)[0] if sender_id else None


def _has_saved_model(serving: ModelServing, uri: str) -> bool:
    """Whether the SavedModel is there; a question S3 refuses to answer (access denied) refuses the request."""
    try:
        return serving.saved_models.has_saved_model(uri)
    except PermanentError as exc:
        raise SpecError(
            [Issue("job", f"cannot look for a SavedModel at {uri}: {exc}"[:MAX_EVENT_MESSAGE])]
        ) from exc


def _kept(data: Any, key: str, plain: Callable[[str], bool]) -> str:
    """A name or team from a rejected body (which may hold any text there), or "" unless plain."""
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) and plain(value) else ""


def recorded_body(body: str) -> str:
    """The body as a REJECTED record keeps it: valid UTF-8, its JSON text at most MAX_RECORDED_BODY bytes."""
    text = body[:MAX_RECORDED_BODY].encode("utf-8", "backslashreplace").decode("utf-8")
    while len(encoded := json.dumps(text)) > MAX_RECORDED_BODY:
        # Escapes make the stored text longer than the body: cut in proportion, then check again.
        text = text[: max(0, len(text) * MAX_RECORDED_BODY // len(encoded) - 16)]
    return text


Change = Callable[[Job], "tuple[Job, Any] | None"]


def update_job(store: JobStore, job: Job, change: Change) -> Job | None:
    """Apply `change` to the latest version of a job, re-reading after a lost race (see update_record).

    `change` returns the new job and its event, or None when nothing is to be done
    (it sees the freshest record each time). Returns the stored job, or None.
    """
    return update_record(store, job, key=job.id, what=f"job {job.id}", change=change)


def note_job(
    store: JobStore,
    job_id: str,
    *,
    reason: str,
    message: str,
    at: datetime,
    once: bool = False,
    queued_only: bool = False,
) -> None:
    """A reason on a job's history, unless the job is final.

    `once`: not when the record has that reason already; `queued_only`: only while it
    is QUEUED. Raises what the store raises: the caller decides what a lost note costs.
    """
    job = store.get(job_id)
    if job is None:
        return
    update_job(
        store,
        job,
        lambda current: (
            None
            if is_terminal(current.status)
            or (once and current.reason == reason)
            or (queued_only and current.status is not JobStatus.QUEUED)
            else note(current, reason=reason, at=at, message=message[:MAX_NOTE])
        ),
    )
