"""Drain of a node with 100 pods: Kubernetes API calls per pod and invocations per drain.

A node holds 90 single-pod Squall jobs and one distributed job of 10 workers whose
PodDisruptionBudget keeps 9 of them running (replacements start on a spare node,
so the budget lets one worker go at a time). Squall's drain runs through the real
handlers: the terminate lifecycle event, then drain-queue steps as they come due
on a virtual clock (30 s apart). The baseline, measured on an identical cluster in
the same run, is a naive drain: cordon, then every 5 s list the node's pods and
evict every one still there, until none is left.

Counts come from SimulatedCluster.calls, so they are exact and machine-independent.
The simulator removes an evicted pod at once (no termination grace period), which
flatters the baseline: a real cluster keeps evicted pods for up to 30 s, and a
poller sees (and polls) them all that time.

    python benchmarks/bench_drain.py
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# Quiet, before powertools reads its settings at import: the handlers log every step.
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")
for _key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
    os.environ.setdefault(_key, "testing")
warnings.filterwarnings("ignore", message="No application metrics to publish")

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from squall import runtime  # noqa: E402
from squall.adapters.aws.drain_store import DynamoDrainStore  # noqa: E402
from squall.adapters.aws.job_store import DynamoJobStore  # noqa: E402
from squall.adapters.aws.scale_state import DynamoScaleState  # noqa: E402
from squall.core.drain import DrainOutcome  # noqa: E402
from squall.core.settings import Settings  # noqa: E402
from squall.core.telemetry import RecordingMetrics  # noqa: E402
from squall.handlers import drain as drain_handler  # noqa: E402
from squall.handlers import lifecycle as lifecycle_handler  # noqa: E402
from squall.local.aws import create_table  # noqa: E402
from squall.local.clock import VirtualClock  # noqa: E402
from squall.local.cluster import SimulatedCluster  # noqa: E402
from squall.local.drain_queue import InMemoryDrainQueue  # noqa: E402
from squall.local.lambda_events import LocalContext, eventbridge_event, sqs_event  # noqa: E402
from squall.local.runtime import LocalScaleRequests  # noqa: E402
from squall.planner import Policy  # noqa: E402
from squall.planner.kube import parse_pods  # noqa: E402
from squall.ports import FleetGroup, GroupRef, LifecycleAction, LifecycleResult, ScalingActivity  # noqa: E402
from squall.services.admission import Admitter  # noqa: E402
from squall.services.intake import Intake, IntakeConfig  # noqa: E402
from squall.services.scale import ScaleResult, cordon_patch  # noqa: E402

REGION = "us-west-2"
ASG = "squall-p3-usw2"
INSTANCE = "i-0a1b2c3d4e5f60718"
TEAMS = {"research": "team-research"}
IMAGE = "registry.example.com/squall/tf-trainer:1.0"
NODE = {"cpu": "64", "memory": "488Gi", "nvidia.com/gpu": "8", "pods": "110"}
GROUP = {"name": "p3-usw2", "region": REGION, "asgName": ASG, "instanceType": "p3.16xlarge",
         "allocatable": NODE, "maxSize": 10}
SINGLE_JOBS = 90
GANG_WORKERS = 10
NAIVE_TICK = timedelta(seconds=5)
QUEUE_ARN = f"arn:aws:sqs:{REGION}:123456789012:squall-drain"


@dataclass
class CountingFleet:
    """The lifecycle calls a drain makes; every action waits in Terminating:Wait until completed."""

    calls: list[str] = field(default_factory=list)
    completed: bool = False

    def describe_groups(self, refs: Sequence[GroupRef]) -> list[FleetGroup]:
        return []

    def recent_activities(self, refs: Sequence[GroupRef], *, since: datetime) -> list[ScalingActivity]:
        self.calls.append("recent_activities")
        return []

    def set_desired_capacity(self, *, ref: GroupRef, desired: int) -> None: ...

    def terminate_instance(self, *, region: str, instance_id: str, decrement: bool = True) -> None: ...

    def set_scale_in_protection(self, *, ref: GroupRef, instance_ids: Sequence[str], protected: bool) -> None: ...

    def complete_lifecycle_action(self, action: LifecycleAction, result: LifecycleResult) -> None:
        self.calls.append("complete_lifecycle_action")
        self.completed = True

    def record_lifecycle_heartbeat(self, action: LifecycleAction) -> None:
        self.calls.append("record_lifecycle_heartbeat")


@dataclass
class World:
    clock: VirtualClock
    cluster: SimulatedCluster
    store: DynamoJobStore
    dynamodb: Any
    table: str


def build_world() -> World:
    """A fresh table, a node with 100 pods (10 behind a budget) and a spare node."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    table = f"jobs-{os.urandom(4).hex()}"
    create_table(dynamodb, table)
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock, default_run_for=timedelta(hours=5))
    store = DynamoJobStore(dynamodb, table)
    intake = Intake(
        store=store, cluster=cluster, clock=clock, metrics=RecordingMetrics(clock),
        config=IntakeConfig(teams=TEAMS, registries=[IMAGE.rsplit("/", 1)[0]]),
    )
    labels = {"topology.kubernetes.io/region": REGION}
    cluster.add_node(name="gpu-1", allocatable=NODE, labels=labels, provider_id=f"aws:///{REGION}a/{INSTANCE}")
    small = {"cpu": "100m", "memory": "128Mi", "gpu": 0}
    for i in range(SINGLE_JOBS):
        spec = {"name": "single", "id": f"single-{i}", "team": "research", "image": IMAGE, "resources": small}
        intake.handle(body=json.dumps(spec), message_id=f"m-single-{i}")
    gang = {
        "name": "gang", "id": "gang", "team": "research", "image": IMAGE, "resources": small, "retries": 10,
        "replicas": {"worker": {"count": GANG_WORKERS}},
    }
    intake.handle(body=json.dumps(gang), message_id="m-gang")
    # Jobs are created suspended: admit them, as the scale check's admission does.
    Admitter(cluster=cluster, metrics=RecordingMetrics(clock), teams={}, policy=Policy(), store=store).run(
        now=clock.now(), outcome=ScaleResult(acted=True)
    )
    cluster.advance()
    on_node = [p for p in cluster.list_pods(node_name="gpu-1") if p["status"]["phase"] == "Running"]
    assert len(on_node) == SINGLE_JOBS + GANG_WORKERS, len(on_node)
    cluster.add_pdb("team-research", {"squall.io/job-id": "gang"}, min_available=GANG_WORKERS - 1)
    cluster.add_node(name="gpu-2", allocatable=NODE, labels=labels, provider_id=f"aws:///{REGION}b/i-0bbbbbbbbbbbbbbbb")
    return World(clock=clock, cluster=cluster, store=store, dynamodb=dynamodb, table=table)


