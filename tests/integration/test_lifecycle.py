"""The lifecycle service and its handlers against moto DynamoDB, the simulated cluster and FakeFleet.

Time only moves on the virtual clock; the drain queue is the in-memory one, whose
messages come due on that clock, so a 30-minute drain replays in milliseconds.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest

from squall import runtime
from squall.adapters.aws.drain_queue import SqsDrainQueue, delay_seconds
from squall.adapters.aws.drain_store import DynamoDrainStore
from squall.adapters.aws.scale_state import DynamoScaleState
from squall.conventions import CORDONED_AT_ANNOTATION, TERMINATION_REASON_ANNOTATION
from squall.core.asg_events import DrainStepMessage, parse_lifecycle_event
from squall.core.drain import DrainOutcome, DrainRecord
from squall.core.errors import PermanentError, RetryableError
from squall.core.jobs import JobStatus
from squall.core.settings import Settings
from squall.handlers import drain as drain_handler
from squall.handlers import lifecycle as lifecycle_handler
from squall.local.drain_queue import InMemoryDrainQueue
from squall.local.lambda_events import sqs_event
from squall.local.runtime import LocalScaleRequests
from squall.ports import GroupRef, ScalingActivity
from squall.services.lifecycle_hooks import Handled, LifecycleService, StepMessageEarly
from tests.conftest import load_event
from tests.fakes.fleet import FakeFleet
from tests.integration.conftest import GPU_NODE, IMAGE, REGISTRIES, TEAMS, World

ASG = "squall-p3-usw2"
REGION = "us-west-2"
GROUP = {
    "name": "p3-usw2",
    "region": REGION,
    "asgName": ASG,
    "instanceType": "p3.8xlarge",
    "allocatable": dict(GPU_NODE, **{"nvidia.com/gpu": 4}),
    "maxSize": 10,
}
INSTANCE = "i-0a1b2c3d4e5f60718"  # the recorded terminate event's instance
LAUNCHED = "i-0f9e8d7c6b5a40312"  # the recorded launch event's instance
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
STEP = timedelta(seconds=30)
REF = GroupRef(name=ASG, region=REGION)


@dataclass
class Harness:
    world: World
    fleet: FakeFleet
    queue: InMemoryDrainQueue
    drains: DynamoDrainStore
    state: DynamoScaleState
    services: runtime.Services
    ref: GroupRef = REF
    # when each heartbeat was recorded, as the delivery loop saw it
    heartbeat_times: list[datetime] = field(default_factory=list)

    @property
    def lifecycle(self) -> LifecycleService:
        """A fresh service, as each invocation gets one."""
        return self.services.lifecycle

    @property
    def now(self) -> datetime:
        return self.world.clock.now()

    def node(self, instance_id: str, name: str, *, gpus_ready: bool = True, ready: bool = True) -> None:
        self.world.cluster.add_node(
            name=name,
            allocatable=GROUP["allocatable"],  # type: ignore[arg-type]
            labels={"topology.kubernetes.io/region": REGION},
            taints=GPU_TAINT,
            provider_id=f"aws:///{REGION}a/{instance_id}",
            ready=ready,
            gpus_ready=gpus_ready,
        )

    def submit(self, job_id: str, *, gpus: int = 1, retries: int = 2) -> None:
        body = {
            "name": "train", "id": job_id, "team": "research", "image": IMAGE,
            "resources": {"cpu": "1", "memory": "1Gi", "gpu": gpus}, "retries": retries,
        }
        self.world.new_intake().handle(body=json.dumps(body), message_id=f"m-{job_id}")
        self.world.cluster.set_behaviour(job_id, run_for=timedelta(hours=5))

    def settle(self) -> None:
        """Admit what fits, let pods bind and start, and reconcile once."""
        self.world.admit()
        self.world.clock.advance(timedelta(seconds=10))
        self.world.cluster.advance()
        self.world.reconciler.run()

    def event(
        self,
        name: str,
        instance_id: str,
        *,
        token: str | None = None,
        at: datetime | None = None,
        **detail: Any,
    ) -> dict[str, Any]:
        """A recorded lifecycle event, for this instance at this time."""
        event = copy.deepcopy(load_event(name))
        event["time"] = (at or self.now).strftime("%Y-%m-%dT%H:%M:%SZ")
        event["detail"]["EC2InstanceId"] = instance_id
        if token is not None:
            event["detail"]["LifecycleActionToken"] = token
        event["detail"].update(detail)
        return event

    def busy_node_terminating(self) -> None:
        """Job job-a's pod running on gpu-1, and gpu-1's instance terminating."""
        self.node(INSTANCE, "gpu-1")
        self.submit("job-a")
        self.settle()
        self.terminating(INSTANCE)

    def drain_under_way(self) -> Handled:
        """busy_node_terminating, and the lifecycle function's first answer to its terminate hook."""
        self.busy_node_terminating()
        return self.on_event(self.event("lifecycle_terminate", INSTANCE))

    def protected_pod_terminating(self) -> None:
        """Job job-a's pod on gpu-1, kept by a PDB, and gpu-1's instance terminating."""
        self.busy_node_terminating()
        self.world.cluster.add_pdb("team-research", {"squall.io/job-id": "job-a"}, min_available=1)

    def terminating(self, instance_id: str) -> None:
        self.fleet.add_instance(self.ref, instance_id, lifecycle_state="Terminating:Wait")

    def on_event(self, event: dict[str, Any]) -> Handled:
        return self.lifecycle.on_lifecycle_event(parse_lifecycle_event(event))

    def deliver(self) -> list[Handled]:
        """Run every step message that is due now, through the service."""
        handled = []
        for message in self.queue.take_due():
            before = len(self.fleet.calls_to("record_lifecycle_heartbeat"))
            handled.append(self.lifecycle.step(message))
            if len(self.fleet.calls_to("record_lifecycle_heartbeat")) > before:
                self.heartbeat_times.append(self.now)
        return handled

    def run(self, *, until: datetime | None = None, limit: int = 500) -> int:
        """Deliver step messages as they come due (moving the clock) until none is left; returns the steps run."""
        steps = 0
        while (due := self.queue.next_due()) is not None and steps < limit:
            if until is not None and due > until:
                break
            self.world.clock.advance_to(due)
            self.world.cluster.advance()
            steps += len(self.deliver())
        return steps

    def record(self, instance_id: str = INSTANCE) -> DrainRecord:
        found = self.drains.get(instance_id)
        assert found is not None
        return found

    def reasons(self, job_id: str) -> list[str]:
        return [e.reason for e in self.world.store.events(job_id)]


