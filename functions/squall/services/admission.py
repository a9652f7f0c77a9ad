"""Admission as the scale check does it: read the queue, decide (pure), let jobs run, say why others wait.

The queue is the cluster's suspended replica Jobs (core/manifests.py creates every Job
suspended). The decision is `squall.planner.admission.admit`; acting on it is one merge
patch per replica Job (its region into the pod template, `suspend: false`), then a
reason on the job's record. The scale check runs it under its lease, so there is one
writer; `Admitter.run` runs it alone where there is no fleet (service tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from aws_lambda_powertools import Logger

from squall.core.errors import MAX_ERROR_TEXT, NotFoundError, SquallError
from squall.core.jobs import Reason, reason_code
from squall.core.manifests import admission_patch
from squall.core.telemetry import SERVICE, Metric
from squall.planner import Node, NodeGroup, Pod, Policy
from squall.planner.admission import (
    AdmissionCache,
    AdmissionPlan,
    Admitted,
    ReplicaJob,
    TeamShare,
    Waiting,
    admit,
)
from squall.planner.inventory import Inventory
from squall.planner.kube import ParseCache, busy_stand_in, node_cache, pod_cache, replica_job_cache
from squall.planner.text import amounts, counted
from squall.ports import Cluster, JobStore, MetricsSink
from squall.services.intake import note_job

logger = Logger(service=SERVICE, child=True)

# Queued jobs whose record gets a new reason per check, head of the queue first: the
# others follow in the next checks (the decision record holds the queue's first part).
MAX_QUEUE_NOTES = 100


class Report(Protocol):
    """Where a step says what it did (the scale check's result)."""

    done: dict[str, list[Any]]
    skipped: list[str]
    errors: list[str]


def job_failed(outcome: Report, *, job_id: str, what: str, exc: Exception, metrics: MetricsSink) -> None:
    """A step on one job raised unexpectedly: logged, counted and reported; the check goes on."""
    outcome.errors.append(f"{what}: {type(exc).__name__}: {exc}"[:MAX_ERROR_TEXT])
    logger.exception("scale check step failed for job", job_id=job_id, action=what)
    metrics.add(Metric.JOB_ERRORS, 1)


def note_or_report(
    store: JobStore,
    job_id: str,
    reason: str,
    message: str,
    *,
    now: datetime,
    outcome: Report,
    metrics: MetricsSink,
    once: bool = False,
    queued_only: bool = False,
) -> None:
    """A reason on the job's record (intake's note_job); the check's actions stand without it.

    A store that fails us is logged and the check goes on; anything else is the job's failure.
    """
    try:
        note_job(store, job_id, reason=reason, message=message, at=now, once=once, queued_only=queued_only)
    except SquallError as exc:
        logger.warning("could not note job", job_id=job_id, reason=reason, error=str(exc))
    except Exception as exc:
        job_failed(outcome, job_id=job_id, what=f"note {job_id}", exc=exc, metrics=metrics)


@dataclass
class AdmissionMemory:
    """What earlier checks in this process saw; keep one per process (a warm Lambda reuses it)."""

    jobs: ParseCache[ReplicaJob | None] = field(default_factory=replica_job_cache)
    prepared: AdmissionCache = field(default_factory=AdmissionCache)
    # job id -> the queue reason last written on its record by this process
    noted: dict[str, str] = field(default_factory=dict)


@dataclass
class Admitter:
    cluster: Cluster
    metrics: MetricsSink
    teams: Mapping[str, TeamShare]
    policy: Policy
    store: JobStore | None = None  # for the reasons on jobs' records; None: admit only
    parsed: AdmissionMemory = field(default_factory=AdmissionMemory)
    _listed: Sequence[Mapping[str, Any]] = ()

    def read_queue(self) -> list[ReplicaJob]:
        """Squall's replica Jobs; an unreadable one is left out, logged and counted."""
        raw_jobs = self.cluster.list_jobs()
        self._listed = raw_jobs
        jobs = [job for job in self.parsed.jobs.parse_all(raw_jobs, unreadable=lambda item, why: None) if job]
        problems = self.parsed.jobs.unreadable
        if problems:
            logger.warning("jobs admission cannot read", count=len(problems), first=problems[0][:500])
            self.metrics.add(Metric.UNREADABLE_OBJECTS, len(problems), dimensions={"Kind": "job"})
        return jobs

    @property
    def queue_changed(self) -> bool:
        """Whether the latest read of the queue found a Job new, changed or gone."""
        return self.parsed.jobs.changed

    def decide(
        self,
        *,
        jobs: Sequence[ReplicaJob],
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        groups: Sequence[NodeGroup],
        now: datetime,
        inventory: Inventory | None = None,
    ) -> AdmissionPlan:
        return admit(
            jobs=jobs,
            nodes=nodes,
            pods=pods,
            groups=groups,
            teams=self.teams,
            policy=self.policy,
            now=now,
            cache=self.parsed.prepared,
            inventory=inventory,
        )

    def run(self, *, now: datetime, outcome: Report, groups: Sequence[NodeGroup] = ()) -> AdmissionPlan:
        """Observe, decide and act, without a scale check around it (no fleet to plan for)."""
        nodes = node_cache().parse_all(self.cluster.list_nodes(), unreadable=lambda item, why: None)
        pods = pod_cache().parse_all(self.cluster.list_pods(), unreadable=busy_stand_in)
        decided = self.decide(jobs=self.read_queue(), nodes=nodes, pods=pods, groups=groups, now=now)
        self.act(decided, now=now, outcome=outcome)
        self.note_queue(decided, now=now, outcome=outcome)
        self.emit(decided)
        return decided

    # ---- act -------------------------------------------------------------------

    def act(self, admission: AdmissionPlan, *, now: datetime, outcome: Report) -> None:
        """Unsuspend every replica Job of each admitted job, pinned to its region.

        A failure part way leaves the job admitted in part (its region annotated on the
        Jobs already let go): the next check finishes it in the same region.
        """
        if not admission.admitted:
            return
        wanted = {(replica.namespace, replica.name) for a in admission.admitted for replica in a.jobs}
        listed: dict[tuple[Any, Any], Mapping[str, Any]] = {}
        for obj in self._listed:
            metadata = obj.get("metadata")
            if (
                isinstance(metadata, Mapping)
                and (key := (metadata.get("namespace"), metadata.get("name"))) in wanted
            ):
                listed[key] = obj
        for admitted in admission.admitted:
            try:
                if self._unsuspend(admitted, listed, outcome=outcome):
                    outcome.done.setdefault("admitted", []).append(
                        {"job": admitted.job_id, "region": admitted.region, "gpus": admitted.gpus}
                    )
                    self.parsed.noted.pop(admitted.job_id, None)
                    self._note(
                        admitted.job_id,
                        reason_code(Reason.ADMITTED, admitted.region),
                        f"admitted whole in {admitted.region}: {_asks(admitted)} over "
                        f"{counted(len(admitted.jobs), 'replica Job')}; its run time counts from now",
                        now=now,
                        outcome=outcome,
                    )
            except Exception as exc:
                # One job's trouble never costs the others.
                self._job_failed(outcome, admitted.job_id, f"admit {admitted.job_id}", exc)

    def _unsuspend(
        self, admitted: Admitted, listed: Mapping[tuple[Any, Any], Mapping[str, Any]], *, outcome: Report
    ) -> bool:
        for replica in admitted.jobs:
            raw = listed.get((replica.namespace, replica.name))
            if raw is None:
                return False
            try:
                self.cluster.patch_job(
                    namespace=replica.namespace,
                    name=replica.name,
                    patch=admission_patch(dict(raw), region=admitted.region),
                )
            except NotFoundError:
                outcome.skipped.append(f"{replica.name}: gone before admission (cancelled?)")
                return False
            except SquallError as exc:
                outcome.errors.append(f"admit {replica.name}: {exc}"[:MAX_ERROR_TEXT])
                logger.warning("could not admit replica", job=replica.name, error=str(exc))
                return False
        return True

    # ---- why jobs wait ---------------------------------------------------------------

    def note_queue(
        self, admission: AdmissionPlan, *, now: datetime, outcome: Report, scaling: str = ""
    ) -> None:
        """Write on the records of waiting jobs why they wait, when that changed; head first, bounded."""
        if self.store is None:
            return
        live = {w.job_id for w in admission.waiting}
        for job_id in [j for j in self.parsed.noted if j not in live]:
            del self.parsed.noted[job_id]  # admitted, finished or cancelled: forget it
        written = 0
        for waiting in admission.waiting:
            if written >= MAX_QUEUE_NOTES:
                break
            if self.parsed.noted.get(waiting.job_id) == waiting.reason:
                continue
            self._note(
                waiting.job_id,
                waiting.reason,
                queue_message(waiting, scaling=scaling),
                now=now,
                outcome=outcome,
                only_queued=True,
            )
            self.parsed.noted[waiting.job_id] = waiting.reason
            written += 1

    def _note(
        self,
        job_id: str,
        reason: str,
        message: str,
        *,
        now: datetime,
        outcome: Report,
        only_queued: bool = False,
    ) -> None:
        """A reason on the job's record, unless it has it already; admission stands without it."""
        if self.store is not None:
            note_or_report(
                self.store,
                job_id,
                reason,
                message,
                now=now,
                outcome=outcome,
                metrics=self.metrics,
                once=True,
                queued_only=only_queued,
            )

    def _job_failed(self, outcome: Report, job_id: str, what: str, exc: Exception) -> None:
        job_failed(outcome, job_id=job_id, what=what, exc=exc, metrics=self.metrics)

    # ---- metrics ------------------------------------------------------------------

    def emit(self, admission: AdmissionPlan) -> None:
        for team in sorted({*admission.queued, *admission.in_use, *self.teams}):
            dims = {"Team": team}
            jobs, gpus = admission.queued.get(team, (0, 0))
            self.metrics.add(Metric.QUEUED_JOBS, jobs, dimensions=dims)
            self.metrics.add(Metric.QUEUED_GPUS, gpus, dimensions=dims)
            self.metrics.add(Metric.ADMITTED_GPUS, admission.in_use.get(team, 0), dimensions=dims)
            share = self.teams.get(team)
            if share is not None and share.quota is not None:
                self.metrics.add(Metric.GPU_QUOTA, share.quota, dimensions=dims)
        self.metrics.add(Metric.JOBS_ADMITTED, sum(1 for a in admission.admitted if not a.resumed))


def _asks(admitted: Admitted) -> str:
    """What an admitted job asks for: its GPUs, or a job without GPUs its CPUs and memory."""
    return amounts(
        gpus=admitted.gpus,
        cpu_millis=sum(job.pod.requests.cpu for job in admitted.jobs),
        memory_bytes=sum(job.pod.requests.memory for job in admitted.jobs),
    )


def queue_message(waiting: Waiting, *, scaling: str = "") -> str:
    """`3rd in research, 7th overall; needs 16 GPUs over 2 replicas in one region; p3-usw2 scaling 2->6`."""
    return with_scaling(waiting.message, scaling=scaling, held=waiting.held_by_quota)


def with_scaling(message: str, *, scaling: str, held: bool) -> str:
    """A waiting job's line with what is being bought (never for one a quota holds back)."""
    return f"{message}; {scaling}" if scaling and not held else message
