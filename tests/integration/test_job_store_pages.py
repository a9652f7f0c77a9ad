"""The status index read a page at a time (JobStore.page_by_status) against moto, and the
in-memory store that must agree with it: bounded reads, the filter after the read, and a key
to go on from even when a page keeps nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.adapters.aws.job_store import DynamoJobStore
from squall.core.jobs import JobStatus, new_job, transition
from squall.local.memory import InMemoryJobStore

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryJobStore()
    return DynamoJobStore(request.getfixturevalue("jobs_table"), "jobs")


def add(store: Any, index: int, *, team: str = "research", name: str = "gan", running: bool = False) -> str:
    job_id = f"job-{index:03d}"
    job, event = new_job(
        job_id=job_id, name=name, team=team, namespace=f"team-{team}", at=T0 + timedelta(seconds=index)
    )
    store.create(job, event)
    if running:
        store.save(*transition(job, to=JobStatus.RUNNING, reason="Started", at=T0 + timedelta(hours=1)))
    return job_id


def every_page(store: Any, status: JobStatus, *, read: int, **filters: Any) -> tuple[list[str], int]:
    """Every page's jobs in order, and how many reads it took."""
    seen: list[str] = []
    key, reads = None, 0
    while True:
        jobs, key = store.page_by_status(status, read=read, after=key, **filters)
        reads += 1
        assert len(jobs) <= read
        seen += [job.id for job in jobs]
        if key is None:
            return seen, reads
        assert reads < 100


def test_pages_go_through_a_state_once_each_way(store: Any) -> None:
    ids = [add(store, i) for i in range(23)]
    add(store, 99, running=True)
    # oldest first, and newest first: every queued job once, in order, none of the running one
    seen, reads = every_page(store, JobStatus.QUEUED, read=5)
    assert seen == ids and 5 <= reads <= 6
    seen, _ = every_page(store, JobStatus.QUEUED, read=5, newest_first=True)
    assert seen == ids[::-1]
    # a key is the status index's, plain strings: what a console puts in its cursor
    _, key = store.page_by_status(JobStatus.QUEUED, read=5)
    assert key == {"pk": "JOB#job-004", "sk": "META", "gsi1pk": "STATUS#QUEUED", "gsi1sk": key["gsi1sk"]}
    assert key["gsi1sk"].endswith("#job-004")
    assert [j.id for j in store.page_by_status(JobStatus.RUNNING, read=5)[0]] == ["job-099"]


def test_the_filter_keeps_a_teams_jobs_by_name_and_the_read_stays_bounded(store: Any) -> None:
    for i in range(30):
        add(store, i, team="vision" if i % 10 == 3 else "research", name="bert-large" if i % 2 else "gan")
    # when: a page reads 4 jobs, of which the filter may keep none
    jobs, key = store.page_by_status(JobStatus.QUEUED, read=4, team="vision")
    assert [j.id for j in jobs] == ["job-003"] and key is not None
    jobs, key = store.page_by_status(JobStatus.QUEUED, read=4, after=key, team="vision")
    assert jobs == [] and key is not None  # nothing kept, and still a next page
    # then: page by page, exactly the team's jobs whose name holds the text
    seen, reads = every_page(store, JobStatus.QUEUED, read=4, team="vision", name="bert")
    assert seen == ["job-003", "job-013", "job-023"] and reads >= 8
    seen, _ = every_page(store, JobStatus.QUEUED, read=7, name="ert-l", newest_first=True)
    assert seen == [f"job-{i:03d}" for i in range(29, 0, -2)]
    assert every_page(store, JobStatus.QUEUED, read=10, team="nobody")[0] == []
