"""A hostile job name, team, argument, log line, metric name or sweep parameter shows as text.

Two ways in. Through the front door, what validation lets through: a job's args and env
values, a sweep's categorical values, the lines its code prints (its log and metric lines).
And straight into the table, what validation would refuse but a record can still hold
(an older writer, a hand-edited item): a job's name and team, an event's message, the
names of its metrics, a sweep's parameter names. Every page that shows them shows them
escaped (`&lt;script&gt;`), never as markup.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import boto3
import markupsafe
import pytest

from squall.cli import deployment
from squall.core.jobs import JobStatus, new_job, transition
from squall.core.logstreams import ContainerStream, log_group
from squall.core.metrics import JobMetrics, MetricPoint, MetricSeries
from squall.local.cluster.metrics import ParameterOptimum, SyntheticObjective
from tests.e2e.helpers_runtime import IMAGE
from tests.integration.console.conftest import Console

pytestmark = pytest.mark.timeout(240)

# Markup that would run, style or navigate if it were ever put into a page as HTML.
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
HOSTILE_ARG = '--note="><svg onload=alert(3)>'
HOSTILE_ENV = "</pre><iframe src=//evil.example></iframe>"
HOSTILE_CHOICE = "<b>adam</b>"
HOSTILE_LOG = "step 7 <script>document.title='owned'</script> & done"
HOSTILE_METRIC = "<i>loss</i>"
HOSTILE_PARAMETER = "<u>lr</u>"
HOSTILE_TEAM = "<marquee>team</marquee>"
HOSTILE_NAME = "<h1>big</h1>"
HOSTILE_ID = "<img src=x onerror=alert(5)>"  # in the address: no '/', which would end a path segment
HOSTILE_MESSAGE = "failed: <a href=javascript:alert(4)>details</a>"

FRONT_JOB = "hostile-args"
SWEEP = "hostile-sweep"
RECORD = "hostile-record"
RECORD_SWEEP = "hostile-params"
WAITING = "hostile-waiting"


def job_spec(**fields: Any) -> dict[str, Any]:
    return {
        "name": "hostile",
        "team": "research",
        "image": IMAGE,
        "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1},
        "maxRuntime": "2h",
        "retries": 0,
    } | fields


@dataclass
class Scene:
    console: Console
    sweep_trials: tuple[str, ...]


def put_log_line(console: Console, job_id: str, text: str) -> None:
    """A line the job's container printed, where the cluster's log agent puts it."""
    job = console.sdk.get(job_id)
    logs = boto3.client("logs")
    group = log_group(deployment.clusters()[0].name)
    stream = ContainerStream(
        host="ip-10-0-1-7", pod=f"{job_id}-worker-0-x1y2z", namespace=job.namespace,
        container="trainer", container_id="ab12",
    ).name  # fmt: skip
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    # CloudWatch Logs takes events of the last 14 days only: real time, not the runtime's virtual clock
    at = int(datetime.now(UTC).timestamp() * 1000)
    logs.put_log_events(
        logGroupName=group, logStreamName=stream, logEvents=[{"timestamp": at, "message": text}]
    )


def write_records(console: Console) -> None:
    """Records that validation would have refused, written straight into the table."""
    store = console.runtime.store
    at = console.runtime.clock.now() - timedelta(minutes=30)
    series = MetricSeries(
        last=MetricPoint(20, 0.5), min=MetricPoint(20, 0.5), max=MetricPoint(10, 0.9),
        history=(MetricPoint(10, 0.9), MetricPoint(20, 0.5)), count=2,
    )  # fmt: skip
    job, event = new_job(
        job_id=RECORD, name=HOSTILE_NAME, team=HOSTILE_TEAM, namespace="team-research", at=at,
        status=JobStatus.RUNNING, reason="Started", message=HOSTILE_MESSAGE,
        spec={"name": HOSTILE_NAME, "team": HOSTILE_TEAM, "image": IMAGE, "args": [HOSTILE]},
        metrics=JobMetrics(series={HOSTILE_METRIC: series, "eval/score": series}),
    )  # fmt: skip
    store.create(job, event)
    done, event = transition(
        job, to=JobStatus.FAILED, reason="ApplicationError", at=at, message=HOSTILE_MESSAGE
    )
    store.save(done, event)
    # a job of a team with a hostile name, waiting: 8 GPUs in one pod, which no node has
    shape = json.dumps([{"d": 7200, "n": 1, "pod": {"containers": [{"resources": {
        "limits": {"nvidia.com/gpu": "8"}, "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "8"}}}],
        "tolerations": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]}}])  # fmt: skip
    waiting, event = new_job(
        job_id=WAITING, name=HOSTILE_NAME, team=HOSTILE_TEAM, namespace="team-research", at=at,
        spec={"name": HOSTILE_NAME, "team": HOSTILE_TEAM, "image": IMAGE}, gpus=8, replicas=1, priority=50,
        queue_shape=shape,
    )  # fmt: skip
    store.create(waiting, event)
    # a sweep whose parameter has a hostile name, and its two trials
    trials = (f"{RECORD_SWEEP}-t000", f"{RECORD_SWEEP}-t001")
    sweep_spec = {"name": "params", "team": "research", "image": IMAGE, "sweep": {
        "strategy": "grid", "maxTrials": 2, "parallelism": 2,
        "parameters": {HOSTILE_PARAMETER: [0.1, 0.2]},
        "objective": {"metric": "eval/score", "goal": "maximize"}}}  # fmt: skip
    parent, event = new_job(
        job_id=RECORD_SWEEP, name="params", team="research", namespace="team-research", at=at,
        status=JobStatus.RUNNING, reason="Started", spec=sweep_spec, trial_ids=trials,
    )  # fmt: skip
    store.create(parent, event)
    for number, trial_id in enumerate(trials):
        trial, event = new_job(
            job_id=trial_id, name="params", team="research", namespace="team-research", at=at,
            status=JobStatus.RUNNING, reason="Started", parent_id=RECORD_SWEEP,
            spec=sweep_spec | {"id": trial_id, "trialParameters": {HOSTILE_PARAMETER: 0.1 * (number + 1)}},
            metrics=JobMetrics(series={"eval/score": series}),
        )  # fmt: skip
        store.create(trial, event)


@pytest.fixture
def scene(console: Console) -> Iterator[Scene]:
    sdk = console.sdk
    assert (
        sdk.submit(job_spec(id=FRONT_JOB, args=[HOSTILE_ARG, HOSTILE], env={"NOTE": HOSTILE_ENV}))
        == FRONT_JOB
    )
    sweep = job_spec(
        id=SWEEP,
        resources={"cpu": "1", "memory": "1Gi"},
        sweep={
            "strategy": "grid",
            "maxTrials": 2,
            "parallelism": 2,
            "parameters": {"optimizer": [HOSTILE_CHOICE, "sgd"]},
            "objective": {"metric": "eval/score", "goal": "maximize"},
        },
    )
    console.runtime.simulated_metrics.set_objective(
        SWEEP, SyntheticObjective(parameters={"optimizer": ParameterOptimum(optimum="sgd")}, steps=100)
    )
    assert sdk.submit(sweep) == SWEEP
    for _ in range(120):
        console.step(30)
        front = sdk.find(FRONT_JOB)
        parent = sdk.find(SWEEP)
        if (
            front is not None
            and front.status is JobStatus.RUNNING
            and parent is not None
            and parent.trial_ids
        ):
            break
    put_log_line(console, FRONT_JOB, HOSTILE_LOG)
    write_records(console)
    parent = sdk.get(SWEEP)
    for _ in range(120):
        console.step(30)
        if sdk.get(SWEEP).status is JobStatus.SUCCEEDED:
            break
    yield Scene(console=console, sweep_trials=tuple(parent.trial_ids))


def escaped(text: str) -> str:
    """`text` as the templates' autoescape writes it."""
    return str(markupsafe.escape(text))


