"""`squall logs`, `squall watch` and `squall tensorboard`: what a job shows its researcher.

They read AWS through boto3's default chain (AWS_ENDPOINT_URL points it at the local
endpoint), never cluster credentials: the job record from the jobs table
(SQUALL_TABLE_NAME), container output from the CloudWatch Logs group of the cluster the
job's record names, in that cluster's region (SQUALL_CLUSTERS, or for one cluster
SQUALL_CLUSTER_NAME, default "squall"), event files from the job's S3 URIs.

Exit codes as the rest of `squall` (0 ok, 1 not found or failed, 2 bad input), and for
`watch` the job's own end: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 REJECTED; 130 when
interrupted. The loops are in squall/cli/follow/; this module builds their adapters.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from squall.cli import deployment
from squall.cli.argtypes import port, seconds
from squall.cli.deployment import CLUSTER_ENV, CLUSTERS_ENV, ClusterPlace
from squall.cli.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_REJECTED, CommandError, reported
from squall.cli.human import moment
from squall.cli.text import printable
from squall.core.errors import NotFoundError
from squall.core.jobs import Job, JobStatus

DEFAULT_PORT = 6006

_STATUS_EXIT = {
    JobStatus.SUCCEEDED: EXIT_OK,
    JobStatus.FAILED: EXIT_FAILED,
    JobStatus.CANCELLED: EXIT_CANCELLED,
    JobStatus.REJECTED: EXIT_REJECTED,
}


def exit_code(status: JobStatus) -> int:
    """The exit code of a followed job's final state (`watch`, `submit --watch`)."""
    return _STATUS_EXIT.get(status, EXIT_FAILED)


def _job(store: Any, job_id: str) -> Job:
    job: Job | None = store.get(job_id)
    if job is None:
        raise CommandError(f"no job {job_id}", code=EXIT_FAILED)
    return job


def _sweep_refused(job: Job, what: str) -> CommandError:
    shown = printable(", ".join(job.trial_ids[:5]), newlines=False) + (
        ", ..." if len(job.trial_ids) > 5 else ""
    )
    return CommandError(
        f"job {job.id} is a sweep: each of its {len(job.trial_ids)} trials has {what} of its own "
        f"(squall {what.split()[0]} <trial id>; trials: {shown})",
        code=EXIT_FAILED,
    )


# ---- squall logs ----


def log_cluster(job: Job, configured: list[ClusterPlace]) -> ClusterPlace | None:
    """The cluster whose log group holds the job's output; None when it was never placed in one.

    The record names it (admission sets `cluster`) and SQUALL_CLUSTERS says where that
    cluster's group is. A job that waits in the queue has none (requeued after its pods were
    lost, it may be placed in another cluster next). With SQUALL_CLUSTER_NAME's one cluster,
    a job placed or run is read there, as before there were several (its record may be from
    before Squall recorded clusters, or name the cluster otherwise than the log group does).
    """
    legacy = len(configured) == 1 and configured[0].region is None
    if job.cluster and legacy:
        return configured[0]
    if job.cluster:
        for place in configured:
            if place.name == job.cluster:
                return place
        names = ", ".join(p.name for p in configured)
        raise CommandError(
            f"job {job.id} is in cluster {printable(job.cluster, newlines=False)}, which this shell's "
            f"clusters ({names}) do not include: set {CLUSTERS_ENV} to the deployment's clusters "
            '(JSON [{"name": ..., "region": ...}], the CDK app\'s output)',
            code=EXIT_FAILED,
        )
    if job.started_at is None or (job.status is JobStatus.QUEUED and len(configured) > 1):
        return None
    if len(configured) == 1:
        return configured[0]
    raise CommandError(
        f"job {job.id}'s record names no cluster (it ran before its deployment recorded one), and "
        f"{CLUSTERS_ENV} lists {len(configured)}: its logs are in one of "
        + ", ".join(f"/aws/containerinsights/{p.name}/application ({p.region})" for p in configured),
        code=EXIT_FAILED,
    )


def _unplaced(job: Job) -> str:
    what = printable(f"job {job.id} is {job.status.value} ({job.reason})", newlines=False)
    if job.status is JobStatus.QUEUED:
        return f"{what}: not placed in a cluster yet, so it has no logs yet"
    return f"{what}: it was never placed in a cluster, so it has no logs"


