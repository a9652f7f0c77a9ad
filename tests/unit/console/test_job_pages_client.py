"""Client.jobs_page over the in-memory store: states one after another, newest first in each,
pages of at most `size`, no job twice and none missing, and never more read than `most_read`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.cli.client import Client
from squall.cli.errors import CommandError
from squall.core.jobs import JobStatus, new_job
from squall.local.memory import InMemoryJobStore

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class CountingStore(InMemoryJobStore):
    def __init__(self) -> None:
        super().__init__()
        self.read: list[int] = []

    def page_by_status(self, status: JobStatus, **kwargs: Any) -> Any:
        self.read.append(kwargs["read"])
        return super().page_by_status(status, **kwargs)


def client_over(store: InMemoryJobStore) -> Client:
    client = Client(environment={})
    client._jobs = store
    return client


def add(
    store: InMemoryJobStore, job_id: str, *, at: int, status: JobStatus = JobStatus.QUEUED, team: str = "a"
) -> None:
    job, event = new_job(
        job_id=job_id,
        name="n",
        team=team,
        namespace="ns",
        status=status,
        reason="r",
        at=T0 + timedelta(seconds=at),
    )
    store.create(job, event)


def every_page(client: Client, **kwargs: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    after = None
    while True:
        jobs, after = client.jobs_page(after=after, **kwargs)
        pages.append([job.id for job in jobs])
        if after is None:
            return pages
        assert len(pages) < 50


def test_every_state_in_turn_newest_first_in_pages_of_size() -> None:
    store = CountingStore()
    for i in range(7):
        add(store, f"q{i}", at=i)
    for i in range(5):
        add(store, f"r{i}", at=i, status=JobStatus.RUNNING)
    pages = every_page(client_over(store), size=4)
    assert [len(p) for p in pages[:-1]] == [4, 4, 4] and len(pages[-1]) <= 4
    flat = [job_id for page in pages for job_id in page]
    assert flat == [f"q{i}" for i in range(6, -1, -1)] + [f"r{i}" for i in range(4, -1, -1)]
    assert max(store.read) <= 4


def test_a_sparse_filter_reads_at_most_most_read_and_goes_on() -> None:
    store = CountingStore()
    for i in range(30):
        add(store, f"q{i:02d}", at=i, team="b" if i == 0 else "a")
    client = client_over(store)
    jobs, after = client.jobs_page(states=[JobStatus.QUEUED], team="b", size=5, most_read=12)
    assert jobs == [] and after is not None and sum(store.read) <= 12
    assert [
        p for p in every_page(client, states=[JobStatus.QUEUED], team="b", size=5, most_read=12) if p
    ] == [["q00"]]


def test_a_page_of_a_state_the_list_does_not_show_is_refused() -> None:
    with pytest.raises(CommandError, match=r"^after: "):
        client_over(InMemoryJobStore()).jobs_page(states=[JobStatus.QUEUED], after=(JobStatus.FAILED, None))
