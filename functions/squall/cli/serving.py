"""`squall serve`, `services`, `unserve`, `predict` and `describe NAME` of a model service.

Like the researcher's other commands (cli/researcher.py) they read AWS through
boto3's default chain (AWS_ENDPOINT_URL points it at the local endpoint), never
cluster credentials: the records from the jobs table (SQUALL_TABLE_NAME), the
SavedModel's presence from S3, and they send their requests to the jobs queue
(SQUALL_JOBS_QUEUE_URL), where the submit function applies the same checks and team
rules as to any message. `predict` talks to the model service's own endpoints
(TensorFlow Serving's REST API, or its gRPC API with `--grpc`).

Exit codes as the rest of `squall`: 0 ok, 1 not found or failed (a service that
FAILED, a server's error), 2 bad input (a request refused before anything was sent).

What a record holds (a reason, an error, an endpoint, a job's or team's name) came
from a request, a pod or another team: every line shows it through `printable`, so
a terminal prints its control characters instead of obeying them (`--json` escapes
them as JSON does).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from squall.cli import deployment
from squall.cli.argtypes import seconds, whole_number
from squall.cli.errors import EXIT_FAILED, EXIT_OK, CommandError, reported
from squall.cli.follow.clock import patient
from squall.cli.human import moment
from squall.cli.prediction import (
    DEFAULT_SIGNATURE,
    check_request,
    grpc_predict,
    grpc_target,
    read_request,
    rest_base,
    rest_predict,
)
from squall.cli.text import printable
from squall.core.errors import PermanentError
from squall.core.jobs import Job
from squall.core.serving import LIVE, ModelService, ServiceEvent, ServiceReason, ServiceStatus

if TYPE_CHECKING:  # for annotations only: ports.py imports pydantic, which `squall plan` does without
    from squall.ports import FollowClock


DEFAULT_POLL = 2.0
# The submit function takes a message within seconds; a record that has not appeared
# (or not taken this request) after this long was refused or lost.
WAIT_FOR_RECORD = 120.0
# Pods placed (a node launched first, perhaps), the model fetched and loaded: the
# Deployment's progress deadline is 600 s and reconcile looks every minute.
WAIT_TIMEOUT = 1800.0
DEFAULT_PREDICT_TIMEOUT = 60.0


# ---- AWS, through boto3's default chain ----


def _service(store: Any, name: str) -> ModelService:
    service: ModelService | None = store.get(name)
    if service is None:
        raise CommandError(f"no model service {name}", code=EXIT_FAILED)
    return service


def checked_name(name: str) -> str:
    from squall.core.spec import is_service_name

    if not is_service_name(name):
        raise CommandError(
            f"{name[:80]!r} is not a model service name (a DNS label of lowercase letters, digits and "
            "'-', starting with a letter, at most 40 characters)"
        )
    return name


def _refused(source: str, exc: Any) -> CommandError:
    """A SpecError as the CLI shows a refused spec: every issue, field first."""
    total = getattr(exc, "total", len(exc.issues))
    lines = [f"{source}: refused ({total} error{'s' if total != 1 else ''})"]
    lines += [f"  {_shown(issue.field)}: {_shown(issue.message)}" for issue in exc.issues]
    return CommandError("\n".join(lines))


def _shown(value: object) -> str:
    """A value of a record (or a request) as one line shows it: control characters escaped."""
    return printable(str(value), newlines=False)


# ---- records as shown ----


def service_dict(service: ModelService) -> dict[str, Any]:
    return {
        "name": service.name,
        "status": service.status.value,
        "reason": service.reason,
        "job": service.job_id,
        "team": service.team,
        "namespace": service.namespace,
        "modelUri": service.model_uri,
        "modelVersion": service.model_version,
        "replicas": service.replicas,
        "readyReplicas": service.ready_replicas,
        "resources": {"gpu": service.gpus, "cpu": service.cpu, "memory": service.memory},
        "restUrl": service.rest_url,
        "grpcTarget": service.grpc_target,
        "cluster": service.cluster,  # where its objects are (null: a record from before several clusters)
        "createdAt": service.created_at.isoformat(),
        "updatedAt": service.updated_at.isoformat(),
        "errors": list(service.errors),
    }


def event_dict(event: ServiceEvent) -> dict[str, Any]:
    return {
        "at": event.at.isoformat(),
        "status": event.status.value,
        "reason": event.reason,
        "message": event.message,
    }


def event_line(event: ServiceEvent) -> str:
    message = f": {_shown(event.message)}" if event.message else ""
    return f"{moment(event.at)}  {event.status.value:<10} {_shown(event.reason)}{message}"


def _endpoints(service: ModelService) -> str:
    if service.rest_url is None and service.grpc_target is None:
        return "no endpoints yet"
    return f"REST {_shown(service.rest_url or '-')}, gRPC {_shown(service.grpc_target or '-')}"


def model_service_history(name: str) -> tuple[ModelService, list[ServiceEvent]] | None:
    """Model service `name`'s record and events; None when there is none (or `name` cannot be one)."""
    from squall.core.spec import is_service_name

    if not is_service_name(name):
        return None
    store = deployment.service_store()
    service: ModelService | None = store.get(name)
    if service is None:
        return None
    return service, store.events(name)


