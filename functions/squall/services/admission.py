"""Admission as the scale check does it: read the queue, decide (pure), create the admitted jobs' objects.

The queue lives in DynamoDB (core/queue.py): a queued job has no Kubernetes objects, only
its record, whose index entry holds what admission needs. Each check reads the waiting
entries and the placed ones (admitted to a cluster, objects not all created), and each
reachable cluster's replica Jobs (what runs counts against the teams' quotas). The decision
is `squall.planner.admission.admit`, which chooses a site (a cluster and a region) for each
admitted gang. Acting on it is, per job: the record first (cluster and region, under a
condition on its version, so a job is placed once and its objects never exist in two
clusters), then its objects in that cluster (deterministic names: a retry finishes what a
killed check left), then the record again (objects created). A check creates at most
MAX_CREATES objects; the rest continue at the next check, first, without losing their place.
The scale check runs it under its lease, so there is one writer; `Admitter.run` runs it
alone where there is no fleet (service tests).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from aws_lambda_powertools import Logger

from squall.core import manifests
from squall.core.errors import (
    MAX_ERROR_TEXT,
    ConflictError,
    PermanentError,
    RetryableError,
    SquallError,
)
from squall.core.jobs import Job, JobStatus, Reason, is_terminal, reason_code, transition
from squall.core.queue import QueueEntry, replica_jobs
from squall.core.spec import SpecError, load_spec
from squall.core.telemetry import SERVICE, Metric
from squall.planner import Node, NodeGroup, Pod, Policy
from squall.planner.admission import (
    AdmissionCache,
    AdmissionPlan,
    Admitted,
    ReplicaJob,
    TeamShare,
    Waiting,
    admit,
)
from squall.planner.inventory import Inventory
from squall.planner.kube import ParseCache, busy_stand_in, node_cache, pod_cache, replica_job_cache
from squall.planner.queue_types import TeamBudget
from squall.planner.sites import split_site
from squall.planner.text import amounts, counted
from squall.ports import Cluster, JobStore, MetricsSink, SpendLedger
from squall.services.intake import note_job, update_job

logger = Logger(service=SERVICE, child=True)

# Queued jobs whose record gets a new reason per check, head of the queue first: the
# others follow in the next checks (the decision record holds the queue's first part).
MAX_QUEUE_NOTES = 100
# Kubernetes objects one check creates at most (each a create call of about 20-50 ms): the
# admissions past it keep their place and are finished first by the next check.
MAX_CREATES = 400
# Queued jobs whose start estimates are written per check at most, head first; an estimate
# is written again only when it moved by more than ESTIMATE_SLACK (or by a tenth of the wait).
MAX_ESTIMATE_WRITES = 100
ESTIMATE_SLACK = timedelta(minutes=5)
# Finished jobs remembered as learned from (a Job is listed until its TTL removes it).
MAX_LEARNED = 20_000
# Teams' spend this month is read at most this often (it reads every running job's record).
SPEND_READ_EVERY = timedelta(minutes=5)
# A team's run ratio is the mean of its last this many finished jobs' (run time / maxRuntime), about.
RATIO_MEMORY = 50


class Report(Protocol):
    """Where a step says what it did (the scale check's result)."""

    done: dict[str, list[Any]]
    skipped: list[str]
    errors: list[str]


def job_failed(outcome: Report, *, job_id: str, what: str, exc: Exception, metrics: MetricsSink) -> None:
    """A step on one job raised unexpectedly: logged, counted and reported; the check goes on."""
    outcome.errors.append(f"{what}: {type(exc).__name__}: {exc}"[:MAX_ERROR_TEXT])
    logger.exception("scale check step failed for job", job_id=job_id, action=what)
    metrics.add(Metric.JOB_ERRORS, 1)


def note_or_report(
    store: JobStore,
    job_id: str,
    reason: str,
    message: str,
    *,
    now: datetime,
    outcome: Report,
    metrics: MetricsSink,
    once: bool = False,
    queued_only: bool = False,
) -> None:
    """A reason on the job's record (intake's note_job); the check's actions stand without it.

    A store that fails us is logged and the check goes on; anything else is the job's failure.
    """
    try:
        note_job(store, job_id, reason=reason, message=message, at=now, once=once, queued_only=queued_only)
    except SquallError as exc:
        logger.warning("could not note job", job_id=job_id, reason=reason, error=str(exc))
    except Exception as exc:
        job_failed(outcome, job_id=job_id, what=f"note {job_id}", exc=exc, metrics=metrics)


@dataclass
class AdmissionMemory:
    """What earlier checks in this process saw; keep one per process (a warm Lambda reuses it)."""

    # cluster name -> its replica Jobs, parsed (qualified by the cluster when there are several)
    jobs: dict[str, ParseCache[ReplicaJob | None]] = field(default_factory=dict)
    # (job id, record version, placed) -> the replica Jobs its queue entry stands for
    entries: dict[tuple[str, int, bool], list[ReplicaJob]] = field(default_factory=dict)
    # what the last read of the queue was made of: changed when a Job or an entry is new, changed or gone
    seen: tuple[object, ...] = ()
    changed: bool = True
    # the last read: the store's two lists as handed out, the clusters left out, what was made of them
    read: tuple[list[QueueEntry], list[QueueEntry], frozenset[str], list[ReplicaJob]] | None = None
    prepared: AdmissionCache = field(default_factory=AdmissionCache)
    # job id -> the queue reason last written on its record by this process
    noted: dict[str, str] = field(default_factory=dict)
    # job id -> the start estimates last written on its record by this process
    estimated: dict[str, tuple[datetime | None, datetime | None]] = field(default_factory=dict)
    # team -> (mean of run time / declared maxRuntime of its finished jobs, how many); kept in
    # the decision record (`runRatios`) so that a cold process goes on from the last check's
    run_ratios: dict[str, tuple[float, int]] = field(default_factory=dict)
    ratios_loaded: bool = False
    learned: dict[str, None] = field(default_factory=dict)  # finished jobs already counted, oldest first
    spend: tuple[datetime, dict[str, float]] | None = None  # when teams' spend was last read, and what

    def jobs_of(self, cluster: str, *, qualified: bool) -> ParseCache[ReplicaJob | None]:
        if cluster not in self.jobs:
            self.jobs[cluster] = replica_job_cache(cluster=cluster if qualified else None)
        return self.jobs[cluster]


@dataclass
class Admitter:
    clusters: Mapping[str, Cluster]
    metrics: MetricsSink
    teams: Mapping[str, TeamShare]
    policy: Policy
    store: JobStore | None = None  # the queue and the reasons on jobs' records; None: no queue to admit
    parsed: AdmissionMemory = field(default_factory=AdmissionMemory)
    ttl_after_finished: timedelta = manifests.DEFAULT_TTL_AFTER_FINISHED
    # what admitted jobs' pods get from SIGTERM to checkpoint (preemption's grace); None: the default
    termination_grace: timedelta | None = None
    # clusters this check could not reach: nothing is read from or created in them
    unreachable: set[str] = field(default_factory=set)
    # queue entries the latest read could not make replica Jobs of: (job id, version, why)
    unreadable_entries: list[tuple[str, int, str]] = field(default_factory=list)
    # team -> its monthly budget in dollars, and where to read what it spent (both, or no budgets)
    budgets: Mapping[str, float] = field(default_factory=dict)
    ledger: SpendLedger | None = None
    # the placed entries the latest read_queue read
    _placed_read: list[QueueEntry] = field(default_factory=list, init=False)
    # team -> what it spent this month, as this check read it (for the metrics)
    _spent: dict[str, float] = field(default_factory=dict, init=False)

    @property
    def qualified(self) -> bool:
        """Whether the planner tells clusters apart (only when there are several)."""
        return len(self.clusters) > 1

    def read_queue(self, listed_jobs: Mapping[str, list[Any]] | None = None) -> list[ReplicaJob]:
        """The queue's entries as replica Jobs, with each reachable cluster's running ones (quotas).

        An unreadable Job or entry is left out, logged and counted; a cluster whose list
        fails now is unreachable for this check.
        """
        listed: list[ReplicaJob] = []
        changed = False
        seen: list[object] = []
        self.unreadable_entries = []
        for name, cluster in self.clusters.items():
            if name in self.unreachable:
                continue
            cache = self.parsed.jobs_of(name, qualified=self.qualified)
            if listed_jobs is not None:
                raw_jobs = listed_jobs[name]  # as the scale check listed them with its nodes and pods
            else:
                try:
                    raw_jobs = cluster.list_jobs()
                except SquallError as exc:  # a timeout, a 5xx, expired credentials: not readable now
                    self.unreachable.add(name)
                    logger.warning(
                        "cluster unreachable: its Jobs could not be listed", cluster=name, error=str(exc)
                    )
                    continue
            parsed = cache.parse_all(raw_jobs, unreadable=lambda item, why: None)
            changed = changed or cache.changed
            if cache.changed:
                self._learn(job for job in parsed if job is not None and job.finished)
            listed.extend(job for job in parsed if job is not None and not job.suspended)
            problems = cache.unreadable
            if problems:
                logger.warning("jobs admission cannot read", count=len(problems), first=problems[0][:500])
                self.metrics.add(Metric.UNREADABLE_OBJECTS, len(problems), dimensions={"Kind": "job"})
        placed_entries: list[QueueEntry] = []
        waiting_entries: list[QueueEntry] = []
        if self.store is not None:
            placed_entries, waiting_entries = self.store.queue(placed=True), self.store.queue()
        self._placed_read = placed_entries  # _unseen counts those in clusters it cannot read
        memo = self.parsed.read
        if (
            memo is not None
            and not changed
            and memo[0] is placed_entries
            and memo[1] is waiting_entries
            and memo[2] == frozenset(self.unreachable)
        ):
            # The very lists again (a store that hands out what it holds) and no Job changed.
            self.parsed.changed = False
            return memo[3]
        entries = [(e, True) for e in placed_entries] + [(e, False) for e in waiting_entries]
        # A job with an entry is counted by its entry, never also by Jobs a cluster lists of it:
        # a placed one's made in part, or a waiting one's when the index (eventually consistent)
        # has not caught up with its admission yet (admission reads its record before acting).
        entered = {entry.job_id for entry, _ in entries}
        jobs = [job for job in listed if job.job_id not in entered]
        kept: dict[tuple[str, int, bool], list[ReplicaJob]] = {}
        for entry, is_placed in entries:
            if is_placed and entry.cluster in self.unreachable:
                # Placed in a cluster this check cannot reach: it waits for that cluster, and
                # neither its place there nor a reason from this check's view is changed.
                continue
            key = (entry.job_id, entry.version, is_placed)
            seen.append(key)
            replicas = self.parsed.entries.get(key)
            if replicas is None:
                try:
                    replicas = self._replicas(entry)
                except ValueError as exc:
                    logger.warning(
                        "queue entry admission cannot read", job_id=entry.job_id, error=str(exc)[:500]
                    )
                    self.metrics.add(Metric.UNREADABLE_OBJECTS, 1, dimensions={"Kind": "queue entry"})
                    # It would wait forever, unseen: the act step fails it with why.
                    self.unreadable_entries.append((entry.job_id, entry.version, str(exc)))
                    replicas = []
            kept[key] = replicas
            jobs.extend(replicas)
        self.parsed.entries = kept
        signature = tuple(seen)
        self.parsed.changed = changed or signature != self.parsed.seen
        self.parsed.seen = signature
        self.parsed.read = (placed_entries, waiting_entries, frozenset(self.unreachable), jobs)
        return jobs

    def _learn(self, finished: Iterable[ReplicaJob]) -> None:
        """Count how long each newly finished job ran against its declared maxRuntime, per team."""
        runs: dict[str, tuple[str, float, float]] = {}  # job id -> (team, longest run, declared)
        for replica in finished:
            if replica.job_id in self.parsed.learned or (self.teams and replica.team not in self.teams):
                continue  # counted already, or a team not configured (a label anyone could write)
            began, ended, limit = replica.started_at, replica.finished_at, replica.max_runtime
            if began is None or ended is None or not limit:
                continue
            team, ran, declared = runs.get(replica.job_id, (replica.team, 0.0, 0.0))
            runs[replica.job_id] = (team, max(ran, (ended - began).total_seconds()), limit.total_seconds())
        ratios, learned = self.parsed.run_ratios, self.parsed.learned
        for job_id, (team, ran, declared) in runs.items():
            ratio, count = ratios.get(team, (1.0, 0))
            count = min(count + 1, RATIO_MEMORY)
            ratios[team] = (ratio + (min(1.0, max(0.0, ran / declared)) - ratio) / count, count)
            learned[job_id] = None
            if len(learned) > MAX_LEARNED:
                del learned[next(iter(learned))]

    def load_ratios(self, decision: Mapping[str, Any] | None) -> None:
        """Go on from the run ratios the latest decision record kept (a cold process learns nothing before)."""
        if self.parsed.ratios_loaded:
            return
        self.parsed.ratios_loaded = True
        kept = ((decision or {}).get("plan") or {}).get("admission", {}).get("runRatios")
        if not isinstance(kept, Mapping):
            return
        for team, value in list(kept.items())[:1000]:
            if (
                isinstance(team, str)
                and isinstance(value, list)
                and len(value) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
                and 0 <= value[0] <= 1
                and 0 <= value[1] <= RATIO_MEMORY
            ):
                self.parsed.run_ratios.setdefault(team, (float(value[0]), int(value[1])))

    @property
    def run_ratios(self) -> dict[str, float]:
        return {team: ratio for team, (ratio, count) in self.parsed.run_ratios.items() if count}

    def _budgets(self, now: datetime) -> dict[str, TeamBudget]:
        """Each budgeted team's budget and spend this month; none when the spend cannot be read
        (admission goes on without them this check, and says so in the log)."""
        if not self.budgets or self.ledger is None:
            return {}
        read = self.parsed.spend
        if read is not None and read[0] <= now < read[0] + SPEND_READ_EVERY and read[0].month == now.month:
            spent = read[1]  # read a moment ago: every running job's record is too much to read each check
        else:
            try:
                spent = self.ledger.month_to_date(now=now)
            except SquallError as exc:
                logger.warning(
                    "team spend could not be read: budgets not applied this check", error=str(exc)[:500]
                )
                return {}
            self.parsed.spend = (now, spent)
        self._spent = spent
        return {
            team: TeamBudget(monthly=monthly, spent=spent.get(team, 0.0))
            for team, monthly in self.budgets.items()
        }

    def _replicas(self, entry: QueueEntry) -> list[ReplicaJob]:
        """Its replicas as the planner reads a queue: suspended; a placed one's admitted to its
        site (an admission to finish there)."""
        return replica_jobs(entry, qualify_cluster=self.qualified)

    @property
    def queue_changed(self) -> bool:
        """Whether the latest read of the queue found a Job or an entry new, changed or gone."""
        return self.parsed.changed

    def decide(
        self,
        *,
        jobs: Sequence[ReplicaJob],
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        groups: Sequence[NodeGroup],
        now: datetime,
        inventory: Inventory | None = None,
    ) -> AdmissionPlan:
        return admit(
            jobs=jobs,
            nodes=nodes,
            pods=pods,
            groups=groups,
            teams=self.teams,
            policy=self.policy,
            now=now,
            cache=self.parsed.prepared,
            inventory=inventory,
            unseen=self._unseen(),
            run_ratios=self.run_ratios,
            budgets=self._budgets(now),
        )

    def _unseen(self) -> dict[str, int]:
        """Team -> GPUs its jobs hold in clusters this check cannot read (their records say so):
        running there, or placed there, they count against the quotas all the same."""
        if not self.unreachable or self.store is None:
            return {}
        held: dict[str, int] = {}
        counted: list[tuple[str, int]] = []
        for entry in self._placed_read:
            if entry.cluster in self.unreachable:
                try:
                    counted.append((entry.team, entry.gpus))
                except ValueError:
                    continue  # its shape does not read: its job fails when its cluster answers
        running = self.store.list_by_status(JobStatus.RUNNING)
        counted += [(job.team, job.gpus) for job in running if job.cluster in self.unreachable]
        for team, gpus in counted:
            held[team] = held.get(team, 0) + gpus
        return held

    def run(self, *, now: datetime, outcome: Report, groups: Sequence[NodeGroup] = ()) -> AdmissionPlan:
        """Observe, decide and act, without a scale check around it (no fleet to plan for)."""
        nodes: list[Node] = []
        pods: list[Pod] = []
        for name, cluster in self.clusters.items():
            where = name if self.qualified else None
            try:
                listed_nodes, listed_pods = cluster.list_nodes(), cluster.list_pods()
            except SquallError as exc:
                self.unreachable.add(name)
                logger.warning("cluster unreachable", cluster=name, error=str(exc)[:MAX_ERROR_TEXT])
                continue
            nodes += node_cache(cluster=where).parse_all(listed_nodes, unreadable=lambda item, why: None)
            pods += pod_cache(cluster=where).parse_all(
                listed_pods, unreadable=functools.partial(busy_stand_in, cluster=where)
            )
        decided = self.decide(jobs=self.read_queue(), nodes=nodes, pods=pods, groups=groups, now=now)
        self.act(decided, now=now, outcome=outcome)
        self.note_queue(decided, now=now, outcome=outcome)
        self.emit(decided)
        return decided

    # ---- act -------------------------------------------------------------------

    def where(self, site: str) -> tuple[str, str]:
        """The cluster and region of a site the planner chose."""
        cluster, region = split_site(site)
        return (cluster or next(iter(self.clusters)), region)

    def act(self, admission: AdmissionPlan, *, now: datetime, outcome: Report) -> None:
        """Place each admitted job (its record), create its objects in that cluster, record that.

        Admissions an earlier check began (`resumed`) are finished first. One job's trouble
        never costs the others; past MAX_CREATES objects the rest wait for the next check.
        """
        if self.store is None:
            return
        for job_id, version, why in self.unreadable_entries:
            try:
                self._fail_unreadable(job_id, version, why, now=now)
            except Exception as exc:
                self._job_failed(outcome, job_id, f"fail {job_id}", exc)
        if not admission.admitted:
            return
        budget = MAX_CREATES
        ordered = sorted(admission.admitted, key=lambda a: not a.resumed)
        for number, admitted in enumerate(ordered):
            if budget <= 0:
                outcome.skipped.append(
                    f"{len(ordered) - number} admitted jobs wait for the next check "
                    f"(at most {MAX_CREATES} objects created per check)"
                )
                break
            try:
                budget -= self._admit(admitted, now=now, outcome=outcome)
            except Exception as exc:
                self._job_failed(outcome, admitted.job_id, f"admit {admitted.job_id}", exc)

    def _admit(self, admitted: Admitted, *, now: datetime, outcome: Report) -> int:
        """One admitted job: returns how many objects it tried to create."""
        assert self.store is not None
        cluster_name, region = self.where(admitted.region)
        job = self.store.get(admitted.job_id)
        if (
            job is None
            or job.status is not JobStatus.QUEUED
            or (job.cluster is not None and job.objects_created)
        ):
            outcome.skipped.append(f"{admitted.job_id}: no longer waiting for admission")
            return 0
        if job.cluster is not None and job.cluster not in self.clusters:
            self._back_in_queue(job, now=now, outcome=outcome)
            return 0
        try:
            spec = load_spec(job.spec)
        except SpecError as exc:
            # Nothing can be made of it, now or later: it fails with why, before it holds a place.
            self._fail(job, Reason.INVALID_STORED_SPEC, f"the recorded spec does not load: {exc}", now=now)
            outcome.errors.append(f"{job.id}: {Reason.INVALID_STORED_SPEC}: {exc}"[:MAX_ERROR_TEXT])
            return 0
        if job.cluster is None:
            if cluster_name in self.unreachable:
                return 0
            placed = self._place(job, cluster=cluster_name, region=region, admitted=admitted, now=now)
            if placed is None:
                outcome.skipped.append(f"{admitted.job_id}: its record changed; the next check decides again")
                return 0
            job = placed
            self.parsed.noted.pop(job.id, None)
            outcome.done.setdefault("admitted", []).append(
                {"job": job.id, "cluster": cluster_name, "region": region, "gpus": admitted.gpus}
            )
        assert job.cluster is not None
        if job.cluster in self.unreachable or job.cluster not in self.clusters:
            outcome.skipped.append(f"{job.id}: its cluster {job.cluster} cannot be reached; its objects wait")
            return 0
        objects = manifests.render(
            spec,
            job_id=job.id,
            namespace=job.namespace,
            ttl_after_finished=self.ttl_after_finished,
            submitted_at=job.submitted_at,
            requeued=job.requeued,
            region=job.region or region,
            termination_grace=self.termination_grace,
        )
        cluster = self.clusters[job.cluster]
        try:
            # Services first: a replica's pod starts as soon as its Job exists, and its peers'
            # names (TF_CONFIG) must resolve by then.
            for manifest in sorted(objects, key=lambda obj: obj.get("kind") == "Job"):
                cluster.create(manifest)
        except RetryableError as exc:
            outcome.errors.append(f"create {job.id} in {job.cluster}: {exc}"[:MAX_ERROR_TEXT])
            logger.warning(
                "could not create job objects; the next check goes on", job_id=job.id, error=str(exc)
            )
            return len(objects)
        except PermanentError as exc:
            self._refused(job, cluster=cluster, exc=exc, now=now, outcome=outcome)
            return len(objects)
        created = update_job(
            self.store,
            job,
            lambda current: (
                None
                if current.status is not JobStatus.QUEUED
                or current.cluster != job.cluster
                or current.objects_created
                else transition(
                    current,
                    to=JobStatus.QUEUED,
                    reason=reason_code(Reason.ADMITTED, job.region or region),
                    at=now,
                    message=self._admitted(job, admitted, objects=len(objects)),
                    objects_created=True,
                )
            ),
        )
        if created is None and (latest := self.store.get(job.id)) is not None and is_terminal(latest.status):
            # Cancelled (or failed) while its objects were being made: they go with it.
            cluster.delete_job_objects(namespace=job.namespace, job_id=job.id)
        return len(objects)

    def _place(self, job: Job, *, cluster: str, region: str, admitted: Admitted, now: datetime) -> Job | None:
        """Record where the job goes, once: None when its record moved on meanwhile."""
        assert self.store is not None
        where = f"cluster {cluster}, {region}" if self.qualified else region
        message = f"placed in {where}: its objects are being created there"
        try:
            return update_job(
                self.store,
                job,
                lambda current: (
                    None
                    if current.status is not JobStatus.QUEUED or current.cluster is not None
                    else transition(
                        current,
                        to=JobStatus.QUEUED,
                        reason=reason_code(Reason.PLACED, region),
                        at=now,
                        message=message,
                        cluster=cluster,
                        region=region,
                        objects_created=False,
                    )
                ),
            )
        except ConflictError:
            return None

    def _back_in_queue(self, job: Job, *, now: datetime, outcome: Report) -> None:
        """Placed in a cluster no longer configured, its objects not all made: placed afresh."""
        assert self.store is not None
        outcome.skipped.append(
            f"{job.id}: its cluster {job.cluster} is no longer configured; back in the queue"
        )
        update_job(
            self.store,
            job,
            lambda current: (
                None
                if current.version != job.version
                else transition(
                    current,
                    to=JobStatus.QUEUED,
                    reason=reason_code(Reason.CLUSTER_NOT_CONFIGURED, job.cluster),
                    at=now,
                    message=f"its cluster {job.cluster} is no longer configured: it waits to be placed again",
                    cluster=None,
                    region=None,
                    objects_created=False,
                )
            ),
        )

    def _fail_unreadable(self, job_id: str, version: int, why: str, *, now: datetime) -> None:
        """A queue entry whose shape does not read: its job fails with why (it would wait unseen)."""
        assert self.store is not None
        job = self.store.get(job_id)
        if job is not None and job.version == version and job.status is JobStatus.QUEUED:
            self._fail(job, Reason.INVALID_STORED_SPEC, f"its queue entry does not read: {why}", now=now)

    def _fail(self, job: Job, reason: str, message: str, *, now: datetime) -> None:
        assert self.store is not None
        update_job(
            self.store,
            job,
            lambda current: (
                None
                if is_terminal(current.status)
                else transition(current, to=JobStatus.FAILED, reason=reason, at=now, message=message[:2000])
            ),
        )
        self.metrics.add(Metric.JOBS_FAILED, 1)

    def _admitted(self, job: Job, admitted: Admitted, *, objects: int) -> str:
        """`admitted whole in us-east-1: 16 GPUs over 2 replica Jobs (4 objects); its run time counts from now`."""
        where = f"cluster {job.cluster}, {job.region}" if self.qualified else job.region
        return (
            f"admitted whole in {where}: {_asks(admitted)} over "
            f"{counted(len(admitted.jobs), 'replica Job')} ({counted(objects, 'object')}); "
            "its run time counts from now"
        )

    def _refused(
        self, job: Job, *, cluster: Cluster, exc: PermanentError, now: datetime, outcome: Report
    ) -> None:
        """The cluster refused the job's objects (a missing namespace, a webhook): the job fails with why."""
        assert self.store is not None
        logger.warning("cluster refused job objects", job_id=job.id, cluster=job.cluster, error=str(exc))
        outcome.errors.append(f"create {job.id}: {exc}"[:MAX_ERROR_TEXT])
        try:
            cluster.delete_job_objects(namespace=job.namespace, job_id=job.id)
        except SquallError as cleanup:
            logger.warning("could not delete a refused job's objects", job_id=job.id, error=str(cleanup))
        update_job(
            self.store,
            job,
            lambda current: (
                None
                if is_terminal(current.status)
                else transition(
                    current,
                    to=JobStatus.FAILED,
                    reason=Reason.CLUSTER_REFUSED,
                    at=now,
                    message=str(exc)[:2000],
                )
            ),
        )
        self.metrics.add(Metric.JOBS_FAILED, 1)

    # ---- why jobs wait ---------------------------------------------------------------

    def note_queue(
        self, admission: AdmissionPlan, *, now: datetime, outcome: Report, scaling: str = ""
    ) -> None:
        """Write on the records of waiting jobs why they wait, when that changed; head first, bounded."""
        if self.store is None:
            return
        live = {w.job_id for w in admission.waiting}
        for job_id in [j for j in self.parsed.noted if j not in live]:
            del self.parsed.noted[job_id]  # admitted, finished or cancelled: forget it
        written = 0
        for waiting in admission.waiting:
            if written >= MAX_QUEUE_NOTES:
                break
            if self.parsed.noted.get(waiting.job_id) == waiting.reason:
                continue
            self._note(
                waiting.job_id,
                waiting.reason,
                queue_message(waiting, scaling=scaling),
                now=now,
                outcome=outcome,
                only_queued=True,
            )
            self.parsed.noted[waiting.job_id] = waiting.reason
            written += 1
        self._write_estimates(admission, now=now, outcome=outcome)

    def _write_estimates(self, admission: AdmissionPlan, *, now: datetime, outcome: Report) -> None:
        """Write waiting jobs' start estimates on their records, head first, when they moved; bounded."""
        if self.store is None:
            return
        estimated = self.parsed.estimated
        live = {w.job_id for w in admission.waiting}
        for job_id in [j for j in estimated if j not in live]:
            del estimated[job_id]
        written = 0
        for waiting in admission.waiting:
            if written >= MAX_ESTIMATE_WRITES:
                break
            estimate = (waiting.starts_by, waiting.likely_start)
            if estimate == (None, None) or not _moved(estimated.get(waiting.job_id), estimate, now=now):
                continue
            try:
                self.store.set_estimates(waiting.job_id, starts_by=estimate[0], likely_start=estimate[1])
            except SquallError as exc:  # an estimate is a courtesy: the check goes on
                logger.warning("could not write start estimates", job_id=waiting.job_id, error=str(exc)[:500])
                continue
            estimated[waiting.job_id] = estimate
            written += 1

    def _note(
        self,
        job_id: str,
        reason: str,
        message: str,
        *,
        now: datetime,
        outcome: Report,
        only_queued: bool = False,
    ) -> None:
        """A reason on the job's record, unless it has it already; admission stands without it."""
        if self.store is not None:
            note_or_report(
                self.store,
                job_id,
                reason,
                message,
                now=now,
                outcome=outcome,
                metrics=self.metrics,
                once=True,
                queued_only=only_queued,
            )

    def _job_failed(self, outcome: Report, job_id: str, what: str, exc: Exception) -> None:
        job_failed(outcome, job_id=job_id, what=what, exc=exc, metrics=self.metrics)

    # ---- metrics ------------------------------------------------------------------

    def emit(self, admission: AdmissionPlan) -> None:
        spent = self._spent
        for team, monthly in sorted(self.budgets.items()):
            dims = {"Team": team}
            self.metrics.add(Metric.TEAM_BUDGET, monthly, unit="None", dimensions=dims)
            self.metrics.add(
                Metric.TEAM_MONTH_SPEND, round(spent.get(team, 0.0), 2), unit="None", dimensions=dims
            )
            self.metrics.add(
                Metric.JOBS_HELD_BY_BUDGET, admission.held_by_budget.get(team, 0), dimensions=dims
            )
        for team in sorted({*admission.queued, *admission.in_use, *self.teams}):
            dims = {"Team": team}
            jobs, gpus = admission.queued.get(team, (0, 0))
            self.metrics.add(Metric.QUEUED_JOBS, jobs, dimensions=dims)
            self.metrics.add(Metric.QUEUED_GPUS, gpus, dimensions=dims)
            self.metrics.add(Metric.ADMITTED_GPUS, admission.in_use.get(team, 0), dimensions=dims)
            share = self.teams.get(team)
            if share is not None and share.quota is not None:
                self.metrics.add(Metric.GPU_QUOTA, share.quota, dimensions=dims)
        self.metrics.add(Metric.JOBS_ADMITTED, sum(1 for a in admission.admitted if not a.resumed))


def _moved(
    written: tuple[datetime | None, datetime | None] | None,
    estimate: tuple[datetime | None, datetime | None],
    *,
    now: datetime,
) -> bool:
    """Whether an estimate is worth writing again: new, or moved by more than the slack
    (ESTIMATE_SLACK, or a tenth of the wait it foretells, whichever is more)."""
    if written is None:
        return True
    for before, after in zip(written, estimate, strict=True):
        if (before is None) != (after is None):
            return True
        if before is not None and after is not None:
            slack = max(ESTIMATE_SLACK, (after - now) / 10)
            if abs(after - before) > slack:
                return True
    return False


def _asks(admitted: Admitted) -> str:
    """What an admitted job asks for: its GPUs, or a job without GPUs its CPUs and memory."""
    return amounts(
        gpus=admitted.gpus,
        cpu_millis=sum(job.pod.requests.cpu for job in admitted.jobs),
        memory_bytes=sum(job.pod.requests.memory for job in admitted.jobs),
    )


def queue_message(waiting: Waiting, *, scaling: str = "") -> str:
    """`3rd in research, 7th overall; needs 16 GPUs over 2 replicas in one region; p3-usw2 scaling 2->6`."""
    return with_scaling(waiting.message, scaling=scaling, held=waiting.held_back)


def with_scaling(message: str, *, scaling: str, held: bool) -> str:
    """A waiting job's line with what is being bought (never for one a quota holds back)."""
    return f"{message}; {scaling}" if scaling and not held else message
