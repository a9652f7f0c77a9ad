"""The jobs list over the local runtime's table: filters, pages that read the status index a bounded
page at a time with a cursor read back strictly, and job-supplied text shown as text."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from html import escape

import boto3
import pytest

from squall.cli.follow.logs import replica_names
from squall.cli.human import job_cost
from squall.core.jobs import JobStatus, new_job
from squall.core.logstreams import ContainerStream
from squall.core.metrics import JobMetrics, MetricPoint, MetricSeries, merge
from tests.e2e.helpers_runtime import IMAGE
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


# ---- a job's page ----

SMALL_JOB = {
    "name": "console-job",
    "team": "research",
    "image": IMAGE,
    "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
    "maxRuntime": "2h",
}


def put_lines(console: Console, job_id: str, lines: list[str], *, later: float = 0) -> None:
    """Lines of the job's first replica, where the cluster's log agent puts them: `later` seconds
    after now in real time (CloudWatch takes no event older than 14 days, and the runtime's
    virtual clock may be further back)."""
    at = datetime.now(UTC) + timedelta(seconds=later)
    job = console.sdk.get(job_id)
    replica = replica_names(job)[0]
    stream = ContainerStream(
        host="ip-10-0-1-7", pod=f"{job_id}-{replica}-xk2q9", namespace=job.namespace,
        container="trainer", container_id="ab12",
    ).name  # fmt: skip
    logs = boto3.client("logs")
    group = console.runtime.resources.log_group
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    events = [{"timestamp": int(at.timestamp() * 1000) + i, "message": text} for i, text in enumerate(lines)]
    answer = logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)
    assert "rejectedLogEventsInfo" not in answer


def pre_lines(page: str) -> list[str]:
    found = re.search(r'<pre class="logs" id="logs"[^>]*>(.*?)</pre>', page, re.S)
    assert found is not None
    return found.group(1).splitlines()


def data_attribute(page: str, name: str) -> str:
    found = re.search(rf'<pre class="logs"[^>]* data-{name}="([^"]*)"', page)
    assert found is not None
    return found.group(1)


def test_a_job_followed_to_succeeded_shows_its_events_logs_metrics_and_cost(console: Console) -> None:
    # given: a job run to its end, what it printed and the metrics reconcile kept of it
    job_id = console.sdk.submit(SMALL_JOB)
    job = console.sdk.wait(job_id, timeout=4 * 3600, poll=30, wait_for_record=60)
    assert job.status is JobStatus.SUCCEEDED
    put_lines(console, job_id, ["epoch 1", "squall-metric train/loss=0.9 step=1"])
    lines = [f"squall-metric train/loss={1 / step:.3f} step={step}" for step in range(1, 40)]
    assert console.runtime.store.set_metrics(job_id, merge(None, lines, cursor=None))
    # when
    page = console.browser.text(f"/jobs/{job_id}")
    # then: its facts, its whole history with reasons, its cost as `squall describe` writes it
    assert f"<h1>Job {job_id} " in page and "SUCCEEDED" in page
    for event in console.sdk.events(job_id):
        assert f'<td class="reason">{escape(event.reason)}</td>' in page
    assert escape(job_cost(console.sdk.get(job_id)) or "nothing counted yet") in page
    assert escape(IMAGE) in page and "1 GPU" in page
    # its output, complete: no live tail follows a final job
    assert pre_lines(page) == ["[worker-0] epoch 1", "[worker-0] squall-metric train/loss=0.9 step=1"]
    assert data_attribute(page, "final") == "true" and 'src="/static/job.js"' in page
    # its metric as a chart: one polyline of its 39 points
    chart = re.search(r'<h3>train/loss</h3>.*?<polyline points="([^"]+)"', page, re.S)
    assert chart is not None and len(chart.group(1).split()) == 39
    # a SUCCEEDED job can be served; with no s3:// URIs, TensorBoard says why it cannot start
    assert f'href="/services/serve?job={job_id}"' in page
    started = console.browser.post(f"/jobs/{job_id}/tensorboard")
    assert started.status_code == 303
    page = console.browser.text(f"/jobs/{job_id}")
    assert "TensorBoard cannot start: job " in page and "names no s3:// checkpointUri or outputUri" in page


def test_a_running_jobs_output_is_followed_by_its_cursor_until_it_ends(console: Console) -> None:
    # given: a job that runs for ten minutes, and its first lines
    job_id = "tail-1"
    console.runtime.cluster.set_behaviour(job_id, run_for=timedelta(minutes=10))
    console.sdk.submit({**SMALL_JOB, "id": job_id})
    for _ in range(60):
        console.step(10)
        if (found := console.sdk.find(job_id)) is not None and found.status is JobStatus.RUNNING:
            break
    put_lines(console, job_id, ["first"])
    page = console.browser.text(f"/jobs/{job_id}")
    assert pre_lines(page)[-1].endswith("first") and data_attribute(page, "final") == "false"
    after = data_attribute(page, "after")
    # when: more lines, read from the page's cursor
    put_lines(console, job_id, ["second", "<script>alert(1)</script>"], later=1)
    response = console.browser.get(f"/jobs/{job_id}/logs.json", query_string={"after": after})
    # then: only the new lines, as text for job.js to append with textContent
    assert response.status_code == 200 and response.mimetype == "application/json"
    body = response.get_json()
    assert [line.split("] ", 1)[1] for line in body["lines"]] == ["second", "<script>alert(1)</script>"]
    assert body["final"] is False and body["status"] == "RUNNING" and body["after"] != after
    again = console.browser.get(f"/jobs/{job_id}/logs.json", query_string={"after": body["after"]})
    assert again.get_json()["lines"] == []
    # once the job has ended (and the log agent's grace passed), the tail says it is final
    console.sdk.wait(job_id, timeout=3600, poll=30)
    console.step(30)
    last = console.browser.get(f"/jobs/{job_id}/logs.json", query_string={"after": body["after"]}).get_json()
    assert last["final"] is True and last["status"] == "SUCCEEDED"


@pytest.mark.parametrize("after", ["%%%", cursor(["a"]), cursor({"stream": 3}), "A" * 20_000])
def test_a_hostile_log_cursor_is_refused_naming_after(console: Console, after: str) -> None:
    record(console, "logs-1")
    response = console.browser.get("/jobs/logs-1/logs.json", query_string={"after": after})
    assert response.status_code == 400 and "after: not a log cursor" in response.get_data(as_text=True)


def test_an_unknown_job_is_a_404_naming_it(console: Console) -> None:
    for path in ("/jobs/no-such-job", "/jobs/no-such-job/logs.json"):
        response = console.browser.get(path)
        assert response.status_code == 404 and "no job no-such-job" in response.get_data(as_text=True)


def test_a_hostile_name_log_line_and_metric_name_show_as_text(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a job whose record, output and metrics carry markup
    job_id = "hostile-2"
    console.runtime.cluster.set_behaviour(job_id, run_for=timedelta(minutes=10))
    console.sdk.submit({**SMALL_JOB, "id": job_id})
    for _ in range(60):
        console.step(10)
        if (found := console.sdk.find(job_id)) is not None and found.status is JobStatus.RUNNING:
            break
    put_lines(console, job_id, list(HOSTILE))
    point = MetricPoint(step=1, value=0.5)
    hostile_metrics = JobMetrics(
        series={
            name: MetricSeries(last=point, min=point, max=point, history=(point,), count=1)
            for name in HOSTILE
        }
    )
    # (the record keeps only well-formed names: a page is still to escape any it is handed)
    read = console.sdk.get
    monkeypatch.setattr(console.sdk, "get", lambda wanted: replace(read(wanted), metrics=hostile_metrics))
    record(console, "hostile-3", name=HOSTILE[0], reason=HOSTILE[1])
    # when
    pages = [console.browser.text(f"/jobs/{job_id}"), console.browser.text("/jobs/hostile-3")]
    # then: the text is there, escaped, and no markup of it
    for page in pages:
        assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[0]
        and "&lt;img src=x onerror=alert(1)&gt;" in pages[0]
    )
    assert "<h3>&lt;script&gt;alert(1)&lt;/script&gt;</h3>" in pages[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[1] and "&#34;&gt;&lt;img" in pages[1]


def test_a_final_jobs_output_longer_than_a_pass_is_read_on_until_its_end(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    from squall.adapters.aws import logs
    from squall.console import job_logs

    # given: passes of one page of two events, and a finished job that printed five lines
    monkeypatch.setattr(logs, "EVENTS_PAGE", 2)
    monkeypatch.setattr(job_logs, "MAX_PAGES", 1)
    job_id = console.sdk.submit(SMALL_JOB)
    assert (
        console.sdk.wait(job_id, timeout=4 * 3600, poll=30, wait_for_record=60).status is JobStatus.SUCCEEDED
    )
    console.step(60)
    put_lines(console, job_id, [f"line {i}" for i in range(5)])
    # when: the page, then the tail from its cursor until it says the output is complete
    page = console.browser.text(f"/jobs/{job_id}")
    seen = [line.split("] ", 1)[1] for line in pre_lines(page)]
    assert data_attribute(page, "final") == "false" and "pages in one pass" in page
    after = data_attribute(page, "after")
    for _ in range(5):
        body = console.browser.get(f"/jobs/{job_id}/logs.json", query_string={"after": after}).get_json()
        seen += [line.split("] ", 1)[1] for line in body["lines"]]
        after = body["after"]
        if body["final"]:
            break
    # then: every line once, in order
    assert seen == [f"line {i}" for i in range(5)] and body["final"] is True
