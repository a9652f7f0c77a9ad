"""The model services pages: the list by state (page by page), a service's own page with its
endpoints, its job, its history and a predict form, and the serve and unserve actions.

The list reads the status index one state at a time (ModelServiceStore.list_by_status), never
more than MAX_OFFSET + page_size + 1 records a request: the store has no key to start a page
from, so the `Next page` cursor is `<state>:<offset>`, read back strictly (anything else is a
400 naming `after`). With no state chosen it shows SERVING, DEPLOYING, FAILED and STOPPED one
after another.

Predict sends the form's JSON to the service as `squall predict` does (Client.predict): it
reads the service, it changes nothing in the deployment, so it is answered in read-only mode
too, but as a POST it carries the session's form token like every form. Serve and unserve
are actions: shown and answered only with --allow-actions, each confirmed on a page of its
own, and sent as `squall serve` (Client.serve) and `squall unserve` send them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from squall.cli import deployment
from squall.cli.errors import EXIT_USAGE, CommandError
from squall.cli.serving import checked_name
from squall.console.context import current
from squall.core.serving import ModelService, ServiceEvent, ServiceStatus

blueprint = Blueprint("services", __name__, url_prefix="/services")

# The list's order with no state chosen: what answers first, then what may, then what ended.
STATES: tuple[ServiceStatus, ...] = (
    ServiceStatus.SERVING,
    ServiceStatus.DEPLOYING,
    ServiceStatus.FAILED,
    ServiceStatus.STOPPED,
)
MAX_OFFSET = 10_000  # the deepest page a cursor may ask for (each request reads up to it)
MAX_EVENTS = 200  # the newest events a service's page lists
MAX_PREDICT_CHARS = 256_000  # a predict form's JSON (below the form parser's own 500 kB)
MAX_ANSWER_CHARS = 200_000  # of an answer shown (the rest is cut, and the page says so)
PREDICT_TIMEOUT = 30.0
UNSERVE_REASON = "unserved in the Squall console"
SERVE_NUMBERS = ("version", "replicas", "gpu")
SERVE_TEXTS = ("cpu", "memory")


# ---- the list's arguments and cursor (pure) ----


def state_argument(text: str | None) -> ServiceStatus | None:
    """`?state=`: one of the states, or none (every state)."""
    if text is None or text == "":
        return None
    try:
        return ServiceStatus(text)
    except ValueError:
        allowed = ", ".join(s.value for s in STATES)
        raise CommandError(f"state: expected one of {allowed}, got {text[:40]!r}") from None


def encode_cursor(state: ServiceStatus, offset: int) -> str:
    return f"{state.value}:{offset}"


def decode_cursor(text: str, *, states: Sequence[ServiceStatus]) -> tuple[ServiceStatus, int]:
    """`?after=` as encode_cursor wrote it, for one of `states`; else a 400 naming `after`."""
    name, _, number = text.partition(":")
    allowed = {s.value: s for s in states}
    if name not in allowed or not number.isdigit() or len(number) > 6 or int(number) > MAX_OFFSET:
        raise CommandError(
            f"after: expected a cursor as the list's `Next page` link gives it (<state>:<offset>, "
            f"offset at most {MAX_OFFSET}), got {text[:60]!r}"
        )
    return allowed[name], int(number)


@dataclass(frozen=True)
class ServicesPage:
    services: list[ModelService]
    cursor: str | None  # the next page's `after`, None at the end


def services_page(
    store: Any, *, states: Sequence[ServiceStatus], after: tuple[ServiceStatus, int] | None, size: int
) -> ServicesPage:
    """Up to `size` services of `states` in order, from `after`: each state read with a bounded Limit."""
    start = states.index(after[0]) if after is not None else 0
    offset = after[1] if after is not None else 0
    shown: list[ModelService] = []
    for index in range(start, len(states)):
        state = states[index]
        wanted = size - len(shown)
        read: list[ModelService] = store.list_by_status(state, limit=offset + wanted + 1)
        shown.extend(read[offset : offset + wanted])
        if len(read) > offset + wanted:
            if offset + wanted > MAX_OFFSET:
                return ServicesPage(shown, None)
            return ServicesPage(shown, encode_cursor(state, offset + wanted))
        offset = 0
        if len(shown) == size:
            # A next page only when a later state has a service: one read of one item each.
            following = next((s for s in states[index + 1 :] if store.list_by_status(s, limit=1)), None)
            return ServicesPage(shown, encode_cursor(following, 0) if following is not None else None)
    return ServicesPage(shown, None)


# ---- what a service's page shows (pure) ----


def endpoints(service: ModelService) -> list[tuple[str, str]]:
    """Its endpoints as `squall describe` names them: REST and gRPC, where recorded."""
    found = [("REST", service.rest_url), ("gRPC", service.grpc_target)]
    return [(kind, address) for kind, address in found if address]


def service_facts(service: ModelService) -> list[tuple[str, str]]:
    return [
        ("State", f"{service.status.value} ({service.reason})"),
        ("Team", f"{service.team} (namespace {service.namespace})"),
        ("Cluster", service.cluster or "the first configured cluster"),
        ("Model", f"{service.model_uri}, served as version {service.model_version}"),
        ("Replicas", f"{service.ready_replicas}/{service.replicas} ready"),
        ("Each replica", f"{service.gpus} GPUs, cpu {service.cpu}, memory {service.memory}"),
        ("Created", service.created_at.isoformat()),
        ("Updated", service.updated_at.isoformat()),
    ]


def predict_body(text: str) -> dict[str, Any]:
    """The predict form's `instances`: a JSON list of rows (sent as {"instances": ...}), or a whole
    request ({"instances": ...} or {"inputs": ...}), checked as `squall predict` checks a file."""
    from squall.cli.prediction import check_request

    if len(text) > MAX_PREDICT_CHARS:
        raise CommandError(
            f"instances: {len(text)} characters; a predict form sends at most {MAX_PREDICT_CHARS}"
        )
    if not text.strip():
        raise CommandError('instances: empty: give a JSON list of rows, or {"instances": [...]}')
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"instances: not JSON: {exc}") from None
    body = {"instances": value} if isinstance(value, list) else value
    return check_request(body, source="instances", signature=None)


def answer_text(answer: Any) -> tuple[str, bool]:
    """The answer as indented JSON, cut at MAX_ANSWER_CHARS; and whether it was cut."""
    text = json.dumps(answer, indent=2)
    return text[:MAX_ANSWER_CHARS], len(text) > MAX_ANSWER_CHARS


# ---- the pages ----


@blueprint.get("")
def page() -> str:
    context = current()
    state = state_argument(request.args.get("state"))
    states = STATES if state is None else (state,)
    after_text = request.args.get("after")
    after = decode_cursor(after_text, states=states) if after_text else None
    listed = services_page(context.client.service_store, states=states, after=after, size=context.page_size)
    args = {key: value for key, value in request.args.items() if key in ("state", "after") and value}
    return render_template(
        "services.html", listed=listed, state=state, states=STATES, args=args, live=frozenset(STATES[:2])
    )


@blueprint.get("/<name>")
def service(name: str) -> tuple[str, int] | str:
    checked_name(name)
    if request.args.get("requested") and current().client.service_store.get(name) is None:
        return render_template("service.html", service=None, name=name), 200
    return _service_page(name)


def _service_page(name: str, *, status: int = 200, **predict: Any) -> tuple[str, int]:
    context = current()
    record = context.client.service(name)
    events: list[ServiceEvent] = context.client.service_store.events(record.name)
    return (
        render_template(
            "service.html",
            service=record,
            name=record.name,
            facts=service_facts(record),
            endpoints=endpoints(record),
            events=list(reversed(events[-MAX_EVENTS:])),
            more_events=max(0, len(events) - MAX_EVENTS),
            can_unserve=record.status is not ServiceStatus.STOPPED,
            serving=record.status is ServiceStatus.SERVING,
            **predict,
        ),
        status,
    )


@blueprint.post("/<name>/predict")
def predict(name: str) -> tuple[str, int]:
    checked_name(name)
    text = request.form.get("instances", "")
    try:
        body = predict_body(text)
        answer = current().client.predict(name, body, timeout=PREDICT_TIMEOUT)
    except CommandError as exc:
        status = 400 if exc.code == EXIT_USAGE else 502
        kept = text if len(text) <= MAX_PREDICT_CHARS else ""  # an over-long request is not sent back
        return _service_page(name, status=status, instances=kept, predict_error=str(exc))
    shown, cut = answer_text(answer)
    return _service_page(name, instances=text, answer=shown, answer_cut=cut)


# ---- serve and unserve (actions) ----


def _actions_only(what: str) -> None:
    if not current().allow_actions:
        abort(403, description=f"this console is read-only: start it with --allow-actions to {what}")


def _job_argument(text: str | None) -> str:
    if not text:
        raise CommandError("job: expected the id of a SUCCEEDED job to serve (?job=<id>)")
    return text


@blueprint.get("/serve")
def serve_form() -> str:
    _actions_only("serve models")
    job = current().client.get(_job_argument(request.args.get("job")))
    return render_template("confirm_serve.html", job=job, name=job.id)


@blueprint.post("/serve")
def serve() -> Response:
    _actions_only("serve models")
    form = request.form
    job_id = _job_argument(form.get("job"))
    options: dict[str, Any] = {key: _number(key, form.get(key)) for key in SERVE_NUMBERS}
    options |= {key: (form.get(key) or "").strip() or None for key in SERVE_TEXTS}
    name = (form.get("name") or "").strip() or None
    sent = current().client.serve(job_id, name=name, **options)
    return redirect(url_for("services.service", name=sent.name, requested=1), code=303)


def _number(field: str, text: str | None) -> int | None:
    value = (text or "").strip()
    if not value:
        return None
    if not value.lstrip("-").isdigit() or len(value) > 10:
        raise CommandError(f"{field}: expected a whole number, got {value[:40]!r}")
    return int(value)


@blueprint.get("/<name>/unserve")
def confirm_unserve(name: str) -> str:
    _actions_only("unserve models")
    record = current().client.service(checked_name(name))
    return render_template(
        "confirm_unserve.html",
        service=record,
        stopped=record.status is ServiceStatus.STOPPED,
        reason=UNSERVE_REASON,
    )


@blueprint.post("/<name>/unserve")
def unserve(name: str) -> Response:
    """`squall unserve NAME`: the unserve request, checked as the submit function checks it, on the jobs queue."""
    from squall.core.spec import SpecError, parse_command

    _actions_only("unserve models")
    record = current().client.service(checked_name(name))
    if record.status is ServiceStatus.STOPPED:
        raise CommandError(f"model service {record.name} is already STOPPED ({record.reason})")
    body = {"action": "unserve", "name": record.name, "reason": UNSERVE_REASON}
    try:
        parse_command(body)
    except SpecError as exc:
        raise CommandError("; ".join(f"{i.field}: {i.message}" for i in exc.issues)) from exc
    deployment.send_to_jobs_queue(body)
    return redirect(url_for("services.service", name=record.name, sent="unserve"), code=303)