ALL = (HOSTILE, HOSTILE_ID, HOSTILE_ARG, HOSTILE_ENV, HOSTILE_CHOICE, HOSTILE_LOG, HOSTILE_METRIC, HOSTILE_PARAMETER,
       HOSTILE_TEAM, HOSTILE_NAME, HOSTILE_MESSAGE)  # fmt: skip
# Each page, and the hostile texts it shows (escaped). Every page is also checked for every
# hostile text unescaped, and for markup no template writes (inline script, event handlers).
PAGES: dict[str, tuple[str, ...]] = {
    "/queue": (HOSTILE_TEAM,),
    "/jobs": (HOSTILE_TEAM, HOSTILE_NAME),
    f"/jobs?team={HOSTILE_TEAM}": (HOSTILE_TEAM, HOSTILE_NAME),
    f"/jobs/{RECORD}": (HOSTILE_TEAM, HOSTILE_NAME, HOSTILE_MESSAGE),
    f"/jobs/{WAITING}": (HOSTILE_TEAM, HOSTILE_NAME),
    f"/jobs/{FRONT_JOB}": (HOSTILE_LOG,),
    f"/jobs/{SWEEP}": (),
    f"/jobs/{SWEEP}-t000": (),
    f"/jobs/{RECORD_SWEEP}-t000": (),
    "/sweeps": (),
    f"/sweeps/{SWEEP}": (HOSTILE_CHOICE,),
    # reconcile failed the sweep whose stored spec names a parameter so: the page says why
    f"/sweeps/{RECORD_SWEEP}": (HOSTILE_PARAMETER,),
    "/capacity": (),
    "/costs": (),
    "/services": (),
    # what the address carries comes back in a 404 or 400 page: as text
    f"/jobs/{quote(HOSTILE_ID, safe='')}": (HOSTILE_ID,),
    f"/sweeps/{quote(HOSTILE_ID, safe='')}": (HOSTILE_ID,),
    f"/services/{quote(HOSTILE_ID, safe='')}": (HOSTILE_ID,),
    f"/jobs?state={quote(HOSTILE, safe='')}": (),
    f"/jobs?team={quote(HOSTILE, safe='')}": (),
    f"/capacity?hours={quote(HOSTILE_ARG, safe='')}": (),
    f"/costs?since={quote(HOSTILE_ARG, safe='')}": (),
}