def history_dict(service: ModelService, events: Sequence[ServiceEvent]) -> dict[str, Any]:
    return service_dict(service) | {"events": [event_dict(e) for e in events]}


def print_history(service: ModelService, events: Sequence[ServiceEvent], *, out: TextIO) -> None:
    print(
        f"model service {_shown(service.name)}  {service.status.value}  ({_shown(service.reason)})", file=out
    )
    print(
        f"  job {_shown(service.job_id)}, team {_shown(service.team)}, namespace {_shown(service.namespace)}, "
        + (f"cluster {_shown(service.cluster)}, " if service.cluster else "")
        + f"model {_shown(service.model_uri)} as version {service.model_version}",
        file=out,
    )
    print(
        f"  {service.ready_replicas}/{service.replicas} replicas ready, each {service.gpus} GPUs, "
        f"cpu {_shown(service.cpu)}, memory {_shown(service.memory)}; {_endpoints(service)}",
        file=out,
    )
    for error in service.errors:
        print(f"  error {_shown(error.get('field', ''))}: {_shown(error.get('message', ''))}", file=out)
    for event in events:
        print(f"  {event_line(event)}", file=out)


def describe_model_service(name: str, *, as_json: bool, out: TextIO | None = None) -> bool:
    """`squall describe NAME` of a model service; False when there is no model service NAME."""
    found = model_service_history(name)
    if found is None:
        return False
    out = out or sys.stdout
    if as_json:
        print(json.dumps(history_dict(*found)), file=out)
    else:
        print_history(*found, out=out)
    return True


# ---- squall serve ----


def checked_serve(
    job_id: str,
    *,
    name: str | None,
    version: int | None,
    replicas: int | None,
    gpu: int | None,
    cpu: str | None,
    memory: str | None,
    jobs: Any,
    services: Any,
) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """A serve request's body and the model service's name, checked as the submit function will check it (the job's record,
    the name's, the SavedModel in S3), and what could not be checked with these credentials.
    A request that cannot be served is a CommandError naming the field."""
    from squall.core.serving_requests import plan_serve
    from squall.core.spec import ServeCommand, SpecError, parse_command

    body: dict[str, Any] = {"action": "serve", "job": job_id}
    if name is not None:
        body["name"] = name
    for key, value in (("modelVersion", version), ("replicas", replicas)):
        if value is not None:
            body[key] = value
    resources = {k: v for k, v in (("gpu", gpu), ("cpu", cpu), ("memory", memory)) if v is not None}
    if resources:
        body["resources"] = resources
    try:
        command = parse_command(body)
    except SpecError as exc:
        raise _refused("serve request", exc) from exc
    assert isinstance(command, ServeCommand)
    saved_models = deployment.saved_models()
    unchecked: list[str] = []

    def has_saved_model(uri: str) -> bool:
        try:
            return bool(saved_models.has_saved_model(uri))
        except PermanentError as exc:
            # These credentials may not read there (S3 answers a missing key with 403 to
            # whoever may not list the bucket): the submit function asks with its own.
            unchecked.append(str(exc))
            return True

    try:
        plan_serve(
            command,
            job=jobs.get(command.job),
            existing=services.get(command.name),
            message_id=None,
            has_saved_model=has_saved_model,
        )
    except SpecError as exc:
        raise _refused(f"serve {command.job}", exc) from exc
    return body, command.name, tuple(unchecked)


