"""The local runtime: the handlers Lambda runs, driven the way AWS would drive them.

It owns a moto server (the real queues and table), a simulated cluster and a
virtual clock. Each step it drains the jobs queue into the submit handler in SQS
batches (deleting what succeeded, as the event source mapping does), advances the
cluster, and fires the schedules that are due. Nothing here decides anything about
jobs: that is the handlers' code, unchanged.
"""

from __future__ import annotations

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
from squall.fleet import AutoScalingFleet
from squall.jobs import Job, JobEvent, is_terminal
from squall.local.aws import REGION, LocalResources, client, create_groups, create_resources, local_endpoint
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.fleet import LocalFleet, RegionCapacity
from squall.local.lambda_events import LocalContext, eventbridge_event, scheduled_event, sqs_event
from squall.planner.offline import parse_groups
from squall.settings import PolicySettings, Settings
from squall.state import DynamoScaleState
from squall.store import DynamoJobStore
from squall.telemetry import SERVICE, RecordingMetrics

DEFAULT_TEAMS = {"research": "team-research", "vision": "team-vision"}
DEFAULT_REGISTRIES = ["registry.example.com/squall", "123456789012.dkr.ecr.us-west-2.amazonaws.com"]
SQS_BATCH_SIZE = 10


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


class LocalRuntime:
    def __init__(
        self,
        *,
        resources: LocalResources,
        clock: VirtualClock,
        cluster: SimulatedCluster,
        settings: Settings,
        capacity: Mapping[str, RegionCapacity] | None = None,
    ) -> None:
        self.resources = resources
        self.clock = clock
        self.cluster = cluster
        self.settings = settings
        self.metrics = RecordingMetrics(clock)
        self.scale_requests = LocalScaleRequests(clock=clock)
        self.sqs = client("sqs", resources.endpoint)
        dynamodb = client("dynamodb", resources.endpoint)
        self.store = DynamoJobStore(dynamodb, resources.table_name)
        self.fleet: LocalFleet | None = None
        if settings.node_groups:
            groups, _ = parse_groups(settings.node_groups)
            create_groups(resources.endpoint, groups)
            regional: dict[tuple[str, str], Any] = {}

            def regional_client(service: str, region: str) -> Any:
                if (service, region) not in regional:
                    regional[(service, region)] = client(service, resources.endpoint, region=region)
                return regional[(service, region)]

            self.fleet = LocalFleet(
                adapter=AutoScalingFleet(lambda region: regional_client("autoscaling", region)),
                clock=clock,
                cluster=cluster,
                groups=groups,
                capacity=dict(capacity or {}),
            )
        self.services = runtime.Services(
            settings=settings,
            clock=clock,
            store=self.store,
            cluster=cluster,
            metrics=self.metrics,
            scale_requests=self.scale_requests,
            fleet=self.fleet,
            scale_state=DynamoScaleState(dynamodb, resources.table_name),
        )
        self.scale_results: list[dict[str, Any]] = []
        self.deliveries = DeliveryStats()
        # message ids that SQS will hand over twice (at-least-once delivery, on purpose)
        self.deliver_twice: set[str] = set()
        self._queue_arn = self.sqs.get_queue_attributes(
            QueueUrl=resources.jobs_queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self.schedules: list[Schedule] = []
        self.add_schedule(timedelta(minutes=1), self.invoke_reconcile)
        if self.fleet is not None:
            self.add_schedule(timedelta(minutes=1), self.invoke_scale)

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
    ) -> Iterator[LocalRuntime]:
        """Start the embedded endpoint, create the resources, install the services."""
        clock = clock or VirtualClock()
        cluster = cluster or SimulatedCluster(clock=clock)
        # The functions log every job at INFO, as they should in CloudWatch; here the
        # caller shows progress itself. Metrics go to the recording sink instead of EMF.
        from squall.handlers import reconcile, scale, submit  # noqa: F401  (their loggers exist now)

        for name in list(logging.root.manager.loggerDict):
            if name == SERVICE or name.startswith(f"{SERVICE}."):
                logging.getLogger(name).setLevel(log_level)
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        with local_endpoint() as endpoint:
            resources = create_resources(endpoint)
            settings = Settings(
                table_name=resources.table_name,
                jobs_queue_url=resources.jobs_queue_url,
                drain_queue_url=resources.drain_queue_url,
                teams=dict(teams or DEFAULT_TEAMS),
                allowed_registries=list(registries or DEFAULT_REGISTRIES),
                regions=sorted({g["region"] for g in node_groups or []} | {REGION}),
                node_groups=list(node_groups or []),
                policy=policy or PolicySettings(),
            )
            local = cls(resources=resources, clock=clock, cluster=cluster, settings=settings, capacity=capacity)
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
        text = body if isinstance(body, str) else json.dumps(body)
        return str(self.sqs.send_message(QueueUrl=self.resources.jobs_queue_url, MessageBody=text)["MessageId"])

    def deliver(self) -> int:
        """Hand every visible message to the submit handler in batches of up to 10."""
        from squall.handlers import submit

        handled = 0
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=self.resources.jobs_queue_url,
                MaxNumberOfMessages=SQS_BATCH_SIZE,
                AttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if not messages:
                return handled
            event = sqs_event(messages, queue_arn=self._queue_arn, region=REGION)
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
                    sqs_event(twice, queue_arn=self._queue_arn, region=REGION),
                    LocalContext(function_name="squall-submit"),
                )
                self.deliveries.redelivered += len(twice)
            done = [m for m in messages if m["MessageId"] not in failed]
            if done:
                self.sqs.delete_message_batch(
                    QueueUrl=self.resources.jobs_queue_url,
                    Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
                )
            handled += len(messages)

    def dead_letters(self) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=self.resources.dead_letter_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0
        )
        return list(response.get("Messages", []))

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
