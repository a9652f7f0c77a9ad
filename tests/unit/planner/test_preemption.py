"""Preemption's victim choice: least work lost, the priority gap, never when it fits or capacity can be bought."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from squall.planner.model import NodeGroup, Pod, ScalingFailure
from squall.planner.preemption import (
    Preemption,
    PreemptionPolicy,
    RunningJob,
    WaitingJob,
    buyable,
    choose,
    may_preempt,
)

from .builders import NOW, ago, group, instance, node_of, pod, resources

POLICY = PreemptionPolicy(enabled=True, min_priority_gap=30)


def eight_gpu(
    name: str = "p4d", *, nodes: int = 2, max_size: int | None = None, region: str = "us-west-2"
) -> NodeGroup:
    return group(
        name,
        region=region,
        allocatable=resources("95", "1100Gi", 8, 110),
        instances=[instance(f"i-{name}-{i}") for i in range(nodes)],
        max_size=nodes if max_size is None else max_size,
    )


def running(job: str, node: str, *, gpus: int = 8, replicas: int = 1) -> list[Pod]:
    return [pod(f"{job}-{i}", gpu=gpus, job=job, node=node) for i in range(replicas)]


def waiting(job: str = "urgent", *, priority: int = 90, gpus: int = 8, replicas: int = 1) -> WaitingJob:
    return WaitingJob(
        job_id=job,
        priority=priority,
        pods=tuple(pod(f"{job}-{i}", gpu=gpus, job=job) for i in range(replicas)),
    )


def record(
    job: str, *, priority: int = 10, started: float = 5, checkpoint: float | None = None
) -> RunningJob:
    """Started `started` hours ago; its latest checkpoint `checkpoint` hours ago."""
    return RunningJob(
        job_id=job,
        priority=priority,
        started_at=ago(hours=started),
        checkpoint_at=ago(hours=checkpoint) if checkpoint is not None else None,
    )


def decide(
    queue: list[WaitingJob],
    records: list[RunningJob],
    pods: list[Pod],
    groups: list[NodeGroup],
    *,
    policy: PreemptionPolicy = POLICY,
) -> Preemption | None:
    nodes = [node_of(g, i.instance_id) for g in groups for i in g.instances]
    return choose(
        waiting=queue, running=records, nodes=nodes, pods=pods, groups=groups, policy=policy, now=NOW
    )


def victims(found: Preemption | None) -> list[str]:
    assert found is not None
    return [v.job_id for v in found.victims]


def test_the_victim_is_the_job_that_loses_the_least_work() -> None:
    # given two full nodes: "old" checkpointed 2 h ago, "fresh" 10 minutes ago
    fleet = eight_gpu()
    pods = running("old", "node-i-p4d-0") + running("fresh", "node-i-p4d-1")
    records = [record("old", checkpoint=2), record("fresh", started=20, checkpoint=1 / 6)]
    # when an urgent job needs one node
    found = decide([waiting()], records, pods, [fleet])
    # then the job whose checkpoint is newest goes, though it ran longest
    assert victims(found) == ["fresh"]
    assert found is not None and found.job_id == "urgent" and found.site == "us-west-2"
    assert found.work_lost == timedelta(minutes=10)


def test_a_job_without_a_checkpoint_loses_all_its_run_time() -> None:
    fleet = eight_gpu()
    pods = running("never", "node-i-p4d-0") + running("saved", "node-i-p4d-1")
    records = [record("never", started=1), record("saved", started=6, checkpoint=1.5)]
    assert victims(decide([waiting()], records, pods, [fleet])) == ["never"]


def test_a_checkpoint_from_an_earlier_run_saves_nothing_of_this_one() -> None:
    # "resumed" checkpointed 3 h ago, then was preempted and started again 1 h ago
    fleet = eight_gpu()
    pods = running("resumed", "node-i-p4d-0") + running("other", "node-i-p4d-1")
    records = [record("resumed", started=1, checkpoint=3), record("other", started=2, checkpoint=0.5)]
    assert victims(decide([waiting()], records, pods, [fleet])) == ["other"]


def test_the_lowest_priority_goes_first_when_work_lost_ties() -> None:
    fleet = eight_gpu()
    pods = running("a", "node-i-p4d-0") + running("b", "node-i-p4d-1")
    records = [record("a", priority=20, started=1), record("b", priority=5, started=1)]
    assert victims(decide([waiting()], records, pods, [fleet])) == ["b"]


def test_jobs_less_than_the_gap_below_are_never_victims() -> None:
    # given the only job that would lose little is 20 below the waiting job
    fleet = eight_gpu()
    pods = running("close", "node-i-p4d-0") + running("far", "node-i-p4d-1")
    records = [record("close", priority=70, started=0.1), record("far", priority=60, started=5)]
    # then the one 30 below goes, though it loses more
    assert victims(decide([waiting(priority=90)], records, pods, [fleet])) == ["far"]
    # and with both too close nothing is preempted
    records = [record("close", priority=70, started=0.1), record("far", priority=61, started=5)]
    assert decide([waiting(priority=90)], records, pods, [fleet]) is None


def test_no_victim_is_taken_that_the_fit_does_not_need() -> None:
    # given four half-used nodes: small jobs of 4 GPUs each, one per node
    fleet = eight_gpu(nodes=2)
    pods = (
        running("s1", "node-i-p4d-0", gpus=4)
        + running("s2", "node-i-p4d-0", gpus=4)
        + running("s3", "node-i-p4d-1", gpus=4)
        + running("s4", "node-i-p4d-1", gpus=4)
    )
    # s1 and s3 lose the least, but are on different nodes: an 8-GPU pod needs one whole node
    records = [
        record("s1", started=0.1),
        record("s3", started=0.2),
        record("s2", started=0.3),
        record("s4", started=3),
    ]
    found = decide([waiting(gpus=8)], records, pods, [fleet])
    # s1, s3, s2 are taken in order until it fits (s1 and s2 free node 0), then s3 is given back
    assert victims(found) == ["s1", "s2"]


def test_a_gang_takes_victims_in_one_site_only() -> None:
    west, east = eight_gpu("west", nodes=1), eight_gpu("east", nodes=1, region="us-east-1")
    pods = running("w", "node-i-west-0") + running("e", "node-i-east-0")
    records = [record("w", started=0.1), record("e", started=0.2)]
    # a gang of two 8-GPU replicas cannot be whole in either site, even with both victims
    assert decide([waiting(replicas=2)], records, pods, [west, east]) is None
    # one replica: the site whose victim loses less
    found = decide([waiting()], records, pods, [west, east])
    assert victims(found) == ["w"] and found is not None and found.site == "us-west-2"


def test_no_preemption_for_a_job_that_fits_already() -> None:
    # given a free node (the job waits only for admission's next check)
    fleet = eight_gpu(nodes=2)
    pods = running("low", "node-i-p4d-0")
    assert decide([waiting()], [record("low", started=0.1)], pods, [fleet]) is None


def test_pods_being_deleted_hold_no_room() -> None:
    # a preemption under way: the victim's pods are leaving; no second victim is taken
    fleet = eight_gpu(nodes=2)
    leaving = [dataclasses.replace(p, deleting=True) for p in running("gone", "node-i-p4d-0")]
    pods = leaving + running("other", "node-i-p4d-1")
    assert decide([waiting()], [record("other", started=0.1)], pods, [fleet]) is None


def test_no_preemption_while_capacity_can_be_bought() -> None:
    # given the group can still grow: the job waits for a node to be bought
    fleet = eight_gpu(nodes=2, max_size=4)
    pods = running("a", "node-i-p4d-0") + running("b", "node-i-p4d-1")
    records = [record("a", started=0.1), record("b", started=0.2)]
    assert decide([waiting()], records, pods, [fleet]) is None
    nodes = [node_of(fleet, i.instance_id) for i in fleet.instances]
    assert buyable(waiting(), groups=[fleet], nodes=nodes)
    assert may_preempt([waiting()], groups=[fleet], nodes=nodes, policy=POLICY) == []


def test_no_preemption_while_nodes_are_on_their_way() -> None:
    # at max size, but one instance has no ready node yet
    fleet = eight_gpu(nodes=3, max_size=3)
    nodes = [node_of(fleet, i.instance_id) for i in fleet.instances[:2]]
    assert buyable(waiting(), groups=[fleet], nodes=nodes)


def test_a_group_failing_to_launch_counts_as_unable_to_grow() -> None:
    fleet = eight_gpu(nodes=2, max_size=4)
    failure = ScalingFailure(time=ago(minutes=3), reason="InsufficientInstanceCapacity")
    failing = dataclasses.replace(fleet, failures=(failure,))
    nodes = [node_of(fleet, i.instance_id) for i in fleet.instances]
    assert not buyable(waiting(), groups=[failing], nodes=nodes)


def test_a_group_the_job_does_not_fit_is_no_capacity_for_it() -> None:
    # a CPU group that can grow does not help a GPU job
    gpus = eight_gpu(nodes=2)
    cpus = group("cpu", gpu=False, max_size=10)
    nodes = [node_of(gpus, i.instance_id) for i in gpus.instances]
    assert not buyable(waiting(), groups=[gpus, cpus], nodes=nodes)


def test_jobs_held_by_quota_and_disabled_policy_preempt_nothing() -> None:
    fleet = eight_gpu()
    pods = running("a", "node-i-p4d-0") + running("b", "node-i-p4d-1")
    records = [record("a", started=0.1), record("b", started=0.2)]
    held = WaitingJob(job_id="held", priority=90, pods=waiting().pods, in_line=False)
    assert decide([held], records, pods, [fleet]) is None
    assert decide([waiting()], records, pods, [fleet], policy=PreemptionPolicy()) is None


def test_the_first_job_in_line_that_can_preempt_is_the_one() -> None:
    fleet = eight_gpu()
    pods = running("a", "node-i-p4d-0") + running("b", "node-i-p4d-1")
    records = [record("a", priority=40, started=0.1), record("b", priority=10, started=0.2)]
    # "mid" (priority 60) can take only "b"; "top" (priority 90) would take "a"; "top" is first in line
    queue = [waiting("top", priority=90), waiting("mid", priority=60)]
    found = decide(queue, records, pods, [fleet])
    assert found is not None and found.job_id == "top" and victims(found) == ["a"]


def test_a_job_ahead_that_fits_takes_its_room_first() -> None:
    # one free node: "first" fits there and takes it; "second" then preempts
    fleet = eight_gpu(nodes=2)
    pods = running("low", "node-i-p4d-1")
    queue = [waiting("first", priority=90), waiting("second", priority=90)]
    found = decide(queue, [record("low", started=0.1)], pods, [fleet])
    assert found is not None and found.job_id == "second" and victims(found) == ["low"]


def test_the_policy_checks_its_values() -> None:
    with pytest.raises(ValueError, match="minPriorityGap"):
        PreemptionPolicy(min_priority_gap=0)
    with pytest.raises(ValueError, match="graceSeconds"):
        PreemptionPolicy(grace=timedelta(seconds=-1))
    assert PreemptionPolicy() == PreemptionPolicy(
        enabled=False, min_priority_gap=30, grace=timedelta(seconds=120)
    )
