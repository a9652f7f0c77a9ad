"""Reconcile: bring every active job's record in line with what its cluster says.

Runs on a schedule. One list of Squall's Kubernetes Jobs and one list of pods per
cluster per run, grouped by job id, then one pure `observe` per job, in the cluster
its record names, and at most one write per job that changed. A job waiting in the
queue (no cluster yet) has no objects and is left to admission. Also puts waiting
sweep trials in the queue when a slot opens, puts a job whose objects went missing
back in the queue (its leftovers deleted first, so that its objects are never in two
clusters), and cleans up the objects of finished jobs. A cluster whose lists cannot
be read is unreachable for the run: its jobs are left as they are (never lost for
that alone), the others are reconciled. With costs (services/costs.py), a run that starts
records its rate, one that stops keeps what it cost, a final cost goes to the ledger once.
Then the model services' turn (services/serving.py), when the runtime has them: a
failure there is reported, and never undoes the jobs' run.
"""

from __future__ import annotations

import enum
import functools
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from aws_lambda_powertools import Logger

from squall.core.errors import (
    MAX_ERROR_TEXT,
    ConflictError,
    InvalidTransitionError,
    RetryableError,
    SquallError,
)
from squall.core.jobs import Job, JobStatus, Reason, is_terminal, reason_code, transition
from squall.core.kubestatus import Observation, job_id_of, observe
from squall.core.queue import queue_shape
from squall.core.serving import ServiceStatus
from squall.core.spec import SpecError, load_spec
from squall.core.telemetry import SERVICE, Metric
from squall.planner import Node
from squall.planner.kube import ParseCache
from squall.ports import Clock, Cluster, JobStore, MetricsSink
from squall.services.costs import JobCosting, RunPrices
from squall.services.intake import Intake, update_job
from squall.services.metrics import MetricsCollector, MetricsReport
from squall.services.quiet import Quiet
from squall.services.serving import ServingReconciler, ServingReport
from squall.services.sweeps import SweepCheck
from squall.services.versioned import CREATE_GRACE

logger = Logger(service=SERVICE, child=True)

IMAGE_PULL_GRACE = timedelta(minutes=5)
# Active jobs one run reads at most; far beyond the queue admission is sized for
# (docs/design.md, "At size": 100,000 queued jobs).
MAX_ACTIVE_JOBS = 200_000
# Runs between two looks for the Jobs of jobs that are no longer active (Reconciler._strays).
STRAY_RUNS = 60


@dataclass
class ReconcileReport:
    transitions: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    # jobs whose objects went missing, put back in the queue (admission makes them again)
    recreated: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # clusters whose lists could not be read this run: their jobs were left as they were
    unreachable_clusters: list[str] = field(default_factory=list)
    serving: ServingReport | None = None  # None: this runtime has no model services
    metrics: MetricsReport | None = None  # None: this runtime reads no metric lines


@dataclass
class ReconcileMemory:
    """What the last run of this process read, and until when reading the same again decides nothing.

    Keep one per process (a warm Lambda reuses it). A run whose Jobs, pods and active
    job records (by version) are those of the last run, before any grace it waits out
    is over, would observe each job as the last run did and change nothing: it ends
    after its reads. A run that read something new still leaves out each job whose
    own record, Jobs and pods are as they were when a run last left it as it was (_Settled).
    """

    # What the last run read, and the earliest grace it waited out; None: no run yet, or
    # one with errors or an unreachable cluster (the next run reads and decides afresh).
    quiet: Quiet | None = None
    # Per cluster, the latest lists' objects by identity (see _Listing): a lister handing
    # out the same unchanged dicts again is read without looking inside them.
    jobs: dict[str, _Listing] = field(default_factory=dict)
    # The active job records last read, their (id, version) pairs, and the oldest queued one's time.
    active: tuple[list[Job], tuple[tuple[str, int], ...]] = ((), ())  # type: ignore[assignment]
    oldest_queued: tuple[datetime | None] | None = None  # (None,): none queued; None: not found yet
    pods: dict[str, _Listing] = field(default_factory=dict)
    # The jobs the last runs observed and left as they were, by job id (see _Settled).
    settled: dict[str, _Settled] = field(default_factory=dict)
    # Each cluster's nodes as parsed when a job was last priced (the same ones are not parsed again)
    nodes: dict[str, ParseCache[Node]] = field(default_factory=dict)
    # Runs until the listed objects of jobs that are not active are looked for again
    # (see Reconciler._strays); 0: this run does (a fresh process, or after errors).
    strays_in: int = 0