@reported
def cmd_serve(args: argparse.Namespace) -> int:
    from squall.cli.client import Client

    client = Client()
    # What the submit function will check, asked now: a request that cannot be served
    # fails here, naming the field, and nothing is sent.
    request = client.serve(
        args.job,
        name=args.name,
        version=args.version,
        replicas=args.replicas,
        gpu=args.gpu,
        cpu=args.cpu,
        memory=args.memory,
    )
    for problem in request.unchecked:
        print(
            f"squall: could not check for the SavedModel ({_shown(problem)}); the submit function checks it",
            file=sys.stderr,
        )
    if args.json and not args.wait:
        print(json.dumps({"name": request.name, "job": request.job, "messageId": request.message_id}))
        return EXIT_OK
    print(f"serve requested: model service {request.name} of job {request.job}", flush=True)
    if not args.wait:
        print(f"  follow it with: squall services, squall describe {request.name}")
        return EXIT_OK
    service = client.wait_service(request, timeout=args.timeout, out=sys.stdout)
    if args.json:
        print(json.dumps(service_dict(service)))
    return serve_exit(service)


def rejected_id(message_id: str) -> str:
    """The id under which the submit function records a message it refuses (services/intake.py `_reject`)."""
    import hashlib

    from squall.core.spec import REJECTED_PREFIX

    return REJECTED_PREFIX + hashlib.sha256(message_id.encode()).hexdigest()[:12]


def serve_exit(service: ModelService) -> int:
    return EXIT_OK if service.status is ServiceStatus.SERVING else EXIT_FAILED


def follow_service(
    name: str,
    *,
    message_id: str,
    store: Any,
    clock: FollowClock,
    out: TextIO,
    poll: float = DEFAULT_POLL,
    wait_for_record: float = WAIT_FOR_RECORD,
    timeout: float = WAIT_TIMEOUT,
    rejected: Callable[[], Job | None] | None = None,
) -> ModelService:
    """Follow model service `name`, as the serve request `message_id` made it, until SERVING, FAILED or STOPPED.

    Prints its events from that request on, one line each, and then the outcome. The
    record is the request's once it carries the request's message id (serving a
    STOPPED or FAILED name again continues its record). `rejected()` reads the
    REJECTED record the submit function makes of a request it refuses (None while
    there is none). Raises CommandError when the request was refused, when no record
    took it within `wait_for_record` seconds, or it is still deploying after `timeout`
    seconds.
    """
    start = clock.now()
    shown = 0  # the record version whose events are printed
    while True:
        service: ModelService | None = patient(lambda: store.get(name), clock=clock, wait=poll)
        waited = (clock.now() - start).total_seconds()
        if service is None or service.message_id != message_id:
            refusal = patient(rejected, clock=clock, wait=poll) if rejected is not None else None
            if refusal is not None:
                raise CommandError(
                    f"the submit function refused the serve request for {name} ({_shown(refusal.reason)}, "
                    f"recorded as {_shown(refusal.id)}):\n"
                    + "\n".join(
                        f"  {_shown(e.get('field', ''))}: {_shown(e.get('message', ''))}"
                        for e in refusal.errors
                    ),
                    code=EXIT_FAILED,
                )
            if waited >= wait_for_record:
                raise CommandError(
                    f"the serve request for {name} was not taken within {wait_for_record:g} s: the submit "
                    "function refuses a request it cannot serve (serving not configured, a team rule, a name "
                    "taken meanwhile) and logs why; squall describe "
                    f"{name} shows the record if one is made",
                    code=EXIT_FAILED,
                )
        elif service.version != shown:
            events: list[ServiceEvent] = patient(lambda: store.events(name), clock=clock, wait=poll)
            if shown == 0:  # this request's events: from the last serve on
                starts = [
                    e.version
                    for e in events
                    if e.reason in (ServiceReason.REQUESTED, ServiceReason.SERVED_AGAIN)
                ]
                shown = (starts[-1] - 1) if starts else 0
            for event in events:
                if event.version > shown:
                    print(event_line(event), file=out, flush=True)
            shown = max([shown, *(e.version for e in events)])
            if (
                service.status is not ServiceStatus.DEPLOYING
            ):  # SERVING (its endpoints known), FAILED, STOPPED
                print(_outcome(service), file=out, flush=True)
                return service
        if waited >= timeout:
            status = (
                service.status.value
                if service is not None and service.message_id == message_id
                else "not recorded"
            )
            raise CommandError(
                f"model service {name} is still {status} after {timeout:g} s (squall describe {name})",
                code=EXIT_FAILED,
            )
        clock.sleep(poll)


