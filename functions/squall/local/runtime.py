"""The local runtime: the handlers Lambda runs, driven the way AWS would drive them.

It owns a moto server (the real queues and table), a simulated cluster and a
virtual clock. Each step it drains the jobs queue into the submit handler in SQS
batches (deleting what succeeded, as the event source mapping does), advances the
cluster, and fires the schedules that are due. Nothing here decides anything about
jobs: that is the handlers' code, unchanged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from squall import runtime
from squall.drain_queue import InMemoryDrainQueue
from squall.drain_store import DynamoDrainStore
from squall.fleet import AutoScalingFleet
from squall.jobs import Job, JobEvent, is_terminal
from squall.local.aws import (
    MAX_RECEIVE_COUNT,
    REGION,
    LocalResources,
    client,
    create_groups,
    create_resources,
    local_endpoint,
)
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.fleet import LifecycleHooks, LocalFleet, RegionCapacity
from squall.local.lambda_events import LocalContext, eventbridge_event, scheduled_event, sqs_event
from squall.local.memory import InMemoryAutoScaling, InMemoryDrainStore, InMemoryJobStore, InMemoryScaleState
from squall.local.queues import LocalQueue, MemoryQueue, SqsQueue
from squall.planner import NodeGroup
from squall.planner.offline import parse_groups
from squall.settings import PolicySettings, Settings
from squall.state import DynamoScaleState
from squall.store import DynamoJobStore
from squall.telemetry import SERVICE, RecordingMetrics

DEFAULT_TEAMS = {"research": "team-research", "vision": "team-vision"}
DEFAULT_REGISTRIES = ["registry.example.com/squall", "123456789012.dkr.ecr.us-west-2.amazonaws.com"]
SQS_BATCH_SIZE = 10
DRAIN_QUEUE_ARN = "arn:aws:sqs:us-west-2:123456789012:squall-drains"


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


@dataclass
class DeliveryStats:
    batches: int = 0
    messages: int = 0
    failures: int = 0
    redelivered: int = 0


@dataclass
class Backend:
    """Where the local runtime keeps its AWS state: moto's server, or memory for big replays."""

    name: str
    store: Any  # JobStore
    scale_state: Any  # ScaleState
    queue: LocalQueue
    autoscaling: Any  # what LocalFleet drives: AutoScalingFleet on moto, or InMemoryAutoScaling
    create_groups: Callable[[list[NodeGroup]], None]
    drain_store: Any  # DrainStore
    resources: LocalResources | None = None


def moto_backend(endpoint: str) -> Backend:
    resources = create_resources(endpoint)
    dynamodb = client("dynamodb", endpoint)
    regional: dict[str, Any] = {}

    def autoscaling_client(region: str) -> Any:
        if region not in regional:
            regional[region] = client("autoscaling", endpoint, region=region)
        return regional[region]

    return Backend(
        name="moto",
        store=DynamoJobStore(dynamodb, resources.table_name),
        scale_state=DynamoScaleState(dynamodb, resources.table_name),
        queue=SqsQueue(
            client("sqs", endpoint), url=resources.jobs_queue_url, dead_letter_url=resources.dead_letter_queue_url
        ),
        autoscaling=AutoScalingFleet(autoscaling_client),
        create_groups=lambda groups: create_groups(endpoint, groups),
        drain_store=DynamoDrainStore(dynamodb, resources.table_name),
        resources=resources,
    )


def memory_backend() -> Backend:
    autoscaling = InMemoryAutoScaling()

    def create(groups: list[NodeGroup]) -> None:
        for g in groups:
            autoscaling.create_group(
                name=g.asg_name or g.name, region=g.region, min_size=g.min_size, max_size=g.max_size, desired=g.desired
            )

    return Backend(
        name="memory",
        store=InMemoryJobStore(),
        scale_state=InMemoryScaleState(),
        queue=MemoryQueue(max_receive_count=MAX_RECEIVE_COUNT),
        autoscaling=autoscaling,
        create_groups=create,
        drain_store=InMemoryDrainStore(),
    )