@pytest.fixture
def harness(world: World) -> Iterator[Harness]:
    dynamodb = boto3.client("dynamodb", region_name=REGION)  # the same moto backend as the world's store
    fleet = FakeFleet()
    fleet.add_group(ASG, REGION, desired=2, max_size=10)
    queue = InMemoryDrainQueue(clock=world.clock)
    drains = DynamoDrainStore(dynamodb, "jobs")
    state = DynamoScaleState(dynamodb, "jobs")
    services = runtime.Services(
        settings=Settings(table_name="jobs", teams=TEAMS, allowed_registries=REGISTRIES, node_groups=[GROUP]),
        clock=world.clock,
        store=world.store,
        clusters={"local": world.cluster},
        metrics=world.metrics,
        scale_requests=LocalScaleRequests(clock=world.clock),
        fleet=fleet,
        scale_state=state,
        drain_queue=queue,
        drain_store=drains,
    )
    runtime.install(services)
    yield Harness(world, fleet, queue, drains, state, services)
    runtime.install(None)


def evictions(world: World) -> list[str]:
    return [f"{c.args['namespace']}/{c.args['name']}" for c in world.cluster.calls if c.method == "evict"]


# ---- terminate ---------------------------------------------------------------------------


def test_a_terminating_node_is_drained_its_jobs_told_and_the_action_continued(
    harness: Harness, lambda_context: Any
) -> None:
    # given a node running two Squall jobs, its instance waiting on Squall's terminate hook
    world = harness.world
    harness.node(INSTANCE, "gpu-1")
    harness.submit("job-a")
    harness.submit("job-b")
    harness.settle()
    assert {p["spec"].get("nodeName") for p in world.cluster.list_pods()} == {"gpu-1"}
    harness.terminating(INSTANCE)
    # when Auto Scaling's event reaches the lifecycle handler
    answer = lifecycle_handler.handler(harness.event("lifecycle_terminate", INSTANCE), lambda_context)
    # then the node is cordoned with Squall's marker and both pods are evicted at once
    node = world.cluster.get_node("gpu-1")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert CORDONED_AT_ANNOTATION in node["metadata"]["annotations"]
    assert sorted(evictions(world)) == sorted(p for p in harness.record().pods_left)
    assert len(evictions(world)) == 2
    # and each job says why it is losing its pod
    assert "NodeLost:terminate" in harness.reasons("job-a")
    assert "NodeLost:terminate" in harness.reasons("job-b")
    # and the drain continues through the queue rather than waiting in the function
    assert answer["outcome"] == "new" and answer["done"] is False
    assert [q.due_at for q in harness.queue.sent] == [harness.now + STEP]
    # when the next step comes due
    assert harness.run() == 1
    # then the pods are gone and the instance may terminate
    record = harness.record()
    assert record.outcome is DrainOutcome.DRAINED and record.result == "CONTINUE"
    assert harness.fleet.instance(INSTANCE).lifecycle_state == "Terminating:Proceed"
    assert world.metrics.total("DrainsStarted") == 1 and world.metrics.total("DrainsCompleted") == 1
    assert world.metrics.total("HooksCompleted") == 1 and world.metrics.total("DrainSeconds") == 30
    assert world.metrics.total("DrainsPastDeadline") == 0
    # and the reconcile function re-runs the jobs, which wait for capacity again
    world.clock.advance(timedelta(minutes=1))
    world.cluster.advance()
    world.reconciler.run()
    job = world.store.get("job-a")
    assert job is not None and job.status is JobStatus.QUEUED and job.reason == "NodeLost:retry 1/2"


