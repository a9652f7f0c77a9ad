"""The local runtime plays Lambda's part: its metrics, failed invocations and their triggers' retries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from squall.core.asg_events import DrainStepMessage
from squall.core.drain import DrainOutcome
from squall.core.errors import RetryableError
from squall.core.resources import (
    DRAIN_VISIBILITY_TIMEOUT,
    FUNCTIONS,
    JOBS_MAX_RECEIVE_COUNT,
    JOBS_VISIBILITY_TIMEOUT,
)
from squall.core.settings import PolicySettings
from squall.core.telemetry import RecordedMetric
from squall.local.clock import VirtualClock
from squall.local.lambda_events import InvocationKilled
from squall.local.runtime import LocalRuntime
from squall.local.summary import ObservedCluster
from squall.ports import GroupRef, LifecycleAction, LifecycleResult
from tests.e2e.helpers_runtime import P3_USW2, gan_job, run_until_running

ZERO = timedelta(0)
GROUPS = [P3_USW2]
# The drain tests' policy: idle nodes go in five minutes, a node has two minutes to boot.
DRAIN_POLICY = {"idleThreshold": "PT5M", "bootGrace": "PT2M"}


def points(local: LocalRuntime, name: str, **dimensions: str) -> list[RecordedMetric]:
    return [p for p in local.metrics.points if p.name == name and p.dimensions == dimensions]


def start_terminate_hook(local: LocalRuntime, instance: str) -> None:
    """Auto Scaling takes the instance out without lowering desired capacity: its terminate hook starts."""
    assert local.fleet is not None
    local.fleet.terminate_instance(region=P3_USW2["region"], instance_id=instance, decrement=False)


def drain_steps(local: LocalRuntime, instance: str) -> list[Any]:
    """The lifecycle steps queued for one instance (a replacement's launch queues its own)."""
    assert local.drain_queue is not None
    return [q for q in local.drain_queue.waiting if q.message.instance_id == instance]


def total(local: LocalRuntime, name: str, **dimensions: str) -> float:
    return sum(p.value for p in points(local, name, **dimensions))


@dataclass
class World:
    """A virtual clock and a cluster on it that can kill the function calling it."""

    clock: VirtualClock
    cluster: ObservedCluster

    def start(self, backend: str, **kwargs: Any) -> Any:
        return LocalRuntime.start(clock=self.clock, cluster=self.cluster, backend=backend, **kwargs)

    def start_fleet(self) -> Any:
        """A memory-backed runtime on GROUPS with its simulated fleet, under DRAIN_POLICY."""
        return self.start("memory", node_groups=GROUPS, policy=PolicySettings.model_validate(DRAIN_POLICY))

    @contextmanager
    def running_job(self) -> Iterator[tuple[LocalRuntime, str, str]]:
        """gan-1 running (for two hours) on a node of start_fleet(): the runtime, the node's name, its instance."""
        with self.start_fleet() as local:
            node, instance = run_until_running(local, run_for=timedelta(hours=2))
            yield local, node, instance


@pytest.fixture
def world() -> World:
    clock = VirtualClock()
    return World(clock=clock, cluster=ObservedCluster(clock=clock))


@pytest.fixture(params=["memory", "moto"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def local(world: World) -> Iterator[LocalRuntime]:
    with world.start("memory") as runtime:
        yield runtime


def test_every_invocation_records_lambdas_own_metrics(world: World, backend: str) -> None:
    with world.start(backend) as local:
        # given a job on the queue
        local.send(gan_job("gan-1"))
        # when one step delivers it
        local.step(ZERO)
        # then the submit function ran once, and Lambda's metrics say so
        function = {"FunctionName": "squall-submit"}
        assert total(local, "Invocations", **function) == 1
        assert total(local, "Errors", **function) == 0
        assert total(local, "Throttles", **function) == 0
        (duration,) = points(local, "Duration", **function)
        assert duration.unit == "Milliseconds" and duration.value > 0
        assert local.store.get("gan-1") is not None
        assert points(local, "Invocations", FunctionName="squall-reconcile") == [], (
            "its schedule is a minute away"
        )


def test_a_failed_scheduled_invocation_is_an_error_and_waits_for_its_next_period(
    local: LocalRuntime, world: World
) -> None:
    t0 = local.clock.now()
    # given the job table refuses the reconcile function's first read (a cluster's API refusing
    # its lists is not the function's failure: the cluster is unreachable for that run)
    store = local.store
    original = store.list_by_status

    def throttled(*args: Any, **kwargs: Any) -> Any:
        store.list_by_status = original
        raise RetryableError("Query: 429 ThrottlingException")

    store.list_by_status = throttled
    local.clock.advance(timedelta(minutes=1))
    # when the schedule fires
    local.step(ZERO)
    # then Lambda counts one error, and the schedule's event is not retried (no async retries)
    (error,) = local.function_errors
    assert (error.at, error.function, error.killed) == (t0 + timedelta(minutes=1), "reconcile", False)
    assert "429" in error.error
    assert total(local, "Errors", FunctionName="squall-reconcile") == 1
    assert local.pending_retries == [] and local.dropped_events == [(t0 + timedelta(minutes=1), "reconcile")]
    assert local.next_event_time() == t0 + timedelta(minutes=2)
    local.step(ZERO)
    assert total(local, "Invocations", FunctionName="squall-reconcile") == 1, "nothing more this minute"
    # and the next period's invocation succeeds
    local.clock.advance(timedelta(minutes=1))
    local.step(ZERO)
    assert total(local, "Invocations", FunctionName="squall-reconcile") == 2
    assert total(local, "Errors", FunctionName="squall-reconcile") == 1


def kill_store_create(local: Any) -> None:
    """The next invocation recording a job dies as it writes (its only write: the job is its queue entry)."""
    store = local.store
    original = store.create

    def killed(job: Any, event: Any) -> None:
        store.create = original
        raise InvocationKilled("killed at create")

    store.create = killed


def test_a_killed_submit_batch_comes_back_and_the_redrive_still_applies(world: World, backend: str) -> None:
    with world.start(backend) as local:
        # given the submit invocation dies half way through its batch
        t0 = local.clock.now()
        local.send(gan_job("gan-1"))
        kill_store_create(local)
        local.step(ZERO)
        (error,) = local.function_errors
        assert (error.function, error.killed, error.error) == ("submit", True, "killed at create")
        assert total(local, "Errors", FunctionName="squall-submit") == 1
        # then nothing of the batch was deleted: it stays hidden for the jobs queue's
        # visibility timeout (the stack's six minutes), then the next delivery records the job
        assert local.queue.next_visible_at() == t0 + JOBS_VISIBILITY_TIMEOUT
        local.step(ZERO)
        assert local.store.get("gan-1") is None, "still hidden"
        local.clock.advance(JOBS_VISIBILITY_TIMEOUT)
        local.step(ZERO)
        assert local.store.get("gan-1") is not None
        assert local.dead_letters() == []
        # and a message whose every delivery dies goes to the dead-letter queue on the
        # receive after the stack's maximum (five)
        local.send(gan_job("gan-2"))
        for _ in range(JOBS_MAX_RECEIVE_COUNT):
            kill_store_create(local)
            local.step(ZERO)
            local.clock.advance(JOBS_VISIBILITY_TIMEOUT)
        assert local.dead_letters() == []
        local.step(ZERO)
        (dead,) = local.dead_letters()
        assert '"gan-2"' in dead["Body"]
        submit_errors = [e for e in local.function_errors if e.function == "submit"]
        assert (
            total(local, "Errors", FunctionName="squall-submit")
            == len(submit_errors)
            == 1 + JOBS_MAX_RECEIVE_COUNT
        )


def test_a_failed_lifecycle_event_is_retried_twice_then_dropped(world: World) -> None:
    # given a job running on a node
    with world.running_job() as (local, _, instance):
        # when the node's terminate hook starts and the lifecycle function dies cordoning it
        start_terminate_hook(local, instance)
        world.cluster.kill_at("patch_node")
        local.step(ZERO)
        failed_at = local.clock.now()
        assert [(e.function, e.killed) for e in local.function_errors] == [("lifecycle", True)]
        # then Lambda tries again a minute later, and two minutes after that
        (retry,) = local.pending_retries
        assert (retry.function, retry.due, retry.attempt) == (
            "lifecycle",
            failed_at + timedelta(minutes=1),
            1,
        )
        local.clock.advance_to(failed_at + timedelta(seconds=50))
        local.step(ZERO)  # the schedules of the minute, if any, have run: the retry is next
        assert local.next_event_time() == failed_at + timedelta(minutes=1)
        for wait, attempt in ((timedelta(minutes=1), 1), (timedelta(minutes=2), 2)):
            (retry,) = local.pending_retries
            assert (retry.due, retry.attempt) == (local.function_errors[-1].at + wait, attempt)
            local.clock.advance_to(retry.due - timedelta(seconds=1))
            local.step(ZERO)
            assert local.pending_retries == [retry] and len(local.function_errors) == attempt, (
                "not before it is due"
            )
            local.clock.advance_to(retry.due)
            world.cluster.kill_at("patch_node")
            local.step(ZERO)
            assert (local.function_errors[-1].at, local.function_errors[-1].function) == (
                retry.due,
                "lifecycle",
            )
        # and after the second retry failed too, the event is dropped
        assert [e.function for e in local.function_errors] == ["lifecycle"] * 3
        assert total(local, "Errors", FunctionName="squall-lifecycle") == 3
        assert local.pending_retries == []
        assert local.dropped_events == [(local.clock.now(), "lifecycle")]
        # into the lifecycle function's on-failure destination, as the stack configures it
        (failed,) = local.failed_events
        assert (failed.function, failed.destination, failed.condition) == (
            "lifecycle",
            "squall-lifecycle-failures",
            "RetriesExhausted",
        )
        assert failed.event["detail"]["EC2InstanceId"] == instance


def test_a_retried_lifecycle_event_drains_the_node(world: World) -> None:
    with world.start_fleet() as local:
        assert local.fleet is not None
        local.fleet.set_desired_capacity(ref=GroupRef(name="squall-p3-usw2", region="us-west-2"), desired=1)
        local.run(
            until=lambda rt: bool(rt.cluster.list_nodes()),
            step=timedelta(seconds=10),
            limit=timedelta(minutes=10),
        )
        (node,) = world.cluster.list_nodes()
        instance = local.fleet.instance_of(node["metadata"]["name"])
        assert instance is not None
        # when the lifecycle function dies answering the node's terminate hook
        local.fleet.terminate_instance(region="us-west-2", instance_id=instance, decrement=True)
        world.cluster.kill_at("patch_node")
        local.step(ZERO)
        failed_at = local.clock.now()
        assert [e.function for e in local.function_errors] == ["lifecycle"]
        # then the retry a minute later finds the action still waiting, drains the node and completes it
        gone = local.run(
            until=lambda rt: not rt.cluster.list_nodes(),
            step=timedelta(seconds=10),
            limit=timedelta(minutes=4),
        )
        assert gone, "well before the hook's five-minute heartbeat timeout"
        (answered,) = [r for r in local.lifecycle_results if r["kind"] == "terminate"]
        assert (answered["at"], answered["instanceId"]) == (failed_at + timedelta(minutes=1), instance)
        assert local.fleet.hook_stats()["hooksLeftOpen"] == 0


def test_the_runtime_says_when_it_next_has_something_to_do(local: LocalRuntime) -> None:
    t0 = local.clock.now()
    assert local.next_event_time() == t0 + timedelta(minutes=1), "the reconcile schedule"


def test_a_scale_check_request_is_due_after_its_debounce(world: World) -> None:
    with world.start("memory", node_groups=GROUPS) as local:
        t0 = local.clock.now()
        local.send(gan_job("gan-1"))
        local.step(ZERO)
        # the submission asked for a scale check: due after the debounce, before the schedules
        debounce = local.settings.policy.scale_check_debounce
        assert local.scale_requests.requests
        assert local.next_event_time() == t0 + debounce < t0 + timedelta(minutes=1)


def test_the_jobs_queue_is_sampled_for_sqs_metrics(world: World, backend: str) -> None:
    with world.start(backend) as local:
        t0 = local.clock.now()
        queue = {"QueueName": "squall-jobs"}
        # given three jobs that wait thirty seconds on the queue, and a body nobody can read
        for number in range(3):
            local.send(gan_job(f"gan-{number}"))
        local.send("{not json")
        local.clock.advance(timedelta(seconds=30))
        # when the next step samples the queue before delivering
        local.step(ZERO)
        # then SQS's metrics show the backlog and its age
        (visible,) = points(local, "ApproximateNumberOfMessagesVisible", **queue)
        (age,) = points(local, "ApproximateAgeOfOldestMessage", **queue)
        assert (visible.at, visible.value, visible.unit) == (t0 + timedelta(seconds=30), 4, "Count")
        assert (age.value, age.unit) == (30, "Seconds")
        # a later sample in the same minute keeps the minute's largest, as SQS's one point a minute
        for _ in range(4):
            local.step(ZERO)
        local.clock.advance(timedelta(seconds=10))
        local.step(ZERO)
        assert [p.value for p in points(local, "ApproximateNumberOfMessagesVisible", **queue)] == [4]
        # the next minute's sample finds nothing visible: the unreadable body failed and
        # is hidden for the visibility timeout, still counted in the age of the oldest message
        local.clock.advance(timedelta(minutes=1))
        local.step(ZERO)
        assert [p.value for p in points(local, "ApproximateNumberOfMessagesVisible", **queue)] == [4, 0]
        # (the first minute kept its largest sample, ten seconds after the first)
        assert [p.value for p in points(local, "ApproximateAgeOfOldestMessage", **queue)] == [40, 100]
        # it goes to the dead-letter queue on its sixth receive, five visibility timeouts later
        dead = points(local, "ApproximateNumberOfMessagesVisible", QueueName="squall-jobs-dlq")
        assert [p.value for p in dead] == [0, 0]
        for _ in range(JOBS_MAX_RECEIVE_COUNT):
            local.clock.advance(JOBS_VISIBILITY_TIMEOUT)
            local.step(ZERO)
        local.clock.advance(timedelta(minutes=1))
        local.step(ZERO)
        assert (
            local.dead_letters()
            and points(local, "ApproximateNumberOfMessagesVisible", QueueName="squall-jobs-dlq")[-1].value
            == 1
        )
        assert len(points(local, "ApproximateNumberOfMessagesVisible", QueueName="squall-drain")) >= 2


def test_a_drain_batch_whose_invocation_dies_comes_back_after_the_visibility_timeout(world: World) -> None:
    with world.running_job() as (local, node, instance):
        # given a drain under way: the lifecycle function took its first step and queued the next
        start_terminate_hook(local, instance)
        local.step(ZERO)
        (queued,) = drain_steps(local, instance)  # the replacement's launch waits beside it
        # and someone uncordoned the node meanwhile, so the drain function must cordon it again
        world.cluster.patch_node(node, {"spec": {"unschedulable": False}})
        # when the drain function dies doing so
        local.clock.advance_to(queued.due_at)
        world.cluster.kill_at("patch_node")
        local.step(ZERO)
        assert [(e.function, e.killed) for e in local.function_errors] == [("drain", True)]
        assert total(local, "Errors", FunctionName="squall-drain") == 1
        # then its message was not deleted: it is back, not after the queue's six-minute
        # visibility timeout, but a step delay after the invocation's own timeout, as the
        # drain function asked before it started (it could not ask when it died)
        (again,) = drain_steps(local, instance)
        lease = timedelta(seconds=FUNCTIONS["drain"].timeout_seconds) + local.settings.policy.drain_step_delay
        assert (again.message, again.due_at) == (queued.message, local.clock.now() + lease)
        assert lease < local.hook_heartbeat_timeout < DRAIN_VISIBILITY_TIMEOUT
        local.clock.advance_to(again.due_at)
        local.step(ZERO)
        assert world.cluster.get_node(node)["spec"]["unschedulable"] is True, (
            "the step ran again, and cordoned"
        )
        assert len(local.function_errors) == 1
        # and the hook is answered before it times out
        local.run(
            until=lambda rt: rt.fleet is not None and rt.fleet.hook_stats()["hooksLeftOpen"] == 0,
            step=timedelta(seconds=10),
            limit=timedelta(minutes=30),
        )
        assert local.fleet.stats.timed_out == 0


def test_a_drain_message_that_keeps_failing_is_dead_lettered_on_its_tenth_receive(world: World) -> None:
    with world.running_job() as (local, _, instance):
        start_terminate_hook(local, instance)
        local.step(ZERO)
        # a drain record left mid-drain: its own next step message is taken away
        local.drain_queue.waiting.clear()
        record = local.backend.drain_store.get(instance)
        assert record is not None and not record.done
        # given a step message from a version of the drain record that is never saved:
        # the drain function reports it failed ("early") every time it sees it
        early = DrainStepMessage(
            instance_id=instance, step_id="from-the-future", version=record.version + 100
        )
        local.drain_queue.send_step(early, delay=ZERO)
        local.step(ZERO)
        for _ in range(8):
            local.clock.advance(timedelta(seconds=30))
            local.step(ZERO)
        # when it is received a ninth time it is still waiting, and on the tenth it is dead-lettered
        assert early in [q.message for q in local.drain_queue.waiting] and local.drain_dead_letters == []
        local.clock.advance(timedelta(seconds=30))
        local.step(ZERO)
        assert local.drain_dead_letters == [early]
        assert early not in [q.message for q in local.drain_queue.waiting]
        assert local.function_errors == [], "a failed record is not a failed invocation"


def test_a_scale_check_request_names_the_jobs_that_asked_for_it(world: World) -> None:
    with world.start("memory", node_groups=GROUPS) as local:
        events: list[dict[str, Any]] = []
        invoke = local.invoke

        def recording(handler: str, event: Any) -> Any:
            if handler == "scale":
                events.append(event)
            return invoke(handler, event)

        local.invoke = recording  # type: ignore[method-assign]
        # given two submissions in one batch, no node yet
        local.send(gan_job("gan-1"))
        local.send(gan_job("gan-2"))
        local.step(ZERO)
        # when the debounce has passed
        local.clock.advance(local.settings.policy.scale_check_debounce)
        local.step(ZERO)
        # then one check, told which jobs asked (as EventBridgeScaleRequests puts them),
        # and since their pods wait for room it is a whole check that scales up
        (event,) = events
        assert event["detail-type"] == "Scale Check Requested"
        assert (event["detail"]["jobIds"], event["detail"]["jobCount"]) == (["gan-1", "gan-2"], 2)
        assert local.scale_results[-1]["done"]["scaledUp"] == [{"group": "p3-usw2", "to": 2}]


def test_a_drain_step_that_fails_once_is_retried_after_the_step_delay_and_the_hook_is_answered(
    world: World, backend: str
) -> None:
    # given 10 s drain steps, and a job running on a node
    policy = PolicySettings.model_validate({**DRAIN_POLICY, "drainStepDelay": "PT10S"})
    with world.start(backend, node_groups=GROUPS, policy=policy) as local:
        assert local.fleet is not None
        _, instance = run_until_running(local, run_for=timedelta(hours=2))
        # and Auto Scaling throttles the first completion of a lifecycle action
        failures: list[Any] = []
        complete = local.fleet.complete_lifecycle_action

        def throttled_once(action: LifecycleAction, result: LifecycleResult) -> None:
            if not failures:
                failures.append(local.clock.now())
                raise RetryableError("CompleteLifecycleAction: Throttling: Rate exceeded")
            complete(action, result)

        local.fleet.complete_lifecycle_action = throttled_once  # type: ignore[method-assign]
        # when the node's instance is terminated under the job: the lifecycle function
        # evicts the pod and the drain function completes the action once it is gone
        start_terminate_hook(local, instance)

        def answered(rt: LocalRuntime) -> bool:
            record = rt.backend.drain_store.get(instance)
            return record is not None and record.done

        assert local.run(until=answered, step=timedelta(seconds=1), limit=timedelta(minutes=10))
        # then the failed step came back a step delay later, not after the queue's
        # six-minute visibility timeout, and completed the action well inside the hook's timeout
        (failed_at,) = failures
        record = local.backend.drain_store.get(instance)
        assert record is not None and record.finished_at is not None
        assert (record.outcome, record.result) == (DrainOutcome.DRAINED, "CONTINUE")
        assert record.finished_at - failed_at == policy.drain_step_delay
        assert record.finished_at < record.started_at + local.hook_heartbeat_timeout
        # and the replacement Auto Scaling launched meanwhile has its launch hook answered too
        assert local.run(
            until=lambda rt: rt.fleet is not None and rt.fleet.hook_stats()["hooksLeftOpen"] == 0,
            step=timedelta(seconds=10),
            limit=timedelta(minutes=10),
        )
        assert local.fleet.stats.timed_out == 0
        assert local.fleet.terminated_busy == []
        assert local.function_errors == [], "a failed step fails its record, not the invocation"
        assert local.drain_dead_letters == []


def test_both_backends_refuse_a_body_sqs_would_refuse(world: World, backend: str) -> None:
    from squall.core.resources import SQS_MAX_MESSAGE_BYTES
    from squall.local.queues import MessageTooLong

    # given a body within SQS's limit in characters but over it in bytes
    body = "é" * (SQS_MAX_MESSAGE_BYTES // 2 + 1)
    with world.start(backend) as local:
        # when it is sent, then the queue refuses it as SendMessage would, and nothing is queued
        with pytest.raises(MessageTooLong):
            local.send(body)
        local.send(gan_job("fits"))
        local.deliver()
        assert [j.id for j in local.jobs()] == ["fits"]
