"""The local runtime: the handlers Lambda runs, driven the way AWS would drive them.

It owns a moto server (the real queues and table), one simulated cluster per
configured cluster (`clusters`, each with its own API, nodes, scheduler and faults)
and a virtual clock. Each step it drains the jobs queue into the submit handler in SQS
batches (deleting what succeeded, as the event source mapping does), advances the
cluster, and fires the schedules that are due. Nothing here decides anything about
jobs: that is the handlers' code, unchanged.

Every invocation goes through `LocalRuntime.invoke`, which plays Lambda's part: it
records Lambda's own metrics for the invocation (Invocations, Errors, Duration,
Throttles per FunctionName) and, when the handler raised or was killed, what its
trigger does next:

- an SQS batch (jobs or drain queue) is not deleted: its messages come back after
  the queue's visibility timeout (the stack's, squall/resources.py), or sooner if
  the function asked for it (ChangeMessageVisibility), one receive further
  towards the dead-letter queue, which takes them after the stack's receive count;
- an EventBridge invocation (a schedule, a scale-check request, a lifecycle action)
  is asynchronous: Lambda retries it as often as the function allows
  (`ASYNC_RETRIES`, as the CDK stack configures them) while it is younger than the
  function's maximum event age, then drops it, into the function's on-failure
  destination if it has one (the lifecycle function does). A schedule fires
  again on its next period either way.

Before each step it samples the queues for the SQS metrics the dashboard graphs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from squall import runtime
from squall.adapters.aws.eventbridge import MAX_JOB_IDS
from squall.core import resources as deployed
from squall.core.asg_events import DrainStepMessage
from squall.core.jobs import Job, JobEvent
from squall.core.settings import ClusterSettings, PolicySettings, ServingSettings, Settings, image_problem
from squall.core.telemetry import SERVICE, RecordedMetric, RecordingMetrics
from squall.local.aws import (
    ACCOUNT,
    DEAD_LETTER_QUEUE,
    DRAIN_QUEUE,
    JOBS_QUEUE,
    PREFIX,
    REGION,
    LocalResources,
    local_endpoint,
)
from squall.local.backends import Backend, memory_backend, moto_backend
from squall.local.clock import VirtualClock
from squall.local.cluster import DEFAULT_CLUSTER_NAME, SimulatedCluster
from squall.local.cluster.metrics import SimulatedMetricLines
from squall.local.cluster.pods import PodRunner
from squall.local.drain_queue import InMemoryDrainQueue, QueuedStep
from squall.local.fleet import FleetHooks, LocalFleet, RegionCapacity
from squall.local.lambda_events import (
    InvocationKilled,
    LocalContext,
    eventbridge_event,
    function_name,
    scheduled_event,
    sqs_event,
)
from squall.local.metric_lines import local_metric_lines
from squall.local.prices import InMemoryPriceRecords, local_price_book
from squall.planner.admission import TeamShare
from squall.planner.offline import parse_groups
from squall.services.preemption import CheckpointReader

DEFAULT_TEAMS = {"research": "team-research", "vision": "team-vision"}
DEFAULT_REGISTRIES = ["registry.example.com/squall", "123456789012.dkr.ecr.us-west-2.amazonaws.com"]
# Model services: the images their pods name, in the local registries (the process runner
# runs a model service's pod by its containers' names, whatever the images).
LOCAL_SERVING = ServingSettings(
    image="registry.example.com/squall/tensorflow-serving:2.16.1",
    fetch_image="registry.example.com/squall/tf-trainer:1.0",
)
SQS_BATCH_SIZE = deployed.JOBS_BATCH_SIZE
DRAIN_QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{DRAIN_QUEUE}"
# A drain-queue message that failed is visible again after this long, unless the
# drain function asked for sooner (the stack's visibility timeout).
DRAIN_VISIBILITY_TIMEOUT = deployed.DRAIN_VISIBILITY_TIMEOUT
# Receives before the drain queue's redrive dead-letters a message (the stack's).
DRAIN_MAX_RECEIVE_COUNT = deployed.DRAIN_MAX_RECEIVE_COUNT
# How often Lambda retries a failed asynchronous (EventBridge) invocation, per function,
# as the stack configures them (squall/resources.py; unset there: Lambda's default
# of 2). Scale and reconcile retry nothing: the next minute's run supersedes a failed one.
ASYNC_RETRIES = {
    h: deployed.async_retries(h) for h in (deployed.SCALE, deployed.RECONCILE, deployed.LIFECYCLE)
}
# Lambda waits a minute before the first retry of a failed asynchronous event, two before the second.
ASYNC_RETRY_DELAYS = (timedelta(minutes=1), timedelta(minutes=2))
# Where Lambda puts an asynchronous event it gave up on, per function (the stack's
# on-failure destinations): the lifecycle function's go to a queue with an alarm.
ON_FAILURE_DESTINATIONS = {deployed.LIFECYCLE: deployed.lifecycle_failures_queue_name(PREFIX)}


@dataclass(frozen=True)
class ClusterEntry:
    """One configured cluster as the local runtime simulates it: its name and region."""

    name: str
    region: str


def default_clusters(node_groups: Sequence[Mapping[str, Any]] | None) -> list[ClusterEntry]:
    """The one cluster of a configuration that names none: DEFAULT_CLUSTER_NAME, in the first group's region."""
    first = next((g.get("region") for g in node_groups or () if isinstance(g.get("region"), str)), None)
    return [ClusterEntry(name=DEFAULT_CLUSTER_NAME, region=str(first or REGION))]