def test_an_empty_node_the_scaler_cordoned_is_answered_in_the_same_invocation(harness: Harness) -> None:
    # given a node the scale function emptied, cordoned and marked before terminating it
    harness.node(INSTANCE, "gpu-1")
    harness.world.cluster.patch_node(
        "gpu-1",
        {"spec": {"unschedulable": True}, "metadata": {"annotations": {TERMINATION_REASON_ANNOTATION: "scale-in"}}},
    )
    harness.terminating(INSTANCE)
    calls_before = len(harness.world.cluster.calls)
    # when
    handled = harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    # then no step message is needed: one invocation, two Kubernetes calls, no eviction
    assert handled.record is not None and handled.record.outcome is DrainOutcome.DRAINED
    assert handled.record.cause == "scale-in"
    assert harness.queue.sent == []
    assert [c.method for c in harness.world.cluster.calls[calls_before:]] == ["list_nodes", "list_pods"]
    assert harness.fleet.calls_to("recent_activities") == []  # the annotation said why
    assert harness.fleet.instance(INSTANCE).lifecycle_state == "Terminating:Proceed"


def test_a_spot_reclaimed_schedulable_node_is_cordoned_and_its_cause_found_in_the_scaling_activity(
    harness: Harness,
) -> None:
    # given an idle node nobody cordoned, and Auto Scaling's activity for its termination
    harness.busy_node_terminating()
    harness.fleet.add_activities(
        [
            ScalingActivity(
                activity_id="a-1", group=ASG, region=REGION, status_code="InProgress", status_message="",
                description=f"Terminating EC2 instance: {INSTANCE}",
                start_time=harness.now, end_time=None,
                cause=f"At {harness.now:%Y-%m-%dT%H:%M:%SZ} an instance was taken out of service in response "
                "to a spot instance interruption.",
            )
        ]
    )
    # when
    handled = harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    # then the cause is Auto Scaling's, in a word, on the record and on the job
    assert handled.record is not None and handled.record.cause == "spot-reclaim"
    assert "NodeLost:spot-reclaim" in harness.reasons("job-a")
    # and the pods were listed only after the cordon
    methods = [c.method for c in harness.world.cluster.calls if c.method in ("patch_node", "list_pods", "evict")]
    assert methods[-3:] == ["patch_node", "list_pods", "evict"]


def test_an_instance_that_never_joined_is_continued_at_once(harness: Harness) -> None:
    harness.terminating(INSTANCE)
    handled = harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    assert handled.record is not None and handled.record.outcome is DrainOutcome.NO_NODE
    assert "never joined" in handled.record.detail
    assert harness.fleet.instance(INSTANCE).lifecycle_state == "Terminating:Proceed"
    assert harness.queue.sent == []


def test_events_of_other_hooks_and_other_groups_are_ignored(harness: Harness) -> None:
    harness.terminating(INSTANCE)
    other_hook = harness.on_event(harness.event("lifecycle_terminate", INSTANCE, LifecycleHookName="someone-elses"))
    other_group = harness.on_event(harness.event("lifecycle_terminate", INSTANCE, AutoScalingGroupName="web-asg"))
    other_region = harness.lifecycle.on_lifecycle_event(
        parse_lifecycle_event(dict(harness.event("lifecycle_terminate", INSTANCE), region="eu-west-1"))
    )
    assert (other_hook.outcome, other_group.outcome, other_region.outcome) == (
        "ignored-hook", "ignored-group", "ignored-group",
    )
    assert harness.drains.get(INSTANCE) is None
    assert harness.fleet.calls == [] and harness.world.cluster.calls == []


