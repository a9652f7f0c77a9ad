"""Lifecycle hooks and drains over two clusters: a group's instances are answered from its own cluster.

Cluster "a" owns a group in us-west-2, cluster "b" one in us-east-1; each is a simulated
cluster with its own API, nodes and pods, and both have a node called gpu-1 (node names
are a cluster's own). The drain queue and the stores are the in-memory ones, on one
virtual clock, so a drain of many steps replays in milliseconds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from squall.conventions import CORDONED_AT_ANNOTATION
from squall.core.asg_events import parse_lifecycle_event
from squall.core.drain import DrainOutcome, DrainPolicy, DrainRecord
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.drain_queue import InMemoryDrainQueue
from squall.local.memory import InMemoryDrainStore, InMemoryJobStore, InMemoryScaleState
from squall.planner import Policy
from squall.planner.model import NodeGroup, Resources
from squall.ports import GroupRef
from squall.services.lifecycle_hooks import Handled, LifecycleConfig, LifecycleService
from tests.conftest import load_event
from tests.fakes.fleet import FakeFleet

WEST, EAST = "us-west-2", "us-east-1"
P3 = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}
GROUPS = (
    NodeGroup(
        name="p3-a",
        region=WEST,
        asg_name="squall-a",
        instance_type="p3.8xlarge",
        allocatable=Resources(cpu=32_000, memory=244 << 30, gpu=4, pods=58),
        max_size=10,
        cluster="a",
    ),
    NodeGroup(
        name="p3-b",
        region=EAST,
        asg_name="squall-b",
        instance_type="p3.8xlarge",
        allocatable=Resources(cpu=32_000, memory=244 << 30, gpu=4, pods=58),
        max_size=10,
        cluster="b",
    ),
)
REF_A, REF_B = GroupRef(name="squall-a", region=WEST), GroupRef(name="squall-b", region=EAST)
IN_A, IN_B = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb1"  # the instances under each cluster's gpu-1
LAUNCHED_B = "i-0bbbbbbbbbbbbbbb2"
POLICY = DrainPolicy()


@dataclass
class TwoClusters:
    clock: VirtualClock
    clusters: dict[str, SimulatedCluster]
    fleet: FakeFleet
    queue: InMemoryDrainQueue
    drains: InMemoryDrainStore

    def lifecycle(self) -> LifecycleService:
        """A fresh service, as each invocation gets one."""
        return LifecycleService(
            drains=self.drains,
            queue=self.queue,
            clusters=self.clusters,
            fleet=self.fleet,
            jobs=InMemoryJobStore(),
            scale_state=InMemoryScaleState(),
            clock=self.clock,
            metrics=RecordingMetrics(self.clock),
            config=LifecycleConfig(
                groups=GROUPS,
                launch_hook_name="squall-launch",
                terminate_hook_name="squall-terminate",
                policy=POLICY,
                planner_policy=Policy(),
            ),
        )

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def node(self, cluster: str, instance_id: str, *, name: str = "gpu-1", gpus_ready: bool = True) -> None:
        region = WEST if cluster == "a" else EAST
        self.clusters[cluster].add_node(
            name=name,
            allocatable=P3,
            labels={"topology.kubernetes.io/region": region},
            provider_id=f"aws:///{region}a/{instance_id}",
            gpus_ready=gpus_ready,
        )

    def running_job(self, cluster: str, job_id: str) -> None:
        """One pod of a Squall job running on the cluster's node."""
        labels = {"app.kubernetes.io/managed-by": "squall", "squall.io/job-id": job_id}
        self.clusters[cluster].create(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"{job_id}-worker-0", "namespace": "team-research", "labels": labels},
                "spec": {
                    "backoffLimit": 2,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "registry.example.com/squall/t:1",
                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                                }
                            ],
                        },
                    },
                },
            }
        )
        self.clusters[cluster].set_behaviour(job_id, run_for=timedelta(hours=5))
        self.advance(timedelta(seconds=10))

    def advance(self, by: timedelta) -> None:
        self.clock.advance(by)
        for cluster in self.clusters.values():
            cluster.advance()

    def event(self, name: str, instance_id: str, *, ref: GroupRef) -> dict[str, Any]:
        """A recorded lifecycle event for this instance of this group, now."""
        event = copy.deepcopy(load_event(name))
        event["time"] = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        event["region"] = ref.region
        event["detail"].update(EC2InstanceId=instance_id, AutoScalingGroupName=ref.name)
        return event

    def on_event(self, name: str, instance_id: str, *, ref: GroupRef) -> Handled:
        return self.lifecycle().on_lifecycle_event(
            parse_lifecycle_event(self.event(name, instance_id, ref=ref))
        )

    def run(self, *, until: datetime | None = None, limit: int = 500) -> int:
        """Deliver step messages as they come due (moving the clock) until none is left; the steps run."""
        steps = 0
        while (due := self.queue.next_due()) is not None and steps < limit:
            if until is not None and due > until:
                break
            self.advance(max(due - self.now, timedelta(0)))
            for message in self.queue.take_due():
                self.lifecycle().step(message)
                steps += 1
        return steps

    def record(self, instance_id: str) -> DrainRecord:
        found = self.drains.get(instance_id)
        assert found is not None
        return found

    def calls(self, cluster: str) -> list[str]:
        return [c.method for c in self.clusters[cluster].calls]


