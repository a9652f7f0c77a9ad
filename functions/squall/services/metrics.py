"""What running jobs report: reconcile's reading of their ``squall-metric`` lines into their records.

Each reconcile check reads the lines of at most `jobs_per_check` running jobs (those read
longest ago first, so every job comes round), one bounded page each from the cursor its
record keeps (ports.MetricLines), merges them into its metrics (core/metrics.py) and
writes them with JobStore.set_metrics (no new version, no event) only when something
changed. A job whose lines or write fail is skipped for this check; the others are read
all the same. When reconcile records a job finished, its lines are read once more (a
few pages), before its objects go, so that what it printed last counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from squall.core.errors import MAX_ERROR_TEXT, SquallError
from squall.core.jobs import Job, JobStatus
from squall.core.metrics import JobMetrics, MetricLinesPage, merge
from squall.core.telemetry import SERVICE
from squall.ports import JobStore, MetricLines

logger = Logger(service=SERVICE, child=True)

JOBS_PER_CHECK = 25
EVENTS_PER_READ = 1_000
FINAL_PAGES = 4  # read when a job finished: what it printed since the last check


@dataclass
class CollectorMemory:
    """When each running job was last read, as the number of reads before (keep one per process,
    as reconcile's memory): the jobs come round in turn."""

    reads: int = 0
    last_read: dict[str, int] = field(default_factory=dict)


@dataclass
class MetricsReport:
    read: list[str] = field(default_factory=list)  # jobs whose lines were read
    written: list[str] = field(default_factory=list)  # jobs whose metrics changed and were written
    errors: list[str] = field(default_factory=list)


@dataclass
class MetricsCollector:
    store: JobStore
    lines: MetricLines
    memory: CollectorMemory = field(default_factory=CollectorMemory)
    jobs_per_check: int = JOBS_PER_CHECK
    events_per_read: int = EVENTS_PER_READ

    def collect(self, running: Iterable[Job]) -> MetricsReport:
        """Read and merge the lines of at most `jobs_per_check` of these running jobs."""
        memory = self.memory
        jobs = [j for j in running if j.status is JobStatus.RUNNING and not j.is_sweep]
        present = {j.id for j in jobs}
        for gone in memory.last_read.keys() - present:
            del memory.last_read[gone]
        # Never read first, then read longest ago; the oldest submission breaks ties.
        jobs.sort(key=lambda j: (memory.last_read.get(j.id, -1), j.submitted_at, j.id))
        report = MetricsReport()
        for job in jobs[: max(self.jobs_per_check, 0)]:
            memory.reads += 1
            memory.last_read[job.id] = memory.reads
            self._read(job, pages=1, report=report)
        return report

    def final(self, job: Job) -> MetricsReport:
        """Read a job that just finished once more (a few pages): what it printed last counts.

        Its record is read again first: the metrics written earlier in this check are kept.
        Never raises: a failure is logged and reported.
        """
        report = MetricsReport()
        self.memory.last_read.pop(job.id, None)
        try:
            latest = self.store.get(job.id)
        except SquallError as exc:
            self._failed(job, exc, report)
            return report
        if latest is not None:
            self._read(latest, pages=FINAL_PAGES, report=report)
        return report

    def _read(self, job: Job, *, pages: int, report: MetricsReport) -> None:
        """Up to `pages` pages merged into the job's metrics; what was read is written, even when
        a later page fails."""
        metrics: JobMetrics | None = job.metrics
        try:
            for _ in range(pages):
                cursor = metrics.cursor if metrics is not None else None
                page = self.lines.read(job, cursor=cursor, limit=self.events_per_read)
                if not page.lines and page.cursor == cursor:
                    break
                metrics = merge(metrics, page.lines, cursor=page.cursor)
            report.read.append(job.id)
        except (SquallError, ValueError) as exc:
            self._failed(job, exc, report)
        if metrics is None or metrics == job.metrics:
            return
        try:
            if self.store.set_metrics(job.id, metrics):
                report.written.append(job.id)
        except SquallError as exc:
            self._failed(job, exc, report)

    def _failed(self, job: Job, exc: Exception, report: MetricsReport) -> None:
        text = f"{job.id}: metric lines: {exc}"[:MAX_ERROR_TEXT]
        report.errors.append(text)
        logger.warning("metric lines not read", job_id=job.id, error=str(exc)[:MAX_ERROR_TEXT])


class NoMetricLines:
    """MetricLines where a runtime has nowhere to read them from: no lines, the cursor as it was."""

    def read(self, job: Job, *, cursor: str | None, limit: int) -> MetricLinesPage:
        return MetricLinesPage(lines=(), cursor=cursor)