@dataclass
class Reconciler:
    store: JobStore
    # cluster name -> its API, in the configuration's order (one entry for one cluster)
    clusters: Mapping[str, Cluster]
    clock: Clock
    metrics: MetricsSink
    intake: Intake
    memory: ReconcileMemory = field(default_factory=ReconcileMemory)
    serving: ServingReconciler | None = None
    costs: JobCosting | None = None  # jobs' costs (None: not counted)
    collector: MetricsCollector | None = None  # running jobs' metric lines (None: not read)
    _graces: list[datetime] = field(default_factory=list)
    _located: dict[str, str] = field(default_factory=dict)  # this run's cluster of each job observed
    _prices: RunPrices = field(init=False)  # this run's pods of each job observed, to price jobs

    def __post_init__(self) -> None:
        self._prices = RunPrices(clusters=self.clusters, parses=self.memory.nodes)

    def run(self) -> ReconcileReport:
        """The jobs, then the model services (a run of their own: not cut short by a quiet jobs' run)."""
        report = self._run_jobs()
        if self.serving is not None:
            try:
                report.serving = self.serving.run()
            except SquallError as exc:
                # Its lists could not be read now: the next run (a minute on) reads them again.
                logger.warning("model services not reconciled", error=str(exc)[:MAX_ERROR_TEXT])
                report.serving = ServingReport(errors=[f"model services: {exc}"[:MAX_ERROR_TEXT]])
                return report
            self._serving_metrics(report.serving)
        return report

    def _serving_metrics(self, serving: ServingReport) -> None:
        for status in (ServiceStatus.DEPLOYING, ServiceStatus.SERVING):
            self.metrics.add(
                Metric.MODEL_SERVICES_IN_STATE, serving.live[status.value], dimensions={"State": status.value}
            )
        self.metrics.add(Metric.MODEL_SERVICES_FAILED, serving.transitions[ServiceStatus.FAILED.value])
        self.metrics.add(Metric.MODEL_SERVICE_OBJECTS_RECREATED, len(serving.recreated))

    def _run_jobs(self) -> ReconcileReport:
        report = ReconcileReport()
        # Every active job, however long the queue: a job left out would never be seen to
        # fail, finish or lose its objects (the store pages through the status index).
        queued = self.store.list_by_status(JobStatus.QUEUED, limit=MAX_ACTIVE_JOBS)
        running = self.store.list_by_status(JobStatus.RUNNING, limit=MAX_ACTIVE_JOBS)
        active = queued + running
        reachable = self._read_clusters(report)
        if self.collector is not None:  # every check, a quiet one too: lines come without objects changing
            report.metrics = self.collector.collect(j for j in running if j.cluster in reachable)
        memory = self.memory
        if not (len(active) == len(memory.active[0]) and all(map(operator.is_, active, memory.active[0]))):
            # Else the very records again (a store that hands out what it holds): as read.
            memory.active = (active, tuple(map(_ID_AND_VERSION, active)))
            memory.oldest_queued = None
        seen = (
            memory.active[1],
            tuple((name, memory.jobs[name].generation, memory.pods[name].generation) for name in reachable),
            tuple(report.unreachable_clusters),
        )
        # A trial's new metrics may stop it early or name a new best: its sweep is checked again.
        reported = report.metrics is not None and any(
            j.parent_id is not None and j.id in report.metrics.written for j in running
        )
        if memory.quiet is not None and not reported and memory.quiet.holds(seen, self.clock.now()):
            self._gauges(queued, running)
            return report
        self._graces, self._located = [], {}
        self._prices = RunPrices(clusters=self.clusters, parses=memory.nodes)
        last_settled, settled = memory.settled, {}

        for job in active:
            if job.is_sweep:
                self._isolated(job, report, functools.partial(self._sweep, job, report))
                continue
            if job.reason == Reason.WAITING_FOR_TRIAL_SLOT:
                continue
            if job.status is JobStatus.QUEUED and job.cluster is not None and not job.objects_created:
                # Placed, its objects still being made: the scale check's until it records them
                # made (a RUNNING record here would leave the queue index before its Services).
                continue
            where = self._cluster_of(job, reachable, report)
            if where is None:
                # In the queue (no objects anywhere yet), or its cluster cannot be read now:
                # nothing to observe; what it was last seen with is kept for when it can be.
                if job.id in last_settled:
                    settled[job.id] = last_settled[job.id]
                continue
            listed_jobs, listed_pods = memory.jobs[where], memory.pods[where]
            if (
                job.status is JobStatus.QUEUED
                and job.id not in listed_jobs.stirring_count
                and job.id not in listed_pods.by_job
                and job.reason != Reason.IMAGE_PULL_BACK_OFF
                and len(listed_jobs.by_job.get(job.id, ())) >= max(job.replicas, 1)
            ):
                # All its replica Jobs there, suspended: queued before the queue was kept in
                # the job table (a placed job's are made let go), and no admission reads them.
                if job.cluster is None:
                    self._located[job.id] = where
                    step = functools.partial(self._into_queue, job, cluster=where, report=report)
                    self._isolated(job, report, step)
                continue
            self._located[job.id] = where
            inputs = (where, job.version, listed_jobs.changes_of(job.id), listed_pods.changes_of(job.id))
            last = last_settled.get(job.id)
            if last is not None and last.holds(inputs, self.clock):
                settled[job.id] = last
                if last.until is not None:
                    self._graces.append(last.until)
                continue
            step = functools.partial(self._settle, job, inputs=inputs, settled=settled, report=report)
            self._isolated(job, report, step)
        memory.settled = settled
        self._strays(active, reachable, report)
        # Whatever this run wrote changes what the next one reads; errors are tried again,
        # and a cluster that could not be read is read afresh when it answers again.
        trouble = bool(report.errors or report.unreachable_clusters)
        memory.quiet = None if trouble else Quiet(seen=seen, until=min(self._graces, default=None))
        if trouble:
            memory.strays_in = 0
        self._gauges()
        return report

    # ---- every cluster, and one that cannot be read -----------------------

    def _read_clusters(self, report: ReconcileReport) -> list[str]:
        """List each cluster's Squall Jobs and pods into memory: the clusters read, in configuration order.

        A cluster whose lists fail (its API down or slow, its credentials refused) is
        unreachable for this run: listed in the report and the metric, its jobs left as
        they are, its memory kept as it was.
        """
        reachable = []
        for name, cluster in self.clusters.items():
            try:
                listed_jobs, listed_pods = cluster.list_jobs(), cluster.list_pods()
            except SquallError as exc:
                report.unreachable_clusters.append(name)
                logger.warning(
                    "cluster unreachable: its jobs wait", cluster=name, error=str(exc)[:MAX_ERROR_TEXT]
                )
                self.metrics.add(Metric.CLUSTER_UNREACHABLE, 1, dimensions={"Cluster": name})
                continue
            self.memory.jobs.setdefault(name, _Listing()).update(listed_jobs)
            self.memory.pods.setdefault(name, _Listing()).update(listed_pods)
            reachable.append(name)
        return reachable

    def _cluster_of(self, job: Job, reachable: list[str], report: ReconcileReport) -> str | None:
        """The cluster to observe the job in this run; None: nothing to observe now."""
        if job.cluster is not None:
            if job.cluster not in self.clusters:
                self._isolated(job, report, functools.partial(self._unconfigured, job, report))
                return None
            return job.cluster if job.cluster in reachable else None
        if job.status is JobStatus.QUEUED and job.queue_shape:
            return None  # in the queue: admission has not chosen its cluster yet
        # A record from before jobs named their cluster (one cluster then): where its objects are.
        for name in reachable:
            if job.id in self.memory.jobs[name].by_job or job.id in self.memory.pods[name].by_job:
                return name
        # Nowhere to be seen: missing, when every cluster could be looked in.
        return next(iter(self.clusters)) if len(reachable) == len(self.clusters) else None

    def _strays(self, active: list[Job], reachable: list[str], report: ReconcileReport) -> None:
        """Delete the Jobs listed in a cluster that their job no longer has there.

        A finished job's clean-up, or a cancel's, that failed (its cluster unreachable,
        the call refused) left them; so would one whose record moved to another cluster.
        Looked for after any run with errors or an unreachable cluster, in a fresh
        process, and every STRAY_RUNS runs: the record is read again before a delete,
        so that a job admitted after this run read the queue keeps its objects.
        """
        memory = self.memory
        if memory.strays_in > 0:
            memory.strays_in -= 1
            return
        memory.strays_in = STRAY_RUNS
        by_id = {job.id: job for job in active}
        for name in reachable:
            for job_id in list(memory.jobs[name].by_job):
                known = by_id.get(job_id)
                if known is not None and known.cluster in (None, name):
                    continue
                latest = self.store.get(job_id)
                if latest is None or not (is_terminal(latest.status) or latest.cluster not in (None, name)):
                    continue
                try:
                    self.clusters[name].delete_job_objects(namespace=latest.namespace, job_id=job_id)
                except SquallError as exc:
                    report.errors.append(f"{job_id}: clean-up in {name}: {exc}"[:MAX_ERROR_TEXT])
                    continue
                report.cleaned.append(job_id)
                logger.info("stray objects deleted", job_id=job_id, cluster=name, status=latest.status.value)

    # ---- one job's failure stays that job's -------------------------------

    def _isolated(self, job: Job, report: ReconcileReport, step: Callable[[], None]) -> bool:
        """Run one step on one job; whatever it raises, the other jobs are reconciled all the same.

        The platform being unavailable (or a write race lost five times) is left for
        the next run. Anything else would fail this job's step on every run: the job
        fails with the reason, so that it is seen and its objects are cleaned up.
        """
        try:
            step()
        except (RetryableError, ConflictError) as exc:
            report.errors.append(f"{job.id}: {exc}"[:MAX_ERROR_TEXT])
            logger.warning("reconcile failed for job", job_id=job.id, error=str(exc)[:MAX_ERROR_TEXT])
            return False
        except Exception as exc:
            self._fail_job(job, exc, report)
            return False
        return True

    def _fail_job(self, job: Job, exc: Exception, report: ReconcileReport) -> None:
        if isinstance(exc, SpecError):
            reason = Reason.INVALID_STORED_SPEC.value
            message = f"the recorded spec does not load: {exc}"
        else:
            reason = reason_code(Reason.RECONCILE_ERROR, type(exc).__name__)
            message = f"reconcile could not handle this job: {exc}"
        message = message[:MAX_ERROR_TEXT]
        report.errors.append(f"{job.id}: {reason}: {message}"[:MAX_ERROR_TEXT])
        logger.exception("reconcile failed for job; failing it", job_id=job.id, reason=reason)
        self.metrics.add(Metric.JOB_ERRORS, 1)
        try:
            self._record(job, to=JobStatus.FAILED, reason=reason, message=message, report=report)
            for trial_id in job.trial_ids:
                # Trials still waiting for a slot would never start once their sweep is over.
                trial = self.store.get(trial_id)
                if (
                    trial is not None
                    and trial.reason == Reason.WAITING_FOR_TRIAL_SLOT
                    and not is_terminal(trial.status)
                ):
                    self._record(
                        trial,
                        to=JobStatus.FAILED,
                        reason=reason,
                        message=f"sweep {job.id} failed",
                        report=report,
                    )
        except Exception:
            # Recording is best effort; the log and the metric above already tell.
            logger.exception("could not record the failure on the job", job_id=job.id)

    # ---- one job ---------------------------------------------------------

    def _settle(
        self,
        job: Job,
        *,
        inputs: tuple[str, int, int, int],
        settled: dict[str, _Settled],
        report: ReconcileReport,
    ) -> None:
        """Reconcile one job; one that it left as it was is remembered with what it was seen with."""
        where = inputs[0]
        listed_jobs, listed_pods = self.memory.jobs[where], self.memory.pods[where]
        wait = self._job(
            job,
            cluster=where,
            k8s_jobs=listed_jobs.of_job(job.id),
            pods=listed_pods.of_job(job.id),
            report=report,
        )
        if wait is not _ACTED:
            settled[job.id] = _Settled(inputs=inputs, until=wait)

    def _job(
        self,
        job: Job,
        *,
        cluster: str,
        k8s_jobs: list[dict[str, Any]],
        pods: list[dict[str, Any]],
        report: ReconcileReport,
    ) -> datetime | _Acted | None:
        """What the job's objects in `cluster` say, recorded: _ACTED when it wrote or deleted
        objects, else the end of the grace it waits out (None: none)."""
        now = self.clock.now()
        self._prices.observe(job.id, cluster, pods)
        seen = observe(expected_replicas=max(job.replicas, 1), k8s_jobs=k8s_jobs, pods=pods)
        if seen.status is None or seen.reason == Reason.OBJECTS_MISSING:
            if job.status is JobStatus.QUEUED and job.cluster is not None and not job.objects_created:
                return None  # placed, its objects still being made: the scale check finishes them
            if now - job.updated_at >= CREATE_GRACE:
                self._requeue(job, seen, cluster=cluster, report=report)
                return _ACTED
            self._graces.append(job.updated_at + CREATE_GRACE)
            return job.updated_at + CREATE_GRACE
        if seen.retries_used > job.retries_used and not is_terminal(seen.status):
            self._record(
                job,
                to=seen.status,
                reason=reason_code(Reason.NODE_LOST, f"retry {seen.retries_used}/{job.max_retries}"),
                message="a pod was lost with its node; Kubernetes runs it again",
                report=report,
                retries_used=seen.retries_used,
                happened_at=self._started(job, seen) if seen.status is JobStatus.RUNNING else None,
            )
            self.metrics.add(Metric.JOB_RETRIES, seen.retries_used - job.retries_used)
            report.retries += seen.retries_used - job.retries_used
            return _ACTED
        if seen.reason == Reason.IMAGE_PULL_BACK_OFF:
            if job.reason != Reason.IMAGE_PULL_BACK_OFF:
                self._record(
                    job, to=JobStatus.QUEUED, reason=seen.reason, message=seen.message, report=report
                )
            elif now - job.updated_at >= IMAGE_PULL_GRACE:
                self._record(
                    job, to=JobStatus.FAILED, reason=seen.reason, message=seen.message, report=report
                )
            else:
                self._graces.append(job.updated_at + IMAGE_PULL_GRACE)
                return job.updated_at + IMAGE_PULL_GRACE
            return _ACTED
        if seen.status != job.status or (
            seen.status is JobStatus.QUEUED and job.reason == Reason.IMAGE_PULL_BACK_OFF
        ):
            started = self._started(job, seen)
            if is_terminal(seen.status) and job.status is JobStatus.QUEUED and started is not None:
                # It ran and ended between two runs: its start goes on its history first, at
                # the time it happened, however short the run (the record is RUNNING between).
                running = self._record(
                    job,
                    to=JobStatus.RUNNING,
                    reason=Reason.STARTED,
                    message="",
                    report=report,
                    happened_at=started,
                )
                if running is None or is_terminal(running.status):
                    return _ACTED
                job = running
            self._record(
                job,
                to=seen.status,
                reason=seen.reason,
                message=seen.message,
                report=report,
                retries_used=max(seen.retries_used, job.retries_used),
                happened_at=self._finished(job, seen) if is_terminal(seen.status) else started,
            )
            return _ACTED
        return None

    def _started(self, job: Job, seen: Observation) -> datetime | None:
        """When the job's run began, as Kubernetes recorded it, kept between its submission and now."""
        return self._recorded_time(seen.started_at, not_before=job.submitted_at)

    def _finished(self, job: Job, seen: Observation) -> datetime | None:
        """When the job's run ended, as Kubernetes recorded it, kept between its start and now."""
        start = job.started_at or self._started(job, seen) or job.submitted_at
        return self._recorded_time(seen.finished_at, not_before=start)

    def _recorded_time(self, at: datetime | None, *, not_before: datetime) -> datetime | None:
        """`at` no earlier than `not_before` and no later than now (the cluster's clock and
        ours differ; its times are to the second); None: the objects did not say, now it is."""
        if at is None:
            return None
        return min(max(at, not_before), self.clock.now())

    def _unconfigured(self, job: Job, report: ReconcileReport) -> None:
        """Its cluster was taken out of the configuration: nothing can see or clean up its objects."""
        self._record(
            job,
            to=JobStatus.FAILED,
            reason=reason_code(Reason.CLUSTER_NOT_CONFIGURED, job.cluster),
            message=(
                f"its cluster {job.cluster} is no longer configured: Squall can neither follow nor "
                "clean up its objects there (delete them there by hand if the cluster still runs)"
            ),
            report=report,
            strict=True,
        )

    def _requeue(self, job: Job, seen: Observation, *, cluster: str, report: ReconcileReport) -> None:
        """Its objects went missing (deleted by hand, lost with their nodes): back in the queue.

        What is left of them in `cluster` is deleted first, so that admission may place
        the job anywhere without its objects ever being in two clusters; a delete that
        fails leaves the record as it was for the next run. The job keeps its queue
        shape (one is made for a record from before jobs had one).
        """
        lost_while_running = job.status is JobStatus.RUNNING
        used = job.retries_used + (1 if lost_while_running else 0)
        if used > job.max_retries:
            self._record(
                job, to=JobStatus.FAILED, reason=Reason.RETRIES_EXHAUSTED, message=seen.message, report=report
            )
            return
        entry = self._queue_entry(job)
        latest = self.store.get(job.id)
        if latest is None or latest.version != job.version:
            # Its record moved on since this run read it (released and admitted again, maybe to
            # another cluster): what this run saw is stale; the next run looks again.
            return
        self.clusters[cluster].delete_job_objects(namespace=job.namespace, job_id=job.id)
        reason = (
            reason_code(Reason.NODE_LOST, f"retry {used}/{job.max_retries}")
            if lost_while_running
            else Reason.OBJECTS_MISSING
        )
        placement: dict[str, Any] = {"cluster": None, "region": None, "objects_created": False}
        if lost_while_running:
            placement["requeued"] = True
        queued = self._record(
            job,
            to=JobStatus.QUEUED,
            reason=reason,
            message=seen.message or "its Kubernetes objects are gone",
            report=report,
            retries_used=used,
            strict=True,
            **entry,
            **placement,
        )
        if queued is not None:
            report.recreated.append(job.id)
            logger.info("job back in the queue", job_id=job.id, cluster=cluster, reason=reason)

    def _into_queue(self, job: Job, *, cluster: str, report: ReconcileReport) -> None:
        """A job queued before the queue was kept in the job table: its suspended Jobs in `cluster`
        are deleted, then its record joins the queue (admission places it, anywhere)."""
        entry = self._queue_entry(job)
        self.clusters[cluster].delete_job_objects(namespace=job.namespace, job_id=job.id)
        self._record(
            job,
            to=JobStatus.QUEUED,
            # Not admission's Queued: that note says its place once the job is in the queue.
            reason=Reason.SUBMITTED,
            message=f"its suspended Jobs in cluster {cluster} deleted: it waits in the queue",
            report=report,
            cluster=None,
            region=None,
            objects_created=False,
            **entry,
        )

    def _queue_entry(self, job: Job) -> dict[str, Any]:
        """What a record from before the queue was kept in the job table lacks to be in it."""
        if job.queue_shape:
            return {}
        spec = load_spec(job.spec)  # SpecError: a recorded spec that does not load fails the job
        return {
            "queue_shape": queue_shape(spec, job_id=job.id, namespace=job.namespace),
            "priority": spec.priority,
        }

    def _record(
        self,
        job: Job,
        *,
        to: JobStatus,
        reason: str,
        message: str,
        report: ReconcileReport,
        happened_at: datetime | None = None,
        strict: bool = False,
        **changes: Any,
    ) -> Job | None:
        """Record the transition (at `happened_at`, when Kubernetes says it happened earlier); the
        stored job, or None when there was nothing to record. `strict`: only onto the very version
        this run read (a change made on what it saw, which a newer record may have overtaken)."""
        now = self.clock.now()

        def change(current: Job) -> tuple[Job, Any] | None:
            if current.version != job.version and (strict or is_terminal(current.status)):
                return None
            written = changes
            if self.costs is not None and current.status in (JobStatus.QUEUED, JobStatus.RUNNING):
                priced = functools.partial(self._prices.rate, self.costs, job.id)
                written = {
                    **self.costs.on_transition(current, to=to, at=happened_at or now, rate=priced),
                    **changes,
                }
            return transition(
                current, to=to, reason=reason, at=now, message=message, happened_at=happened_at, **written
            )

        try:
            updated = update_job(self.store, job, change)
        except InvalidTransitionError:
            return None
        if updated is None:
            return None
        report.transitions[to.value] += 1
        if to is JobStatus.RUNNING and job.started_at is None and updated.started_at is not None:
            if not updated.ran_seconds:  # a preempted job's wait was counted at its first start
                wait = (updated.started_at - updated.submitted_at).total_seconds()
                self.metrics.add(Metric.QUEUE_WAIT_SECONDS, wait, unit="Seconds")
            self.metrics.add(Metric.JOBS_STARTED, 1)
        if is_terminal(to):
            self._finish(updated, report)
        return updated

    def _finish(self, job: Job, report: ReconcileReport) -> None:
        if job.started_at is not None and job.finished_at is not None:
            self.metrics.add(
                Metric.RUN_SECONDS, (job.finished_at - job.started_at).total_seconds(), unit="Seconds"
            )
        self.metrics.add(
            Metric.JOBS_SUCCEEDED if job.status is JobStatus.SUCCEEDED else Metric.JOBS_FAILED, 1
        )
        logger.info("job finished", job_id=job.id, status=job.status.value, reason=job.reason)
        if self.collector is not None and job.started_at is not None and not job.is_sweep:
            self.collector.final(job)  # what it printed last, read before its objects go
        # Its objects are in the cluster its record names (one observed this run, for a
        # record without one); a job still in the queue has none. A sweep has none either.
        where = job.cluster or self._located.get(job.id)
        if where is None and (job.queue_shape or job.is_sweep):
            return
        for name in (where,) if where is not None else tuple(self.clusters):
            if name not in self.clusters:
                continue
            try:
                self.clusters[name].delete_job_objects(namespace=job.namespace, job_id=job.id)
            except SquallError as exc:
                # Its cluster cannot be reached now: a later run finds the Jobs left (_strays).
                report.errors.append(f"{job.id}: clean-up in {name}: {exc}"[:MAX_ERROR_TEXT])
                logger.warning("finished job's objects not deleted yet", job_id=job.id, cluster=name)
                return
        report.cleaned.append(job.id)

    # ---- sweeps ----------------------------------------------------------

    def _sweep(self, parent: Job, report: ReconcileReport) -> None:
        SweepCheck(
            store=self.store,
            intake=self.intake,
            clock=self.clock,
            record=functools.partial(self._record, report=report),
            isolated=lambda job, step: self._isolated(job, report, step),
        ).run(parent)

    # ---- gauges ----------------------------------------------------------

    def _gauges(self, queued: list[Job] | None = None, running: list[Job] | None = None) -> None:
        """Jobs by state: this run's read when it wrote nothing (else they are read again)."""
        now = self.clock.now()
        if queued is None or running is None:
            queued = self.store.list_by_status(JobStatus.QUEUED, limit=MAX_ACTIVE_JOBS)
            running = self.store.list_by_status(JobStatus.RUNNING, limit=MAX_ACTIVE_JOBS)
            oldest = min((j.submitted_at for j in queued if not j.is_sweep), default=now)
        else:  # this run's read, the records of the last one when nothing changed
            if self.memory.oldest_queued is None:
                first = min((j.submitted_at for j in queued if not j.is_sweep), default=None)
                self.memory.oldest_queued = (first,)
            oldest = self.memory.oldest_queued[0] or now
        for status, jobs in ((JobStatus.QUEUED, queued), (JobStatus.RUNNING, running)):
            self.metrics.add(Metric.JOBS_IN_STATE, len(jobs), dimensions={"State": status.value})
        self.metrics.add(Metric.OLDEST_QUEUED_SECONDS, (now - oldest).total_seconds(), unit="Seconds")


