"""The simulated fleet: capacity, boot, lifecycle hooks with timeouts and heartbeats, faults."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squall.core.errors import LifecycleActionGone, RetryableError
from squall.core.manifests import render
from squall.core.spec import parse_spec
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.fleet import FleetHooks, LocalFleet, RegionCapacity
from squall.local.memory import InMemoryAutoScaling
from squall.planner import NodeGroup, Resources
from squall.ports import GroupRef, LifecycleAction

GROUP = NodeGroup(
    name="p3-usw2",
    region="us-west-2",
    instance_type="p3.8xlarge",
    allocatable=Resources(cpu=31_850, memory=228 * 2**30, gpu=4, pods=58),
    max_size=10,
    asg_name="squall-p3-usw2",
)
REF = GroupRef(name="squall-p3-usw2", region="us-west-2")


def _action(hook_name: str, instance_id: str, *, token: str | None = None) -> LifecycleAction:
    """An action of REF's: without a token, the local fleet finds it by instance and hook, as AWS does."""
    return LifecycleAction(ref=REF, hook_name=hook_name, instance_id=instance_id, token=token)


def make_fleet(
    *, hooks: bool = False, capacity: int = 2
) -> tuple[LocalFleet, VirtualClock, SimulatedCluster]:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock)
    autoscaling = InMemoryAutoScaling()
    autoscaling.create_group(name=GROUP.asg_name, region=GROUP.region, min_size=0, max_size=10)
    fleet = LocalFleet(
        adapter=autoscaling,
        clock=clock,
        cluster=cluster,
        groups=[GROUP],
        capacity={
            "us-west-2": RegionCapacity(instances={"p3.8xlarge": capacity}, boot_time=timedelta(minutes=3))
        },
        hooks=FleetHooks() if hooks else None,
    )
    return fleet, clock, cluster


def test_instances_beyond_capacity_fail_as_aws_words_it_and_never_appear() -> None:
    fleet, _, _ = make_fleet(capacity=2)
    fleet.set_desired_capacity(ref=REF, desired=3)
    group = fleet.describe_groups([REF])[0]
    assert group.desired == 3 and len(group.instances) == 2
    failures = fleet.recent_activities([REF], since=fleet.clock.start)
    assert len(failures) == 1 and failures[0].failed
    assert "do not have sufficient p3.8xlarge capacity" in failures[0].status_message