def say(text: str) -> None:
    """A line about the output, not of it: on stderr, marked, escaped (it may quote a record or a stream's name)."""
    print(f"squall: {printable(text, newlines=False)}", file=sys.stderr, flush=True)


@reported
def cmd_logs(args: argparse.Namespace) -> int:
    from squall.adapters.aws.logs import CloudWatchLogReader, LogAccessDenied
    from squall.cli.follow.clock import RealClock
    from squall.cli.follow.logs import (
        LogFollower,
        LogsError,
        await_placement,
        check_replica,
        parse_since,
        print_logs,
        replica_names,
    )
    from squall.core.logstreams import log_group

    store = deployment.job_store()
    job = _job(store, args.id)
    if job.is_sweep:
        raise _sweep_refused(job, "logs")
    if not job.namespace:
        raise CommandError(
            f"job {job.id} is {job.status.value} ({printable(job.reason, newlines=False)}): it never ran, "
            "so it has no logs",
            code=EXIT_FAILED,
        )
    replicas = replica_names(job)
    clock = RealClock()
    try:
        since = parse_since(args.since, now=clock.now()) if args.since else None
        replica = check_replica(args.replica, job_id=job.id, replicas=replicas) if args.replica else None
    except LogsError as exc:
        raise CommandError(str(exc)) from exc
    configured = deployment.clusters()
    place = log_cluster(job, configured)
    if place is None and args.follow and job.status is JobStatus.QUEUED:
        job = await_placement(job, store=store, clock=clock, on_status=say)
        place = log_cluster(job, configured)
    if place is None:
        say(_unplaced(job))
        return EXIT_OK
    group = log_group(place.name)
    follower = LogFollower(
        source=CloudWatchLogReader(deployment.aws_client("logs", region=place.region), group),
        job_id=job.id,
        namespace=job.namespace,
        replicas=replicas,
        replica=replica,
        since=since,
        on_warning=say,
    )
    try:
        printed = print_logs(
            follower,
            out=sys.stdout,
            timestamps=args.timestamps,
            follow=args.follow,
            store=store,
            clock=clock,
            on_status=say,
        )
    except NotFoundError as exc:
        raise CommandError(
            f"{exc}: no such log group{_in_region(place)}. Is the cluster's log agent installed (docs/deploy.md, "
            f"the CloudWatch Observability add-on), and is {_named_by(configured)} ({place.name}) the cluster's name?"
            + (
                f" (the job's record names cluster {printable(job.cluster, newlines=False)})"
                if job.cluster and job.cluster != place.name
                else ""
            ),
            code=EXIT_FAILED,
        ) from exc
    except LogAccessDenied as exc:
        raise CommandError(
            f"{exc}: these credentials may not read the job's logs (a team's readers may read only "
            f"the streams of their namespace, {job.namespace})",
            code=EXIT_FAILED,
        ) from exc
    if not follower.cursors:
        which = f" of replica {replica}" if replica else ""
        print(
            f"squall: no log streams{which} of job {job.id} in {group}{_in_region(place)} (yet: the pods may not have started, "
            "or the log agent not have shipped their first lines)",
            file=sys.stderr,
        )
    elif printed == 0 and since is not None:
        print(f"squall: no lines since {moment(since)}", file=sys.stderr)
    return EXIT_OK


def _in_region(place: ClusterPlace) -> str:
    return f" in {place.region}" if place.region else ""


def _named_by(configured: list[ClusterPlace]) -> str:
    """The variable that named the clusters (SQUALL_CLUSTERS, or SQUALL_CLUSTER_NAME's one)."""
    return CLUSTERS_ENV if any(p.region for p in configured) else CLUSTER_ENV


# ---- squall watch ----


@reported
def cmd_watch(args: argparse.Namespace) -> int:
    from squall.cli.follow.clock import RealClock
    from squall.cli.follow.watch import watch_job

    store = deployment.job_store()
    live = False if args.plain else None
    status = watch_job(args.id, store=store, clock=RealClock(), out=sys.stdout, live=live, poll=args.poll)
    return exit_code(status)


