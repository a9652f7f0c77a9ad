"""services/metrics.py: running jobs' metric lines read a bounded few per check, merged and written when changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from squall.core.errors import PermanentError
from squall.core.jobs import Job, JobStatus, Reason, new_job, transition
from squall.local.memory import InMemoryJobStore
from squall.services.metrics import FINAL_PAGES, MetricsCollector, NoMetricLines
from tests.fakes.metric_lines import FakeMetricLines, unavailable

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def running(store: InMemoryJobStore, job_id: str, *, minutes: int = 0) -> Job:
    job, event = new_job(
        job_id=job_id,
        name="t",
        team="research",
        namespace="team-research",
        at=T0 + timedelta(minutes=minutes),
    )
    store.create(job, event)
    started = transition(job, to=JobStatus.RUNNING, reason=Reason.STARTED, at=T0 + timedelta(hours=1))
    store.save(*started)
    return started[0]


def test_lines_are_merged_and_written_and_reading_goes_on_from_the_cursor() -> None:
    store, lines = InMemoryJobStore(), FakeMetricLines()
    job = running(store, "j-1")
    collector = MetricsCollector(store=store, lines=lines, events_per_read=2)
    lines.print(
        "j-1", "squall-metric loss=3 step=1", "squall-metric loss=2 step=2", "squall-metric loss=1 step=3"
    )
    report = collector.collect([job])
    assert report.written == ["j-1"]
    stored = store.get("j-1")
    assert stored is not None and stored.version == job.version
    assert stored.metrics is not None and stored.metrics.get("loss").last.value == 2.0  # type: ignore[union-attr]
    # the next check reads on from where this one stopped: the third line, once
    collector.collect(store.list_by_status(JobStatus.RUNNING))
    loss = store.get("j-1").metrics.get("loss")  # type: ignore[union-attr]
    assert [p.step for p in loss.history] == [1, 2, 3]  # type: ignore[union-attr]
    assert lines.calls[-1] == ("j-1", "2", 2)


def test_nothing_new_writes_nothing() -> None:
    store, lines = InMemoryJobStore(), FakeMetricLines()
    job = running(store, "quiet")
    collector = MetricsCollector(store=store, lines=lines)
    assert collector.collect([job]).written == []
    assert store.get("quiet").metrics is None  # type: ignore[union-attr]
    lines.print("quiet", "squall-metric a=1")
    collector.collect(store.list_by_status(JobStatus.RUNNING))
    assert collector.collect(store.list_by_status(JobStatus.RUNNING)).written == []


def test_at_most_the_bound_of_jobs_per_check_the_longest_unread_first() -> None:
    store, lines = InMemoryJobStore(), FakeMetricLines()
    jobs = [running(store, f"j-{i}", minutes=i) for i in range(5)]
    collector = MetricsCollector(store=store, lines=lines, jobs_per_check=2)
    rounds = []
    for _ in range(5):
        lines.calls.clear()
        collector.collect(jobs)
        rounds.append(lines.read_ids())
    assert rounds == [["j-0", "j-1"], ["j-2", "j-3"], ["j-4", "j-0"], ["j-1", "j-2"], ["j-3", "j-4"]]


def test_a_job_whose_read_fails_is_skipped_and_the_others_are_read() -> None:
    store, lines = InMemoryJobStore(), FakeMetricLines()
    jobs = [running(store, f"j-{i}", minutes=i) for i in range(3)]
    for job in jobs:
        lines.print(job.id, "squall-metric x=1")
    lines.next_error["j-1"] = unavailable()
    report = MetricsCollector(store=store, lines=lines).collect(jobs)
    assert report.written == ["j-0", "j-2"]
    assert len(report.errors) == 1 and report.errors[0].startswith("j-1: metric lines:")
    assert store.get("j-1").metrics is None  # type: ignore[union-attr]


def test_a_failed_read_is_tried_again_on_a_later_check() -> None:
    store, lines = InMemoryJobStore(), FakeMetricLines()
    jobs = [running(store, f"j-{i}", minutes=i) for i in range(3)]
    lines.print("j-0", "squall-metric x=1")
    lines.next_error["j-0"] = PermanentError("AccessDeniedException")
    collector = MetricsCollector(store=store, lines=lines, jobs_per_check=3)
    collector.collect(jobs)
    collector.collect(store.list_by_status(JobStatus.RUNNING))
    assert store.get("j-0").metrics is not None  # type: ignore[union-attr]


def test_only_running_jobs_are_read_and_a_finished_one_once_more_to_its_end() -> None:
    store, lines = InMemoryJobStore(), FakeMetricLines()
    job = running(store, "j-1")
    queued, event = new_job(job_id="q-1", name="q", team="research", namespace="team-research", at=T0)
    store.create(queued, event)
    collector = MetricsCollector(store=store, lines=lines, events_per_read=2)
    lines.print("j-1", *(f"squall-metric loss={10 - i} step={i}" for i in range(20)))
    collector.collect([job, queued])
    assert lines.read_ids() == ["j-1"]
    finished = transition(store.get("j-1"), to=JobStatus.SUCCEEDED, reason=Reason.COMPLETED, at=T0)  # type: ignore[arg-type]
    store.save(*finished)
    lines.calls.clear()
    collector.final(finished[0])
    assert len(lines.calls) == FINAL_PAGES
    assert store.get("j-1").metrics.get("loss").last.step == 2 * (1 + FINAL_PAGES) - 1  # type: ignore[union-attr]


def test_a_final_read_that_fails_never_raises() -> None:
    store, lines = InMemoryJobStore(), FakeMetricLines()
    job = running(store, "j-1")
    lines.print("j-1", "squall-metric a=1")
    lines.next_error["j-1"] = unavailable()
    report = MetricsCollector(store=store, lines=lines).final(job)
    assert report.errors and store.get("j-1").metrics is None  # type: ignore[union-attr]


def test_the_null_reader_reads_nothing_and_writes_nothing() -> None:
    store = InMemoryJobStore()
    job = running(store, "j-1")
    report = MetricsCollector(store=store, lines=NoMetricLines()).collect([job])
    assert report.read == ["j-1"] and report.written == [] and store.get("j-1").metrics is None  # type: ignore[union-attr]
