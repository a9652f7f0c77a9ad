"""The drain / launch-wait state machine: pure, so plain data in and out, no fakes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall import conventions
from squall.core import drain
from squall.core.drain import (
    Arrival,
    DrainOutcome,
    DrainPolicy,
    DrainRecord,
    Kind,
    NodeState,
    PodRef,
    Verdict,
)
from squall.core.fleet_refs import GroupRef, LifecycleAction
from squall.planner import Pod

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
POLICY = DrainPolicy(
    deadline=timedelta(minutes=30), provision_timeout=timedelta(minutes=10), step_delay=timedelta(seconds=30)
)
INSTANCE = "i-0a1b2c3d4e5f60718"


ASG = GroupRef(name="squall-p3-usw2", region="us-west-2")


def _action(hook_name: str, token: str) -> LifecycleAction:
    return LifecycleAction(ref=ASG, hook_name=hook_name, instance_id=INSTANCE, token=token)


# What differs between the two kinds of lifecycle action the tests start.
_STARTS: dict[Kind, dict[str, Any]] = {
    Kind.TERMINATE: {
        "action": _action("squall-terminate", "tok-1"),
        "heartbeat_timeout": timedelta(seconds=300),
    },
    Kind.LAUNCH: {"action": _action("squall-launch", "tok-launch"), "gpus_expected": 4},
}


def _record(kind: Kind, **changes: Any) -> DrainRecord:
    record = drain.start(kind=kind, group="p3-usw2", started_at=T0, policy=POLICY, **_STARTS[kind])
    return dataclasses.replace(record, **changes)


def terminate_record(**changes: object) -> DrainRecord:
    return _record(Kind.TERMINATE, **{"cause": "spot-reclaim", **changes})


def launch_record(**changes: object) -> DrainRecord:
    return _record(Kind.LAUNCH, **changes)


def node(*, cordoned: bool = True, ready: bool = True, gpus: int = 4, **annotations: str) -> NodeState:
    return NodeState(name="gpu-1", ready=ready, unschedulable=cordoned, gpus=gpus, annotations=annotations)


def pod(
    name: str,
    *,
    job: str | None = None,
    phase: str = "Running",
    daemonset: bool = False,
    mirror: bool = False,
    deleting: bool = False,
) -> Pod:
    return Pod(
        namespace="team-a",
        name=name,
        job_id=job,
        node_name="gpu-1",
        phase=phase,
        daemonset=daemonset,
        mirror=mirror,
        deleting=deleting,
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# ---- terminate ----------------------------------------------------------------------------


def test_a_schedulable_node_is_cordoned_first_and_observed_again() -> None:
    # given a drain that has not touched the node yet
    record = terminate_record()
    # when the node is found schedulable
    decision = drain.decide(record, node=node(cordoned=False), pods=None, now=at(1), policy=POLICY)
    # then it is cordoned, nothing else happens, and the pods are listed after the cordon
    assert decision.cordon == "gpu-1" and decision.observe_again
    assert decision.evictions == () and decision.complete is None and decision.next_step_in is None
    assert decision.record.node_name == "gpu-1" and decision.record.cordoned


def test_workload_pods_are_evicted_by_job_and_each_job_is_noted_once() -> None:
    # given a cordoned node with pods of two Squall jobs, a plain pod, a DaemonSet pod,
    # a mirror pod and a finished pod
    pods = [
        pod("a-worker-0", job="job-a"),
        pod("a-worker-1", job="job-a"),
        pod("b-chief-0", job="job-b"),
        pod("plain"),
        pod("fluent-bit", daemonset=True),
        pod("kube-proxy", mirror=True),
        pod("done", job="job-c", phase="Succeeded"),
    ]
    # when
    decision = drain.decide(terminate_record(), node=node(), pods=pods, now=at(1), policy=POLICY)
    # then only workload pods that still run are evicted, grouped by budget (job)
    assert decision.evictions == (
        (PodRef(namespace="team-a", name="a-worker-0"), PodRef(namespace="team-a", name="a-worker-1")),
        (PodRef(namespace="team-a", name="b-chief-0"),),
        (PodRef(namespace="team-a", name="plain"),),
    )
    # and each job losing pods is noted once, naming the cause
    assert [(n.job_id, n.reason) for n in decision.notes] == [
        ("job-a", "NodeLost:spot-reclaim"),
        ("job-b", "NodeLost:spot-reclaim"),
    ]
    assert "a-worker-0" in decision.notes[0].message and INSTANCE in decision.notes[0].message
    # and the record remembers what is left and whom it told; the next step comes after the delay
    assert decision.record.pods_left == (
        "team-a/a-worker-0",
        "team-a/a-worker-1",
        "team-a/b-chief-0",
        "team-a/plain",
    )
    assert decision.record.pods_left_count == 4
    assert decision.record.noted_jobs == ("job-a", "job-b")
    assert decision.complete is None and decision.next_step_in == POLICY.step_delay
    assert decision.record.attempts == 1


def test_a_job_already_noted_is_not_noted_again_and_deleting_pods_are_only_waited_for() -> None:
    # given a drain that noted job-a already; one pod is terminating after its eviction
    record = terminate_record(noted_jobs=("job-a",))
    pods = [pod("a-worker-0", job="job-a", deleting=True), pod("a-worker-1", job="job-a")]
    # when
    decision = drain.decide(record, node=node(), pods=pods, now=at(31), policy=POLICY)
    # then
    assert decision.notes == ()
    assert decision.evictions == ((PodRef(namespace="team-a", name="a-worker-1"),),)
    assert decision.record.pods_left_count == 2


def test_the_cause_defaults_to_terminate_when_nobody_said() -> None:
    record = dataclasses.replace(terminate_record(), cause="")
    decision = drain.decide(record, node=node(), pods=[pod("x", job="job-x")], now=at(1), policy=POLICY)
    assert decision.notes[0].reason == "NodeLost:terminate"


def test_evictions_per_step_are_bounded() -> None:
    policy = dataclasses.replace(POLICY, evictions_per_step=3)
    pods = [pod(f"p{i}") for i in range(10)]
    decision = drain.decide(terminate_record(), node=node(), pods=pods, now=at(1), policy=policy)
    assert sum(len(group) for group in decision.evictions) == 3
    assert decision.record.pods_left_count == 10


def test_a_node_with_only_daemonset_mirror_and_finished_pods_is_drained() -> None:
    pods = [pod("fluent-bit", daemonset=True), pod("kube-proxy", mirror=True), pod("old", phase="Failed")]
    decision = drain.decide(terminate_record(), node=node(), pods=pods, now=at(1), policy=POLICY)
    assert decision.complete == "CONTINUE"
    assert decision.record.outcome is DrainOutcome.DRAINED and decision.record.done
    assert decision.record.finished_at == at(1) and decision.next_step_in is None


def test_past_the_deadline_the_action_is_completed_anyway_and_the_pods_left_are_reported() -> None:
    # given pods a PodDisruptionBudget kept on the node until the deadline
    record = terminate_record(noted_jobs=("job-a",))
    pods = [pod("a-worker-0", job="job-a"), pod("late", job="job-z")]
    # when the step at the deadline runs
    decision = drain.decide(record, node=node(), pods=pods, now=record.deadline, policy=POLICY)
    # then CONTINUE, nothing evicted any more, and the pods left are named
    assert decision.complete == "CONTINUE" and decision.evictions == ()
    assert decision.record.outcome is DrainOutcome.PAST_DEADLINE
    assert "team-a/a-worker-0" in decision.record.detail and "team-a/late" in decision.record.detail
    assert decision.record.pods_left_count == 2
    # and the job not noted yet learns it lost its pod
    assert [n.job_id for n in decision.notes] == ["job-z"]


def test_no_node_for_the_instance_completes_at_once() -> None:
    decision = drain.decide(terminate_record(), node=None, pods=None, now=at(1), policy=POLICY)
    assert decision.complete == "CONTINUE"
    assert decision.record.outcome is DrainOutcome.NO_NODE
    assert "never joined" in decision.record.detail


def test_a_node_deleted_mid_drain_completes() -> None:
    record = terminate_record(node_name="gpu-1", pods_left=("team-a/x",), pods_left_count=1)
    decision = drain.decide(record, node=None, pods=None, now=at(90), policy=POLICY)
    assert decision.complete == "CONTINUE"
    assert decision.record.outcome is DrainOutcome.NODE_DELETED
    assert "gpu-1" in decision.record.detail


def test_a_cordoned_node_needs_its_pods_listed() -> None:
    with pytest.raises(ValueError, match="pods must be listed"):
        drain.decide(terminate_record(), node=node(), pods=None, now=at(1), policy=POLICY)


def test_a_finished_record_decides_nothing() -> None:
    record = terminate_record(finished_at=at(5), outcome=DrainOutcome.DRAINED, result="CONTINUE")
    decision = drain.decide(record, node=node(), pods=[pod("x")], now=at(60), policy=POLICY)
    assert decision == drain.Decision(record=record)


# ---- heartbeats and step timing ------------------------------------------------------------


def test_no_heartbeat_while_most_of_the_hook_timeout_is_left() -> None:
    decision = drain.decide(terminate_record(), node=node(), pods=[pod("x")], now=at(30), policy=POLICY)
    assert not decision.heartbeat
    assert decision.record.hook_expires_at == at(300)


def test_a_heartbeat_is_recorded_when_less_than_a_third_of_the_timeout_is_left() -> None:
    # given a 300 s hook: a heartbeat is due once less than 100 s are left
    record = terminate_record()
    # when the step runs 201 s in
    decision = drain.decide(record, node=node(), pods=[pod("x")], now=at(201), policy=POLICY)
    # then a heartbeat goes out and the hook's expiry moves on by the full timeout
    assert decision.heartbeat
    assert decision.record.hook_expires_at == at(201 + 300)
    assert decision.record.heartbeats == 1
    # and at 199 s it was not due yet
    assert not drain.decide(record, node=node(), pods=[pod("x")], now=at(199), policy=POLICY).heartbeat


def test_a_short_hook_is_heartbeaten_so_that_a_late_next_step_still_finds_it() -> None:
    # given a 60 s hook and 30 s steps: less than a step plus its slack is always left
    record = dataclasses.replace(
        terminate_record(), heartbeat_timeout=timedelta(seconds=60), hook_expires_at=at(60)
    )
    decision = drain.decide(record, node=node(), pods=[pod("x")], now=at(5), policy=POLICY)
    assert decision.heartbeat


def test_a_heartbeat_leaves_room_for_a_next_step_whose_invocation_dies() -> None:
    # given 30 s steps with 30 s slack, and a dying step's message back 90 s late
    # (the drain function's 60 s timeout plus a step delay)
    dying = dataclasses.replace(POLICY, redelivery=timedelta(seconds=90))
    record = terminate_record()
    # when a step runs with 140 s of the 300 s hook left
    decision = drain.decide(record, node=node(), pods=[pod("x")], now=at(160), policy=dying)
    # then it heartbeats: the next step at +30 s, dying and back at +120 s, needs more
    assert decision.heartbeat and decision.record.hook_expires_at == at(160 + 300)
    # and at 151 s left, or with no redelivery to allow for, it would not yet
    assert not drain.decide(record, node=node(), pods=[pod("x")], now=at(149), policy=dying).heartbeat
    assert not drain.decide(record, node=node(), pods=[pod("x")], now=at(160), policy=POLICY).heartbeat
    with pytest.raises(ValueError, match="redelivery"):
        DrainPolicy(redelivery=timedelta(seconds=-1))


def test_the_next_step_is_never_later_than_the_deadline() -> None:
    record = terminate_record()
    decision = drain.decide(
        record, node=node(), pods=[pod("x")], now=record.deadline - timedelta(seconds=7), policy=POLICY
    )
    assert decision.next_step_in == timedelta(seconds=7)


def test_policy_heartbeat_timeouts_follow_the_stack() -> None:
    assert POLICY.heartbeat_timeout(Kind.TERMINATE) == timedelta(seconds=300)
    assert DrainPolicy(step_delay=timedelta(minutes=2)).heartbeat_timeout(Kind.TERMINATE) == timedelta(
        minutes=8
    )
    assert POLICY.heartbeat_timeout(Kind.LAUNCH) == POLICY.provision_timeout
    record = drain.start(
        LifecycleAction(ref=GroupRef(name="a", region="r"), hook_name="h", instance_id=INSTANCE, token="t"),
        kind=Kind.TERMINATE,
        group="g",
        started_at=T0,
        policy=POLICY,
    )
    assert record.heartbeat_timeout == timedelta(seconds=300) and record.deadline == T0 + POLICY.deadline


def test_a_record_answers_the_action_it_was_started_for() -> None:
    assert launch_record().action == _STARTS[Kind.LAUNCH]["action"]
    # the record's step ids are made of the token, which every lifecycle event carries
    with pytest.raises(ValueError, match="token"):
        drain.start(
            LifecycleAction(ref=ASG, hook_name="h", instance_id=INSTANCE),
            kind=Kind.LAUNCH,
            group="g",
            started_at=T0,
            policy=POLICY,
        )


def test_policy_refuses_delays_sqs_cannot_hold() -> None:
    with pytest.raises(ValueError, match="step_delay"):
        DrainPolicy(step_delay=timedelta(minutes=16))


# ---- observation failures -------------------------------------------------------------------


def test_an_unobservable_node_is_tried_again_before_the_deadline() -> None:
    decision = drain.decide_unobserved(
        terminate_record(), error="503 from the API server", now=at(60), policy=POLICY
    )
    assert decision.complete is None and decision.next_step_in == POLICY.step_delay
    assert "503" in decision.record.detail and decision.record.attempts == 1


def test_an_unobservable_node_past_the_deadline_is_answered_as_the_hook_would() -> None:
    terminate = terminate_record()
    decision = drain.decide_unobserved(terminate, error="503", now=terminate.deadline, policy=POLICY)
    assert decision.complete == "CONTINUE" and decision.record.outcome is DrainOutcome.PAST_DEADLINE
    launch = launch_record()
    decision = drain.decide_unobserved(launch, error="503", now=launch.deadline, policy=POLICY)
    assert decision.complete == "ABANDON" and not decision.back_off


# ---- launch --------------------------------------------------------------------------------


def test_a_launch_waits_for_its_node() -> None:
    decision = drain.decide(launch_record(), node=None, pods=None, now=at(60), policy=POLICY)
    assert decision.complete is None and decision.next_step_in == POLICY.step_delay


def test_a_launch_waits_until_the_gpus_are_allocatable() -> None:
    decision = drain.decide(
        launch_record(), node=node(cordoned=False, gpus=0), pods=None, now=at(60), policy=POLICY
    )
    assert decision.complete is None
    assert decision.record.node_name == "gpu-1"


def test_a_ready_node_with_its_gpus_continues_the_launch() -> None:
    decision = drain.decide(launch_record(), node=node(cordoned=False), pods=None, now=at(150), policy=POLICY)
    assert decision.complete == "CONTINUE" and not decision.back_off
    assert decision.record.outcome is DrainOutcome.READY


@pytest.mark.parametrize(
    ("observed", "words"),
    [
        (None, "no node joined"),
        (NodeState(name="gpu-1", ready=False, unschedulable=False, gpus=4, annotations={}), "not Ready"),
        (NodeState(name="gpu-1", ready=True, unschedulable=False, gpus=0, annotations={}), "0/4 GPU"),
    ],
)
def test_past_the_provision_timeout_a_launch_is_abandoned_and_the_group_backed_off(
    observed: NodeState | None, words: str
) -> None:
    record = launch_record()
    decision = drain.decide(record, node=observed, pods=None, now=record.deadline, policy=POLICY)
    assert decision.complete == "ABANDON" and decision.back_off
    assert decision.record.outcome is DrainOutcome.PROVISION_TIMEOUT
    assert words in decision.record.detail and "provision timeout" in decision.record.detail


# ---- events and messages --------------------------------------------------------------------


def test_arrival_of_lifecycle_events() -> None:
    started = terminate_record()
    # nothing kept yet
    assert drain.arrival(None, started) is Arrival.NEW
    # the same event again before its first step finished: take that step again
    assert drain.arrival(started, started) is Arrival.RESUME
    # the same event again once the drain runs through the queue, or is over
    under_way = dataclasses.replace(started, next_step_id="abc", version=3)
    assert drain.arrival(under_way, started) is Arrival.DUPLICATE
    # a late launch event never interrupts a drain under way
    launch = launch_record(started_at=T0 - timedelta(minutes=5))
    assert drain.arrival(under_way, launch) is Arrival.STALE
    # a terminate replaces a launch wait; an older event than the kept one is stale
    assert drain.arrival(launch, started) is Arrival.REPLACE
    older = dataclasses.replace(started, token="older", started_at=T0 - timedelta(hours=1))
    assert drain.arrival(started, older) is Arrival.STALE
    # a warm-pool instance launched again after its drain finished
    finished = dataclasses.replace(under_way, finished_at=at(60))
    assert drain.arrival(finished, launch_record(started_at=at(3600))) is Arrival.REPLACE


def test_verdict_on_step_messages() -> None:
    record = terminate_record(next_step_id="s2", version=2)
    assert drain.verdict(record, step_id="s2", version=2) is Verdict.RUN
    assert drain.verdict(record, step_id="s1", version=1) is Verdict.STALE  # a redelivered older message
    assert drain.verdict(record, step_id="other", version=2) is Verdict.STALE  # the loser of a race
    # its sender's save not visible yet
    assert drain.verdict(record, step_id="s3", version=3) is Verdict.EARLY
    assert drain.verdict(None, step_id="s2", version=2) is Verdict.MISSING
    done = dataclasses.replace(record, finished_at=at(10))
    assert drain.verdict(done, step_id="s2", version=2) is Verdict.FINISHED


def test_eviction_results_and_gone_actions_fold_into_the_record() -> None:
    record = drain.evictions_done(terminate_record(evicted=2), accepted=3, refused=1)
    assert (record.evicted, record.refused) == (5, 1)
    gone = drain.action_gone(record, now=at(40))
    assert gone.done and gone.outcome is DrainOutcome.ACTION_GONE and gone.result is None
    completed = terminate_record(
        finished_at=at(5), outcome=DrainOutcome.DRAINED, result="CONTINUE", detail="drained"
    )
    again = drain.action_gone(completed, now=at(40))
    assert (
        again.outcome is DrainOutcome.DRAINED
        and again.finished_at == at(5)
        and "already completed" in again.detail
    )


# ---- causes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (
            "At 2026-01-05T09:00:00Z an instance was taken out of service in response to a spot instance interruption.",
            "spot-reclaim",
        ),
        (
            "At 2026-01-05T09:00:00Z an instance was taken out of service in response to an EC2 instance rebalance recommendation.",
            "spot-rebalance",
        ),
        (
            "At 2026-01-05T08:59:00Z instances were launched to balance instances in zones us-west-2a us-west-2b. At "
            "2026-01-05T09:00:00Z an instance was taken out of service in response to a difference between desired "
            "and actual capacity, shrinking the capacity from 3 to 2.",
            "rebalance",
        ),
        (
            "At 2026-01-05T09:00:00Z instance i-0a1b was taken out of service in response to a user request, shrinking the capacity from 2 to 1.",
            "scale-in",
        ),
        (
            "At 2026-01-05T09:00:00Z a user request explicitly set group desired capacity changing the desired capacity from 2 to 1.",
            "scale-in",
        ),
        (
            "At 2026-01-05T09:00:00Z an instance was taken out of service in response to an EC2 health check indicating it has been terminated or stopped.",
            "health-check",
        ),
        (
            "At 2026-01-05T09:00:00Z an instance was taken out of service in response to a user request.",
            "terminate",
        ),
    ],
)
def test_auto_scaling_causes_are_classified(cause: str, expected: str) -> None:
    assert drain.classify_termination(cause) == expected


def test_what_squall_wrote_on_the_node_wins_over_the_event_and_auto_scaling() -> None:
    assert (
        drain.termination_cause(annotation="scale-in", hint="warm-pool", activity_cause="spot interruption")
        == "scale-in"
    )
    assert (
        drain.termination_cause(annotation=None, hint="warm-pool", activity_cause="spot interruption")
        == "warm-pool"
    )
    assert (
        drain.termination_cause(annotation="", hint="", activity_cause="a spot interruption notice")
        == "spot-reclaim"
    )
    assert drain.termination_cause(annotation=None, hint="", activity_cause=None) == "terminate"


def test_notification_metadata_is_read_only_when_it_is_a_json_object() -> None:
    assert drain.notification_metadata('{"heartbeatTimeout": 600}') == {"heartbeatTimeout": 600}
    assert drain.notification_metadata("additional-info") == {}
    assert drain.notification_metadata("[1, 2]") == {}
    assert drain.notification_metadata(None) == {}


def test_the_node_of_an_instance_is_found_by_provider_id() -> None:
    nodes: list[dict[str, Any]] = [
        {"metadata": {"name": "other"}, "spec": {"providerID": "aws:///us-west-2a/i-0ffff"}},
        {
            "metadata": {
                "name": "gpu-1",
                "annotations": {conventions.TERMINATION_REASON_ANNOTATION: "scale-in"},
            },
            "spec": {"providerID": f"aws:///us-west-2b/{INSTANCE}", "unschedulable": True},
            "status": {
                "allocatable": {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    ]
    found = drain.find_node(nodes, INSTANCE)
    assert found is not None
    state = drain.node_state(found)
    assert state == NodeState(
        name="gpu-1",
        ready=True,
        unschedulable=True,
        gpus=4,
        annotations={conventions.TERMINATION_REASON_ANNOTATION: "scale-in"},
    )
    assert drain.find_node(nodes, "i-0123") is None
