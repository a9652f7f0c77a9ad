"""Names of every metric Squall emits, shared by the functions and the dashboard.

The functions emit these as CloudWatch embedded metric format (EMF) through
powertools; the monitoring stack and the local dashboard renderer read the same
names, so a metric cannot be renamed in one place and silently vanish in the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

NAMESPACE = "Squall"
SERVICE = "squall"


class Metric(StrEnum):
    # intake
    JOBS_SUBMITTED = "JobsSubmitted"
    JOBS_REJECTED = "JobsRejected"
    JOBS_DUPLICATE = "JobsDuplicate"
    JOBS_CANCELLED = "JobsCancelled"
    # reconcile
    JOBS_STARTED = "JobsStarted"
    JOBS_SUCCEEDED = "JobsSucceeded"
    JOBS_FAILED = "JobsFailed"
    JOB_RETRIES = "JobRetries"
    # Kubernetes' times, not the reconcile run's: submitted to the run's start (every
    # replica's containers started), and that start to its Job's end (core/kubestatus.py)
    QUEUE_WAIT_SECONDS = "QueueWaitSeconds"
    RUN_SECONDS = "RunSeconds"
    JOBS_IN_STATE = "JobsInState"  # dimension: State
    OLDEST_QUEUED_SECONDS = "OldestQueuedJobAgeSeconds"
    # a job whose step failed in reconcile or the scale check (recorded on the job; the others went on)
    JOB_ERRORS = "JobErrors"
    # scale
    PENDING_GPUS = "PendingGpus"
    PENDING_PODS = "PendingPods"
    IN_FLIGHT_NODES = "InFlightNodes"
    DESIRED_CAPACITY = "DesiredCapacity"  # dimensions: Group, Region
    IN_SERVICE_CAPACITY = "InServiceCapacity"  # dimensions: Group, Region
    SCALE_UPS = "ScaleUps"
    FALLBACKS = "Fallbacks"
    SCALE_DOWNS = "ScaleDowns"
    UNSCHEDULABLE_PODS = "UnschedulablePods"
    UNREADABLE_OBJECTS = "UnreadableObjects"  # dimension: Kind (node, pod); left out or counted busy
    # dimension: Cluster; 1 while a check or run could not reach its API (list calls failed), else 0
    CLUSTER_UNREACHABLE = "ClusterUnreachable"
    # admission (the scale check): per team (dimension Team) what waits and what is admitted
    QUEUED_JOBS = "QueuedJobs"  # dimension: Team
    QUEUED_GPUS = "QueuedGpus"  # dimension: Team
    ADMITTED_GPUS = "AdmittedGpus"  # dimension: Team; GPUs of admitted, unfinished jobs: the quota in use
    GPU_QUOTA = "GpuQuota"  # dimension: Team; only for teams with a gpuQuota
    JOBS_ADMITTED = "JobsAdmitted"  # admitted by this check
    # dimension: Team; held back by the team's monthly budget this check
    JOBS_HELD_BY_BUDGET = "JobsHeldByBudget"
    # costs (dollars): a team's spend this calendar month so far (the scale check, each check)
    TEAM_MONTH_SPEND = "TeamMonthSpend"  # dimension: Team
    TEAM_BUDGET = "TeamBudget"  # dimension: Team; only for teams with a monthly budget
    JOB_COST = "JobCost"  # dimension: Team; a finished job's cost, when it is recorded
    OVERHEAD_COST = "OverheadCost"  # dimension: Group; what no job held of its nodes since the last check
    JOBS_PREEMPTED = "JobsPreempted"
    # lifecycle and drains
    # model services (the reconcile function's serving run)
    MODEL_SERVICES_IN_STATE = "ModelServicesInState"  # dimension: State (DEPLOYING, SERVING)
    MODEL_SERVICES_FAILED = "ModelServicesFailed"
    MODEL_SERVICE_OBJECTS_RECREATED = "ModelServiceObjectsRecreated"
    DRAINS_STARTED = "DrainsStarted"
    DRAINS_COMPLETED = "DrainsCompleted"
    DRAIN_SECONDS = "DrainSeconds"
    DRAINS_PAST_DEADLINE = "DrainsPastDeadline"
    HOOKS_COMPLETED = "HooksCompleted"
    LAUNCHES_ABANDONED = "LaunchesAbandoned"


class PowertoolsMetrics:
    """MetricsSink on a powertools Metrics object (EMF in the function's log).

    Metrics with their own dimensions (per group, per state) go out as single
    metrics, because an EMF blob's dimensions apply to every metric in it.
    """

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics

    def add(
        self, name: str, value: float, *, unit: str = "Count", dimensions: Mapping[str, str] | None = None
    ) -> None:
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        metric_unit = MetricUnit(unit)
        if not dimensions:
            self._metrics.add_metric(name=name, unit=metric_unit, value=value)
            return
        with single_metric(name=name, unit=metric_unit, value=value, namespace=NAMESPACE) as metric:
            metric.add_dimension(name="service", value=SERVICE)
            for key, dim_value in dimensions.items():
                metric.add_dimension(name=key, value=dim_value)


@dataclass
class RecordedMetric:
    at: datetime
    name: str
    value: float
    unit: str
    dimensions: dict[str, str]


@dataclass
class RecordingMetrics:
    """MetricsSink that keeps every data point with its time (local runtime, tests)."""

    clock: Any
    points: list[RecordedMetric] = field(default_factory=list)

    def add(
        self, name: str, value: float, *, unit: str = "Count", dimensions: Mapping[str, str] | None = None
    ) -> None:
        self.points.append(
            RecordedMetric(
                at=self.clock.now(), name=name, value=value, unit=unit, dimensions=dict(dimensions or {})
            )
        )

    def total(self, name: str) -> float:
        return sum(p.value for p in self.points if p.name == name)