@dataclass(frozen=True)
class Measured:
    cluster_calls: int
    invocations: int
    seconds: float
    fleet_calls: int = 0
    heartbeats: int = 0
    outcome: str = ""


def squall_drain(world: World) -> Measured:
    fleet = CountingFleet()
    queue = InMemoryDrainQueue(clock=world.clock)
    table = world.table
    runtime.install(
        runtime.Services(
            settings=Settings(table_name=table, teams=TEAMS, node_groups=[GROUP]),
            clock=world.clock,
            store=world.store,
            cluster=world.cluster,
            metrics=RecordingMetrics(world.clock),
            scale_requests=LocalScaleRequests(clock=world.clock),
            fleet=fleet,
            scale_state=DynamoScaleState(world.dynamodb, table),
            drain_queue=queue,
            drain_store=DynamoDrainStore(world.dynamodb, table),
        )
    )
    context = LocalContext(function_name="squall-bench")
    before = len(world.cluster.calls)
    started = world.clock.now()
    event = eventbridge_event(
        source="aws.autoscaling",
        detail_type="EC2 Instance-terminate Lifecycle Action",
        detail={
            "LifecycleActionToken": "87654321-4321-4321-4321-210987654321",
            "AutoScalingGroupName": ASG,
            "LifecycleHookName": "squall-terminate",
            "EC2InstanceId": INSTANCE,
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        },
        at=started,
        region=REGION,
    )
    answer = lifecycle_handler.handler(event, context)
    invocations = 1
    while not fleet.completed and (due := queue.next_due()) is not None:
        world.clock.advance_to(due)
        world.cluster.advance()
        messages = [
            {"MessageId": m.step_id, "ReceiptHandle": m.step_id, "Body": m.body()} for m in queue.take_due()
        ]
        for start in range(0, len(messages), 10):  # SQS batches of up to 10
            response = drain_handler.handler(sqs_event(messages[start : start + 10], queue_arn=QUEUE_ARN, region=REGION), context)
            assert not response["batchItemFailures"], response
            invocations += 1
    runtime.install(None)
    record = DynamoDrainStore(world.dynamodb, table).get(INSTANCE)
    assert record is not None and record.outcome is DrainOutcome.DRAINED, (answer, record)
    return Measured(
        cluster_calls=len(world.cluster.calls) - before,
        invocations=invocations,
        seconds=(world.clock.now() - started).total_seconds(),
        fleet_calls=len(fleet.calls),
        heartbeats=fleet.calls.count("record_lifecycle_heartbeat"),
        outcome=record.outcome.value,
    )