# ---- squall tensorboard ----


@reported
def cmd_tensorboard(args: argparse.Namespace) -> int:
    from squall.adapters.aws.s3_objects import S3ObjectReader
    from squall.cli.follow.clock import RealClock
    from squall.cli.follow.tensorboard import (
        EventFileMirror,
        MirrorError,
        ServeError,
        SyncReport,
        job_sources,
        keep_in_step,
        mirrored,
        nothing_yet,
        progress,
        warnings,
    )

    store = deployment.job_store()
    job = _job(store, args.id)
    sources = job_sources(job)
    if not sources:
        raise CommandError(
            f"job {job.id} names no s3:// checkpointUri or outputUri: there are no TensorBoard files to copy",
            code=EXIT_FAILED,
        )
    dest = Path(args.dir) if args.dir else Path("tensorboard") / job.id
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"--dir {dest}: cannot write there: {exc.strerror}") from exc
    mirror = EventFileMirror(S3ObjectReader(deployment.aws_client("s3")), dest, sources)

    def report(result: SyncReport) -> None:
        for line in warnings(result):
            print(f"squall: {line}", file=sys.stderr)
        copied = progress(result, dest)
        if copied is not None:
            print(copied, flush=True)

    try:
        if args.once:
            result = mirror.sync()
            report(result)
            if not result.files:
                print(f"squall: {nothing_yet(sources)}", file=sys.stderr)
            else:
                print(mirrored(result, dest))
            return EXIT_OK
        from squall.cli.follow.tensorboard import start_tensorboard

        report(mirror.sync())
        url = start_tensorboard(dest, port=args.port, host=args.host)
        print(f"TensorBoard at {url} (serving {dest}; Ctrl-C stops it)", flush=True)
        status = keep_in_step(
            mirror, store=store, job_id=job.id, clock=RealClock(), interval=args.interval, on_report=report
        )
        print(
            f"job {job.id} is {status.value if status else 'gone'}: its files are all copied; still serving",
            flush=True,
        )
        clock = RealClock()
        while True:
            clock.sleep(3600)
    except (MirrorError, ServeError) as exc:
        raise CommandError(str(exc), code=EXIT_FAILED) from exc
    except OSError as exc:  # the local directory, not S3 (whose errors are Squall's already)
        raise CommandError(f"{dest}: cannot write the copy there: {exc}", code=EXIT_FAILED) from exc


# ---- registration ----


def add_researcher_commands(subparsers: Any) -> None:
    """Add `logs`, `watch` and `tensorboard` to the `squall` command's subparsers."""
    p = subparsers.add_parser("logs", help="a job's container output (CloudWatch Logs), merged by time")
    p.add_argument("id")
    p.add_argument(
        "--replica", metavar="TYPE-INDEX", help="only this replica's output, e.g. chief-0 or worker-1"
    )
    p.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new lines until the job is final"
    )
    p.add_argument(
        "--since",
        metavar="WHEN",
        help="only lines since a duration ago (90s, 10m, 2h, 3d) or an ISO 8601 time",
    )
    p.add_argument("--timestamps", action="store_true", help="start each line with its time")
    p.set_defaults(run=cmd_logs)

    p = subparsers.add_parser(
        "watch", help="a job's state, replicas and latest events, live until it is final"
    )
    p.add_argument("id")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    p.add_argument("--poll", type=seconds(0.5, 300), default=2.0, help="seconds between reads (default 2)")
    p.set_defaults(run=cmd_watch)

    p = subparsers.add_parser("tensorboard", help="copy a job's TensorBoard files from S3 and serve them")
    p.add_argument("id")
    p.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"TensorBoard's port (default {DEFAULT_PORT})"
    )
    p.add_argument("--host", default="127.0.0.1", help="address TensorBoard listens on (default 127.0.0.1)")
    p.add_argument("--once", action="store_true", help="only copy the files, then exit")
    p.add_argument("--dir", metavar="DIR", help="where the files go (default ./tensorboard/<job id>)")
    p.add_argument(
        "--interval",
        type=seconds(1, 3600),
        default=30.0,
        help="seconds between copies while the job runs (default 30)",
    )
    p.set_defaults(run=cmd_tensorboard)
