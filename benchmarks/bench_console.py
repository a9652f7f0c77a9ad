"""The console's pages over a 10,000-job table: the server's time to answer each one.

The jobs (10,000 by default) are written through the job store's create and save, as the
functions write them: QUEUED jobs with their queue shape, RUNNING ones placed in a
cluster, finished ones (SUCCEEDED, FAILED, CANCELLED), and 20 sweeps of 10 trials whose
records carry metrics (two series of 64 points). The store is the local runtime's
in-memory JobStore (local/memory.py: DynamoDB's status index and conditions, kept sorted
as writes land), set as the SDK Client's store: moto answers each Query by passing over
every item of the table, which would time moto rather than the console (bench_queue_read.py
says how). Everything else the pages read is in moto's table, in process: the scale checks'
decision records of the last six hours (one a minute, each with the queue's first 200
waiting jobs as admission lists them, and a scale-up), written with the scale state
adapter; the cost ledger and the model services are empty (their pages read an empty
ledger and no services); CloudWatch Logs has no log group (a job page says so).

Timed: each page through the Flask test client (the request as the console's own page
sends it: the app's whole server-side time, guard, reads through the Client, template),
the median of --repeat requests after one warm-up. Printed per page: that time, the part
spent in the job store (reads and jobs returned) and in AWS calls (moto: calls and items
returned), the ratio to the baseline, and "under 1 s: yes/no". The reads show that no
page reads the whole table: a list page reads one page of the status index.

Baseline, measured in the same run on the same store: `squall list --limit 50` (the
command's own function, in this process, its output captured): 50 jobs of each state from
the status index, printed as a table. The ratio is a page's time over it.

Run: .venv/bin/python benchmarks/bench_console.py [--jobs 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = "squall-jobs"
PORT = 8080
TOKEN = "bench-session-token"
TEAMS = ("research", "vision", "speech", "ranking")
IMAGE = "registry.example.com/squall/tf-trainer:2.16"
SWEEPS = 20
TRIALS = 10
DECISION_HOURS = 6
QUEUED_SHARE, RUNNING_SHARE, FAILED_SHARE, CANCELLED_SHARE = 0.2, 0.05, 0.08, 0.02


def environment() -> None:
    """What `eval "$(squall local env)"` would set, for moto in process."""
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-west-2",
            "SQUALL_TABLE_NAME": TABLE,
            "SQUALL_JOBS_QUEUE_URL": "https://sqs.us-west-2.amazonaws.com/123456789012/squall-jobs",
            "SQUALL_ARTIFACTS_BUCKET": "squall-artifacts",
            "SQUALL_CLUSTER_NAME": "squall",
        }
    )
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "SQUALL_TEAMS", "SQUALL_CLUSTERS"):
        os.environ.pop(name, None)


@dataclass
class Table:
    """What was written: ids to open pages at."""

    queued: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    sweeps: list[str] = field(default_factory=list)
    items: int = 0


def spec_of(name: str, team: str, gpus: int, **more: Any) -> Any:
    from squall.core.spec import parse_spec

    body = {
        "name": name,
        "team": team,
        "image": IMAGE,
        "command": ["python", "-m", "trainer"],
        "args": ["--epochs", "20", "--batch-size", "256"],
        "resources": {"cpu": str(4 * max(gpus, 1)), "memory": f"{30 * max(gpus, 1)}Gi", "gpu": gpus},
    } | more
    return parse_spec(body, teams=TEAMS, registries=["registry.example.com/squall"])


def metrics_of(rng: random.Random, quality: float) -> Any:
    from squall.core.metrics import JobMetrics, MetricPoint, MetricSeries

    def series(values: list[float]) -> MetricSeries:
        points = tuple(MetricPoint(10 * (i + 1), v) for i, v in enumerate(values))
        low, high = min(points, key=lambda p: p.value), max(points, key=lambda p: p.value)
        return MetricSeries(last=points[-1], min=low, max=high, history=points, count=len(points))

    score = [quality * (1 - 0.95 ** (i + 1)) + rng.gauss(0, 0.01) for i in range(64)]
    return JobMetrics(series={"eval/score": series(score), "train/loss": series([1 - s for s in score])})


def fill(store: Any, count: int, *, now: datetime, seed: int = 29) -> Table:
    """`count` jobs (sweeps and their trials among them), written through the store's create and
    save as the functions write them (a finished job: created running, then saved finished)."""
    from squall.core.jobs import JobStatus, new_job, transition
    from squall.core.queue import queue_shape
    from squall.core.spec.parse import recorded

    rng = random.Random(seed)
    table = Table()

    def put(job: Any, event: Any) -> None:
        if job.version == 1:
            store.create(job, event)
            table.items += 1
        else:
            store.save(job, event)

    start = now - timedelta(days=20)
    spacing = (now - start) / count
    # sweeps: a parent and its trials, all finished, the trials with metrics
    for s in range(SWEEPS):
        sweep_id = f"sweep-{s:03d}"
        team = TEAMS[s % len(TEAMS)]
        at = now - timedelta(hours=2 * (SWEEPS - s) + 3)  # the last days: a sweep every two hours
        trial_ids = tuple(f"{sweep_id}-t{n:03d}" for n in range(TRIALS))
        sweep_body = {"strategy": "random", "seed": s, "maxTrials": TRIALS, "parallelism": 4,
                      "parameters": {"learning_rate": {"min": 1e-5, "max": 1e-2, "log": True},
                                     "batch_size": [64, 128, 256]},
                      "objective": {"metric": "eval/score", "goal": "maximize"}}  # fmt: skip
        parent_spec = recorded(spec_of("sweep", team, 1, id=sweep_id, sweep=sweep_body))
        for n, trial_id in enumerate(trial_ids):
            lr, batch_size = 10 ** rng.uniform(-5, -2), rng.choice([64, 128, 256])
            trial_spec = parent_spec | {"id": trial_id, "trialParameters": {"learning_rate": lr,
                                                                           "batch_size": batch_size}}  # fmt: skip
            trial, event = new_job(job_id=trial_id, name="sweep", team=team, namespace=f"team-{team}",
                                   at=at + timedelta(minutes=n), status=JobStatus.RUNNING, reason="Started",
                                   spec=trial_spec, parent_id=sweep_id, gpus=1, replicas=1, cluster="local",
                                   region="us-west-2", metrics=metrics_of(rng, rng.uniform(0.3, 0.95)))  # fmt: skip
            put(trial, event)
            put(*transition(trial, to=JobStatus.SUCCEEDED, reason="Completed", at=at + timedelta(hours=2)))
        parent, event = new_job(job_id=sweep_id, name="sweep", team=team, namespace=f"team-{team}", at=at,
                                status=JobStatus.RUNNING, reason="Started", spec=parent_spec,
                                trial_ids=trial_ids, best_trial=trial_ids[0])  # fmt: skip
        put(parent, event)
        put(*transition(parent, to=JobStatus.SUCCEEDED, reason="TrialsFinished", at=at + timedelta(hours=3)))
        table.sweeps.append(sweep_id)

    for i in range(count - table.items):
        team = rng.choice(TEAMS)
        gpus = rng.choice((1, 2, 4, 8))
        spec = spec_of(f"train-{i}", team, gpus, priority=rng.randint(0, 100))
        job_id = f"train-{i:06x}"
        at = start + spacing * i
        fields = {"spec": recorded(spec), "gpus": gpus, "replicas": 1, "priority": spec.priority,
                  "submitted_by": "AROAEXAMPLEID:researcher", "message_id": f"m-{i:08d}"}  # fmt: skip
        draw = rng.random()
        if draw < QUEUED_SHARE:
            shape = queue_shape(spec, job_id=job_id, namespace=f"team-{team}")
            job, event = new_job(job_id=job_id, name=spec.name, team=team, namespace=f"team-{team}", at=at,
                                 queue_shape=shape, **fields)  # fmt: skip
            put(job, event)
            table.queued.append(job_id)
            continue
        job, event = new_job(job_id=job_id, name=spec.name, team=team, namespace=f"team-{team}", at=at,
                             status=JobStatus.RUNNING, reason="Started", cluster="local", region="us-west-2",
                             **fields)  # fmt: skip
        if draw < QUEUED_SHARE + RUNNING_SHARE:
            put(job, event)
            table.running.append(job_id)
            continue
        put(job, event)
        ended = at + timedelta(minutes=rng.randint(5, 600))
        if draw < QUEUED_SHARE + RUNNING_SHARE + FAILED_SHARE:
            put(*transition(job, to=JobStatus.FAILED, reason="ApplicationError", at=ended,
                            message=f"{job_id}-worker-0: exit code 1"))  # fmt: skip
        elif draw < QUEUED_SHARE + RUNNING_SHARE + FAILED_SHARE + CANCELLED_SHARE:
            put(*transition(job, to=JobStatus.CANCELLED, reason="Cancelled", at=ended))
        else:
            put(*transition(job, to=JobStatus.SUCCEEDED, reason="Completed", at=ended))
        table.finished.append(job_id)
    return table


def decisions(table: Table, *, now: datetime) -> int:
    """The last hours' scale checks, one a minute, each listing the queue as admission does
    (written into moto's table with the scale state adapter)."""
    import boto3

    from squall.adapters.aws.scale_state import DynamoScaleState
    from squall.planner.admission_plan import AdmissionPlan, Waiting

    rng = random.Random(5)
    per_team: dict[str, int] = {}
    waiting = []
    for position, job_id in enumerate(table.queued[:250], start=1):
        team = TEAMS[position % len(TEAMS)]
        per_team[team] = per_team.get(team, 0) + 1
        waiting.append(
            Waiting(
                job_id=job_id,
                team=team,
                priority=50,
                gpus=4,
                replicas=1,
                position=position,
                team_position=per_team[team],
                reason="Queued",
                starts_by=now + timedelta(minutes=position),
                likely_start=now + timedelta(minutes=position // 2),
            )
        )
    queued = {team: (len(table.queued) // len(TEAMS), 4 * len(table.queued) // len(TEAMS)) for team in TEAMS}
    admission = AdmissionPlan(waiting=tuple(waiting), queued=queued, in_use={"research": 16}).to_dict()
    state = DynamoScaleState(boto3.client("dynamodb"), TABLE)
    count = DECISION_HOURS * 60
    for minute in range(count):
        desired = 2 + (minute // 30) % 6
        plan = {"admission": admission,
                "scaleUp": [{"group": "p3-usw2", "from": desired, "to": desired + 1, "reasons": [
                    f"{rng.randint(1, 9)} pending pods need 4 GPUs each"]}]}  # fmt: skip
        acted = {"scaledUp": [{"group": "p3-usw2", "to": desired + 1}]}
        state.record_decision(
            at=now - timedelta(minutes=count - minute),
            trigger="schedule",
            dry_run=False,
            plan=plan,
            acted=acted,
        )
    return count


@dataclass
class Reads:
    """The reads made while a page was answered: job store calls and the jobs they returned,
    DynamoDB calls (decision records, services, the cost ledger) and the items they returned."""

    store_calls: int = 0
    store_jobs: int = 0
    store_seconds: float = 0.0
    aws_calls: int = 0
    aws_items: int = 0
    aws_seconds: float = 0.0

    def clear(self) -> None:
        self.store_calls = self.store_jobs = self.aws_calls = self.aws_items = 0
        self.store_seconds = self.aws_seconds = 0.0


READS = Reads()


class CountedStore:
    """The job store, its reads counted and timed (what a page asks of the table)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result = found(*args, **kwargs)
            finally:
                READS.store_seconds += time.perf_counter() - started
                READS.store_calls += 1
            jobs = (
                result[0] if isinstance(result, tuple) and result and isinstance(result[0], list) else result
            )
            READS.store_jobs += len(jobs) if isinstance(jobs, list) else int(jobs is not None)
            return result

        return call


def count_aws_calls() -> None:
    """Every boto3 call of this process counted and timed (moto answers it in process)."""
    from botocore.client import BaseClient

    original = BaseClient._make_api_call

    def counted(self: Any, operation: str, params: Any) -> Any:
        started = time.perf_counter()
        try:
            answer = original(self, operation, params)
        finally:
            READS.aws_seconds += time.perf_counter() - started
            READS.aws_calls += 1
        if isinstance(answer, dict):
            READS.aws_items += len(answer.get("Items", ()) or ()) + (1 if answer.get("Item") else 0)
        return answer

    BaseClient._make_api_call = counted


@dataclass
class Timing:
    seconds: float
    reads: Reads
    status: int


def measure(read: Callable[[], int], repeat: int) -> Timing:
    """The median of `repeat` runs of `read` (after one to warm up), with the reads it made."""
    read()
    runs = []
    for _ in range(repeat):
        READS.clear()
        started = time.perf_counter()
        status = read()
        runs.append((time.perf_counter() - started, dataclasses.replace(READS), status))
    runs.sort(key=lambda run: run[0])
    seconds, reads, status = runs[len(runs) // 2]
    return Timing(seconds, reads, status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    environment()
    os.chdir(ROOT)  # cdk.json's node groups, as the command reads them
    from moto import mock_aws

    count_aws_calls()
    with mock_aws():
        import boto3

        from squall.cli import deployment
        from squall.cli.client import Client
        from squall.console.app import create_app
        from squall.console.context import ConsoleContext
        from squall.console.guard import COOKIE
        from squall.local.aws import create_table
        from squall.local.memory import InMemoryJobStore

        create_table(boto3.client("dynamodb"), TABLE)
        assert deployment.table_name() == TABLE
        now = datetime.now(UTC).replace(microsecond=0)
        started = time.perf_counter()
        store = InMemoryJobStore()
        table = fill(store, args.jobs, now=now)
        written = decisions(table, now=now)
        print(
            f"table: {table.items:,} jobs ({len(table.queued):,} queued, {len(table.running):,} running, "
            f"{SWEEPS} sweeps of {TRIALS} trials) and {written} decision records, "
            f"written in {time.perf_counter() - started:.1f} s"
        )

        client = Client()
        client._jobs = CountedStore(store)  # the Client's job store: the one the pages and the CLI read
        app = create_app(ConsoleContext(client=client, token=TOKEN, now=lambda: now), port=PORT)
        http = app.test_client()
        http.set_cookie(COOKIE, TOKEN, domain="127.0.0.1")
        base = f"http://127.0.0.1:{PORT}"

        def page(path: str) -> Callable[[], int]:
            def get() -> int:
                response = http.get(path, base_url=base)
                response.get_data()
                return int(response.status_code)

            return get

        # a later page of the jobs list: the first page's "Next page" link, followed twice
        later = "/jobs"
        for _ in range(2):
            shown = http.get(later, base_url=base).get_data(as_text=True)
            marker = 'rel="next" href="'
            if marker in shown:
                later = shown.split(marker, 1)[1].split('"', 1)[0].replace("&amp;", "&")
        paths = {
            "queue": "/queue",
            "jobs": "/jobs",
            "jobs, third page": later,
            "jobs?state=SUCCEEDED": "/jobs?state=SUCCEEDED",
            "a job (finished)": f"/jobs/{table.finished[len(table.finished) // 2]}",
            "a job (queued)": f"/jobs/{table.queued[0]}",
            "a trial (metrics)": f"/jobs/{table.sweeps[0]}-t003",
            "sweeps": "/sweeps",
            "sweeps?state=SUCCEEDED": "/sweeps?state=SUCCEEDED",
            "a sweep": f"/sweeps/{table.sweeps[0]}",
            "capacity": "/capacity",
            "costs": "/costs",
            "services": "/services",
        }

        from squall.cli import commands

        commands._client = lambda: client  # the command reads the same store

        def baseline() -> int:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = commands.cmd_list(argparse.Namespace(status=None, limit=50, json=False))
            return 200 if code == 0 and out.getvalue().count("\n") > 50 else 500

        base_time = measure(baseline, args.repeat)
        print(
            f"baseline, `squall list --limit 50` (its read and its table, in this process): {base_time.seconds * 1000:.1f} ms "
            f"({base_time.reads.store_calls} store reads, {base_time.reads.store_jobs} jobs)"
        )
        print(f"{'page':<22}{'status':>7}{'server ms':>11}{'store ms':>10}{'reads':>7}{'jobs':>6}"
              f"{'AWS ms':>8}{'calls':>7}{'items':>7}{'ratio':>8}  under 1 s")  # fmt: skip
        worst = 0.0
        results = {}
        for name, path in paths.items():
            timing = measure(page(path), args.repeat)
            reads = timing.reads
            ratio = timing.seconds / base_time.seconds if base_time.seconds else float("inf")
            worst = max(worst, timing.seconds)
            results[name] = round(timing.seconds * 1000, 1)
            print(
                f"{name:<22}{timing.status:>7}{timing.seconds * 1000:>11.1f}{reads.store_seconds * 1000:>10.1f}"
                f"{reads.store_calls:>7}{reads.store_jobs:>6}{reads.aws_seconds * 1000:>8.1f}{reads.aws_calls:>7}"
                f"{reads.aws_items:>7}{ratio:>8.1f}  {'yes' if timing.seconds < 1 else 'no'}"
            )
        print(f"slowest page: {worst * 1000:.0f} ms; every page under 1 s: {'yes' if worst < 1 else 'no'}")
        print(
            json.dumps(
                {"jobs": table.items, "baseline_ms": round(base_time.seconds * 1000, 1), "pages_ms": results}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