def test_an_invalid_event_is_reported_not_raised(harness: Harness, lambda_context: Any) -> None:
    event = harness.event("lifecycle_terminate", INSTANCE)
    event["detail"]["EC2InstanceId"] = "not-an-instance"
    answer = lifecycle_handler.handler(event, lambda_context)
    assert answer["outcome"] == "invalid" and answer["error"].startswith("detail.EC2InstanceId:")


def test_a_duplicated_event_does_not_run_the_drain_twice(harness: Harness) -> None:
    # given a drain under way for a pod that takes a while to evict
    harness.protected_pod_terminating()
    event = harness.event("lifecycle_terminate", INSTANCE)
    harness.on_event(event)
    # when EventBridge delivers the same event again, now and after a step
    again = harness.on_event(event)
    harness.run(until=harness.now + STEP)
    later = harness.on_event(event)
    # then it changes nothing: one chain of steps, one note on the job
    assert again.outcome == "duplicate" and later.outcome == "duplicate"
    assert len(harness.queue.waiting) == 1
    assert harness.reasons("job-a").count("NodeLost:terminate") == 1


def test_a_late_launch_event_is_ignored_and_a_terminate_replaces_a_launch_wait(harness: Harness) -> None:
    # given an instance whose launch Squall awaits (no node yet)
    harness.fleet.add_instance(harness.ref, LAUNCHED, lifecycle_state="Pending:Wait")
    launch = harness.event("lifecycle_launch", LAUNCHED)
    harness.on_event(launch)
    launch_step = harness.queue.waiting[0].message
    # when it is terminated during the wait (spot reclaimed before it joined)
    harness.world.clock.advance(timedelta(seconds=10))
    harness.fleet.set_lifecycle_state(LAUNCHED, "Terminating:Wait")
    replaced = harness.on_event(harness.event("lifecycle_terminate", LAUNCHED))
    # then the terminate takes over and is answered at once (no node)
    assert replaced.outcome == "replace" and replaced.record is not None
    assert replaced.record.outcome is DrainOutcome.NO_NODE
    assert harness.fleet.instance(LAUNCHED).lifecycle_state == "Terminating:Proceed"
    # and the launch's pending step finds a record that no longer waits for it
    assert harness.lifecycle.step(launch_step).outcome == "finished"
    # and the launch event delivered late, or again, changes nothing
    assert harness.on_event(launch).outcome == "stale"
    assert len(harness.fleet.calls_to("complete_lifecycle_action")) == 1


def test_an_action_completed_by_someone_else_is_finished_quietly(harness: Harness) -> None:
    # given a drain waiting on a PDB-protected pod
    harness.protected_pod_terminating()
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    # when an operator completes the action by hand (the token is no longer valid)
    harness.fleet.set_lifecycle_state(INSTANCE, "Terminating:Proceed")
    harness.run()
    # then the first heartbeat learns it, and the drain ends without errors or further steps
    record = harness.record()
    assert record.outcome is DrainOutcome.ACTION_GONE and record.done and record.result is None
    assert harness.queue.waiting == []
    assert harness.fleet.calls_to("complete_lifecycle_action") == []
    assert harness.world.metrics.total("HooksCompleted") == 0


def test_a_second_completion_of_a_finished_drain_is_taken_as_done(harness: Harness) -> None:
    # given the instance's action completed already (e.g. by a step that died before saving)
    harness.node(INSTANCE, "gpu-1")
    harness.world.cluster.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    harness.fleet.add_instance(harness.ref, INSTANCE, lifecycle_state="Terminating:Proceed")
    # when the drain completes it
    handled = harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    # then the record keeps how it ended, and says the action was completed already
    assert handled.record is not None and handled.record.outcome is DrainOutcome.DRAINED
    assert "already completed" in handled.record.detail
    assert harness.world.metrics.total("HooksCompleted") == 0