@pytest.fixture
def two() -> TwoClusters:
    clock = VirtualClock()
    clusters = {name: SimulatedCluster(clock=clock, name=name) for name in ("a", "b")}
    fleet = FakeFleet()
    fleet.add_group(REF_A.name, WEST, desired=1)
    fleet.add_group(REF_B.name, EAST, desired=1)
    world = TwoClusters(clock, clusters, fleet, InMemoryDrainQueue(clock=clock), InMemoryDrainStore())
    # both clusters have a gpu-1, each running a job
    world.node("a", IN_A)
    world.node("b", IN_B)
    world.running_job("a", "job-a")
    world.running_job("b", "job-b")
    fleet.add_instance(REF_A, IN_A)
    fleet.add_instance(REF_B, IN_B, lifecycle_state="Terminating:Wait")
    return world


def _pods_on_gpu1(cluster: SimulatedCluster) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in cluster.list_pods(node_name="gpu-1")
        if p["status"].get("phase") in ("Pending", "Running")
    ]


def test_a_terminate_hook_of_a_group_in_cluster_b_drains_bs_node_and_never_touches_a(
    two: TwoClusters,
) -> None:
    # given gpu-1 of both clusters running a job, and b's instance waiting on the terminate hook
    assert _pods_on_gpu1(two.clusters["a"]) and _pods_on_gpu1(two.clusters["b"])
    a_calls = len(two.calls("a"))
    # when the hook's event comes, and its steps run
    two.on_event("lifecycle_terminate", IN_B, ref=REF_B)
    two.run()
    # then b's gpu-1 was cordoned and drained, and the instance may go
    record = two.record(IN_B)
    assert (record.outcome, record.result, record.node_name) == (DrainOutcome.DRAINED, "CONTINUE", "gpu-1")
    b_node = two.clusters["b"].get_node("gpu-1")
    assert b_node is not None and b_node["spec"]["unschedulable"] is True
    assert CORDONED_AT_ANNOTATION in b_node["metadata"]["annotations"]
    assert "evict" in two.calls("b") and not _pods_on_gpu1(two.clusters["b"])
    assert two.fleet.instance(IN_B).lifecycle_state == "Terminating:Proceed"
    # and a, whose node has the same name, was never asked anything: its job runs on
    assert two.calls("a")[a_calls:] == []
    a_node = two.clusters["a"].get_node("gpu-1")
    assert a_node is not None and not a_node["spec"].get("unschedulable")
    assert _pods_on_gpu1(two.clusters["a"])


def test_an_unreachable_cluster_mid_drain_is_waited_on_not_answered_for(two: TwoClusters) -> None:
    # given b's API down for 10 minutes from the moment its instance's terminate hook fires
    outage_ends = two.now + timedelta(minutes=10)
    two.clusters["b"].outage(until=outage_ends)
    a_calls = len(two.calls("a"))
    # when the event comes and the steps run through the outage
    first = two.on_event("lifecycle_terminate", IN_B, ref=REF_B)
    assert first.record is not None and first.record.done is False
    two.run(until=outage_ends - timedelta(seconds=1))
    # then the hook is kept alive, never completed while b cannot be seen
    record = two.record(IN_B)
    assert not record.done and record.attempts > 1 and "could not observe the node" in record.detail
    assert two.fleet.calls_to("complete_lifecycle_action") == []
    assert len(two.fleet.calls_to("record_lifecycle_heartbeat")) >= 1  # 10 minutes > the 5-minute heartbeat
    assert two.fleet.instance(IN_B).lifecycle_state == "Terminating:Wait"
    assert two.queue.next_due() is not None  # the next step is on its way
    # when b answers again
    two.run()
    # then the drain finishes as a drain, not as a deadline: the node cordoned, its pod evicted
    record = two.record(IN_B)
    assert (record.outcome, record.result) == (DrainOutcome.DRAINED, "CONTINUE")
    assert record.finished_at is not None and record.finished_at >= outage_ends
    assert not _pods_on_gpu1(two.clusters["b"])
    # and a was never asked to stand in for b
    assert two.calls("a")[a_calls:] == []


def test_a_cluster_down_past_the_drain_deadline_is_answered_only_at_the_deadline(two: TwoClusters) -> None:
    two.clusters["b"].outage(until=two.now + timedelta(hours=2))
    started = two.now
    two.on_event("lifecycle_terminate", IN_B, ref=REF_B)
    two.run()
    record = two.record(IN_B)
    assert (record.outcome, record.result) == (DrainOutcome.PAST_DEADLINE, "CONTINUE")
    assert record.finished_at is not None and record.finished_at >= started + POLICY.deadline
    assert len(two.fleet.calls_to("complete_lifecycle_action")) == 1


def test_a_launch_in_cluster_b_waits_through_bs_outage_for_its_node_there(two: TwoClusters) -> None:
    # given a launching instance of b's group, and b's API down for 3 minutes
    two.fleet.add_instance(REF_B, LAUNCHED_B, lifecycle_state="Pending:Wait")
    outage_ends = two.now + timedelta(minutes=3)
    two.clusters["b"].outage(until=outage_ends)
    # and a node in a (not b) that claims the instance: a is not where b's instances join
    two.node("a", LAUNCHED_B, name="impostor")
    two.on_event("lifecycle_launch", LAUNCHED_B, ref=REF_B)
    two.run(until=outage_ends - timedelta(seconds=1))
    assert not two.record(LAUNCHED_B).done
    assert two.fleet.instance(LAUNCHED_B).lifecycle_state == "Pending:Wait"
    # when b answers again and the node joins b, ready with its GPUs
    two.advance(outage_ends - two.now)
    two.node("b", LAUNCHED_B, name="gpu-2")
    two.run()
    # then the launch is continued on b's node
    record = two.record(LAUNCHED_B)
    assert (record.outcome, record.result, record.node_name) == (DrainOutcome.READY, "CONTINUE", "gpu-2")
    assert two.fleet.instance(LAUNCHED_B).lifecycle_state == "Pending:Proceed"