def clusters_of_groups(node_groups: Sequence[Mapping[str, Any]] | None) -> list[ClusterEntry]:
    """The clusters the groups name, in the order they first appear, each in the region of its
    first group; `default_clusters` when none names one (what `LocalRuntime.start` runs without
    a `clusters` list: a groups file that names two clusters is served as two)."""
    found: dict[str, str] = {}
    for group in node_groups or ():
        name, region = group.get("cluster"), group.get("region")
        if isinstance(name, str) and name not in found:
            found[name] = str(region) if isinstance(region, str) else REGION
    if not found:
        return default_clusters(node_groups)
    return [ClusterEntry(name=name, region=region) for name, region in found.items()]


@dataclass
class LocalScaleRequests:
    """Scale-check requests, collected for the runtime to act on (EventBridge in AWS)."""

    requests: list[tuple[datetime, str, tuple[str, ...]]] = field(default_factory=list)
    clock: Any = None

    def request_scale_check(self, *, reason: str, job_ids: Any = ()) -> None:
        self.requests.append((self.clock.now() if self.clock else datetime.min, reason, tuple(job_ids)))


@dataclass
class Schedule:
    every: timedelta
    invoke: Callable[[], Any]
    next_at: datetime


@dataclass(frozen=True)
class FunctionError:
    """An invocation that raised or was killed: one in Lambda's Errors metric."""

    at: datetime
    function: str  # the handler: submit, scale, reconcile, lifecycle or drain
    error: str
    killed: bool = False  # killed half way (a timeout, out of memory) rather than raising


@dataclass(frozen=True)
class PendingRetry:
    """A failed asynchronous event that Lambda will invoke the function with again."""

    due: datetime
    function: str
    event: dict[str, Any]
    attempt: int  # the retry this will be: 1 or 2


@dataclass(frozen=True)
class FailedEvent:
    """An asynchronous event Lambda gave up on, as its on-failure destination receives it."""

    at: datetime
    function: str
    destination: str  # the queue's name
    condition: str  # RetriesExhausted or EventAgeExceeded, in Lambda's words
    event: dict[str, Any]


@dataclass
class DeliveryStats:
    redelivered: int = 0


def _local_serving(registries: list[str]) -> ServingSettings:
    images = (LOCAL_SERVING.image, LOCAL_SERVING.fetch_image)
    if all(image and image_problem(image, registries=registries) is None for image in images):
        return LOCAL_SERVING
    return ServingSettings()