def _outcome(service: ModelService) -> str:
    if service.status is ServiceStatus.SERVING:
        return (
            f"{_shown(service.name)} SERVING ({service.ready_replicas}/{service.replicas} ready): "
            f"{_endpoints(service)}\n  squall predict {_shown(service.name)} --input FILE.json"
        )
    return f"{_shown(service.name)} {service.status.value} ({_shown(service.reason)})"


# ---- squall services ----


@reported
def cmd_services(args: argparse.Namespace) -> int:
    store = deployment.service_store()
    statuses = list(ServiceStatus) if args.all else [s for s in ServiceStatus if s in LIVE]
    services = [s for status in statuses for s in store.list_by_status(status, limit=args.limit)]
    services.sort(key=lambda s: (s.created_at, s.name))
    if args.json:
        print(json.dumps([service_dict(s) for s in services]))
        return EXIT_OK
    if not services:
        print(
            "no model services"
            + ("" if args.all else " deploying or serving (--all shows the ended ones too)")
        )
        return EXIT_OK
    header = ["NAME", "STATUS", "REASON", "JOB", "READY", "REST", "GRPC"]
    table = [header] + [
        [
            _shown(s.name),
            s.status.value,
            _shown(s.reason),
            _shown(s.job_id),
            f"{s.ready_replicas}/{s.replicas}",
            _shown(s.rest_url or "-"),
            _shown(s.grpc_target or "-"),
        ]
        for s in services
    ]
    if any(s.cluster for s in services):  # a column only when a record names its cluster
        for row, s in zip(table, [None, *services], strict=True):
            row.insert(4, "CLUSTER" if s is None else _shown(s.cluster or "-"))
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for *cells, last in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)), last, sep="  ")
    return EXIT_OK


# ---- squall unserve ----


@reported
def cmd_unserve(args: argparse.Namespace) -> int:
    from squall.core.spec import SpecError, parse_command

    name = checked_name(args.name)
    body = {"action": "unserve", "name": name, "reason": args.reason}
    try:
        parse_command(body)
    except SpecError as exc:
        raise _refused("unserve request", exc) from exc
    service = _service(deployment.service_store(), name)
    if service.status is ServiceStatus.STOPPED:
        print(f"model service {name} is already STOPPED ({_shown(service.reason)})")
        return EXIT_OK
    deployment.send_to_jobs_queue(body)
    print(f"unserve requested for {name} ({service.status.value})")
    return EXIT_OK


# ---- squall predict ----


@reported
def cmd_predict(args: argparse.Namespace) -> int:
    from squall.cli.client import Client

    name = checked_name(args.name)
    body = read_request(args.input, signature=args.signature)
    answer = Client().predict(
        name, body, grpc=args.grpc, url=args.url, version=args.model_version, timeout=args.timeout
    )
    print(json.dumps(answer))
    return EXIT_OK