_ID_AND_VERSION = operator.attrgetter("id", "version")


class _Acted(enum.Enum):
    ACTED = "acted"


_ACTED = _Acted.ACTED  # a job's step wrote its record or made its objects


@dataclass(frozen=True)
class _Settled:
    """A job that a run observed and left as it was: no write, no objects made, no error.

    `_job` decides from the job's record, its replica Jobs, its pods and the time, and
    the time only through the two graces it waits out from the record's `updated_at`
    (a missing object's create grace, an image pull's); a run's deadline is Kubernetes'
    (activeDeadlineSeconds) and comes as a changed Job. So a later run that finds the
    same record version and the same Jobs and pods in the same cluster (none of the
    job's objects came, went or changed version in either listing since, see
    `_Listing.changes_of`), before that grace is over, would decide the same nothing
    again: it does not observe the job. Any other outcome (a write, a retry, a job put
    back in the queue, a failed step) is not
    remembered, and the job is observed again on the next run.
    """

    # (its cluster, record version, its Jobs' changes_of, its pods' changes_of in that cluster)
    inputs: tuple[str, int, int, int]
    until: datetime | None  # None: it waits out no grace

    def holds(self, inputs: tuple[str, int, int, int], clock: Clock) -> bool:
        return inputs == self.inputs and (self.until is None or clock.now() < self.until)


