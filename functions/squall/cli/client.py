"""The Python SDK: `from squall import Client`. The `squall` command is built on it.

A Client talks to one deployment the way the command does: its jobs table, jobs queue,
artifacts bucket and clusters as the environment names them (the CDK app's outputs, or
what `squall local up` prints), through the AWS adapters with boto3's default chain. It
checks a spec as the submit function checks it (the deployment's teams, registries and
maxRuntimeLimit: cli/config.py), packs and uploads code as `squall submit --code` does,
and sends requests to the jobs queue, where the submit function checks them again.

Errors are the command's: CommandError (a refused input, a job that is not there: its
`code` is the command's exit code; NotFound and WaitTimeout are kinds of it) and
squall.core.errors.SquallError (the table, queue or bucket failing, as its adapter
translated it). No boto3 or botocore exception leaves it.

    client = Client.local()                      # the local runtime `squall local up` started
    job_id = client.submit("sweep.yaml", code="trainer/")
    job = client.wait(job_id, timeout=3600)
    print(client.sweep_results(job_id).best)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from squall.cli import deployment
from squall.cli.config import check_spec, configured_max_runtime_limit, load_spec
from squall.cli.errors import EXIT_FAILED, CommandError, NotFound, WaitTimeout
from squall.cli.text import printable
from squall.core.jobs import Job, JobEvent, JobStatus, is_terminal

if TYPE_CHECKING:
    from squall.cli.deployment import ClusterPlace
    from squall.cli.queue import QueueSnapshot
    from squall.core.experiments import SweepResults
    from squall.core.serving import ModelService
    from squall.core.spec import JobSpec
    from squall.ports import FollowClock

DEFAULT_POLL = 2.0
SERVE_TIMEOUT = 1800.0


@dataclass(frozen=True)
class CodeUpload:
    """A directory packed and stored in the artifacts bucket once per content (core/codepack.py)."""

    uri: str
    sha256: str
    uploaded: bool  # False: the same content was there already
    renewed: bool  # uploaded again: the stored copy could have expired during the longest run
    files: int
    bytes: int  # the archive's
    ignored: int  # files left out (VCS, caches, .squallignore)

    def as_json(self) -> dict[str, Any]:
        return {
            "codeUri": self.uri,
            "codeSha256": self.sha256,
            "codeUploaded": self.uploaded,
            "codeFiles": self.files,
            "codeBytes": self.bytes,
        }


@dataclass(frozen=True)
class Submission:
    """A job spec sent to the jobs queue: the job's id, the message's, and its code when packed."""

    job_id: str
    message_id: str
    code: CodeUpload | None = None
    replaced_code_uri: str | None = None  # the spec's own codeUri, which `code` replaced


@dataclass(frozen=True)
class ServeRequest:
    """A serve request sent: the model service's name, its job, the message's id, and what could
    not be checked beforehand (the submit function checks it with its own credentials)."""

    name: str
    job: str
    message_id: str
    unchecked: tuple[str, ...] = ()


class Client:
    """Squall's jobs, sweeps and model services, from Python.

    `environment`: variables that name the deployment (SQUALL_TABLE_NAME,
    SQUALL_JOBS_QUEUE_URL, SQUALL_ARTIFACTS_BUCKET, SQUALL_CLUSTERS, AWS_ENDPOINT_URL, ...),
    set in this process as `export` sets them in a shell: a process talks to one deployment
    at a time, as the command does. `profile` and `region` pick boto3's profile and default
    region the same way. None of them: the environment as it is. `clock` is what `wait` and
    `logs(follow=True)` wait on (real time unless a test injects a virtual one).
    """

    def __init__(
        self,
        *,
        environment: Mapping[str, str] | None = None,
        profile: str | None = None,
        region: str | None = None,
        clock: FollowClock | None = None,
    ) -> None:
        named = dict(environment or {})
        if profile is not None:
            named["AWS_PROFILE"] = profile
        if region is not None:
            named["AWS_DEFAULT_REGION"] = region
        for key, value in named.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise CommandError(f"environment: expected text names and values, got {key!r}")
        os.environ.update(named)
        if clock is None:
            from squall.cli.follow.clock import RealClock

            clock = RealClock()
        self.clock: FollowClock = clock
        self._jobs: Any = None
        self._services: Any = None

    @classmethod
    def local(cls, state_dir: str | Path | None = None, *, clock: FollowClock | None = None) -> Client:
        """A Client of the local runtime `squall local up` started (its state directory: the default one)."""
        from squall.local import control

        try:
            environment = control.environment(
                state_dir=control.state_dir(str(state_dir) if state_dir else None)
            )
        except control.ControlError as exc:
            raise CommandError(str(exc), code=EXIT_FAILED) from exc
        return cls(environment=environment, clock=clock)

    # ---- the deployment's stores, made once ----

    @property
    def store(self) -> Any:
        """The jobs table (ports.JobStore, through adapters/aws/job_store.py)."""
        if self._jobs is None:
            self._jobs = deployment.job_store()
        return self._jobs

    @property
    def service_store(self) -> Any:
        """The model services' records (ports.ModelServiceStore)."""
        if self._services is None:
            self._services = deployment.service_store()
        return self._services

    # ---- jobs ----

    def check(self, spec: Mapping[str, Any] | JobSpec | str | Path) -> tuple[JobSpec, dict[str, Any]]:
        """A spec (a mapping, a JobSpec, or a YAML/JSON file's path) checked as the submit function
        checks it, and the body that would be sent. CommandError lists every problem, field first."""
        from squall.core.spec import JobSpec, recorded

        if isinstance(spec, str | Path):
            checked, data = load_spec(str(spec))
        elif isinstance(spec, JobSpec):
            data = recorded(spec)
            checked = check_spec(data, source="spec")
        elif isinstance(spec, Mapping):
            data = dict(spec)
            checked = check_spec(data, source="spec")
        else:
            raise CommandError(
                f"spec: expected a mapping, a JobSpec or a file's path, got {type(spec).__name__}"
            )
        return checked, data

    def send(
        self, spec: Mapping[str, Any] | JobSpec | str | Path, *, code: str | Path | None = None
    ) -> Submission:
        """`submit`, with everything the command prints about it (the message id, the code's upload)."""
        from squall.core.spec import derive_job_id

        checked, data = self.check(spec)
        source = str(spec) if isinstance(spec, str | Path) else "spec"
        upload, replaced = None, None
        if code is not None:
            replaced = data.get("codeUri") if isinstance(data.get("codeUri"), str) else None
            upload = self._upload(checked, directory=str(code))
            data = {**data, "codeUri": upload.uri}
            checked = check_spec(data, source=source)
        message_id = deployment.send_to_jobs_queue(data, what="the job spec")
        job_id = checked.id or derive_job_id(checked, message_id=message_id)
        return Submission(job_id=job_id, message_id=message_id, code=upload, replaced_code_uri=replaced)

    def submit(
        self, spec: Mapping[str, Any] | JobSpec | str | Path, *, code: str | Path | None = None
    ) -> str:
        """Send a job spec (or a sweep's) to the jobs queue; its job id.

        `code`: a directory packed (less VCS files, caches and what DIR/.squallignore lists),
        stored once per content in the artifacts bucket, and named as the spec's codeUri.
        Everything is checked before the first byte goes up.
        """
        return self.send(spec, code=code).job_id

    def _upload(self, spec: JobSpec, *, directory: str) -> CodeUpload:
        from squall.adapters.aws.artifacts import CodeArtifacts
        from squall.core.codepack import PackError, pack

        bucket = deployment.artifacts_bucket()
        deployment.jobs_queue_url()  # named before anything goes up
        with tempfile.TemporaryDirectory(prefix="squall-code-") as scratch:
            try:
                packed = pack(directory, Path(scratch) / "code.tar.gz")
            except PackError as exc:
                raise CommandError(f"--code {directory}: {exc}") from exc
            artifacts = CodeArtifacts(
                deployment.aws_client("s3"), bucket, longest_run=configured_max_runtime_limit()
            )
            stored = artifacts.store(team=spec.team, sha256=packed.sha256, path=packed.path)
        return CodeUpload(
            uri=stored.uri,
            sha256=packed.sha256,
            uploaded=stored.uploaded,
            renewed=stored.renewed,
            files=packed.files,
            bytes=packed.archive_bytes,
            ignored=packed.ignored,
        )

    def find(self, job_id: str) -> Job | None:
        """Job `job_id`'s record; None when there is none."""
        job: Job | None = self.store.get(job_id)
        return job

    def get(self, job_id: str) -> Job:
        """Job `job_id`'s record; NotFound when there is none."""
        job = self.find(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        return job

    def events(self, job_id: str) -> list[JobEvent]:
        """Job `job_id`'s history, oldest first (one event per version of its record)."""
        events: list[JobEvent] = self.store.events(job_id)
        return events

    def jobs(self, status: JobStatus | str | None = None, *, limit: int = 1000) -> list[Job]:
        """The jobs in `status` (None: in each state), at most `limit` per state."""
        statuses = list(JobStatus) if status is None else [JobStatus(status)]
        return [job for s in statuses for job in self.store.list_by_status(s, limit=limit)]

    def jobs_page(
        self,
        *,
        states: Sequence[JobStatus] | None = None,
        team: str | None = None,
        name: str | None = None,
        after: tuple[JobStatus, Mapping[str, str] | None] | None = None,
        size: int = 50,
        most_read: int = 500,
    ) -> tuple[list[Job], tuple[JobStatus, dict[str, str] | None] | None]:
        """A page of jobs: at most `size`, of `team` (None: any) whose name contains `name`, in
        `states` one after another (None: every state, QUEUED and RUNNING first), newest
        submission first within a state; and where the next page starts, (state, the status
        index's key to go on after, None: that state's start), None when there is no more.

        `after` is where this page starts (a page's own answer). The status index is read
        page by page and never past `most_read` jobs, however few the filter keeps: a page
        may hold fewer than `size` and still have a next one.
        """
        order = list(states) if states else list(JobStatus)
        state, key = after if after is not None else (order[0], None)
        if state not in order:
            raise CommandError(f"after: a page of {state.value} jobs, which this list does not show")
        index, read = order.index(state), 0
        jobs: list[Job] = []
        while True:
            budget = min(size - len(jobs), most_read - read)
            found, key = self.store.page_by_status(
                order[index], read=budget, after=key, team=team, name=name, newest_first=True
            )
            jobs.extend(found)
            read += budget
            if key is None:
                index += 1
                if index == len(order):
                    return jobs, None
            if len(jobs) >= size or read >= most_read:
                return jobs, (order[index], key)

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll: float = DEFAULT_POLL,
        wait_for_record: float = 0.0,
    ) -> Job:
        """Job `job_id`'s record once it is final (SUCCEEDED, FAILED, CANCELLED, REJECTED).

        `wait_for_record`: seconds to wait for the record to appear (a job just submitted
        is recorded once the submit function takes its message); NotFound after that.
        WaitTimeout when it is not final after `timeout` seconds (None: no limit).
        """
        from squall.cli.follow.clock import patient

        if poll <= 0:
            raise CommandError(f"poll: expected seconds above 0, got {poll!r}")
        start = self.clock.now()
        while True:
            job = patient(lambda: self.find(job_id), clock=self.clock, wait=poll)
            waited = (self.clock.now() - start).total_seconds()
            if job is not None and is_terminal(job.status):
                return job
            if job is None and waited >= wait_for_record:
                raise NotFound(f"no job {job_id}")
            if timeout is not None and waited >= timeout:
                state = job.status.value if job is not None else "not recorded"
                raise WaitTimeout(f"job {job_id} is still {state} after {timeout:g} s")
            self.clock.sleep(poll)

    def cancel(self, job_id: str, *, reason: str = "cancelled with the Squall SDK") -> None:
        """Ask the submit function to cancel job `job_id` (NotFound when there is none)."""
        self.get(job_id)
        deployment.send_to_jobs_queue({"action": "cancel", "id": job_id, "reason": reason})

    # ---- logs ----

    def logs(
        self,
        job_id: str,
        *,
        follow: bool = False,
        replica: str | None = None,
        since: datetime | str | None = None,
        timestamps: bool = False,
        on_status: Callable[[str], None] = lambda text: None,
    ) -> Iterator[str]:
        """Job `job_id`'s container output, line by line, merged across its replicas by time
        (CloudWatch Logs). `follow`: new lines until the job is final and its streams are drained.

        `replica` (chief-0, worker-1), `since` (a time, or 90s, 10m, 2h, 3d, an ISO 8601 time)
        narrow it. The job is checked now; lines are read as the iterator is consumed.
        `on_status` hears what is said about the output rather than in it (why a job has none
        yet, a throttled read tried again), escaped.
        """
        from squall.cli.follow.logs import LogsError, check_replica, parse_since, replica_names

        job = self.get(job_id)
        if job.is_sweep:
            raise sweep_refused(job, "logs")
        if not job.namespace:
            raise CommandError(
                f"job {job.id} is {job.status.value} ({printable(job.reason, newlines=False)}): it never ran, "
                "so it has no logs",
                code=EXIT_FAILED,
            )
        replicas = replica_names(job)
        try:
            start = parse_since(since, now=self.clock.now()) if isinstance(since, str) else since
            chosen = check_replica(replica, job_id=job.id, replicas=replicas) if replica else None
        except LogsError as exc:
            raise CommandError(str(exc)) from exc
        configured = deployment.clusters()
        place = log_cluster(job, configured)  # checked now: a cluster this shell does not know is an error
        return self._log_lines(
            job,
            configured=configured,
            place=place,
            follow=follow,
            replica=chosen,
            since=start,
            timestamps=timestamps,
            on_status=on_status,
        )

    def _log_lines(
        self,
        job: Job,
        *,
        configured: list[ClusterPlace],
        place: ClusterPlace | None,
        follow: bool,
        replica: str | None,
        since: datetime | None,
        timestamps: bool,
        on_status: Callable[[str], None],
    ) -> Iterator[str]:
        from squall.adapters.aws.logs import CloudWatchLogReader, LogAccessDenied
        from squall.cli.follow.logs import LogFollower, await_placement, log_events, replica_names
        from squall.core.errors import NotFoundError
        from squall.core.logstreams import log_group

        if place is None and follow and job.status is JobStatus.QUEUED:
            job = await_placement(job, store=self.store, clock=self.clock, on_status=on_status)
            place = log_cluster(job, configured)
        if place is None:
            on_status(unplaced(job))
            return
        group = log_group(place.name)
        follower = LogFollower(
            source=CloudWatchLogReader(deployment.aws_client("logs", region=place.region), group),
            job_id=job.id,
            namespace=job.namespace,
            replicas=replica_names(job),
            replica=replica,
            since=since,
            on_warning=on_status,
        )
        events = log_events(
            follower,
            timestamps=timestamps,
            follow=follow,
            store=self.store,
            clock=self.clock,
            on_status=on_status,
        )
        try:
            for lines in events:
                yield from lines
        except NotFoundError as exc:
            raise CommandError(
                f"{exc}: no such log group{_in_region(place)}. Is the cluster's log agent installed "
                f"(docs/deploy.md, the CloudWatch Observability add-on), and is {_named_by(configured)} "
                f"({place.name}) the cluster's name?"
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
            on_status(
                f"no log streams{which} of job {job.id} in {group}{_in_region(place)} (yet: the pods may not "
                "have started, or the log agent not have shipped their first lines)"
            )

    # ---- sweeps and the queue ----

    def sweep_results(self, sweep_id: str) -> SweepResults:
        """Sweep `sweep_id`'s trials ranked by its objective, best first (core/experiments.py):
        each trial's parameters, objective value, state, run time, GPU-hours and cost, and the
        best trial. `unreported` says when the sweep has an objective no trial reported."""
        from squall.core.experiments import rank_trials
        from squall.core.spec import SpecError

        parent = self.get(sweep_id)
        if not parent.is_sweep:
            where = f" (a trial of sweep {parent.parent_id})" if parent.parent_id else ""
            raise CommandError(f"job {parent.id} is not a sweep{where}", code=EXIT_FAILED)
        trials = [trial for trial in (self.find(tid) for tid in parent.trial_ids) if trial is not None]
        try:
            return rank_trials(parent, trials, now=self.clock.now())
        except SpecError as exc:  # a record written by another Squall, say
            raise CommandError(
                f"sweep {parent.id}: its recorded spec does not load, so its objective is unknown: "
                + "; ".join(f"{issue.field}: {issue.message}" for issue in exc.issues[:3]),
                code=EXIT_FAILED,
            ) from exc

    def queue(self, *, team: str | None = None) -> QueueSnapshot:
        """The queue in admission order with reasons and start estimates, as the latest scale check
        left it (only `team`'s jobs when given). CommandError when no check has recorded one."""
        from squall.cli.queue import read_queue

        return read_queue(deployment.scale_state().latest_decision(now=self.clock.now()), team=team)

    # ---- model services ----

    def serve(
        self,
        job_id: str,
        *,
        name: str | None = None,
        version: int | None = None,
        replicas: int | None = None,
        gpu: int | None = None,
        cpu: str | None = None,
        memory: str | None = None,
    ) -> ServeRequest:
        """Ask for a model service of a SUCCEEDED job's SavedModel (TensorFlow Serving).

        Checked first as the submit function will check it (the job, the name, the SavedModel
        in S3): a request that cannot be served is a CommandError naming the field, and nothing
        is sent. `wait_service` follows it until it serves.
        """
        from squall.cli.serving import checked_serve

        body, service_name, unchecked = checked_serve(
            job_id,
            name=name,
            version=version,
            replicas=replicas,
            gpu=gpu,
            cpu=cpu,
            memory=memory,
            jobs=self.store,
            services=self.service_store,
        )
        message_id = deployment.send_to_jobs_queue(body)
        return ServeRequest(name=service_name, job=job_id, message_id=message_id, unchecked=unchecked)

    def wait_service(
        self, request: ServeRequest, *, timeout: float = SERVE_TIMEOUT, out: TextIO | None = None
    ) -> ModelService:
        """The model service `request` made, once SERVING, FAILED or STOPPED; its events are written
        to `out` as they happen (None: nowhere). CommandError when the submit function refused the
        request, or it still deploys after `timeout` seconds."""
        import io

        from squall.cli.serving import follow_service, rejected_id

        return follow_service(
            request.name,
            message_id=request.message_id,
            store=self.service_store,
            clock=self.clock,
            out=out if out is not None else io.StringIO(),
            timeout=timeout,
            rejected=lambda: self.find(rejected_id(request.message_id)),
        )

    def service(self, name: str) -> ModelService:
        """Model service `name`'s record; NotFound when there is none."""
        from squall.cli.serving import checked_name

        found: ModelService | None = self.service_store.get(checked_name(name))
        if found is None:
            raise NotFound(f"no model service {name}")
        return found

    def predict(
        self,
        name: str,
        body: Mapping[str, Any] | str | Path,
        *,
        grpc: bool = False,
        url: str | None = None,
        version: int | None = None,
        signature: str | None = None,
        timeout: float = 60.0,
    ) -> Any:
        """Model service `name`'s answer to a predict request: `{"instances": [...]}` or
        `{"inputs": ...}` (or a JSON file's path), sent to its REST endpoint (or gRPC's), or to
        `url`. The answer is read as hostile: bounded in size and depth."""
        from squall.cli.serving import predict

        return predict(
            self, name, body=body, grpc=grpc, url=url, version=version, signature=signature, timeout=timeout
        )


# ---- a job's logs: where they are ----


def sweep_refused(job: Job, what: str) -> CommandError:
    shown = printable(", ".join(job.trial_ids[:5]), newlines=False) + (
        ", ..." if len(job.trial_ids) > 5 else ""
    )
    return CommandError(
        f"job {job.id} is a sweep: each of its {len(job.trial_ids)} trials has {what} of its own "
        f"(squall {what.split()[0]} <trial id>; trials: {shown})",
        code=EXIT_FAILED,
    )


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
            f"clusters ({names}) do not include: set {deployment.CLUSTERS_ENV} to the deployment's clusters "
            '(JSON [{"name": ..., "region": ...}], the CDK app\'s output)',
            code=EXIT_FAILED,
        )
    if job.started_at is None or (job.status is JobStatus.QUEUED and len(configured) > 1):
        return None
    if len(configured) == 1:
        return configured[0]
    raise CommandError(
        f"job {job.id}'s record names no cluster (it ran before its deployment recorded one), and "
        f"{deployment.CLUSTERS_ENV} lists {len(configured)}: its logs are in one of "
        + ", ".join(f"/aws/containerinsights/{p.name}/application ({p.region})" for p in configured),
        code=EXIT_FAILED,
    )


def unplaced(job: Job) -> str:
    what = printable(f"job {job.id} is {job.status.value} ({job.reason})", newlines=False)
    if job.status is JobStatus.QUEUED:
        return f"{what}: not placed in a cluster yet, so it has no logs yet"
    return f"{what}: it was never placed in a cluster, so it has no logs"


def _in_region(place: ClusterPlace) -> str:
    return f" in {place.region}" if place.region else ""


def _named_by(configured: list[ClusterPlace]) -> str:
    """The variable that named the clusters (SQUALL_CLUSTERS, or SQUALL_CLUSTER_NAME's one)."""
    return deployment.CLUSTERS_ENV if any(p.region for p in configured) else deployment.CLUSTER_ENV