def test_eviction_blocked_by_a_pdb_past_the_deadline_completes_with_heartbeats_and_reports(
    harness: Harness,
) -> None:
    # given a pod whose PodDisruptionBudget never allows its eviction
    world = harness.world
    harness.protected_pod_terminating()
    started = harness.now
    # when the drain runs its course
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    steps = harness.run()
    # then it retried the eviction at every step (429 is "later", not "never") ...
    record = harness.record()
    assert steps == 60 and record.attempts == 61
    assert len(evictions(world)) == 60 and record.refused == 60
    # ... kept the 300 s hook alive with a heartbeat whenever less was left than the next
    # step needs should its invocation die (30 s step + 30 s slack + 90 s redelivery) ...
    gaps = [b - a for a, b in zip([started, *harness.heartbeat_times], harness.heartbeat_times, strict=False)]
    assert len(harness.heartbeat_times) == record.heartbeats >= 8
    assert all(timedelta(seconds=150) < gap <= timedelta(seconds=180) for gap in gaps)
    # ... and at the deadline completed anyway with CONTINUE, naming the pod left
    assert harness.now == started + timedelta(minutes=30)
    assert record.outcome is DrainOutcome.PAST_DEADLINE and record.result == "CONTINUE"
    assert record.pods_left_count == 1 and record.pods_left[0].startswith("team-research/job-a")
    assert record.pods_left[0] in record.detail
    assert harness.fleet.instance(INSTANCE).lifecycle_state == "Terminating:Proceed"
    assert world.metrics.total("DrainsPastDeadline") == 1
    # and no pod was ever deleted directly
    assert not any(c.method == "delete_job_objects" for c in world.cluster.calls)


def test_a_failed_heartbeat_is_tried_again_at_the_next_step(harness: Harness) -> None:
    # given a drain held up by a budget, 150 s into a 300 s hook (a heartbeat is due once
    # less is left than a step, its slack and a dying step's redelivery: 150 s)
    harness.protected_pod_terminating()
    started = harness.now
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    harness.run(until=started + timedelta(seconds=150))
    assert harness.record().heartbeats == 0
    # when the heartbeat due at 180 s is throttled
    harness.fleet.next_error = RetryableError("Rate exceeded")
    harness.run(until=started + timedelta(seconds=180))
    # then the record does not pretend the hook was extended ...
    record = harness.record()
    assert record.heartbeats == 0 and record.hook_expires_at == started + timedelta(seconds=300)
    # ... and the next step, still inside the hook's timeout, records it
    harness.run(until=started + timedelta(seconds=210))
    assert harness.record().heartbeats == 1
    assert len(harness.fleet.calls_to("record_lifecycle_heartbeat")) == 2


def test_a_pdb_lets_pods_go_one_at_a_time(harness: Harness) -> None:
    # given three pods of jobs sharing a budget that keeps two of them running, and room elsewhere
    world = harness.world
    harness.node(INSTANCE, "gpu-1")
    for job_id in ("job-a", "job-b", "job-c"):
        harness.submit(job_id)
    harness.settle()
    harness.node("i-0bbbbbbbbbbbbbbbb", "gpu-2")
    world.cluster.add_pdb("team-research", {"app.kubernetes.io/managed-by": "squall"}, min_available=2)
    harness.terminating(INSTANCE)
    # when
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    harness.run()
    # then one pod went per step, as replacements started elsewhere; the refused ones were
    # tried again on later steps, and every pod left before the deadline
    record = harness.record()
    assert record.outcome is DrainOutcome.DRAINED and record.evicted == 3 and record.refused == 3
    assert record.attempts == 4
    assert world.metrics.total("DrainsPastDeadline") == 0


def test_a_node_deleted_mid_drain_completes_the_action(harness: Harness) -> None:
    harness.protected_pod_terminating()
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    # when the node goes away between steps
    harness.world.cluster.remove_node("gpu-1")
    harness.run()
    record = harness.record()
    assert record.outcome is DrainOutcome.NODE_DELETED and record.result == "CONTINUE"
    assert harness.fleet.instance(INSTANCE).lifecycle_state == "Terminating:Proceed"


class _DiesOnSave:
    """The drain store of a function that dies right before its save lands."""

    def __init__(self, inner: DynamoDrainStore) -> None:
        self.inner = inner
        self.armed = False

    def get(self, instance_id: str) -> DrainRecord | None:
        return self.inner.get(instance_id)

    def create(self, record: DrainRecord) -> None:
        self.inner.create(record)

    def save(self, record: DrainRecord) -> None:
        if self.armed:
            self.armed = False
            raise RuntimeError("Lambda timed out")
        self.inner.save(record)


