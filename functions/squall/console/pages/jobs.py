"""The jobs pages: the list (filtered by state, team and name, page by page) and a job's own page.

The list never reads the whole table: each request reads the status index page by page
(Client.jobs_page over JobStore.page_by_status: DynamoDB's Limit and ExclusiveStartKey, the
team and name as a FilterExpression) and stops after MOST_READ jobs read, however few the
filter kept, answering a `Next page` cursor all the same. With no state chosen it shows every
state one after another, QUEUED and RUNNING first, newest submission first within each (the
cursor says which state it is in). The cursor is base64url JSON of {state, the status index's
LastEvaluatedKey}, read back strictly: anything else is a 400 naming `after`.

A job's page shows its record (team, priority, image, resources, state and reason, times,
cluster and region, replicas), its events with their reasons, its cost as `squall describe`
writes it, its metrics as charts, the last lines of its output with a live tail while it runs
(static/job.js polling `logs.json`), and links to its sweep, to serve it and to TensorBoard.
Cancel is an action: shown and answered only with --allow-actions, confirmed on a page of its
own. Starting TensorBoard changes nothing in the deployment (it copies the job's files and
serves them on a loopback port), so it is offered in read-only mode too.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flask import Blueprint, abort, current_app, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from squall.cli.errors import CommandError
from squall.console.context import current
from squall.core.jobs import Job, JobStatus, is_terminal

blueprint = Blueprint("jobs", __name__, url_prefix="/jobs")

MOST_READ = 500  # jobs read from the status index per request, whatever the filter keeps
LOG_LINES = 200  # the last lines of a job's output its page shows
MAX_EVENTS = 200  # the newest events a job's page lists
MAX_FILTER_CHARS = 100
MAX_CURSOR_CHARS = 2_000
KEY_NAMES = frozenset({"pk", "sk", "gsi1pk", "gsi1sk"})
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
CANCEL_REASON = "cancelled in the Squall console"


# ---- the list's arguments and cursor (pure) ----


def state_argument(text: str | None) -> JobStatus | None:
    if not text:
        return None
    try:
        return JobStatus(text)
    except ValueError:
        allowed = ", ".join(s.value for s in JobStatus)
        raise CommandError(f"state: expected one of {allowed}, got {text[:40]!r}") from None


def text_argument(name: str, text: str | None) -> str | None:
    if not text:
        return None
    if len(text) > MAX_FILTER_CHARS or not text.isprintable():
        raise CommandError(f"{name}: expected printable text of at most {MAX_FILTER_CHARS} characters")
    return text


def encode_cursor(state: JobStatus, key: dict[str, str] | None) -> str:
    text = json.dumps({"state": state.value, "key": key}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(text: str, *, states: Sequence[JobStatus]) -> tuple[JobStatus, dict[str, str] | None]:
    """A list cursor read back: its state (one of `states`) and the status index's key in it, exactly
    as encode_cursor writes them; CommandError (400) naming `after` for anything else."""
    refused = CommandError("after: not a page cursor of this list (open the list's first page again)")
    if len(text) > MAX_CURSOR_CHARS or not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise refused
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8"))
    except (binascii.Error, ValueError):
        raise refused from None
    if not isinstance(value, dict) or set(value) != {"state", "key"}:
        raise refused
    state, key = value["state"], value["key"]
    if not isinstance(state, str) or state not in {s.value for s in states}:
        raise refused
    if key is None:
        return JobStatus(state), None
    if (
        not isinstance(key, dict)
        or set(key) != KEY_NAMES
        or not all(isinstance(v, str) for v in key.values())
    ):
        raise refused
    job_id = key["pk"].removeprefix("JOB#")
    submitted, _, sort_id = key["gsi1sk"].partition("#")
    if not (
        key["pk"].startswith("JOB#")
        and JOB_ID.fullmatch(job_id)
        and key["sk"] == "META"
        and key["gsi1pk"] == f"STATUS#{state}"
        and sort_id == job_id
        and _is_time(submitted)
    ):
        raise refused
    return JobStatus(state), dict(key)


def _is_time(text: str) -> bool:
    try:
        return len(text) <= 40 and datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


# ---- the list ----


@blueprint.get("")
def page() -> str:
    context = current()
    state = state_argument(request.args.get("state"))
    team = text_argument("team", request.args.get("team"))
    name = text_argument("name", request.args.get("name"))
    states = [state] if state is not None else list(JobStatus)
    after = request.args.get("after")
    start = decode_cursor(after, states=states) if after else None
    jobs, following = context.client.jobs_page(
        states=states, team=team, name=name, after=start, size=context.page_size, most_read=MOST_READ
    )
    return render_template(
        "jobs.html",
        jobs=jobs,
        states=[s.value for s in JobStatus],
        state=state.value if state else "",
        team=team or "",
        name=name or "",
        cursor=encode_cursor(*following) if following is not None else None,
        moment=_moment,
    )


def _moment(value: datetime | None) -> str:
    from squall.cli.human import moment

    return moment(value) if value is not None else "-"


# ---- a job ----


def _chart_of(name: str, series: Any) -> Any:
    from squall.console.charts import line_chart

    return line_chart({name: [(float(p.step), p.value) for p in series.history]}, height=200, width=460)


def job_facts(job: Job) -> list[tuple[str, str]]:
    """The record's facts as (label, text): the template escapes the text."""
    from squall.cli.follow.logs import replica_names
    from squall.cli.human import job_cost, job_needs, placement

    spec = job.spec or {}
    replicas = replica_names(job)
    facts = [
        ("State", f"{job.status.value} ({job.reason})"),
        ("Name", job.name),
        ("Team", f"{job.team} (namespace {job.namespace or '-'})"),
        ("Priority", str(job.priority)),
        ("Image", str(spec.get("image", "-"))),
        ("Resources", job_needs(job)),
        (
            "Replicas",
            f"{job.replicas or len(replicas)}"
            + (f": {', '.join(replicas[:16])}" if replicas else "")
            + (", ..." if len(replicas) > 16 else ""),
        ),
        ("Submitted", _moment(job.submitted_at) + (f" by {job.submitted_by}" if job.submitted_by else "")),
        ("Started", _moment(job.started_at)),
        ("Ended", _moment(job.finished_at)),
        ("Where", placement(job) or "not placed in a cluster"),
        ("Retries", f"{job.retries_used} of {job.max_retries}"),
        ("Cost", job_cost(job) or "nothing counted yet"),
    ]
    if job.status is JobStatus.QUEUED:
        from squall.cli.human import estimate

        if when := estimate(job.starts_by, job.likely_start):
            facts.append(("Start", when))
    facts += [
        ("Error", f"{e.get('field')}: {e.get('message')}") for e in job.errors[:20] if isinstance(e, dict)
    ]
    return facts


