"""MetricLines in memory: what each job printed, read a page at a time, with failures on demand."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from squall.core.errors import RetryableError
from squall.core.jobs import Job
from squall.core.metrics import MetricLinesPage
from squall.ports import MetricLines


@dataclass
class FakeMetricLines:
    """Each job's printed lines (`print`); the cursor is the count of lines read, as text.

    `next_error[job_id]` fails that job's next read; `calls` records every read.
    """

    printed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    next_error: dict[str, Exception] = field(default_factory=dict)
    calls: list[tuple[str, str | None, int]] = field(default_factory=list)

    def print(self, job_id: str, *lines: str) -> None:
        self.printed[job_id].extend(lines)

    def read(self, job: Job, *, cursor: str | None, limit: int) -> MetricLinesPage:
        self.calls.append((job.id, cursor, limit))
        error = self.next_error.pop(job.id, None)
        if error is not None:
            raise error
        start = int(cursor) if cursor else 0
        lines = self.printed.get(job.id, [])[start : start + limit]
        if not lines:
            return MetricLinesPage(lines=(), cursor=cursor)
        return MetricLinesPage(lines=tuple(lines), cursor=str(start + len(lines)))

    def read_ids(self) -> list[str]:
        return [job_id for job_id, _, _ in self.calls]


def unavailable() -> RetryableError:
    return RetryableError("reading the metric lines: ThrottlingException: Rate exceeded")


_: type[MetricLines] = FakeMetricLines