def test_a_step_that_dies_before_saving_is_resumed_from_dynamodb(harness: Harness) -> None:
    # given a drain whose next step will complete it
    harness.drain_under_way()
    dying = _DiesOnSave(harness.drains)
    harness.services.drain_store = dying
    # when the step completes the action, then the function dies before saving
    harness.world.clock.advance(STEP)
    message = harness.queue.take_due()[0]
    dying.armed = True
    with pytest.raises(RuntimeError):
        harness.lifecycle.step(message)
    assert not harness.record().done
    # then SQS delivers the same message again and the step is retaken from the stored record
    retaken = harness.lifecycle.step(message)
    assert retaken.outcome == "step" and retaken.record is not None and retaken.record.done
    # and Auto Scaling's "no active lifecycle action" for the second completion means done
    assert harness.record().outcome is DrainOutcome.DRAINED
    assert len(harness.fleet.calls_to("complete_lifecycle_action")) == 2
    assert harness.world.metrics.total("HooksCompleted") == 1


def test_a_lifecycle_function_that_dies_after_creating_the_record_is_resumed_by_the_retried_event(
    harness: Harness,
) -> None:
    # given a drain that needs more steps (a pod its budget keeps for now)
    harness.protected_pod_terminating()
    dying = _DiesOnSave(harness.drains)
    harness.services.drain_store = dying
    event = harness.event("lifecycle_terminate", INSTANCE)
    # when the first invocation dies after its step sent the next message, before saving
    dying.armed = True
    with pytest.raises(RuntimeError):
        harness.on_event(event)
    (orphan,) = [q.message for q in harness.queue.waiting]
    # then Lambda's retry of the event takes the first step again
    assert harness.on_event(event).outcome == "resume"
    # and when both steps come due, the message the dead invocation sent is dropped
    harness.world.clock.advance(STEP)
    outcomes = {m.step_id: harness.lifecycle.step(m).outcome for m in harness.queue.take_due()}
    assert outcomes.pop(orphan.step_id) == "stale" and list(outcomes.values()) == ["step"]
    # so the drain goes on as one chain of steps
    assert len(harness.queue.waiting) == 1
    harness.world.cluster.delete_job_objects(namespace="team-research", job_id="job-a")
    harness.run()
    assert harness.record().outcome is DrainOutcome.DRAINED
    assert harness.reasons("job-a").count("NodeLost:terminate") == 1


def test_a_message_ahead_of_its_record_is_retried_later(harness: Harness) -> None:
    harness.protected_pod_terminating()
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    version = harness.record().version
    with pytest.raises(StepMessageEarly):
        harness.lifecycle.step(DrainStepMessage(instance_id=INSTANCE, step_id="future", version=version + 1))


def test_kubernetes_api_errors_delay_the_drain_but_never_stop_it(harness: Harness) -> None:
    # given a node with a pod, and an API server answering 503 to the first observation
    world = harness.world
    harness.busy_node_terminating()
    world.cluster.fail_calls("list_nodes", RetryableError("503 Service Unavailable"))
    # when
    first = harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    # then the step says why and tries again later
    assert first.record is not None and not first.record.done and "503" in first.record.detail
    # and an eviction that fails with a 5xx is tried again on the next step
    world.cluster.fail_calls("evict", RetryableError("500 Internal Server Error"))
    harness.run()
    record = harness.record()
    assert record.outcome is DrainOutcome.DRAINED
    assert len(evictions(world)) == 2 and record.evicted == 1


def test_an_api_that_stays_down_past_the_deadline_still_gets_the_action_completed(harness: Harness) -> None:
    harness.node(INSTANCE, "gpu-1")
    harness.terminating(INSTANCE)
    harness.world.cluster.fail_calls("list_nodes", RetryableError("connection refused"), times=1000)
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    harness.run()
    record = harness.record()
    assert record.outcome is DrainOutcome.PAST_DEADLINE and record.result == "CONTINUE"
    assert "connection refused" in record.detail
    assert harness.fleet.instance(INSTANCE).lifecycle_state == "Terminating:Proceed"


# ---- launch ---------------------------------------------------------------------------------