def test_a_launched_instance_becomes_a_node_after_its_boot_time() -> None:
    fleet, clock, cluster = make_fleet()
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    clock.advance(timedelta(minutes=2))
    fleet.advance()
    assert cluster.list_nodes() == []
    clock.advance(timedelta(minutes=1))
    fleet.advance()
    (node,) = cluster.list_nodes()
    instance = fleet.describe_groups([REF])[0].instances[0].instance_id
    assert node["spec"]["providerID"].endswith(instance)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0", "Ready before the device plugin runs"
    clock.advance(timedelta(seconds=30))
    fleet.advance()
    assert cluster.list_nodes()[0]["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def test_launch_hook_holds_the_instance_until_continue() -> None:
    fleet, _, _ = make_fleet(hooks=True)
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    (event,) = fleet.outbox
    assert event["detail-type"] == "EC2 Instance-launch Lifecycle Action"
    instance = event["detail"]["EC2InstanceId"]
    assert fleet.describe_groups([REF])[0].instances[0].lifecycle_state == "Pending:Wait"
    fleet.complete_lifecycle_action(
        _action("squall-launch", instance, token=event["detail"]["LifecycleActionToken"]), "CONTINUE"
    )
    assert fleet.describe_groups([REF])[0].instances[0].lifecycle_state == "InService"
    with pytest.raises(LifecycleActionGone):
        fleet.complete_lifecycle_action(_action("squall-launch", instance), "CONTINUE")


def test_an_expired_launch_hook_abandons_and_the_group_replaces_the_instance() -> None:
    fleet, clock, _ = make_fleet(hooks=True)
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    first = fleet.outbox[0]["detail"]["EC2InstanceId"]
    clock.advance(timedelta(minutes=11))
    fleet.advance()
    instances = [i.instance_id for i in fleet.describe_groups([REF])[0].instances]
    assert first not in instances and len(instances) == 1
    assert fleet.stats.timed_out == 1
    # the expired hook and the replacement's hook, still waiting, both count as open
    assert fleet.hook_stats()["hooksLeftOpen"] == 2


def test_terminate_waits_for_the_hook_and_heartbeats_extend_it() -> None:
    fleet, clock, cluster = make_fleet(hooks=True)
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    launch = fleet.outbox.pop()["detail"]
    fleet.complete_lifecycle_action(_action("squall-launch", launch["EC2InstanceId"]), "CONTINUE")
    clock.advance(timedelta(minutes=3))
    fleet.advance()
    fleet.terminate_instance(region="us-west-2", instance_id=launch["EC2InstanceId"], decrement=True)
    terminate = fleet.outbox.pop()
    assert terminate["detail"]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    for _ in range(3):
        clock.advance(timedelta(minutes=8))
        fleet.record_lifecycle_heartbeat(
            _action(
                "squall-terminate", launch["EC2InstanceId"], token=terminate["detail"]["LifecycleActionToken"]
            )
        )
        fleet.advance()
        assert len(cluster.list_nodes()) == 1, "the node stays while its drain is going on"
    fleet.complete_lifecycle_action(_action("squall-terminate", launch["EC2InstanceId"]), "CONTINUE")
    fleet.advance()
    assert cluster.list_nodes() == [] and fleet.describe_groups([REF])[0].desired == 0
    assert fleet.hook_stats() == {"drains": 1, "hooksCompleted": 2, "hooksLeftOpen": 0}


def test_a_replacement_launches_while_the_old_instance_waits_in_its_terminate_hook() -> None:
    # given a booted instance with a job on its node, in a group with room for two
    fleet, clock, cluster = make_fleet(hooks=True, capacity=2)
    instance = booted(fleet, clock)
    node = run_a_job_on_the_node(cluster)
    # when it is terminated through its group without decrementing desired capacity
    fleet.terminate_instance(region="us-west-2", instance_id=instance, decrement=False)
    fleet.advance()
    # then Auto Scaling launches the replacement at once ("terminate and launch") while the
    # old instance runs on in Terminating:Wait, as describe shows it, its node still there
    group = fleet.describe_groups([REF])[0]
    states = {i.instance_id: i.lifecycle_state for i in group.instances}
    assert group.desired == 1 and states.pop(instance) == "Terminating:Wait"
    (replacement,) = states
    assert states[replacement] == "Pending:Wait"
    assert [e["detail"]["LifecycleTransition"] for e in fleet.outbox] == [
        "autoscaling:EC2_INSTANCE_TERMINATING",
        "autoscaling:EC2_INSTANCE_LAUNCHING",
    ]
    fleet.complete_lifecycle_action(_action("squall-launch", replacement), "CONTINUE")
    clock.advance(timedelta(minutes=3))
    fleet.advance()
    assert sorted(n["metadata"]["name"] for n in cluster.list_nodes()) == sorted(
        [node, f"{GROUP.name}-{replacement[-8:]}"]
    ), "the replacement joins while the old node drains"
    # and once the hook is done the old instance goes, and only the replacement is left
    fleet.complete_lifecycle_action(_action("squall-terminate", instance), "CONTINUE")
    fleet.advance()
    group = fleet.describe_groups([REF])[0]
    assert [i.instance_id for i in group.instances] == [replacement] and group.desired == 1
    assert [n["metadata"]["name"] for n in cluster.list_nodes()] == [f"{GROUP.name}-{replacement[-8:]}"]
    assert fleet.hook_stats() == {"drains": 1, "hooksCompleted": 3, "hooksLeftOpen": 0}


def test_a_replacement_beyond_the_regions_capacity_fails_while_the_old_instance_still_runs() -> None:
    # given a region that can run only one instance of the type, and it runs
    fleet, clock, _ = make_fleet(hooks=True, capacity=1)
    instance = booted(fleet, clock)
    # when it is replaced: the old instance still holds the region's one place
    fleet.terminate_instance(region="us-west-2", instance_id=instance, decrement=False)
    fleet.advance()
    # then the replacement's launch fails for capacity, as EC2 words it
    group = fleet.describe_groups([REF])[0]
    assert [(i.instance_id, i.lifecycle_state) for i in group.instances] == [(instance, "Terminating:Wait")]
    assert any(a.status_code == "Failed" for a in fleet.recent_activities([REF], since=clock.start))


def test_a_wrong_token_is_refused() -> None:
    fleet, _, _ = make_fleet(hooks=True)
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    instance = fleet.outbox[0]["detail"]["EC2InstanceId"]
    with pytest.raises(LifecycleActionGone):
        fleet.complete_lifecycle_action(_action("squall-launch", instance, token="stale"), "CONTINUE")


def test_a_spot_reclaim_takes_the_instance_after_two_minutes_whatever_the_hook() -> None:
    fleet, clock, _ = make_fleet(hooks=True)
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    instance = fleet.outbox.pop()["detail"]["EC2InstanceId"]
    fleet.complete_lifecycle_action(_action("squall-launch", instance), "CONTINUE")
    clock.advance(timedelta(minutes=3))
    fleet.advance()
    fleet.reclaim(instance)
    assert fleet.outbox.pop()["detail-type"] == "EC2 Instance-terminate Lifecycle Action"
    clock.advance(timedelta(minutes=2))
    fleet.advance()
    assert instance not in [i.instance_id for i in fleet.describe_groups([REF])[0].instances]
    assert fleet.describe_groups([REF])[0].desired == 1, "the group replaces a reclaimed instance"


def test_throttling_and_region_outage_and_broken_joins() -> None:
    fleet, clock, cluster = make_fleet(capacity=5)
    fleet.throttle(1)
    with pytest.raises(RetryableError, match="Rate exceeded"):
        fleet.describe_groups([REF])
    assert fleet.describe_groups([REF])[0].desired == 0
    fleet.set_capacity(region="us-west-2", instance_type="p3.8xlarge", instances=0)
    fleet.set_desired_capacity(ref=REF, desired=1)
    assert fleet.describe_groups([REF])[0].instances == ()
    fleet.set_capacity(region="us-west-2", instance_type="p3.8xlarge", instances=5)
    fleet.break_joins(region="us-west-2", instance_type="p3.8xlarge", count=1)
    fleet.set_desired_capacity(ref=REF, desired=0)
    fleet.set_desired_capacity(ref=REF, desired=1)
    clock.advance(timedelta(minutes=10))
    fleet.advance()
    assert len(fleet.describe_groups([REF])[0].instances) == 1 and cluster.list_nodes() == []


def booted(fleet: LocalFleet, clock: VirtualClock) -> str:
    """One instance launched, its hook answered, booted into a node with its GPUs: its id."""
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    instance = fleet.describe_groups([REF])[0].instances[0].instance_id
    if fleet.hooks is not None:
        fleet.outbox.clear()
        fleet.complete_lifecycle_action(_action("squall-launch", instance), "CONTINUE")
    clock.advance(timedelta(minutes=3))
    fleet.advance()
    clock.advance(timedelta(seconds=30))
    fleet.advance()
    return instance


def run_a_job_on_the_node(cluster: SimulatedCluster) -> str:
    spec = parse_spec(
        {
            "name": "j",
            "team": "research",
            "image": "registry.example.com/squall/t:1",
            "resources": {"gpu": 4},
        },
        teams=["research"],
        registries=["registry.example.com/squall"],
    )
    for manifest in render(spec, job_id="j-1", namespace="team-research"):
        if manifest["kind"] == "Job":
            manifest["spec"]["suspend"] = False  # as admission lets it run
        cluster.create(manifest)
    cluster.set_behaviour("j-1", run_for=timedelta(hours=1))
    cluster.advance()
    (pod,) = cluster.list_pods(job_id="j-1")
    assert pod["status"]["phase"] == "Running"
    return str(pod["spec"]["nodeName"])


def test_a_lost_instance_takes_its_busy_node_at_once_and_the_group_replaces_it() -> None:
    fleet, clock, cluster = make_fleet(hooks=True)
    instance = booted(fleet, clock)
    node = run_a_job_on_the_node(cluster)
    # when the host fails without notice
    assert fleet.lose(instance) == node
    # then its node and pod are gone at once: no notice, nothing drained first
    assert cluster.list_nodes() == []
    assert cluster.list_pods(node_name=node) == [] and cluster.list_pods(job_id="j-1") == []
    (activity,) = fleet.recent_activities([REF], since=clock.start)
    assert "in response to an EC2 health check indicating it has been terminated or stopped" in activity.cause
    # Auto Scaling still runs the terminate hook for the health-check replacement, after the fact
    (event,) = fleet.outbox
    assert event["detail"]["EC2InstanceId"] == instance
    assert event["detail"]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    fleet.advance()
    assert cluster.list_nodes() == [], "while its hook waits, the lost instance does not join again"
    fleet.complete_lifecycle_action(_action("squall-terminate", instance), "CONTINUE")
    fleet.advance()
    group = fleet.describe_groups([REF])[0]
    assert group.desired == 1, "the desired capacity stays"
    assert [i.instance_id for i in group.instances] != [instance] and len(group.instances) == 1
    # a node lost to a fault is not a busy node terminated by Squall
    assert fleet.terminated_busy == []


def test_without_hooks_a_lost_instance_is_replaced_at_once() -> None:
    fleet, clock, cluster = make_fleet()
    instance = booted(fleet, clock)
    fleet.lose(instance)
    fleet.advance()
    assert cluster.list_nodes() == []
    (replacement,) = fleet.describe_groups([REF])[0].instances
    assert replacement.instance_id != instance and fleet.terminated_busy == []


def test_the_fleet_says_when_it_next_changes_on_its_own() -> None:
    fleet, clock, _ = make_fleet(hooks=True)
    assert fleet.next_event_time() is None
    fleet.set_desired_capacity(ref=REF, desired=1)
    fleet.advance()
    launched = clock.now()
    # a boot in three minutes, before the launch hook's ten-minute timeout
    assert fleet.next_event_time() == launched + timedelta(minutes=3)
    instance = fleet.outbox.pop()["detail"]["EC2InstanceId"]
    fleet.complete_lifecycle_action(_action("squall-launch", instance), "CONTINUE")
    clock.advance(timedelta(minutes=3))
    fleet.advance()
    assert fleet.next_event_time() == clock.now() + timedelta(seconds=30), "the GPU device plugin"
    clock.advance(timedelta(seconds=30))
    fleet.advance()
    assert fleet.next_event_time() is None
    fleet.reclaim(instance)
    assert fleet.next_event_time() == clock.now() + timedelta(minutes=2), "the spot notice runs out"
