"""Preemption as the scale check does it: choose (pure, planner/preemption.py), then stop the victims.

Asked once per check, after admission decided, with what admission read: its plan (who
waits, in order) and its cache (the waiting jobs' pods). Nothing is read from the job
table unless some waiting job could preempt (in line, high enough, no capacity to buy
for it): then the running jobs' records once, and the latest checkpoint of those that
could be victims (CheckpointReader, at most MAX_CHECKPOINT_READS a check).

Each victim, in turn: its Kubernetes objects are deleted (its pods get SIGTERM and their
termination grace to checkpoint, as a drain's evictions do), then its record goes back
in the queue, on the very version read: `Preempted:by <job>`, at the head of its
priority (`requeued`), no cluster or region, its run time so far added to
`ran_seconds`, its start cleared (the next run's is its own), its queue shape kept and
no retry used. One victim's trouble never costs the others or the check.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aws_lambda_powertools import Logger

from squall.core import costs
from squall.core.errors import MAX_ERROR_TEXT, SquallError
from squall.core.jobs import Job, JobStatus, Reason, reason_code, transition
from squall.core.queue import queue_shape
from squall.core.spec import SpecError, load_spec
from squall.core.telemetry import SERVICE, Metric
from squall.planner import Node, NodeGroup, Pod
from squall.planner.admission import AdmissionCache, AdmissionPlan
from squall.planner.preemption import (
    Preemption,
    PreemptionPolicy,
    RunningJob,
    Victim,
    WaitingJob,
    choose,
    may_preempt,
)
from squall.planner.sites import split_site
from squall.ports import Cluster, JobStore, MetricsSink, ObjectSource
from squall.services.admission import Report, job_failed
from squall.services.intake import update_job

logger = Logger(service=SERVICE, child=True)

# Running jobs' records read at most, when some waiting job could preempt.
MAX_RUNNING = 5_000
# Checkpoint times read at most per check (each a list call to the checkpoint store).
MAX_CHECKPOINT_READS = 100


# When a running job's trainer last saved a checkpoint, as it reported it (None: never, or
# unknown): ReportedCheckpoints(...).latest in AWS, the simulated cluster's checkpoints.latest.
CheckpointReader = Callable[[Job], datetime | None]


# Where a job's trainer reports its latest checkpoint, under `<checkpointUri>/<job id>/`
# (worker_images/tf_trainer/trainer/report.py writes it; code of one's own may too).
CHECKPOINT_REPORT = "checkpoints/squall-checkpoint.json"
MAX_REPORT_BYTES = 4096


@dataclass
class ReportedCheckpoints:
    """The checkpoint reports trainers leave beside their checkpoints in S3 (`latest` is a CheckpointReader).

    One list and one small read per job asked about, of what the job's own files are
    under: the scale function needs to read the checkpoint prefixes, the pods nothing new.
    A job without a checkpointUri, or whose report is missing or does not read, has none.
    """

    objects: ObjectSource

    def latest(self, job: Job) -> datetime | None:
        try:
            uri = load_spec(job.spec).checkpoint_uri
        except SpecError:
            return None
        if not uri or not uri.startswith("s3://"):
            return None
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        key = "/".join(part for part in (prefix.strip("/"), job.id, CHECKPOINT_REPORT) if part)
        listed = [item for item in self.objects.list(bucket, key, limit=1) if item.key == key]
        if not listed or listed[0].size > MAX_REPORT_BYTES:
            return None
        with tempfile.TemporaryDirectory() as scratch:
            target = Path(scratch) / "report.json"
            self.objects.download(bucket, key, target, end=listed[0].size)
            return _saved_at(target.read_bytes())


def _saved_at(body: bytes) -> datetime | None:
    """A report's `savedAt` (ISO 8601, UTC), or None when it does not read as one."""
    try:
        report = json.loads(body)
        saved = datetime.fromisoformat(str(report["savedAt"]).replace("Z", "+00:00"))
    except (ValueError, KeyError, TypeError):
        return None
    return saved.astimezone(UTC) if saved.utcoffset() is not None else None


def preempted_reason(by: str) -> str:
    """`Preempted:by <job>`."""
    return reason_code(Reason.PREEMPTED, f"by {by}")