def predict(
    client: Any,
    name: str,
    *,
    body: Mapping[str, Any] | str | Path,
    grpc: bool,
    url: str | None,
    version: int | None,
    signature: str | None,
    timeout: float,
) -> Any:
    """`Client.predict`: the request checked, then sent to the service's recorded endpoint (or `url`)."""
    name = checked_name(name)
    if isinstance(body, str | Path):
        request = read_request(str(body), signature=signature)
    else:
        request = check_request(body, source="body", signature=signature)
    endpoint = url
    if endpoint is None:
        service = client.service(name)
        endpoint = service.grpc_target if grpc else service.rest_url
        if service.status is not ServiceStatus.SERVING or not endpoint:
            raise CommandError(
                f"model service {name} is {service.status.value} ({_shown(service.reason)}): no endpoint to send to "
                f"(squall describe {name}; --url sends to an address of your own)",
                code=EXIT_FAILED,
            )
    if grpc:
        return grpc_predict(grpc_target(endpoint), name=name, version=version, body=request, timeout=timeout)
    return rest_predict(rest_base(endpoint), name=name, version=version, body=request, timeout=timeout)


# ---- registration ----


def add_serving_commands(subparsers: Any) -> None:
    """Add `serve`, `services`, `unserve` and `predict` to the `squall` command's subparsers."""
    p = subparsers.add_parser("serve", help="serve a finished job's SavedModel with TensorFlow Serving")
    p.add_argument("job", help="the id of a SUCCEEDED job (its SavedModel is <outputUri>/<job id>)")
    p.add_argument("--name", help="the model service's name (default: the job id)")
    # Checked by the serve command's model, which names the field; argparse only reads numbers.
    p.add_argument(
        "--version", type=whole_number(-(2**31), 2**31), help="the model version served (default 1)"
    )
    p.add_argument("--replicas", type=whole_number(-(2**31), 2**31), help="serving replicas (default 1)")
    p.add_argument("--gpu", type=whole_number(-(2**31), 2**31), help="GPUs per replica (default 0)")
    p.add_argument("--cpu", help="CPU per replica, a Kubernetes quantity (default 1)")
    p.add_argument("--memory", help="memory per replica, a Kubernetes quantity (default 2Gi)")
    p.add_argument(
        "--wait",
        action="store_true",
        help="follow it until SERVING (exit 0, endpoints printed) or FAILED (exit 1)",
    )
    p.add_argument(
        "--timeout",
        type=seconds(1, 24 * 3600),
        default=WAIT_TIMEOUT,
        help="with --wait: give up after this long",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_serve)

    p = subparsers.add_parser(
        "services", help="list model services (deploying and serving; --all: every one)"
    )
    p.add_argument("--all", action="store_true", help="the FAILED and STOPPED ones too")
    p.add_argument("--limit", type=whole_number(1, 10_000), default=1000, help="at most this many per state")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_services)

    p = subparsers.add_parser("unserve", help="stop a model service and remove its Kubernetes objects")
    p.add_argument("name")
    p.add_argument("--reason", default="unserved with squall unserve")
    p.set_defaults(run=cmd_unserve)

    p = subparsers.add_parser("predict", help="send a predict request to a model service (REST, or --grpc)")
    p.add_argument("name")
    p.add_argument(
        "--input",
        required=True,
        metavar="FILE.json",
        help="the request: {'instances': [...]} or {'inputs': ...}",
    )
    p.add_argument("--grpc", action="store_true", help="through TensorFlow Serving's gRPC API")
    p.add_argument(
        "--url", help="send here instead of the recorded endpoint (REST: http://host:port, gRPC: host:port)"
    )
    p.add_argument(
        "--model-version", type=whole_number(1, 1_000_000), help="this version (default: the served one)"
    )
    p.add_argument(
        "--signature", help=f"the signature (default: the file's signature_name, else {DEFAULT_SIGNATURE})"
    )
    p.add_argument(
        "--timeout",
        type=seconds(1, 3600),
        default=DEFAULT_PREDICT_TIMEOUT,
        help="seconds to wait for the answer",
    )
    p.set_defaults(run=cmd_predict)