@dataclass(frozen=True)
class _Read:
    """What a run takes from one listed object, kept by the object's identity."""

    obj: dict[str, Any]
    job_id: str | None
    version: tuple[str, str] | None  # (uid, resourceVersion); None when it lacks either
    stirring: bool  # a Job not suspended, or one that failed


@dataclass
class _Listing:
    """One kind's list (Jobs or pods) grouped by job id, kept between runs and brought up to date.

    A lister may hand out the very same dict again while its object is unchanged (the
    simulated cluster's shared lists do; see ParseCache), never one changed in place:
    such a dict is known by its identity, so a run costs what changed since the last.
    `generation` moves on whenever the list's objects (by uid and resourceVersion)
    differ from the last run's, or it holds one without them; `changes_of` does the
    same for one job's objects.
    """

    reads: dict[int, _Read] = field(default_factory=dict)  # id -> read; the dicts are held
    by_job: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stirring_count: Counter[str] = field(default_factory=Counter)
    generation: int = 0
    last: tuple[dict[str, Any], ...] = ()  # the latest list as it came
    unversioned: bool = False  # it held an object without uid or version
    updates: int = 0  # the lists looked inside so far
    # The update in which each job's objects last came, went or changed (or held one
    # without uid or version); a job with no objects has no entry.
    changed: dict[str, int] = field(default_factory=dict)

    @property
    def stirring(self) -> set[str]:
        return set(self.stirring_count)

    def update(self, listed: Iterable[dict[str, Any]]) -> None:
        objects = tuple(listed)
        if (
            len(objects) == len(self.last)
            and all(map(operator.is_, objects, self.last))
            and not self.unversioned
        ):
            return  # the very list of dicts again (a lister's unchanged answer)
        self.last = objects
        known = self.reads
        ids = list(map(id, objects))
        found = list(map(known.get, ids))
        reads: dict[int, _Read | None] = dict(zip(ids, found, strict=True))
        unversioned: set[str | None] = set()  # the jobs of objects without uid or version
        # Only the dicts not known by identity are looked inside (all, after an unversioned one).
        unknown = objects if self.unversioned else itertools.compress(objects, map(operator.not_, found))
        for obj in unknown:
            read = reads[id(obj)]
            if read is None or read.version is None:
                read = reads[id(obj)] = _read(obj)
                if read.version is None:
                    unversioned.add(read.job_id)
        self.reads = cast(dict[int, _Read], reads)  # every one read by now
        went = [known[i] for i in known.keys() - reads.keys()]
        came = [self.reads[i] for i in reads.keys() - known.keys()]
        for read in went:
            self._file(read, -1)
        for read in came:
            self._file(read, +1)
        self.unversioned = bool(unversioned)
        moved: Counter[tuple[str | None, tuple[str, str] | None]] = Counter()
        for read in went:
            moved[read.job_id, read.version] -= 1
        for read in came:
            moved[read.job_id, read.version] += 1
        if self.unversioned or any(moved.values()):
            self.generation += 1
        self.updates += 1
        touched = unversioned | {job_id for (job_id, _), count in moved.items() if count}
        for job_id in touched:
            if job_id is None:
                continue
            if job_id in self.by_job:
                self.changed[job_id] = self.updates
            else:
                self.changed.pop(job_id, None)

    def _file(self, read: _Read, step: int) -> None:
        if read.job_id is None:
            return
        if step > 0:
            self.by_job.setdefault(read.job_id, []).append(read.obj)
            if read.stirring:
                self.stirring_count[read.job_id] += 1
            return
        objects = self.by_job[read.job_id]
        del objects[next(i for i, obj in enumerate(objects) if obj is read.obj)]
        if not objects:
            del self.by_job[read.job_id]
        if read.stirring:
            self.stirring_count[read.job_id] -= 1
            if not self.stirring_count[read.job_id]:
                del self.stirring_count[read.job_id]

    def changes_of(self, job_id: str) -> int:
        """Moves on whenever the job's objects (by uid and resourceVersion) are not those of the
        last update that looked at them, or it holds one without them; 0 while it has none."""
        return self.changed.get(job_id, 0)

    def of_job(self, job_id: str) -> list[dict[str, Any]]:
        """The job's objects in the API server's order (by name)."""
        return sorted(
            self.by_job.get(job_id, ()), key=lambda obj: str((obj.get("metadata") or _NONE).get("name"))
        )


def _version(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """An object's identity and version; None for one without them (never the same as before)."""
    metadata = obj.get("metadata") or {}
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    return (uid, version) if uid and version else None


def _read(obj: dict[str, Any]) -> _Read:
    stirring = (obj.get("spec") or {}).get("suspend") is not True or bool(
        (obj.get("status") or {}).get("failed")
    )
    return _Read(obj=obj, job_id=job_id_of(obj), version=_version(obj), stirring=stirring)


_NONE: Mapping[str, Any] = {}