@blueprint.get("/<job_id>")
def job(job_id: str) -> str:
    from squall.cli.sweeps import best_trial_line
    from squall.console import tensorboard
    from squall.console.job_logs import read_tail

    context = current()
    record = context.client.get(job_id)
    events = context.client.events(job_id)
    metrics = record.metrics
    charts = (
        [(name, _chart_of(name, series)) for name, series in sorted(metrics.series.items())]
        if metrics
        else []
    )
    try:
        tail = read_tail(context.client, record, after={}, most=LOG_LINES, now=context.now())
        log_error = ""
    except CommandError as exc:
        tail, log_error = None, str(exc)
    return render_template(
        "job.html",
        job=record,
        facts=job_facts(record),
        events=events[-MAX_EVENTS:],
        events_left_out=max(len(events) - MAX_EVENTS, 0),
        charts=charts,
        ignored=metrics.ignored if metrics else 0,
        tail=tail,
        log_error=log_error,
        best=best_trial_line(context.client, record) if record.is_sweep else "",
        serveable=record.status is JobStatus.SUCCEEDED and not record.is_sweep,
        cancellable=not is_terminal(record.status),
        board=tensorboard.boards(current_app).status(record.id),
        sent=request.args.get("sent") == "cancel",
        moment=_moment,
    )


@blueprint.get("/<job_id>/logs.json")
def logs(job_id: str) -> Response:
    from squall.console.job_logs import decode_cursor as log_cursor
    from squall.console.job_logs import read_tail

    context = current()
    after = log_cursor(request.args.get("after"))
    record = context.client.get(job_id)
    tail = read_tail(context.client, record, after=after, most=LOG_LINES * 10, now=context.now())
    return jsonify(
        lines=list(tail.lines),
        after=tail.cursor,
        final=tail.final,
        notes=list(tail.notes),
        dropped=tail.dropped,
        status=record.status.value,
    )


# ---- cancel (an action) and TensorBoard ----


def _actions_only() -> None:
    if not current().allow_actions:
        abort(403, description="this console is read-only: start it with --allow-actions to cancel jobs")


@blueprint.get("/<job_id>/cancel")
def confirm_cancel(job_id: str) -> str:
    _actions_only()
    record = current().client.get(job_id)
    return render_template(
        "confirm_cancel.html", job=record, final=is_terminal(record.status), reason=CANCEL_REASON
    )


@blueprint.post("/<job_id>/cancel")
def cancel(job_id: str) -> Response:
    _actions_only()
    context = current()
    record = context.client.get(job_id)
    if is_terminal(record.status):
        raise CommandError(f"job {record.id} is {record.status.value} already: there is nothing to cancel")
    context.client.cancel(record.id, reason=CANCEL_REASON)
    return redirect(url_for("jobs.job", job_id=record.id, sent="cancel"), code=303)


@blueprint.post("/<job_id>/tensorboard")
def start_tensorboard(job_id: str) -> Response:
    from squall.console import tensorboard

    context = current()
    record = context.client.get(job_id)
    tensorboard.boards(current_app).start(record, store=context.client.store)
    return redirect(url_for("jobs.job", job_id=record.id) + "#tensorboard", code=303)