class LocalRuntime:
    def __init__(
        self,
        *,
        backend: Backend,
        clock: VirtualClock,
        settings: Settings,
        cluster: SimulatedCluster | None = None,
        clusters: Mapping[str, SimulatedCluster] | None = None,
        capacity: Mapping[str, RegionCapacity] | None = None,
        hooks: bool = True,
        submitters: Mapping[str, Sequence[str]] | None = None,
        checkpoints: CheckpointReader | None = None,
    ) -> None:
        """`clusters`: name -> its simulated cluster, in the configuration's order (the
        settings' `clusters`); `cluster`: the one cluster of a runtime that has one."""
        if (cluster is None) == (clusters is None):
            raise ValueError("give either one cluster or the clusters by name")
        self.clusters: dict[str, SimulatedCluster] = (
            dict(clusters) if clusters is not None else {cluster.name: cluster} if cluster is not None else {}
        )
        if not self.clusters:
            raise ValueError("the runtime needs at least one cluster")
        self.backend = backend
        self.clock = clock
        self.settings = settings
        self.metrics = RecordingMetrics(clock)
        self.scale_requests = LocalScaleRequests(clock=clock)
        self.queue = backend.queue
        self.store = backend.store
        self.fleet: LocalFleet | None = None
        # The hooks' timeouts, as the capacity stack gives Squall's hooks (stacks/lifecycle.py).
        self.hook_heartbeat_timeout = max(timedelta(minutes=5), 4 * settings.policy.drain_step_delay)
        self.launch_hook_timeout = settings.policy.provision_timeout
        if settings.node_groups:
            groups, _ = parse_groups(settings.node_groups)
            backend.create_groups(groups)
            self.fleet = LocalFleet(
                adapter=backend.autoscaling,
                clock=clock,
                cluster=self.cluster,
                clusters=self.clusters,
                groups=groups,
                capacity=dict(capacity or {}),
                # Squall's hooks, with the timeouts the capacity stack gives them
                hooks=FleetHooks(
                    launch=settings.launch_hook_name,
                    terminate=settings.terminate_hook_name,
                    heartbeat_timeout=self.hook_heartbeat_timeout,
                    launch_timeout=self.launch_hook_timeout,
                )
                if hooks
                else None,
            )
        self.drain_queue = InMemoryDrainQueue(clock)
        # What the simulated trainers print (local/cluster/metrics.py): a job whose objective is
        # set here reports squall-metric lines from it, as a real trainer would.
        self.simulated_metrics = SimulatedMetricLines(self.clusters)
        self.services = runtime.Services(
            settings=settings,
            clock=clock,
            store=self.store,
            clusters=self.clusters,
            metrics=self.metrics,
            scale_requests=self.scale_requests,
            fleet=self.fleet,
            scale_state=backend.scale_state,
            drain_queue=self.drain_queue,
            drain_store=backend.drain_store,
            submitters={team: frozenset(ids) for team, ids in (submitters or {}).items()},
            model_services=backend.model_services,
            saved_models=backend.saved_models,
            cost_ledger=backend.cost_ledger,
            checkpoints=checkpoints,
            # groups with priceFrom ec2: their configured prices, refreshed without a network
            price_book=local_price_book(settings.node_groups),
            price_records=InMemoryPriceRecords(),
        )
        self.lifecycle_results: list[dict[str, Any]] = []
        self.scale_results: list[dict[str, Any]] = []
        # Scale checks that acted, or failed to: one that decided nothing leaves nothing to
        # deliver at its instant (see settle).
        self.scale_checks_acted = 0
        self.deliveries = DeliveryStats()
        # every invocation that raised or was killed, oldest first (the summary's functionErrors)
        self.function_errors: list[FunctionError] = []
        self.pending_retries: list[PendingRetry] = []
        # (when, function) of asynchronous events dropped once their retries were spent
        self.dropped_events: list[tuple[datetime, str]] = []
        # those of them that went to the function's on-failure destination
        self.failed_events: list[FailedEvent] = []
        self.drain_dead_letters: list[DrainStepMessage] = []
        self._drain_receives: Counter[DrainStepMessage] = Counter()
        self._drain_deliveries = 0
        self._handlers: dict[str, Callable[[Any, Any], Any]] = {}
        self._dimensions: dict[str, dict[str, str]] = {}
        self._sampled_at: datetime | None = None
        self._gauges: dict[tuple[str, str], RecordedMetric] = {}
        # message ids that SQS will hand over twice (at-least-once delivery, on purpose)
        self.deliver_twice: set[str] = set()
        self.schedules: list[Schedule] = []
        self.add_schedule(timedelta(minutes=1), self.invoke_reconcile)
        if self.fleet is not None:
            self.add_schedule(timedelta(minutes=1), self.invoke_scale)

    @property
    def cluster(self) -> SimulatedCluster:
        """The first configured cluster (the only one of a one-cluster runtime)."""
        return next(iter(self.clusters.values()))

    @property
    def resources(self) -> LocalResources:
        if self.backend.resources is None:
            raise RuntimeError("the memory backend has no AWS endpoint")
        return self.backend.resources

    # ---- set-up ------------------------------------------------------------

    @classmethod
    @contextmanager
    def start(
        cls,
        *,
        clock: VirtualClock | None = None,
        cluster: SimulatedCluster | None = None,
        clusters: Sequence[ClusterEntry] | None = None,
        simulated: Mapping[str, SimulatedCluster] | None = None,
        teams: Mapping[str, str] | None = None,
        registries: list[str] | None = None,
        policy: PolicySettings | None = None,
        node_groups: list[dict[str, Any]] | None = None,
        capacity: Mapping[str, RegionCapacity] | None = None,
        log_level: int = logging.WARNING,
        backend: str = "moto",
        submitters: Mapping[str, Sequence[str]] | None = None,
        quotas: Mapping[str, TeamShare] | None = None,
        budgets: Mapping[str, float] | None = None,
        checkpoints: CheckpointReader | None = None,
        port: int = 0,
        pod_runner: Callable[[LocalResources], PodRunner] | None = None,
        serving: ServingSettings | None = None,
    ) -> Iterator[LocalRuntime]:
        """Start the embedded endpoint (or the memory backend), install the services.

        `clusters`: the configured clusters (default: those the groups name, else one,
        `clusters_of_groups`); each node group names its cluster (`cluster`) when there
        are several. The runtime
        simulates each; `simulated` hands in some of them ready made (by name), as
        `cluster` hands in the one cluster of a one-cluster runtime.

        `port`: the endpoint's loopback port (0: a free one). `pod_runner`: builds
        the runner of the pods that run for real (local/processes.py) once the
        endpoint is up; the runtime then makes its clusters (give no `cluster`), and
        closes the runner when it stops.

        `submitters`: team -> unique ids of the principals that may submit for it
        (what SQS reports as a message's SenderId, before any ':'), handed to the
        intake as they are; a team left out takes jobs from any sender while no team
        is listed, and from nobody once one is (core/settings.py may_submit).
        `quotas`: team -> its GPU quota and weight in admission (the functions'
        `quotas` setting, `planner.inputs.team_shares` of a configuration's teams);
        a team left out has no quota and weight 1.
        `budgets`: team -> its monthly budget in dollars (the functions' `budgets` setting).
        `checkpoints`: where preemption learns running jobs' latest checkpoints (the simulated
        clusters' trainers, local/cluster/checkpoints.py); None: from their records only.
        `serving`: the model services' settings (default: LOCAL_SERVING where the
        registries allow its images, else none: serve requests are refused).
        """
        clock = clock or VirtualClock()
        if pod_runner is not None and (cluster is not None or simulated):
            raise ValueError(
                "give either a cluster or a pod_runner: the runtime makes the cluster of real pods"
            )
        if cluster is not None and simulated:
            raise ValueError("give either one cluster or the simulated clusters by name")
        entries = list(clusters or clusters_of_groups(node_groups))
        if cluster is not None:
            if len(entries) != 1:
                raise ValueError("one cluster given for a configuration of several: give them by name")
            entries = [ClusterEntry(name=cluster.name, region=entries[0].region)]
            simulated = {cluster.name: cluster}
        unknown = sorted(set(simulated or {}) - {e.name for e in entries})
        if unknown:
            raise ValueError(f"simulated clusters {', '.join(unknown)} are not among the configured clusters")
        # The functions log every job at INFO, as they should in CloudWatch; here the
        # caller shows progress itself. Metrics go to the recording sink instead of EMF.
        from squall.handlers import observability  # noqa: F401  (the functions' logger exists now)

        for name in list(logging.root.manager.loggerDict):
            if name == SERVICE or name.startswith(f"{SERVICE}."):
                logging.getLogger(name).setLevel(log_level)
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        with contextlib.ExitStack() as stack:
            if backend == "moto":
                chosen = moto_backend(stack.enter_context(local_endpoint(port=port)))
            elif backend == "memory":
                chosen = memory_backend()
            else:
                raise ValueError(f"unknown backend {backend!r}: use 'moto' or 'memory'")
            local_resources = chosen.resources
            runner: PodRunner | None = None
            if pod_runner is not None:
                if local_resources is None:
                    raise ValueError("real pods need the moto backend: they talk to its endpoint")
                runner = pod_runner(local_resources)
                close = getattr(runner, "close", None)
                if close is not None:
                    stack.callback(close)
            made: dict[str, SimulatedCluster] = {}
            for index, entry in enumerate(entries):
                given = (simulated or {}).get(entry.name)
                made[entry.name] = (
                    given
                    if given is not None
                    # A seed per cluster: pod uids differ between clusters, as real clusters' do
                    # (one pod runner serves them all and tells pods apart by uid).
                    else SimulatedCluster(
                        clock=clock, name=entry.name, region=entry.region, runner=runner, seed=index
                    )
                )
            settings = Settings(
                table_name=local_resources.table_name if local_resources else "memory",
                jobs_queue_url=local_resources.jobs_queue_url if local_resources else "",
                drain_queue_url=local_resources.drain_queue_url if local_resources else "",
                teams=dict(teams or DEFAULT_TEAMS),
                quotas=dict(quotas or {}),
                budgets=dict(budgets or {}),
                allowed_registries=list(registries or DEFAULT_REGISTRIES),
                regions=sorted(
                    {g["region"] for g in node_groups or []} | {e.region for e in entries} | {REGION}
                ),
                node_groups=list(node_groups or []),
                clusters=[ClusterSettings(name=e.name, region=e.region) for e in entries],
                policy=policy or PolicySettings(),
                serving=serving or _local_serving(list(registries or DEFAULT_REGISTRIES)),
            )
            local = cls(
                backend=chosen,
                clock=clock,
                clusters=made,
                settings=settings,
                capacity=capacity,
                submitters=submitters,
                checkpoints=checkpoints,
            )
            # reconcile reads the jobs' metric lines: the real pods' from the endpoint's log group
            local.services.metric_lines = local_metric_lines(
                real_pods=runner is not None,
                resources=local_resources,
                clusters=made,
                simulated=local.simulated_metrics,
            )
            runtime.install(local.services)
            try:
                yield local
            finally:
                runtime.install(None)

    def add_schedule(self, every: timedelta, invoke: Callable[[], Any]) -> None:
        self.schedules.append(Schedule(every=every, invoke=invoke, next_at=self.clock.now() + every))

    # ---- invocations -------------------------------------------------------

    def invoke(self, handler: str, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """One invocation of a function, as Lambda runs it: its response, or None if it failed.

        Lambda's metrics for it go to `metrics` (dimension FunctionName); a failure
        (an exception, or the invocation killed half way) goes to `function_errors`.
        What becomes of a failed event is its trigger's business: see the callers.
        """
        function = function_name(handler)
        started = time.perf_counter()
        failure: FunctionError | None = None
        response: dict[str, Any] | None = None
        try:
            context = LocalContext(
                function_name=function, timeout_ms=deployed.FUNCTIONS[handler].timeout_seconds * 1000
            )
            response = self._handler(handler)(event, context) or {}
        except InvocationKilled as killed:
            failure = FunctionError(at=self.clock.now(), function=handler, error=str(killed), killed=True)
        except Exception as error:
            failure = FunctionError(at=self.clock.now(), function=handler, error=str(error))
        # The handler's real (wall-clock) time: the virtual clock stands still while an
        # invocation runs, so it cannot say how long one took.
        duration_ms = (time.perf_counter() - started) * 1000
        # One dimensions mapping per function, shared by its points: a replay records
        # four points for each of tens of thousands of invocations.
        dimensions = self._dimensions.setdefault(function, {"FunctionName": function})
        at = self.clock.now()
        self.metrics.points += [
            RecordedMetric(at=at, name="Invocations", value=1.0, unit="Count", dimensions=dimensions),
            RecordedMetric(
                at=at, name="Errors", value=float(failure is not None), unit="Count", dimensions=dimensions
            ),
            RecordedMetric(
                at=at, name="Duration", value=duration_ms, unit="Milliseconds", dimensions=dimensions
            ),
            # Invocations run one at a time here, with no concurrency limit to hit: none is throttled.
            RecordedMetric(at=at, name="Throttles", value=0.0, unit="Count", dimensions=dimensions),
        ]
        if failure is not None:
            self.function_errors.append(failure)
        return response

    def invoke_async(self, handler: str, event: dict[str, Any], *, attempt: int = 0) -> dict[str, Any] | None:
        """An EventBridge invocation: a failed one is retried as Lambda retries asynchronous events."""
        response = self.invoke(handler, event)
        if response is None:
            now = self.clock.now()
            if attempt < ASYNC_RETRIES.get(handler, len(ASYNC_RETRY_DELAYS)):
                due = now + ASYNC_RETRY_DELAYS[attempt]
                if due - _event_time(event, default=now) <= self.max_event_age(handler):
                    self.pending_retries.append(
                        PendingRetry(due=due, function=handler, event=event, attempt=attempt + 1)
                    )
                else:
                    self._give_up(handler, event, condition="EventAgeExceeded")
            else:
                self._give_up(handler, event, condition="RetriesExhausted")
            return None
        if handler == "scale":
            self.scale_results.append({"at": self.clock.now()} | response)
            if response.get("done") or response.get("errors") or response.get("fallbacks"):
                self.scale_checks_acted += 1
        elif handler == "lifecycle":
            self.lifecycle_results.append({"at": self.clock.now(), "event": event["detail-type"]} | response)
        return response

    def max_event_age(self, handler: str) -> timedelta:
        """How old an event Lambda still retries, as the stack configures each function."""
        if handler == deployed.LIFECYCLE:
            # Past its hook's timeout Auto Scaling has answered the action itself.
            return max(self.hook_heartbeat_timeout, self.launch_hook_timeout)
        seconds = deployed.FUNCTIONS[handler].max_event_age_seconds
        return timedelta(hours=6) if seconds is None else timedelta(seconds=seconds)

    def _give_up(self, handler: str, event: dict[str, Any], *, condition: str) -> None:
        now = self.clock.now()
        self.dropped_events.append((now, handler))
        destination = ON_FAILURE_DESTINATIONS.get(handler)
        if destination is not None:
            self.failed_events.append(
                FailedEvent(
                    at=now, function=handler, destination=destination, condition=condition, event=event
                )
            )

    def _handler(self, handler: str) -> Callable[[Any, Any], Any]:
        if handler not in self._handlers:
            self._handlers[handler] = importlib.import_module(f"squall.handlers.{handler}").handler
        return self._handlers[handler]

    # ---- the queue ---------------------------------------------------------

    def send(self, body: Mapping[str, Any] | str, *, sender: str | None = None) -> str:
        """Drop a message on the jobs queue, as `squall submit` or a user's SendMessage does.

        `sender`: the unique id of the principal that sends it (AROA...:session for
        a role), which SQS reports to the submit function as the SenderId attribute.
        """
        text = body if isinstance(body, str) else json.dumps(body)
        return self.queue.send(text, at=self.clock.now(), sender=sender)

    def deliver(self) -> int:
        """Hand every visible message to the submit handler in batches of up to 10.

        What a failed batch, or a failed record of one, held is not deleted: it is
        visible again after the jobs queue's visibility timeout (the stack's, on the
        virtual clock), its receive count one higher, so the redrive policy applies.
        """
        handled = 0
        while True:
            messages = self.queue.receive(SQS_BATCH_SIZE, at=self.clock.now())
            if not messages:
                return handled
            response = self.invoke("submit", sqs_event(messages, queue_arn=self.queue.arn, region=REGION))
            handled += len(messages)
            if response is None:
                return handled
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            twice = [
                m for m in messages if m["MessageId"] in self.deliver_twice and m["MessageId"] not in failed
            ]
            if twice:
                # The same records again, as an at-least-once queue may deliver them.
                self.deliver_twice.difference_update(m["MessageId"] for m in twice)
                again = self.invoke("submit", sqs_event(twice, queue_arn=self.queue.arn, region=REGION))
                self.deliveries.redelivered += len(twice)
                if again is None:
                    failed.update(m["MessageId"] for m in twice)
            self.queue.delete([m["ReceiptHandle"] for m in messages if m["MessageId"] not in failed])

    def dead_letters(self) -> list[dict[str, Any]]:
        return self.queue.dead_letters()

    def record_queue_metrics(self) -> None:
        """SQS's metrics for the queues the dashboard graphs, sampled before delivery.

        Sampled once per instant (a step at the same instant adds nothing new). SQS
        publishes them once a minute: each minute keeps one point, its largest sample,
        which is what the dashboard's Maximum statistic reads.
        """
        now = self.clock.now()
        if now == self._sampled_at:
            return
        self._sampled_at = now
        depth = self.queue.depth(at=now)
        age = (now - depth.oldest_sent_at).total_seconds() if depth.oldest_sent_at is not None else 0.0
        drains_visible = sum(1 for queued in self.drain_queue.waiting if queued.due_at <= now)
        self._queue_gauge("ApproximateNumberOfMessagesVisible", JOBS_QUEUE, depth.visible, unit="Count")
        self._queue_gauge("ApproximateAgeOfOldestMessage", JOBS_QUEUE, max(age, 0.0), unit="Seconds")
        self._queue_gauge(
            "ApproximateNumberOfMessagesVisible", DEAD_LETTER_QUEUE, depth.dead_letters, unit="Count"
        )
        self._queue_gauge("ApproximateNumberOfMessagesVisible", DRAIN_QUEUE, drains_visible, unit="Count")

    def _queue_gauge(self, name: str, queue: str, value: float, *, unit: str) -> None:
        now = self.clock.now()
        last = self._gauges.get((name, queue))
        if last is not None and _minute(last.at) == _minute(now):
            last.value = max(last.value, value)
            return
        point = RecordedMetric(
            at=now, name=name, value=float(value), unit=unit, dimensions={"QueueName": queue}
        )
        self.metrics.points.append(point)
        self._gauges[(name, queue)] = point

    # ---- schedules and events ------------------------------------------------

    def invoke_reconcile(self) -> dict[str, Any] | None:
        event = scheduled_event(rule="squall-reconcile", at=self.clock.now(), region=REGION)
        return self.invoke_async("reconcile", event)

    def invoke_scale(
        self, *, trigger: str = "schedule", job_ids: Sequence[str] = ()
    ) -> dict[str, Any] | None:
        if trigger == "schedule":
            event = scheduled_event(rule="squall-scale", at=self.clock.now(), region=REGION)
        else:
            event = eventbridge_event(
                source="squall.core.jobs",
                detail_type="Scale Check Requested",
                # As EventBridgeScaleRequests puts it: at most MAX_JOB_IDS named, all counted.
                detail={"reason": trigger, "jobIds": list(job_ids[:MAX_JOB_IDS]), "jobCount": len(job_ids)},
                at=self.clock.now(),
                region=REGION,
            )
        return self.invoke_async("scale", event)

    def answer_scale_requests(self) -> None:
        """Scale-check requests wait out the debounce, then trigger one check (EventBridge in AWS)."""
        if self.fleet is None or not self.scale_requests.requests:
            return
        first = self.scale_requests.requests[0][0]
        if self.clock.now() - first >= self.settings.policy.scale_check_debounce:
            reasons = sorted({reason for _, reason, _ in self.scale_requests.requests})
            job_ids = tuple(dict.fromkeys(j for _, _, ids in self.scale_requests.requests for j in ids))
            self.scale_requests.requests.clear()
            self.invoke_scale(trigger=",".join(reasons), job_ids=job_ids)

    def deliver_lifecycle_events(self) -> None:
        """The hooks' events to the lifecycle function, as the EventBridge rule does."""
        if self.fleet is None or not self.fleet.outbox:
            return
        events, self.fleet.outbox = self.fleet.outbox, []
        for event in events:
            self.invoke_async("lifecycle", event)

    def deliver_retries(self) -> None:
        """Failed asynchronous events whose retry is due, to their function again."""
        now = self.clock.now()
        due = [r for r in self.pending_retries if r.due <= now]
        if not due:
            return
        self.pending_retries = [r for r in self.pending_retries if r.due > now]
        for retry in sorted(due, key=lambda r: r.due):
            self.invoke_async(retry.function, retry.event, attempt=retry.attempt)

    def deliver_drain_steps(self) -> None:
        """Drain-queue messages that are due, in batches of 10, to the drain function.

        A step the function reports as failed, or every step of a batch whose
        invocation failed, comes back as SQS would deliver it again: after the
        queue's visibility timeout (the stack's), or when the function asked for it
        (ChangeMessageVisibility, which the drain function does for a failed step).
        After DRAIN_MAX_RECEIVE_COUNT receives the queue's redrive moves it to
        `drain_dead_letters` instead.
        """
        due = self.drain_queue.take_due()
        for start in range(0, len(due), SQS_BATCH_SIZE):
            batch = due[start : start + SQS_BATCH_SIZE]
            self._drain_receives.update(batch)
            messages: list[dict[str, Any]] = []
            for step in batch:
                self._drain_deliveries += 1
                messages.append(
                    {
                        "MessageId": f"drain-{self._drain_deliveries}",
                        "ReceiptHandle": f"drain-receipt-{self._drain_deliveries}",
                        "Body": step.body(),
                        "Attributes": {"ApproximateReceiveCount": str(self._drain_receives[step])},
                    }
                )
            received_at = self.clock.now()
            response = self.invoke("drain", sqs_event(messages, queue_arn=DRAIN_QUEUE_ARN, region=REGION))
            failed = (
                {m["MessageId"] for m in messages}
                if response is None
                else {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            )
            for message, step in zip(messages, batch, strict=True):
                visible_again = self.drain_queue.visible_again.pop(str(message["ReceiptHandle"]), None)
                if message["MessageId"] not in failed:
                    self._drain_receives.pop(step, None)
                elif self._drain_receives[step] >= DRAIN_MAX_RECEIVE_COUNT:
                    self._drain_receives.pop(step, None)
                    self.drain_dead_letters.append(step)
                else:
                    # Not sent again: the same message, visible again.
                    self.drain_queue.waiting.append(
                        QueuedStep(
                            due_at=visible_again or received_at + DRAIN_VISIBILITY_TIMEOUT, message=step
                        )
                    )

    def run_due_schedules(self) -> None:
        now = self.clock.now()
        for schedule in self.schedules:
            while schedule.next_at <= now:
                schedule.invoke()
                schedule.next_at += schedule.every

    # ---- time --------------------------------------------------------------

    def next_event_time(self) -> datetime | None:
        """When the runtime next has something to do of its own accord, None if never.

        The earliest of: a schedule, the debounced scale-check request, a jobs-queue
        message visible again after its visibility timeout, a drain-queue message
        coming due, a retry of a failed asynchronous event, and the fleet's own
        changes (a boot, a GPU plugin, a lifecycle hook timing out).
        """
        times = [schedule.next_at for schedule in self.schedules]
        times.extend(retry.due for retry in self.pending_retries)
        if (visible_at := self.queue.next_visible_at()) is not None:
            times.append(visible_at)
        if (drain_due := self.drain_queue.next_due()) is not None:
            times.append(drain_due)
        if self.fleet is not None:
            if self.scale_requests.requests:
                times.append(self.scale_requests.requests[0][0] + self.settings.policy.scale_check_debounce)
            if (fleet_due := self.fleet.next_event_time()) is not None:
                times.append(fleet_due)
        return min(times, default=None)

    def step(self, delta: timedelta) -> None:
        """Deliver what is queued, let the cluster run, fire due schedules, move time on."""
        self.record_queue_metrics()
        self.deliver()
        self.answer_scale_requests()
        if self.fleet is not None:
            self.fleet.advance()
        self.advance_clusters()
        self.deliver_lifecycle_events()
        self.deliver_retries()
        self.deliver_drain_steps()
        self.run_due_schedules()
        self.clock.advance(delta)
        self.advance_clusters()

    def advance_clusters(self) -> None:
        """Let every simulated cluster catch up with the clock."""
        for cluster in self.clusters.values():
            cluster.advance()

    def cluster_stats(self) -> dict[str, int]:
        """SimulatedCluster.stats() summed over every cluster (the live views' and status's counts)."""
        total: Counter[str] = Counter()
        for cluster in self.clusters.values():
            total.update(cluster.stats())
        return dict(total)

    def clusters_next_event_time(self) -> datetime | None:
        """When a pod of any cluster finishes, or anything else of a cluster's own happens, next."""
        times = [t for c in self.clusters.values() if (t := c.next_event_time()) is not None]
        return min(times, default=None)

    def settle(self, *, max_steps: int = 20) -> None:
        """Step at this instant until a step starts nothing new (a scale check that acted, a hook,
        a node) and nothing more is due at it."""
        for _ in range(max_steps):
            before = self.activity()
            self.step(timedelta(0))
            if self.activity() == before and not self.due_now():
                return

    def activity(self) -> tuple[int, ...]:
        """What changes when a step did something that may need another step at this instant."""
        fleet = self.fleet
        counts = (self.scale_checks_acted, len(self.function_errors), len(self.lifecycle_results))
        if fleet is None:
            return counts
        return (*counts, len(fleet.outbox), fleet.nodes_added, fleet.nodes_removed)

    def due_now(self) -> bool:
        """Whether something of the runtime's own is due at this instant already."""
        upcoming = self.next_event_time()
        return upcoming is not None and upcoming <= self.clock.now()

    def run(
        self,
        *,
        until: Callable[[LocalRuntime], bool],
        step: timedelta = timedelta(seconds=5),
        limit: timedelta = timedelta(hours=6),
        on_step: Callable[[LocalRuntime], None] | None = None,
    ) -> bool:
        """Step until `until` holds or `limit` of virtual time has passed; True if it held."""
        deadline = self.clock.now() + limit
        while self.clock.now() < deadline:
            self.step(step)
            if on_step:
                on_step(self)
            if until(self):
                return True
        return False

    # ---- reading state -----------------------------------------------------

    def jobs(self) -> list[Job]:
        return self.store.list_all()

    def events(self, job_id: str) -> list[JobEvent]:
        return self.store.events(job_id)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _event_time(event: Mapping[str, Any], *, default: datetime) -> datetime:
    """When EventBridge says an event happened (its ``time``), for Lambda's maximum event age."""
    try:
        return datetime.fromisoformat(str(event["time"]))
    except (KeyError, ValueError):
        return default