class Markup(HTMLParser):
    """What a browser would make of a page: inline scripts, event handlers, script URLs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name.lower() for name, _ in attrs}
        if tag == "script" and "src" not in names:
            self.found.append("an inline <script>")
        self.found += [f"<{tag} {name}=...>" for name in names if name.startswith("on")]
        self.found += [
            f"<{tag} {name}={value!r}>"
            for name, value in attrs
            if name in ("href", "src", "action") and (value or "").strip().lower().startswith("javascript:")
        ]
        if tag in ("iframe", "img", "marquee", "object", "embed"):
            self.found.append(f"a <{tag}> no template writes")


def test_every_page_shows_hostile_text_escaped_and_never_as_markup(scene: Scene) -> None:
    problems: list[str] = []
    for path, shown in PAGES.items():
        response = scene.console.browser.get(path)
        page = response.get_data(as_text=True)
        if response.status_code not in (200, 400, 404):
            problems.append(f"{path}: answered {response.status_code}")
            continue
        if not response.content_type.startswith("text/html"):
            problems.append(f"{path}: {response.content_type}")
        for text in ALL:
            if text in page:
                problems.append(f"{path}: shows {text!r} unescaped")
        for text in shown:
            if escaped(text) not in page:
                problems.append(f"{path}: does not show {text!r} (escaped)")
        parser = Markup()
        parser.feed(page)
        problems += [f"{path}: {what}" for what in parser.found]
    assert problems == []


def test_the_hostile_texts_reached_the_records_and_the_live_tail(scene: Scene) -> None:
    # What the test above relies on: the texts reached the table as written.
    sdk = scene.console.sdk
    front = sdk.get(FRONT_JOB)
    assert front.spec["args"] == [HOSTILE_ARG, HOSTILE] and front.spec["env"] == {"NOTE": HOSTILE_ENV}
    record = sdk.get(RECORD)
    assert (record.name, record.team) == (HOSTILE_NAME, HOSTILE_TEAM)
    assert HOSTILE_MESSAGE in [event.message for event in sdk.events(RECORD)]
    trial_choices = {str(sdk.get(t).spec["trialParameters"]["optimizer"]) for t in scene.sweep_trials}
    assert trial_choices == {HOSTILE_CHOICE, "sgd"}
    # a metric name that is no metric name is dropped when the record is read: never shown at all
    assert record.metrics is not None and set(record.metrics.series) == {"eval/score"}
    page = scene.console.browser.text(f"/jobs/{RECORD}")
    assert escaped(HOSTILE_METRIC) not in page and HOSTILE_METRIC not in page

    # The live tail's answer: JSON that static/job.js inserts with textContent, and that a
    # browser never reads as a page.
    response = scene.console.browser.get(f"/jobs/{FRONT_JOB}/logs.json")
    assert response.status_code == 200
    assert response.content_type.startswith("application/json")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    lines = response.get_json()["lines"]
    assert any(HOSTILE_LOG in line for line in lines), lines
