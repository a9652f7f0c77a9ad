"""The `squall` command.

Offline: `validate`, `render`, `plan`, `demo`. Against AWS (whatever endpoint the
environment points boto3 at — the local one in the demo): `submit` (with `--code DIR`
through the artifacts bucket, SQUALL_ARTIFACTS_BUCKET), `status`,
`list`, `describe`, `queue`, `cancel`; `sweep` is in cli/sweeps.py, the model services'
commands (`serve`, `services`, `unserve`, `predict`) in cli/serving.py. The commands against
the deployment call the Python SDK (cli/client.py `Client`) and print what it returns.
Exit codes: 0 ok, 1 not found or failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from squall.cli.argtypes import whole_number
from squall.cli.config import (
    configured_policy,
    configured_team_shares,
    configured_teams,
    load_document,
    load_spec,
)
from squall.cli.errors import EXIT_FAILED, EXIT_OK, CommandError, reported
from squall.cli.human import (
    age,
    job_cost,
    job_needs,
    moment,
    moment_text,
    placement,
    spec_needs,
)
from squall.cli.queue import cmd_queue, place_in_queue, start_words
from squall.cli.text import one_line, print_table
from squall.core.jobs import JobStatus, Reason
from squall.planner.text import counted

if TYPE_CHECKING:
    from squall.cli.plan_inputs import ClusterFiles
    from squall.planner.offline import PlanInputError

# ---- offline commands ----


def cmd_validate(args: argparse.Namespace) -> int:
    spec, _ = load_spec(args.file)
    print(f"{args.file}: valid ({counted(len(spec.replica_list()), 'replica')}, {spec_needs(spec)})")
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    import yaml

    from squall.core import manifests
    from squall.core.spec import derive_job_id, expand_sweep

    spec, _ = load_spec(args.file, job_id=args.id)  # an --id is checked as a spec's id is
    job_id = spec.id or derive_job_id(spec, message_id="render")
    namespace = configured_teams()[spec.team]
    trials = expand_sweep(spec, job_id=job_id) or [(job_id, spec)]
    objects = [m for tid, s in trials for m in manifests.render(s, job_id=tid, namespace=namespace)]
    if args.json:
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from squall.cli.plan_inputs import (
        PlanArgumentError,
        cluster_option,
        job_ids,
        queued_replica_jobs,
        read_queue,
        snapshots,
    )
    from squall.planner.inputs import planner_policy
    from squall.planner.offline import ClusterSnapshot, PlanInputError, plan_offline

    now = _now(args.now) if args.now is not None else datetime.now(UTC)
    try:
        files = snapshots(
            clusters=[cluster_option(text) for text in args.cluster or ()],
            nodes=args.nodes,
            pods=args.pods,
            jobs=args.jobs,
        )
    except PlanArgumentError as exc:
        raise CommandError(str(exc)) from exc
    named = [f.name for f in files if f.name]
    # The deployment's policy (./cdk.json's, or --policy's), so that the plan is the one it would make.
    policy = planner_policy(configured_policy(args.policy))
    # Its teams' quotas and weights too, for admission (read only when there are jobs to admit).
    admitting = args.queue is not None or any(f.jobs for f in files)
    teams = configured_team_shares() if admitting else None
    groups_doc = load_document(args.groups)
    taken = [
        ClusterSnapshot(
            name=f.name,
            nodes_doc=load_document(f.nodes),
            pods_doc=load_document(f.pods),
            jobs_doc=load_document(f.jobs) if f.jobs else None,
        )
        for f in files
    ]
    queued = None
    if args.queue is not None:
        try:
            queue = read_queue(load_document(args.queue), source=args.queue)
            listed = {job_id for snapshot in taken for job_id in job_ids(snapshot.jobs_doc or [])}
            queued = queued_replica_jobs(queue, clusters=named, listed=listed, source=args.queue)
        except PlanArgumentError as exc:
            raise CommandError(str(exc)) from exc
        if queue.left_out:
            print(
                f"squall: {args.queue}: {counted(queue.left_out, 'record')} not in the queue left out "
                "(not QUEUED, a sweep's parent, a trial waiting for its slot, or placed with its objects created)",
                file=sys.stderr,
            )
    # The snapshot's millions of objects hold no cycles: spare the cycle collector from
    # traversing them again and again while the planner runs.
    gc.freeze()
    try:
        if named:
            result = plan_offline(
                clusters=taken, groups_doc=groups_doc, queued=queued, teams=teams, now=now, policy=policy
            )
        else:
            (one,) = taken
            result = plan_offline(
                nodes_doc=one.nodes_doc,
                pods_doc=one.pods_doc,
                jobs_doc=one.jobs_doc,
                groups_doc=groups_doc,
                queued=queued,
                teams=teams,
                now=now,
                policy=policy,
            )
    except PlanInputError as exc:
        raise CommandError(f"{_plan_input(exc, args=args, files=files)}: {exc}") from exc
    finally:
        gc.unfreeze()
    print(json.dumps(result, indent=None if args.json else 2))
    return EXIT_OK


def _plan_input(exc: PlanInputError, *, args: argparse.Namespace, files: Sequence[ClusterFiles]) -> str:
    """Which argument a PlanInputError is about: its file, or the option."""
    if exc.document == "now":
        return f"--now {args.now}"
    if exc.document == "groups":
        return str(args.groups)
    if exc.document == "clusters":
        return "--cluster"
    for f in files:
        if f.name == (exc.cluster or ""):
            path = getattr(f, exc.document, None)
            if path:
                return str(path)
    return str(exc.document)


def _now(text: str) -> datetime:
    try:
        now = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(
            f"--now: expected an ISO 8601 time with a timezone, e.g. 2026-01-05T09:00:00Z, got {text!r}"
        ) from None
    if now.utcoffset() is None:
        raise CommandError("--now needs a timezone, e.g. 2026-01-05T09:00:00Z")
    from squall.planner.kube import EARLIEST, LATEST

    if not EARLIEST <= now < LATEST:
        raise CommandError(f"--now: must be between {EARLIEST.year} and {LATEST.year}, got {text!r}")
    return now


def cmd_demo(args: argparse.Namespace) -> int:
    from squall.local.demo import run_demo

    result = run_demo(as_json=args.json, backend=args.backend)
    return EXIT_OK if result.ok else EXIT_FAILED


# ---- commands against the deployment ----


def cmd_submit(args: argparse.Namespace) -> int:
    from squall.cli.client import Client

    client = Client()
    sent = client.send(args.file, code=args.code)
    if sent.replaced_code_uri is not None and not args.json:
        print(
            f"{args.file}: codeUri {sent.replaced_code_uri} is replaced by --code {args.code}",
            file=sys.stderr,
        )
    if sent.code is not None and not args.json:
        code = sent.code
        what = (
            "uploaded again (the stored copy could expire during the longest run)"
            if code.renewed
            else "uploaded"
            if code.uploaded
            else "already there, not uploaded again"
        )
        print(
            f"code sha256 {code.sha256}: {what} ({code.uri}; {counted(code.files, 'file')}, "
            f"{code.bytes:,} bytes packed, {code.ignored} ignored)"
        )
    summary = {"jobId": sent.job_id, "messageId": sent.message_id} | (
        sent.code.as_json() if sent.code else {}
    )
    print(json.dumps(summary) if args.json else f"submitted {sent.job_id}", flush=True)
    if not args.watch:
        return EXIT_OK
    from squall.cli.follow.watch import watch_job
    from squall.cli.researcher import exit_code

    # The record appears once the submit function has taken the message: wait for it a while.
    return exit_code(
        watch_job(sent.job_id, store=client.store, clock=client.clock, out=sys.stdout, wait_for_record=120)
    )


def _job_dict(job: Any) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "status": job.status.value,
        "reason": job.reason,
        "submittedAt": job.submitted_at.isoformat(),
        "startedAt": job.started_at.isoformat() if job.started_at else None,
        "finishedAt": job.finished_at.isoformat() if job.finished_at else None,
        "gpus": job.gpus,
        "retries": f"{job.retries_used}/{job.max_retries}",
        "parentId": job.parent_id,
        "trials": list(job.trial_ids),
        "bestTrial": job.best_trial,  # a sweep's best trial so far (its objective's), kept by reconcile
        "errors": list(job.errors),
        # What admission reads (a `list --status QUEUED --json` file is `squall plan --queue`'s input)
        # and where it placed the job (null while it waits).
        "namespace": job.namespace,
        "version": job.version,
        "priority": job.priority,
        "requeued": job.requeued,
        "queueShape": job.queue_shape,
        "cluster": job.cluster,
        "region": job.region,
        "objectsCreated": job.objects_created,
        # When it will start while it waits (admission's latest estimate, and its first), and what
        # it cost: dollars so far while it runs, final once it ended.
        "startsBy": _iso(job.starts_by),
        "likelyStart": _iso(job.likely_start),
        "firstStartsBy": _iso(job.first_starts_by),
        "firstLikelyStart": _iso(job.first_likely_start),
        "cost": job.cost,
        "costRate": job.cost_rate,
        "spotSavings": job.spot_savings,
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _client() -> Any:
    from squall.cli.client import Client

    return Client()


def cmd_status(args: argparse.Namespace) -> int:
    job = _client().get(args.id)
    print(
        json.dumps(_job_dict(job))
        if args.json
        else f"{one_line(job.id)} {job.status.value} {one_line(job.reason)}"
    )
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    jobs = _client().jobs(args.status, limit=args.limit)
    if args.json:
        print(json.dumps([_job_dict(j) for j in jobs]))
        return EXIT_OK
    if not jobs:
        print(f"no {args.status} job" if args.status else "no job")
        return EXIT_OK
    now = datetime.now(UTC)
    rows = [
        [one_line(j.id), one_line(j.team), j.status.value, age(now - j.submitted_at), one_line(j.reason)]
        for j in jobs
    ]
    header = ["ID", "TEAM", "STATUS", "AGE", "REASON"]
    if any(j.cluster for j in jobs):  # placed by admission: where (a column only when some job has one)
        header.insert(4, "CLUSTER")
        for row, j in zip(rows, jobs, strict=True):
            row.insert(4, one_line(f"{j.cluster}/{j.region}" if j.cluster and j.region else j.cluster or "-"))
    # AGE: since it was submitted.
    print_table(header, rows)
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    from squall.cli.serving import (
        describe_model_service,
        history_dict,
        model_service_history,
        print_history,
    )
    from squall.cli.sweeps import best_trial_line, metrics_dict

    client = _client()
    job = client.find(args.id)
    if job is None:  # a model service's name, then (cli/serving.py)
        if describe_model_service(args.id, as_json=args.json):
            return EXIT_OK
        raise CommandError(f"no job or model service {args.id}", code=EXIT_FAILED)
    events = client.events(args.id)
    place, unread = place_in_queue(job)
    served = model_service_history(args.id)  # a model service is named after its job by default
    if args.json:
        body = _job_dict(job) | {
            "events": [
                {"at": e.at.isoformat(), "status": e.status.value, "reason": e.reason, "message": e.message}
                for e in events
            ],
            "queue": place,
            "modelService": history_dict(*served) if served is not None else None,
            "metrics": metrics_dict(job),
        }
        print(json.dumps(body))
        return EXIT_OK
    for line in describe_lines(job, events, place=place, unread=unread, best=best_trial_line(client, job)):
        print(line)
    if served is not None:
        print_history(*served, out=sys.stdout)
    return EXIT_OK


def describe_lines(
    job: Any, events: Sequence[Any], *, place: dict[str, Any] | None, unread: str, best: str = ""
) -> list[str]:
    """`squall describe` of a job, for people: its state, needs, where it runs, what it cost, what
    it reported (its metrics; a sweep's `best` trial line), its history, and while it waits its
    place in the queue and when it will start."""
    from squall.cli.sweeps import metric_lines

    lines = [
        f"{one_line(job.id)}  {job.status.value}  ({one_line(job.reason)})",
        f"  team {one_line(job.team)}, namespace {one_line(job.namespace or '-')}, {job_needs(job)}, "
        f"retries {job.retries_used}/{job.max_retries}",
    ]
    if where := placement(job):
        lines.append(f"  {where}")
    if cost := job_cost(job):
        lines.append(f"  {cost}")
    if best:
        lines.append(best)
    lines.extend(metric_lines(job))
    lines.extend(
        f"  error {one_line(error.get('field'))}: {one_line(error.get('message'))}" for error in job.errors
    )
    for event in events:
        message = f"  {one_line(event.message)}" if event.message else ""
        lines.append(f"  {moment(event.at)}  {event.status.value:<10} {one_line(event.reason)}{message}")
    if place is not None:
        held = "budget" if str(place["reason"]).startswith(Reason.BUDGET_EXCEEDED) else "quota"
        where = (
            f"position {one_line(place['position'])}" if place["position"] else f"held by its team's {held}"
        )
        lines.append(
            f"  queue ({where}, scale check at {moment_text(place['decidedAt'])}): "
            f"{one_line(place['reason'])}: {one_line(place['message'])}"
        )
    elif unread:
        lines.append(f"  queue: {one_line(unread)}")
    if job.status is JobStatus.QUEUED and (start := start_words(job, place)):
        lines.append(f"  {start}")
    return lines


def cmd_cancel(args: argparse.Namespace) -> int:
    _client().cancel(args.id, reason=args.reason)
    print(f"cancel requested for {args.id}")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="squall", description="Bursty GPU training on Kubernetes in AWS")
    sub = root.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a job spec (YAML or JSON)")
    p.add_argument("file")
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("render", help="print the Kubernetes manifests for a job spec")
    p.add_argument("file")
    p.add_argument("--id", help="job id to render with (default: the spec's id)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_render)

    p = sub.add_parser("plan", help="run the capacity planner offline on kubectl output")
    p.add_argument("--nodes", help="kubectl get nodes -o json (one cluster; else --cluster)")
    p.add_argument("--pods", help="kubectl get pods -A -o json (one cluster; else --cluster)")
    p.add_argument(
        "--cluster",
        action="append",
        metavar="NAME=NODES,PODS[,JOBS]",
        help="one cluster's snapshot (kubectl get nodes -o json, get pods -A -o json, and optionally "
        "get jobs -A -o json), once per cluster; node groups name their cluster",
    )
    p.add_argument("--groups", required=True, help="node groups with their live state (YAML)")
    p.add_argument("--now", help="ISO 8601 time to plan at (default: now)")
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="the policy (a cdk.json, {policy: {...}}, or the policy object); default: ./cdk.json's",
    )
    p.add_argument(
        "--queue",
        metavar="FILE",
        help="the queue: what `squall list --status QUEUED --json --limit 10000` prints; admit it first, "
        "as the scale check does, with cdk.json's teams",
    )
    p.add_argument(
        "--jobs",
        metavar="FILE",
        help="kubectl get jobs -A -o json (one cluster): its running Jobs count toward the teams' quotas, "
        "suspended ones queue",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_plan)

    from squall.local.commands import add_backend_option, add_local_commands

    p = sub.add_parser("demo", help="run Squall locally on its embedded default")
    p.add_argument("--json", action="store_true", help="print only the JSON summary")
    add_backend_option(p, default="moto")
    p.set_defaults(run=cmd_demo)

    p = sub.add_parser("submit", help="send a job spec to the jobs queue")
    p.add_argument("file")
    p.add_argument(
        "--code",
        metavar="DIR",
        help="pack DIR (less VCS files, caches and what DIR/.squallignore lists), upload it once per "
        "content to $SQUALL_ARTIFACTS_BUCKET and run the job's command in it",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="follow the job to its final state (as `squall watch`); exit 0 only if it SUCCEEDED",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_submit)

    for name, func, text in (
        ("status", cmd_status, "a job's state"),
        ("describe", cmd_describe, "a job's history (or a model service's, by its name)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument("--json", action="store_true")
        p.set_defaults(run=func)

    p = sub.add_parser("list", help="list jobs")
    p.add_argument("--status", choices=[s.value for s in JobStatus])
    p.add_argument(
        "--limit",
        type=whole_number(1, 10_000),
        default=1000,
        help="at most this many jobs per status (1..10000)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_list)

    p = sub.add_parser("queue", help="the queue in admission order, with reasons (the latest scale check's)")
    p.add_argument("--team", help="only this team's jobs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_queue)

    p = sub.add_parser("cancel", help="cancel a job")
    p.add_argument("id")
    p.add_argument("--reason", default="cancelled with squall cancel")
    p.set_defaults(run=cmd_cancel)

    add_local_commands(sub)
    from squall.cli.researcher import add_researcher_commands

    add_researcher_commands(sub)
    from squall.cli.serving import add_serving_commands

    add_serving_commands(sub)
    from squall.cli.sweeps import add_sweep_command

    add_sweep_command(sub)
    from squall.cli.costs import add_costs_parser

    add_costs_parser(sub)
    from squall.console.command import add_console_command

    add_console_command(sub)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):
        # A name or message with odd characters is shown escaped rather than failing the command.
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        code: int = reported(args.run)(args)
    except BrokenPipeError:  # `squall plan ... | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (nothing more may be written to the closed pipe)
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