def test_a_launch_continues_once_the_node_is_ready_with_its_gpus(harness: Harness, lambda_context: Any) -> None:
    # given an instance in Pending:Wait on Squall's launch hook
    harness.fleet.add_instance(harness.ref, LAUNCHED, lifecycle_state="Pending:Wait")
    lifecycle_handler.handler(harness.event("lifecycle_launch", LAUNCHED), lambda_context)
    # when its node joins after a minute, and the device plugin reports its GPUs a minute later
    harness.run(until=harness.now + timedelta(seconds=60))
    harness.node(LAUNCHED, "gpu-new", gpus_ready=False)
    harness.run(until=harness.now + timedelta(seconds=60))
    assert harness.fleet.instance(LAUNCHED).lifecycle_state == "Pending:Wait"
    harness.world.cluster.set_gpus_ready("gpu-new")
    harness.run()
    # then the launch is continued, and only then
    record = harness.record(LAUNCHED)
    assert record.outcome is DrainOutcome.READY and record.result == "CONTINUE" and record.node_name == "gpu-new"
    assert harness.fleet.instance(LAUNCHED).lifecycle_state == "Pending:Proceed"
    assert record.finished_at is not None and record.finished_at - record.started_at == timedelta(seconds=150)
    assert harness.world.metrics.total("HooksCompleted") == 1


def test_a_launch_past_the_provision_timeout_is_abandoned_and_the_group_backed_off(harness: Harness) -> None:
    # given a node that joins but never becomes Ready
    harness.fleet.add_instance(harness.ref, LAUNCHED, lifecycle_state="Pending:Wait")
    started = harness.now
    harness.on_event(harness.event("lifecycle_launch", LAUNCHED))
    harness.node(LAUNCHED, "gpu-new", ready=False)
    # when
    harness.run()
    # then at the provision timeout the launch is abandoned ...
    record = harness.record(LAUNCHED)
    assert harness.now == started + timedelta(minutes=10)
    assert record.outcome is DrainOutcome.PROVISION_TIMEOUT and record.result == "ABANDON"
    assert harness.fleet.instance(LAUNCHED).lifecycle_state == "Terminating"
    assert harness.world.metrics.total("LaunchesAbandoned") == 1
    # ... the 600 s hook was heartbeaten so that the answer is Squall's, not a timeout's ...
    assert record.heartbeats >= 1
    # ... and the planner will skip the group for the base backoff
    health = harness.state.load_health()["p3-usw2"]
    assert health.backoff_until == harness.now + timedelta(minutes=5)
    assert health.consecutive_failures == 1 and "not Ready" in health.reason


# ---- the drain handler and the SQS adapter ----------------------------------------------------


def test_the_drain_handler_fails_only_malformed_and_early_messages(harness: Harness, lambda_context: Any) -> None:
    # given a drain under way, plus the recorded batch (an unknown drain and a malformed body)
    harness.protected_pod_terminating()
    harness.on_event(harness.event("lifecycle_terminate", INSTANCE))
    harness.world.clock.advance(STEP)
    due = harness.queue.take_due()[0]
    early = DrainStepMessage(instance_id=INSTANCE, step_id="future", version=due.version + 5)
    recorded = load_event("drain_step")["Records"]
    messages = [
        {"MessageId": "due", "ReceiptHandle": "r1", "Body": due.body()},
        {"MessageId": "early", "ReceiptHandle": "r2", "Body": early.body()},
    ]
    event = sqs_event(messages, queue_arn="arn:aws:sqs:us-west-2:123456789012:squall-drain", region=REGION)
    event["Records"].extend(recorded)
    # when
    response = drain_handler.handler(event, lambda_context)
    # then the due step ran, the unknown drain was acknowledged, and the rest come back
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    assert failed == {"early", recorded[1]["messageId"]}
    assert harness.record().attempts == 2


def test_the_sqs_adapter_sends_a_delayed_step(aws_credentials: None) -> None:
    from moto import mock_aws

    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="squall-drain")["QueueUrl"]
        queue = SqsDrainQueue(sqs, queue_url=url)
        message = DrainStepMessage(instance_id=INSTANCE, step_id="s1", version=2)
        queue.send_step(message, delay=timedelta(seconds=0.2))
        queue.send_step(message, delay=timedelta(0))
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [DrainStepMessage.model_validate_json(m["Body"]) for m in received] == [message]
        with pytest.raises(PermanentError) as caught:
            SqsDrainQueue(sqs, queue_url=url + "-missing").send_step(message, delay=STEP)
        assert not isinstance(caught.value.__cause__, PermanentError)
    assert (delay_seconds(timedelta(seconds=0.2)), delay_seconds(timedelta(hours=1))) == (1, 900)


