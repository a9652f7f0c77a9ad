"""The jobs list over the local runtime's table: filters, pages that read the status index a bounded
page at a time with a cursor read back strictly, and job-supplied text shown as text."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from squall.core.jobs import JobStatus, new_job
from tests.integration.console.conftest import Console

pytestmark = pytest.mark.timeout(240)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOSTILE = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')


def record(console: Console, job_id: str, *, team: str = "research", name: str = "gan", at: int = 0,
           status: JobStatus = JobStatus.QUEUED, reason: str = "Submitted") -> None:  # fmt: skip
    job, event = new_job(
        job_id=job_id, name=name, team=team, namespace=f"team-{team}", status=status, reason=reason,
        at=T0 + timedelta(seconds=at),
    )  # fmt: skip
    console.runtime.store.create(job, event)


def listed(page: str) -> list[str]:
    return re.findall(r'<td><a href="/jobs/([^"]+)">', page)


def next_href(page: str) -> str | None:
    found = re.search(r'<a rel="next" href="([^"]+)">', page)
    return found.group(1).replace("&amp;", "&") if found else None


def every_page(console: Console, path: str) -> tuple[list[str], int]:
    seen: list[str] = []
    pages = 0
    href: str | None = path
    while href is not None:
        page = console.browser.text(href)
        pages += 1
        seen += listed(page)
        href = next_href(page)
        assert pages < 20
    return seen, pages


def test_120_jobs_come_in_three_pages_of_50_none_twice_none_missing(console: Console) -> None:
    ids = [f"job-{i:03d}" for i in range(120)]
    for i, job_id in enumerate(ids):
        record(console, job_id, at=i)
    # when: the queued jobs, and every state
    seen, pages = every_page(console, "/jobs?state=QUEUED")
    # then: newest first, each once
    assert pages == 3 and seen == ids[::-1]
    assert every_page(console, "/jobs") == (ids[::-1], 3)


def test_every_state_lists_queued_and_running_first_then_the_final_ones(console: Console) -> None:
    record(console, "done-1", status=JobStatus.REJECTED, reason="Invalid", at=1)
    record(console, "run-1", status=JobStatus.RUNNING, reason="Started", at=2)
    record(console, "wait-1", at=3)
    page = console.browser.text("/jobs")
    assert listed(page) == ["wait-1", "run-1", "done-1"]
    assert listed(console.browser.text("/jobs?state=RUNNING")) == ["run-1"]
    assert 'class="state-REJECTED">REJECTED<' in page


def test_team_and_name_filter_the_pages_and_a_sparse_match_still_pages_on(console: Console) -> None:
    for i in range(30):
        record(console, f"r-{i:02d}", name="bert-base" if i % 3 == 0 else "gan", at=i)
    for i in range(3):
        record(console, f"v-{i}", team="vision", name="bert-large", at=100 + i)
    assert listed(console.browser.text("/jobs?team=vision")) == ["v-2", "v-1", "v-0"]
    seen, _ = every_page(console, "/jobs?state=QUEUED&team=research&name=bert")
    assert seen == [f"r-{i:02d}" for i in range(27, -1, -3)]
    assert every_page(console, "/jobs?name=nothing-like-it")[0] == []


def test_a_page_reads_a_bounded_number_of_jobs_however_few_match(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    from squall.console.pages import jobs

    monkeypatch.setattr(jobs, "MOST_READ", 10)
    reads: list[int] = []
    store = console.sdk.store
    original = store.page_by_status

    def counted(*args: object, **kwargs: object) -> object:
        reads.append(int(kwargs["read"]))  # type: ignore[call-overload]
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "page_by_status", counted)
    for i in range(25):
        record(console, f"r-{i:02d}", at=i)
    record(console, "v-0", team="vision", at=-1)
    # when: one vision job, the oldest, behind 25 of research's
    first = console.browser.text("/jobs?state=QUEUED&team=vision")
    # then: a page read at most 10, found none, and still says where to go on
    assert sum(reads) <= 10 and listed(first) == [] and next_href(first) is not None
    seen, pages = every_page(console, "/jobs?state=QUEUED&team=vision")
    assert seen == ["v-0"] and pages == 3


def cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


KEY = {"pk": "JOB#a", "sk": "META", "gsi1pk": "STATUS#QUEUED", "gsi1sk": "2026-03-02T09:00:00+00:00#a"}


@pytest.mark.parametrize(
    "after",
    [
        "not base64!",
        cursor(["QUEUED"]),
        cursor({"state": "QUEUED"}),
        cursor({"state": "PENDING", "key": None}),
        cursor({"state": "QUEUED", "key": {**KEY, "gsi1pk": "STATUS#RUNNING"}}),
        cursor({"state": "QUEUED", "key": {**KEY, "extra": "x"}}),
        cursor({"state": "QUEUED", "key": {**KEY, "sk": "EVENT#1"}}),
        cursor({"state": "QUEUED", "key": {**KEY, "gsi1sk": "yesterday#a"}}),
        cursor({"state": "QUEUED", "key": {**KEY, "gsi1sk": "2026-03-02T09:00:00+00:00#b"}}),
        cursor({"state": "QUEUED", "key": {**KEY, "pk": 7}}),
        "A" * 5000,
    ],
)
def test_a_hostile_cursor_is_refused_naming_after(console: Console, after: str) -> None:
    response = console.browser.get("/jobs", query_string={"after": after, "state": "QUEUED"})
    assert response.status_code == 400
    assert "after: not a page cursor of this list" in response.get_data(as_text=True)


def test_bad_filters_are_refused_naming_what_is_allowed(console: Console) -> None:
    response = console.browser.get("/jobs?state=PENDING")
    assert response.status_code == 400
    text = response.get_data(as_text=True)
    assert "state: expected one of QUEUED, RUNNING, SUCCEEDED" in text and "PENDING" in text
    assert console.browser.get("/jobs", query_string={"name": "x" * 101}).status_code == 400
    # a RUNNING page's cursor does not go on a QUEUED list
    running = cursor({"state": "RUNNING", "key": None})
    assert console.browser.get("/jobs", query_string={"state": "QUEUED", "after": running}).status_code == 400


def test_job_supplied_text_is_shown_as_text(console: Console) -> None:
    record(console, "hostile-1", name=HOSTILE[0], reason=HOSTILE[1])
    page = console.browser.text("/jobs")
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    # the filters echo what was typed, escaped too
    echoed = console.browser.text("/jobs?" + "name=%22%3E%3Cimg%20src%3Dx%3E")
    assert "<img src=x>" not in echoed and 'value="&#34;&gt;&lt;img src=x&gt;"' in echoed
