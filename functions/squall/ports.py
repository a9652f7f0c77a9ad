"""The small interfaces the services (and the researcher's follow loops) depend on.

Production adapters (DynamoDB, the official kubernetes client, Auto Scaling,
EventBridge, EMF) and the local runtime's simulated ones implement these; the type
checker holds both to the same shape. Kubernetes objects cross this boundary as
plain dicts in the API's JSON shape (camelCase keys), exactly what
``kubectl get -o json`` prints, so the pure code parses one format only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

from squall.core.asg_events import DrainStepMessage
from squall.core.costs import FleetAccrual, GroupOverhead, JobCharge, OverheadCauses, TeamMonth
from squall.core.drain import DrainRecord
from squall.core.fleet_refs import GroupRef, LifecycleAction
from squall.core.job_outputs import LogPage, LogStreamInfo, StoredObject
from squall.core.jobs import Job, JobEvent, JobStatus
from squall.core.metrics import JobMetrics, MetricLinesPage
from squall.core.prices import PriceSnapshot
from squall.core.queue import QueueEntry
from squall.core.serving import ModelService, ServiceEvent, ServiceStatus
from squall.planner import GroupHealth, Node, NodeGroup, Pod

KubeObject = dict[str, Any]


class Clock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC now."""
        ...


class FollowClock(Clock, Protocol):
    """The clock the researcher's follow loops wait on: real time in the CLI, virtual time in tests."""

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` (a virtual clock moves its time instead)."""
        ...


class Cluster(Protocol):
    """What Squall asks of a Kubernetes cluster.

    Errors: RetryableError for 429/5xx/connection problems, PermanentError for the
    rest (NotFoundError for 404). Creating an object that exists already is success.
    """

    def create(self, manifest: KubeObject) -> bool:
        """Create a Job or Service; False when it existed already (idempotent)."""
        ...

    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        """Delete every Job and Service of a Squall job (pods go with their Jobs).

        Returns how many objects were deleted; 0 when nothing was left.
        """
        ...

    def list_jobs(self, *, namespace: str | None = None, job_id: str | None = None) -> list[KubeObject]:
        """batch/v1 Jobs managed by Squall, optionally of one namespace or one Squall job."""
        ...

    def patch_job(self, *, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """JSON merge patch (RFC 7386) of a batch/v1 Job; returns the Job as stored after it.

        For admission: ``{"spec": {"suspend": false}}`` resumes a Job (its pods are
        created, ``status.startTime`` is reset, so ``activeDeadlineSeconds`` counts
        from then); ``{"spec": {"suspend": true}}`` deletes its active pods and clears
        ``status.startTime``. The pod template's scheduling directives (nodeSelector,
        tolerations, affinity.nodeAffinity, schedulingGates, template labels and
        annotations) may change only while the stored Job is suspended and has no
        ``status.startTime``; the patch may change them and resume in one call.
        Anything else in the template is immutable. Maps merge, lists are replaced,
        null deletes. PermanentError (422 Invalid, naming the field) when the API
        server refuses the change, NotFoundError when there is no such Job.
        """
        ...

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        job_id: str | None = None,
        node_name: str | None = None,
    ) -> list[KubeObject]:
        """Pods; with job_id only those of that Squall job, with node_name those bound to it."""
        ...

    def list_nodes(self) -> list[KubeObject]: ...

    def get_node(self, name: str) -> KubeObject | None: ...

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Strategic-merge patch of a node (cordon marker, unschedulable)."""
        ...

    def evict(self, *, namespace: str, name: str) -> bool:
        """Evict a pod through policy/v1 Eviction.

        True when the eviction was accepted or the pod is gone already; False when
        a PodDisruptionBudget refused it for now (HTTP 429): try again later.
        """
        ...


class ServingCluster(Cluster, Protocol):
    """The cluster as model services need it: apps/v1 Deployments, v1 Services, policy/v1 PodDisruptionBudgets.

    `create` takes these kinds too. Each object of a model service carries
    MODEL_SERVICE_LABEL with its name.
    """

    def list_deployments(
        self, *, namespace: str | None = None, model_service: str | None = None
    ) -> list[KubeObject]:
        """apps/v1 Deployments managed by Squall, optionally of one namespace or one model service."""
        ...

    def list_model_service_pods(self, *, namespace: str, model_service: str) -> list[KubeObject]:
        """The pods of one model service (those carrying MODEL_SERVICE_LABEL with its name)."""
        ...

    def get_service(self, *, namespace: str, name: str) -> KubeObject | None:
        """One v1 Service (for its status.loadBalancer), None when there is none."""
        ...

    def delete_model_service_objects(self, *, namespace: str, model_service: str) -> int:
        """Delete a model service's Deployment, Service and PodDisruptionBudget (pods go with them).

        Returns how many objects were deleted; 0 when nothing was left.
        """
        ...


class ScaleRequests(Protocol):
    """Asks for a scale check soon (an EventBridge custom event in AWS)."""

    def request_scale_check(self, *, reason: str, job_ids: Sequence[str] = ()) -> None: ...


class MetricsSink(Protocol):
    """Metrics as the functions emit them (EMF in Lambda)."""

    def add(
        self, name: str, value: float, *, unit: str = "Count", dimensions: Mapping[str, str] | None = None
    ) -> None: ...


class JobStore(Protocol):
    """Jobs and their events (DynamoDB in AWS).

    Writes are conditional: ``create`` raises DuplicateJobError when the id exists,
    ``save`` raises ConflictError when the stored version is not the one the caller
    read. Either way nothing is half-written.
    """

    def create(self, job: Job, event: JobEvent) -> None: ...

    def save(self, job: Job, event: JobEvent) -> None:
        """Store `job` (version n+1) and its event if the stored version is still n."""
        ...

    def get(self, job_id: str) -> Job | None: ...

    def events(self, job_id: str) -> list[JobEvent]: ...

    def list_by_status(self, status: JobStatus, *, limit: int = 1000) -> list[Job]:
        """Jobs in one state, oldest submission first."""
        ...

    def page_by_status(
        self,
        status: JobStatus,
        *,
        read: int,
        after: Mapping[str, str] | None = None,
        team: str | None = None,
        name: str | None = None,
        newest_first: bool = False,
    ) -> tuple[list[Job], dict[str, str] | None]:
        """One page of the status index: at most `read` jobs in `status` are read (from the key
        `after`), and those of `team` whose name contains `name` kept; with the key the next page
        starts after (None: the state has no more). A page may keep none and still have a next key.
        """
        ...

    def set_estimates(
        self, job_id: str, *, starts_by: datetime | None, likely_start: datetime | None
    ) -> bool:
        """Write a queued job's start estimates (and its first ones, once), without a new version.

        Estimates are no state of the job: no event, and no write the record's version
        guards waits on them. False when the job is no longer queued (nothing written).
        """
        ...

    def set_metrics(self, job_id: str, metrics: JobMetrics) -> bool:
        """Write a job's metrics (core/metrics.py), without a new version and without an event.

        A versioned ``save`` leaves them as they are stored (its record may have been read
        before this write). False when there is no such job (nothing written).
        """
        ...

    def queue(self, *, placed: bool = False, limit: int = 200_000) -> list[QueueEntry]:
        """The jobs waiting for admission (PLACED ones with `placed`), oldest submission first.

        Reads the queue index only (core/queue.py queue_key says which jobs it holds):
        one partition, page by page, never a scan of the table.
        """
        ...


class SpendLedger(Protocol):
    """Dollars spent per team and calendar month (UTC), as budgets read them (core/costs.py)."""

    def month_to_date(self, *, now: datetime) -> dict[str, float]:
        """Team -> dollars spent in `now`'s calendar month so far: the costs of its jobs that
        ended this month, and what its running jobs have cost this month until `now`."""
        ...


class CostLedger(Protocol):
    """Where costs are summed (adapters/aws/cost_ledger.py, local/cost_ledger.py)."""

    def add_job(self, charge: JobCharge) -> bool:
        """Add a finished job's cost to its team's month once; False when it was added before."""
        ...

    def team_months(self, *, since: datetime, team: str | None = None) -> list[TeamMonth]: ...

    def finished_in_month(self, *, now: datetime) -> dict[str, float]:
        """Team -> dollars of its jobs that ended in `now`'s month."""
        ...

    def last_accrual(self) -> FleetAccrual | None: ...

    def accrue(
        self, *, previous: FleetAccrual | None, accrual: FleetAccrual, overhead: Sequence[GroupOverhead]
    ) -> bool:
        """Add `overhead` and move the accrual from `previous` to `accrual` together; False when
        the stored accrual is no longer `previous` (nothing added)."""
        ...

    def overhead(self, *, since: datetime) -> list[GroupOverhead]:
        """Each group's overhead per month from `since`'s month on: a row per team that caused
        some (`team`), and one for the unattributed rest (`team` None)."""
        ...


class CostMeter(Protocol):
    """Counts what the fleet costs between scale checks: what no job held is overhead (services/costs.py)."""

    def accrue(
        self,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        groups: Sequence[NodeGroup],
        now: datetime,
        causes: OverheadCauses | None = None,
    ) -> None:
        """Add the fleet's cost since the last call, as these nodes, pods and groups stood then;
        `causes` tells whose part of the overhead is whose (None: all of it unattributed)."""
        ...


class MetricLines(Protocol):
    """Where a job's ``squall-metric`` lines are read from (adapters/aws/metric_lines.py: CloudWatch Logs).

    Errors: RetryableError or PermanentError, as the other adapters raise them.
    """

    def read(self, job: Job, *, cursor: str | None, limit: int) -> MetricLinesPage:
        """At most `limit` lines holding the metric prefix, printed by the job's containers after
        `cursor` (None: from the start), in the order printed, and the cursor after them (the same
        one when there is nothing new). One bounded call, whatever the job printed."""
        ...


class PriceBook(Protocol):
    """EC2's current prices of an instance type in a region (adapters/aws/prices.py).

    None when EC2 lists no such price; RetryableError or PermanentError when it cannot be
    asked now (throttled, denied, unreachable).
    """

    def spot_price(self, *, region: str, instance_type: str, zones: Sequence[str] = ()) -> float | None:
        """Dollars per hour of a Linux spot instance: the highest of the current prices of
        `zones` (every zone of the region when empty), since a group may launch in any."""
        ...

    def on_demand_price(self, *, region: str, instance_type: str) -> float | None:
        """Dollars per hour of a Linux on-demand instance on shared tenancy."""
        ...


class PriceRecords(Protocol):
    """Where the last prices asked of EC2 are kept, so that a cold function finds them."""

    def load(self) -> PriceSnapshot | None:
        """The last snapshot saved; None when there is none (or it cannot be read as one)."""
        ...

    def save(self, snapshot: PriceSnapshot) -> None: ...


class JobReader(Protocol):
    """What `squall logs` and `squall tensorboard` read of the job store (JobStore has it)."""

    def get(self, job_id: str) -> Job | None: ...


class JobHistory(JobReader, Protocol):
    """What `squall watch` reads of the job store (JobStore has it)."""

    def events(self, job_id: str) -> list[JobEvent]: ...


class LogSource(Protocol):
    """A log group, read by `squall logs` (adapters/aws/logs.py CloudWatchLogReader in AWS)."""

    group: str
    truncated: bool

    def streams(self) -> Iterable[LogStreamInfo]: ...

    def read(self, stream: str, *, start: datetime | None, token: str | None) -> LogPage: ...


class ObjectSource(Protocol):
    """S3, read side: what `squall tensorboard` mirrors from (adapters/aws/s3_objects.py S3ObjectReader)."""

    def list(self, bucket: str, prefix: str, *, limit: int) -> Iterable[StoredObject]: ...

    def download(self, bucket: str, key: str, target: Path, *, offset: int = 0, end: int) -> int:
        """Write bytes `offset` to `end` (exclusive: the listed size) into `target`; returns how many.

        Never more than `end - offset`, whatever the object holds by now: fewer when it
        shrank. A range past its end (offset >= its size now) writes nothing.
        """
        ...


class ModelServiceStore(Protocol):
    """Model services and their events (the job table in DynamoDB: ``pk=SERVICE#<name>``).

    ``create`` raises DuplicateServiceError when the name exists (in any state);
    ``save`` raises ConflictError when the stored version is not the one the caller
    read. Either way nothing is half-written. Serving a STOPPED or FAILED name again
    is a ``save`` (a transition back to DEPLOYING), so its history is kept.
    """

    def create(self, service: ModelService, event: ServiceEvent) -> None: ...

    def save(self, service: ModelService, event: ServiceEvent) -> None: ...

    def get(self, name: str) -> ModelService | None: ...

    def events(self, name: str) -> list[ServiceEvent]: ...

    def list_by_status(self, status: ServiceStatus, *, limit: int = 1000) -> list[ModelService]:
        """Services in one state, oldest first."""
        ...


class SavedModels(Protocol):
    """Where the SavedModels are (S3 in AWS): asked before a service is created."""

    def has_saved_model(self, uri: str) -> bool:
        """Whether ``<uri>/saved_model.pb`` exists. RetryableError when S3 cannot be asked now."""
        ...


class ScaleState(Protocol):
    """The autoscaler's lease, group health and decision log (DynamoDB in AWS)."""

    def acquire_lease(self, *, name: str, holder: str, now: datetime, duration: timedelta) -> bool: ...

    def release_lease(self, *, name: str, holder: str) -> None: ...

    def load_health(self) -> dict[str, GroupHealth]: ...

    def save_health(self, group: str, health: GroupHealth) -> None: ...

    def record_decision(
        self, *, at: datetime, trigger: str, dry_run: bool, plan: dict[str, Any], acted: dict[str, Any]
    ) -> str: ...

    def latest_decision(self, *, now: datetime) -> dict[str, Any] | None:
        """The newest decision record, as `record_decision` was given it; None when there is none.

        `{"id", "at" (ISO 8601), "trigger", "dryRun", "plan", "acted"}`; `squall queue` reads
        the queue from its `plan["admission"]`.
        """
        ...


# ---- Auto Scaling: the node groups of every region, and their value types ----
# (GroupRef and LifecycleAction, imported above, are core's: the drain record names its action too.)

LifecycleResult = Literal["CONTINUE", "ABANDON"]

# Auto Scaling reports many in-progress codes (PreInService, MidLifecycleAction,
# WaitingForSpotInstanceId, ...); only these three mean the activity is over.
TERMINAL_ACTIVITY_STATUSES = frozenset({"Successful", "Failed", "Cancelled"})


@dataclass(frozen=True, slots=True)
class FleetInstance:
    """One instance of a group, as Auto Scaling sees it.

    ``lifecycle_state`` is Auto Scaling's own word (``Pending:Wait``, ``InService``,
    ``Terminating:Wait``, ``Warmed:Running``, ...), kept as a string on purpose:
    AWS adds states, and an unknown one must never break an observation.
    ``launch_time`` is None unless the adapter was given EC2 clients.
    """

    instance_id: str
    group: str
    region: str
    lifecycle_state: str
    health_status: str
    launch_time: datetime | None
    protected_from_scale_in: bool
    availability_zone: str

    @property
    def ref(self) -> GroupRef:
        return GroupRef(name=self.group, region=self.region)


@dataclass(frozen=True, slots=True)
class FleetGroup:
    """One Auto Scaling group: its sizes, its instances and its tags."""

    name: str
    region: str
    desired: int
    min_size: int
    max_size: int
    instances: tuple[FleetInstance, ...] = ()
    tags: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def ref(self) -> GroupRef:
        return GroupRef(name=self.name, region=self.region)


@dataclass(frozen=True, slots=True)
class ScalingActivity:
    """One scaling activity of a group (a launch or a termination attempt).

    ``status_message`` carries AWS's own words on failure, e.g. "We currently do
    not have sufficient p3.2xlarge capacity in the Availability Zone you
    requested (us-west-2a). ..."; the planner backs a group off on those.
    """

    activity_id: str
    group: str
    region: str
    status_code: str
    status_message: str
    description: str
    start_time: datetime
    end_time: datetime | None
    cause: str = ""

    @property
    def finished(self) -> bool:
        return self.status_code in TERMINAL_ACTIVITY_STATUSES

    @property
    def failed(self) -> bool:
        return self.status_code == "Failed"


class Fleet(Protocol):
    """The node groups of every configured region."""

    def describe_groups(self, refs: Sequence[GroupRef]) -> list[FleetGroup]:
        """The groups asked for, in the order asked; groups that do not exist are omitted."""
        ...

    def recent_activities(self, refs: Sequence[GroupRef], *, since: datetime) -> list[ScalingActivity]:
        """Scaling activities of these groups that started at or after ``since``.

        Newest first within each group, groups in the order asked. A naive
        ``since`` is taken as UTC, as Auto Scaling does.
        """
        ...

    def set_desired_capacity(self, *, ref: GroupRef, desired: int) -> None:
        """Set the group's desired capacity now, ignoring cooldowns."""
        ...

    def terminate_instance(self, *, region: str, instance_id: str, decrement: bool = True) -> None:
        """Terminate this instance; with ``decrement`` the group does not replace it.

        Raises NotFoundError when the instance is not (any more) in a group.
        """
        ...

    def set_scale_in_protection(self, *, ref: GroupRef, instance_ids: Sequence[str], protected: bool) -> None:
        """Protect these instances of the group from scale-in, or lift the protection."""
        ...

    def complete_lifecycle_action(self, action: LifecycleAction, result: LifecycleResult) -> None:
        """Let a launch or termination waiting on the action's hook go on (or abandon it).

        Raises LifecycleActionGone when the action is no longer pending.
        """
        ...

    def record_lifecycle_heartbeat(self, action: LifecycleAction) -> None:
        """Extend the hook's timeout for this instance (a long drain).

        Raises LifecycleActionGone when the action is no longer pending.
        """
        ...


# ---- drains ----


class DrainQueue(Protocol):
    def send_step(self, message: DrainStepMessage, *, delay: timedelta) -> None:
        """Deliver ``message`` to the drain function after ``delay`` (rounded up to seconds, at most 15 min)."""
        ...

    def retry_after(self, receipt_handles: Sequence[str], *, delay: timedelta) -> None:
        """Deliver received messages again ``delay`` from now unless deleted first (not after the visibility timeout)."""
        ...


class DrainStore(Protocol):
    """Drain records, one per instance, written under a version condition."""

    def get(self, instance_id: str) -> DrainRecord | None: ...

    def create(self, record: DrainRecord) -> None:
        """Store a first record for the instance; ConflictError when one exists."""
        ...

    def save(self, record: DrainRecord) -> None:
        """Store ``record`` (version n) if the stored one is still version n - 1; else ConflictError."""
        ...