def test_a_runtime_without_a_drain_queue_cannot_build_the_lifecycle_service(world: World) -> None:
    services = runtime.Services(
        settings=Settings(table_name="jobs"),
        clock=world.clock,
        store=world.store,
        clusters={"local": world.cluster},
        metrics=world.metrics,
        scale_requests=LocalScaleRequests(clock=world.clock),
    )
    with pytest.raises(RuntimeError, match="drain queue"):
        _ = services.lifecycle


# ---- failed steps come back within the hook's heartbeat timeout -------------------------------


def test_a_failed_step_is_asked_back_after_the_step_delay_not_the_visibility_timeout(harness: Harness) -> None:
    # given a drain whose next step will find the node empty
    harness.drain_under_way()
    harness.world.clock.advance(STEP)
    harness.world.cluster.advance()
    (message,) = harness.queue.take_due()
    # when completing the action is throttled (a transient error: the step fails)
    harness.fleet.next_error = RetryableError("CompleteLifecycleAction: Throttling: Rate exceeded")
    with pytest.raises(RetryableError):
        harness.lifecycle.step(message, receipt_handle="receipt-1")
    # then the message is asked back a step delay from now, well inside the hook's
    # heartbeat timeout, and the record is as it was, so the step is taken again
    assert harness.queue.visible_again == {"receipt-1": harness.now + STEP}
    assert harness.record().version == 2 and not harness.record().done
    harness.world.clock.advance(STEP)
    assert harness.lifecycle.step(message, receipt_handle="receipt-2").outcome == "step"
    assert harness.record().outcome is DrainOutcome.DRAINED
    assert "receipt-2" not in harness.queue.visible_again, "a step that ends is not asked back"


def test_a_step_invocation_leases_its_messages_for_its_timeout_plus_the_step_delay(harness: Harness) -> None:
    # when a drain invocation starts with two messages and 60 s to run
    harness.lifecycle.lease(["r1", "r2", ""], time_left=timedelta(seconds=60))
    # then, should it die, both come back a step delay after its timeout
    assert harness.queue.visible_again == {"r1": harness.now + timedelta(seconds=90), "r2": harness.now + timedelta(seconds=90)}


def test_the_runtimes_drain_policy_allows_for_a_dying_step(harness: Harness) -> None:
    # a dying step's messages come back after the drain function's timeout plus a step delay
    assert harness.lifecycle.config.policy.redelivery == timedelta(seconds=60) + STEP


def test_the_drain_handler_leases_the_batch_and_hastens_a_failed_step_on_sqs(
    harness: Harness, lambda_context: Any
) -> None:
    # given the drain queue on SQS (moto), with the stack's visibility timeout, and a drain under way
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="squall-drain", Attributes={"VisibilityTimeout": "360"})["QueueUrl"]
    harness.drain_under_way()
    (due,) = harness.queue.waiting
    harness.services.drain_queue = queue = SqsDrainQueue(sqs, queue_url=url)
    queue.send_step(due.message, delay=timedelta(0))
    (received,) = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    event = sqs_event([received], queue_arn="arn:aws:sqs:us-west-2:123456789012:squall-drain", region=REGION)
    calls: list[dict[str, Any]] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.ChangeMessageVisibilityBatch", lambda params, **_: calls.append(params)
    )
    # when the step fails on a throttled completion
    harness.world.clock.advance(STEP)
    harness.world.cluster.advance()
    harness.fleet.next_error = RetryableError("CompleteLifecycleAction: Throttling: Rate exceeded")
    response = drain_handler.handler(event, lambda_context)
    # then the message failed alone: leased first for the invocation's time plus a step,
    # then asked back after one step delay (SQS's own visibility timeout is 360 s)
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [received["MessageId"]]
    handle = received["ReceiptHandle"]
    leased = lambda_context.get_remaining_time_in_millis() // 1000 + 30
    assert [[(e["ReceiptHandle"], e["VisibilityTimeout"]) for e in c["Entries"]] for c in calls] == [
        [(handle, leased)],
        [(handle, 30)],
    ]


def test_the_sqs_adapter_reports_visibility_changes_it_could_not_make(harness: Harness) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="squall-drain")["QueueUrl"]
    with pytest.raises(RetryableError, match="1 failed"):
        SqsDrainQueue(sqs, queue_url=url).retry_after(["not-a-receipt"], delay=STEP)
    with pytest.raises(PermanentError) as caught:
        SqsDrainQueue(sqs, queue_url=url + "-missing").retry_after(["r"], delay=STEP)
    assert not isinstance(caught.value.__cause__, PermanentError)
