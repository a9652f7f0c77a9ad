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
from squall.cli.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_REJECTED, CommandError, reported
from squall.cli.human import moment
from squall.cli.text import printable
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


def say(text: str) -> None:
    """A line about the output, not of it: on stderr, marked, escaped (it may quote a record or a stream's name)."""
    print(f"squall: {printable(text, newlines=False)}", file=sys.stderr, flush=True)


# ---- squall logs ----


@reported
def cmd_logs(args: argparse.Namespace) -> int:
    from squall.cli.client import Client
    from squall.cli.follow.logs import LogsError, parse_since

    client = Client()
    try:  # parsed here too, to say "no lines since" the moment it meant
        since = parse_since(args.since, now=client.clock.now()) if args.since else None
    except LogsError as exc:
        raise CommandError(str(exc)) from exc
    printed = 0
    for line in client.logs(
        args.id,
        follow=args.follow,
        replica=args.replica,
        since=since,
        timestamps=args.timestamps,
        on_status=say,
    ):
        sys.stdout.write(line + "\n")
        printed += 1
        if args.follow:
            sys.stdout.flush()
    sys.stdout.flush()
    if printed == 0 and since is not None:
        print(f"squall: no lines since {moment(since)}", file=sys.stderr)
    return EXIT_OK


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
    sources = job_sources(job, runs=trial_runs(store, job))
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


def trial_runs(store: Any, job: Job) -> dict[str, str]:
    """A sweep's trial id -> its TensorBoard run's folder, named by its parameters (a trial whose
    record is missing, or a tpe trial whose parameters are not chosen yet, keeps its id)."""
    from squall.cli.follow.tensorboard import run_name
    from squall.core.experiments import trial_parameters

    runs: dict[str, str] = {}
    for trial_id in job.trial_ids:
        trial: Job | None = store.get(trial_id)
        parameters = trial_parameters(trial) if trial is not None else {}
        if parameters:
            runs[trial_id] = run_name(trial_id, sweep_id=job.id, parameters=parameters)
    return runs


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