def naive_drain(world: World) -> Measured:
    """Cordon, then every 5 s: list the node's pods and evict each one still there."""
    cluster = world.cluster
    before = len(cluster.calls)
    started = world.clock.now()
    node = next(n for n in cluster.list_nodes() if n["spec"].get("providerID", "").endswith(INSTANCE))
    cluster.patch_node(node["metadata"]["name"], cordon_patch(started))
    invocations = 0
    while True:
        invocations += 1
        pods = [
            p for p in parse_pods(cluster.list_pods(node_name="gpu-1"))
            if p.is_workload and p.phase not in ("Succeeded", "Failed")
        ]
        if not pods:
            break
        for pod in pods:
            cluster.evict(namespace=pod.namespace, name=pod.name)
        world.clock.advance(NAIVE_TICK)
        cluster.advance()
    return Measured(
        cluster_calls=len(cluster.calls) - before,
        invocations=invocations,
        seconds=(world.clock.now() - started).total_seconds(),
    )


def main() -> dict[str, float]:
    pods = SINGLE_JOBS + GANG_WORKERS
    with mock_aws():
        ours = squall_drain(build_world())
        naive = naive_drain(build_world())
    calls_ratio = (naive.cluster_calls / pods) / (ours.cluster_calls / pods)
    invocations_ratio = naive.invocations / ours.invocations
    print(f"node with {pods} pods ({GANG_WORKERS} behind a PodDisruptionBudget allowing one disruption)")
    print(
        f"squall drain: {ours.cluster_calls} Kubernetes calls ({ours.cluster_calls / pods:.2f}/pod), "
        f"{ours.invocations} invocations, {ours.fleet_calls} Auto Scaling calls "
        f"({ours.heartbeats} heartbeats), drained in {ours.seconds:.0f} s ({ours.outcome})"
    )
    print(
        f"naive 5 s poll: {naive.cluster_calls} Kubernetes calls ({naive.cluster_calls / pods:.2f}/pod), "
        f"{naive.invocations} polls, drained in {naive.seconds:.0f} s"
    )
    print(f"ratio naive/squall: Kubernetes calls per pod = {calls_ratio:.2f}x, invocations = {invocations_ratio:.2f}x")
    print(f"ratio squall/naive: drain time = {ours.seconds / naive.seconds:.2f}x (bounded by the 30 min deadline)")
    return {"calls": calls_ratio, "invocations": invocations_ratio}


if __name__ == "__main__":
    main()