@dataclass
class Preempter:
    clusters: Mapping[str, Cluster]
    store: JobStore | None
    metrics: MetricsSink
    policy: PreemptionPolicy
    # Where running jobs' checkpoints are learnt; None: only what their records say.
    checkpoints: CheckpointReader | None = None

    def run(
        self,
        admission: AdmissionPlan,
        *,
        cache: AdmissionCache,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        groups: Sequence[NodeGroup],
        now: datetime,
        outcome: Report,
    ) -> Preemption | None:
        """Choose and make at most one preemption; what was done goes in `outcome.done["preempted"]`."""
        if not self.policy.enabled or self.store is None:
            return None
        waiting = self._waiting(admission, cache)
        preemptors = may_preempt(waiting, groups=groups, nodes=nodes, policy=self.policy)
        if not preemptors:
            return None
        ceiling = max(job.priority for job in preemptors) - self.policy.min_priority_gap
        records = {
            job.id: job
            for job in self.store.list_by_status(JobStatus.RUNNING, limit=MAX_RUNNING)
            if job.started_at is not None and not job.is_sweep
        }
        running = self._running(records, ceiling=ceiling)
        found = choose(
            waiting=waiting,
            running=running,
            nodes=nodes,
            pods=pods,
            groups=groups,
            policy=self.policy,
            now=now,
            earlier=_earlier(admission, pods),
        )
        if found is None:
            return None
        checkpoints = {job.job_id: job.checkpoint_at for job in running}
        for victim in found.victims:
            try:
                self._preempt(
                    records[victim.job_id],
                    victim,
                    found,
                    checkpoint_at=checkpoints.get(victim.job_id),
                    now=now,
                    outcome=outcome,
                )
            except Exception as exc:
                job_failed(
                    outcome,
                    job_id=victim.job_id,
                    what=f"preempt {victim.job_id}",
                    exc=exc,
                    metrics=self.metrics,
                )
        return found

    def _waiting(self, admission: AdmissionPlan, cache: AdmissionCache) -> list[WaitingJob]:
        """The waiting jobs admission listed, in its order, with their pods."""
        prepared = cache.jobs
        found = []
        for waiting in admission.waiting:
            queued = prepared.get(waiting.job_id)
            if queued is None:
                continue
            found.append(
                WaitingJob(
                    job_id=waiting.job_id,
                    priority=waiting.priority,
                    pods=tuple(replica.pod for replica in queued.job.replicas),
                    in_line=waiting.reason == "Queued",
                )
            )
        return found

    def _running(self, records: Mapping[str, Job], *, ceiling: int) -> list[RunningJob]:
        """The running jobs that could be victims, with their latest checkpoints (read for the first
        MAX_CHECKPOINT_READS, those started last first: without a checkpoint they lose the least)."""
        candidates = sorted(
            (job for job in records.values() if job.priority <= ceiling),
            key=lambda job: (job.started_at, job.id),
            reverse=True,
        )
        running = []
        for count, job in enumerate(candidates):
            assert job.started_at is not None
            checkpoint = job.checkpoint_at
            if self.checkpoints is not None and count < MAX_CHECKPOINT_READS:
                try:
                    reported = self.checkpoints(job)
                except SquallError as exc:
                    logger.warning("checkpoint not read", job_id=job.id, error=str(exc)[:MAX_ERROR_TEXT])
                    reported = None
                if reported is not None and (checkpoint is None or reported > checkpoint):
                    checkpoint = reported
            running.append(
                RunningJob(
                    job_id=job.id, priority=job.priority, started_at=job.started_at, checkpoint_at=checkpoint
                )
            )
        return running

    def _preempt(
        self,
        job: Job,
        victim: Victim,
        found: Preemption,
        *,
        checkpoint_at: datetime | None,
        now: datetime,
        outcome: Report,
    ) -> None:
        assert self.store is not None
        cluster_name = job.cluster or split_site(found.site)[0] or next(iter(self.clusters))
        cluster = self.clusters.get(cluster_name)
        if cluster is None:
            outcome.skipped.append(f"{job.id}: its cluster {cluster_name} is not configured; not preempted")
            return
        shape: dict[str, Any] = {} if job.queue_shape else _queue_entry(job)
        # Its objects go first: a record back in the queue while they remain could be placed in
        # another cluster, and the job would run twice. A delete that fails leaves it as it was.
        cluster.delete_job_objects(namespace=job.namespace, job_id=job.id)
        assert job.started_at is not None
        ran = max((now - job.started_at).total_seconds(), 0.0)
        lost = int(victim.work_lost.total_seconds())
        message = (
            f"preempted by {found.job_id} (priority {found.priority} over its {job.priority}): "
            f"{_span(ran)} run, {_span(lost)} since its latest checkpoint lost; "
            "back in the queue at the head of its priority, it resumes from its checkpoint"
        )
        queued = update_job(
            self.store,
            job,
            lambda current: (
                None
                if current.version != job.version or current.status is not JobStatus.RUNNING
                else transition(
                    current,
                    to=JobStatus.QUEUED,
                    reason=preempted_reason(found.job_id),
                    at=now,
                    message=message,
                    cluster=None,
                    region=None,
                    objects_created=False,
                    requeued=True,
                    started_at=None,
                    checkpoint_at=checkpoint_at,
                    # what this run cost is kept, with its run time (ran_seconds), its rate cleared
                    **costs.stopped(current, run_start=current.started_at, end=now, requeued=True),
                    **shape,
                )
            ),
        )
        if queued is None:
            # Its record moved on while its objects went (it finished, was cancelled): reconcile
            # sees its objects gone and settles it from its record.
            outcome.skipped.append(f"{job.id}: its record changed while it was preempted")
            return
        self.metrics.add(Metric.JOBS_PREEMPTED, 1, dimensions={"Team": job.team})
        outcome.done.setdefault("preempted", []).append(
            {
                "job": job.id,
                "by": found.job_id,
                "cluster": cluster_name,
                "lostSeconds": lost,
                "ranSeconds": int(ran),
            }
        )
        logger.info("job preempted", job_id=job.id, by=found.job_id, lost_seconds=lost)


def _earlier(admission: AdmissionPlan, pods: Sequence[Pod]) -> list[tuple[Pod, str | None]]:
    """Pods that take their room before any waiting job: of jobs admitted now (their site), and
    pending ones of jobs admitted earlier (pinned to their site by their affinity)."""
    earlier: list[tuple[Pod, str | None]] = [
        (replica.pod, admitted.region) for admitted in admission.admitted for replica in admitted.jobs
    ]
    earlier += [(pod, None) for pod in pods if pod.job_id is not None and pod.is_pending]
    return earlier


def _queue_entry(job: Job) -> dict[str, Any]:
    """What a record from before the queue was kept in the job table lacks to be in it."""
    spec = load_spec(job.spec)
    return {
        "queue_shape": queue_shape(spec, job_id=job.id, namespace=job.namespace),
        "priority": spec.priority,
    }


def _span(seconds: float) -> str:
    minutes = int(seconds) // 60
    if minutes < 60:
        return f"{minutes} min" if minutes else f"{int(seconds)} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"