class LocalRuntime:
    def __init__(
        self,
        *,
        backend: Backend,
        clock: VirtualClock,
        cluster: SimulatedCluster,
        settings: Settings,
        capacity: Mapping[str, RegionCapacity] | None = None,
        hooks: bool = True,
    ) -> None:
        self.backend = backend
        self.clock = clock
        self.cluster = cluster
        self.settings = settings
        self.metrics = RecordingMetrics(clock)
        self.scale_requests = LocalScaleRequests(clock=clock)
        self.queue = backend.queue
        self.store = backend.store
        self.fleet: LocalFleet | None = None
        if settings.node_groups:
            groups, _ = parse_groups(settings.node_groups)
            backend.create_groups(groups)
            self.fleet = LocalFleet(
                adapter=backend.autoscaling,
                clock=clock,
                cluster=cluster,
                groups=groups,
                capacity=dict(capacity or {}),
                # Squall's hooks, with the timeouts the capacity stack gives them
                hooks=LifecycleHooks(
                    launch=settings.launch_hook_name,
                    terminate=settings.terminate_hook_name,
                    heartbeat_timeout=max(timedelta(minutes=5), 4 * settings.policy.drain_step_delay),
                    launch_timeout=settings.policy.provision_timeout,
                )
                if hooks
                else None,
            )
        self.drain_queue = InMemoryDrainQueue(clock)
        self.services = runtime.Services(
            settings=settings,
            clock=clock,
            store=self.store,
            cluster=cluster,
            metrics=self.metrics,
            scale_requests=self.scale_requests,
            fleet=self.fleet,
            scale_state=backend.scale_state,
            drain_queue=self.drain_queue,
            drain_store=backend.drain_store,
        )
        self.lifecycle_results: list[dict[str, Any]] = []
        self.scale_results: list[dict[str, Any]] = []
        self.deliveries = DeliveryStats()
        # message ids that SQS will hand over twice (at-least-once delivery, on purpose)
        self.deliver_twice: set[str] = set()
        self.schedules: list[Schedule] = []
        self.add_schedule(timedelta(minutes=1), self.invoke_reconcile)
        if self.fleet is not None:
            self.add_schedule(timedelta(minutes=1), self.invoke_scale)

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
        teams: Mapping[str, str] | None = None,
        registries: list[str] | None = None,
        policy: PolicySettings | None = None,
        node_groups: list[dict[str, Any]] | None = None,
        capacity: Mapping[str, RegionCapacity] | None = None,
        log_level: int = logging.WARNING,
        backend: str = "moto",
    ) -> Iterator[LocalRuntime]:
        """Start the embedded endpoint (or the memory backend), install the services."""
        clock = clock or VirtualClock()
        cluster = cluster or SimulatedCluster(clock=clock)
        # The functions log every job at INFO, as they should in CloudWatch; here the
        # caller shows progress itself. Metrics go to the recording sink instead of EMF.
        from squall.handlers import drain, lifecycle, reconcile, scale, submit  # noqa: F401  (loggers exist now)

        for name in list(logging.root.manager.loggerDict):
            if name == SERVICE or name.startswith(f"{SERVICE}."):
                logging.getLogger(name).setLevel(log_level)
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        with contextlib.ExitStack() as stack:
            if backend == "moto":
                chosen = moto_backend(stack.enter_context(local_endpoint()))
            elif backend == "memory":
                chosen = memory_backend()
            else:
                raise ValueError(f"unknown backend {backend!r}: use 'moto' or 'memory'")
            resources = chosen.resources
            settings = Settings(
                table_name=resources.table_name if resources else "memory",
                jobs_queue_url=resources.jobs_queue_url if resources else "",
                drain_queue_url=resources.drain_queue_url if resources else "",
                teams=dict(teams or DEFAULT_TEAMS),
                allowed_registries=list(registries or DEFAULT_REGISTRIES),
                regions=sorted({g["region"] for g in node_groups or []} | {REGION}),
                node_groups=list(node_groups or []),
                policy=policy or PolicySettings(),
            )
            local = cls(backend=chosen, clock=clock, cluster=cluster, settings=settings, capacity=capacity)
            runtime.install(local.services)
            try:
                yield local
            finally:
                runtime.install(None)

    def add_schedule(self, every: timedelta, invoke: Callable[[], Any]) -> None:
        self.schedules.append(Schedule(every=every, invoke=invoke, next_at=self.clock.now() + every))

    # ---- the queue ---------------------------------------------------------

    def send(self, body: Mapping[str, Any] | str) -> str:
        """Drop a message on the jobs queue, as `squall submit` or a user's SendMessage does."""
        return self.queue.send(body if isinstance(body, str) else json.dumps(body))

    def deliver(self) -> int:
        """Hand every visible message to the submit handler in batches of up to 10."""
        from squall.handlers import submit

        handled = 0
        while True:
            messages = self.queue.receive(SQS_BATCH_SIZE)
            if not messages:
                return handled
            event = sqs_event(messages, queue_arn=self.queue.arn, region=REGION)
            response = submit.handler(event, LocalContext(function_name="squall-submit"))
            self.deliveries.batches += 1
            self.deliveries.messages += len(messages)
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            self.deliveries.failures += len(failed)
            twice = [m for m in messages if m["MessageId"] in self.deliver_twice and m["MessageId"] not in failed]
            if twice:
                # The same records again, as an at-least-once queue may deliver them.
                self.deliver_twice.difference_update(m["MessageId"] for m in twice)
                submit.handler(
                    sqs_event(twice, queue_arn=self.queue.arn, region=REGION),
                    LocalContext(function_name="squall-submit"),
                )
                self.deliveries.redelivered += len(twice)
            self.queue.delete([m["ReceiptHandle"] for m in messages if m["MessageId"] not in failed])
            handled += len(messages)

    def dead_letters(self) -> list[dict[str, Any]]:
        return self.queue.dead_letters()

    # ---- schedules ---------------------------------------------------------

    def invoke_reconcile(self) -> dict[str, Any]:
        from squall.handlers import reconcile

        event = scheduled_event(rule="squall-reconcile", at=self.clock.now(), region=REGION)
        result: dict[str, Any] = reconcile.handler(event, LocalContext(function_name="squall-reconcile"))
        return result

    def invoke_scale(self, *, trigger: str = "schedule") -> dict[str, Any]:
        from squall.handlers import scale

        if trigger == "schedule":
            event = scheduled_event(rule="squall-scale", at=self.clock.now(), region=REGION)
        else:
            event = eventbridge_event(
                source="squall.jobs",
                detail_type="Scale Check Requested",
                detail={"reason": trigger},
                at=self.clock.now(),
                region=REGION,
            )
        result: dict[str, Any] = scale.handler(event, LocalContext(function_name="squall-scale"))
        self.scale_results.append({"at": self.clock.now()} | result)
        return result

    def answer_scale_requests(self) -> None:
        """Scale-check requests wait out the debounce, then trigger one check (EventBridge in AWS)."""
        if self.fleet is None or not self.scale_requests.requests:
            return
        first = self.scale_requests.requests[0][0]
        if self.clock.now() - first >= self.settings.policy.scale_check_debounce:
            reasons = sorted({reason for _, reason, _ in self.scale_requests.requests})
            self.scale_requests.requests.clear()
            self.invoke_scale(trigger=",".join(reasons))

    def deliver_lifecycle_events(self) -> None:
        """The hooks' events to the lifecycle function, as the EventBridge rule does."""
        if self.fleet is None or not self.fleet.outbox:
            return
        from squall.handlers import lifecycle

        events, self.fleet.outbox = self.fleet.outbox, []
        for event in events:
            result = lifecycle.handler(event, LocalContext(function_name="squall-lifecycle"))
            self.lifecycle_results.append({"at": self.clock.now(), "event": event["detail-type"]} | result)

    def deliver_drain_steps(self) -> None:
        """Drain-queue messages that are due, in batches of 10, to the drain function.

        A step the function reports as failed comes back after the visibility
        timeout (30 s here), as SQS would deliver it again.
        """
        from squall.handlers import drain

        due = self.drain_queue.take_due()
        for start in range(0, len(due), SQS_BATCH_SIZE):
            batch = due[start : start + SQS_BATCH_SIZE]
            messages = [
                {"MessageId": f"drain-{id(m)}-{i}", "ReceiptHandle": "local", "Body": m.body(), "Attributes": {}}
                for i, m in enumerate(batch)
            ]
            event = sqs_event(messages, queue_arn=DRAIN_QUEUE_ARN, region=REGION)
            response = drain.handler(event, LocalContext(function_name="squall-drain"))
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            for message, step in zip(messages, batch, strict=True):
                if message["MessageId"] in failed:
                    self.drain_queue.send_step(step, delay=timedelta(seconds=30))

    def run_due_schedules(self) -> None:
        now = self.clock.now()
        for schedule in self.schedules:
            while schedule.next_at <= now:
                schedule.invoke()
                schedule.next_at += schedule.every

    # ---- time --------------------------------------------------------------

    def step(self, delta: timedelta) -> None:
        """Deliver what is queued, let the cluster run, fire due schedules, move time on."""
        self.deliver()
        self.answer_scale_requests()
        if self.fleet is not None:
            self.fleet.advance()
        self.cluster.advance()
        self.deliver_lifecycle_events()
        self.deliver_drain_steps()
        self.run_due_schedules()
        self.clock.advance(delta)
        self.cluster.advance()

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

    def job_counts(self) -> Counter[str]:
        return Counter(job.status.value for job in self.jobs())

    def events(self, job_id: str) -> list[JobEvent]:
        return self.store.events(job_id)

    def all_finished(self) -> bool:
        jobs = self.jobs()
        return bool(jobs) and all(is_terminal(job.status) for job in jobs)
