"""Launch failures, provision timeouts, backoff, give-back, recovery, odd lifecycle states."""

from datetime import UTC, datetime, timedelta

import pytest

from squall.planner import GroupHealth, NodeGroup, Policy, ScalingFailure, backoff_duration, classify_failure
from squall.planner.health import launch_backoff

from .builders import NOW, ago, group, instance, node_of, pending_pods, pod, run_plan, scale_ups

NO_CAPACITY = (
    "Launching a new EC2 instance. Status Reason: We currently do not have sufficient p3.2xlarge "
    "capacity in the Availability Zone you requested (us-west-2a). Our system will be working on "
    "provisioning additional capacity. Launching EC2 instance failed."
)


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (NO_CAPACITY, "insufficient capacity"),
        ("InsufficientInstanceCapacity", "insufficient capacity"),
        ("Your quota allows for 0 more running instance(s). You requested at least 1", "instance limit"),
        ("VcpuLimitExceeded", "instance limit"),
        ("You have requested more vCPU capacity than your current vCPU limit of 32 allows", "instance limit"),
        ("InstanceLimitExceeded", "instance limit"),
        ("VolumeLimitExceeded: You have exceeded your maximum gp3 storage limit", "volume limit"),
        ("Could not launch Spot Instances. UnfulfillableCapacity - Unable to fulfill", "spot capacity"),
        ("The requested configuration is currently not supported.", "launch failure"),
    ],
)
def test_classifies_failures_as_aws_words_them(reason: str, kind: str) -> None:
    assert classify_failure(reason) == kind


@pytest.mark.parametrize(("failures", "minutes"), [(1, 5), (2, 10), (3, 20), (4, 30), (10, 30), (10_000, 30)])
def test_backoff_is_exponential_and_capped(failures: int, minutes: int) -> None:
    assert backoff_duration(failures, Policy()) == timedelta(minutes=minutes)


def _failing_west(**overrides: object) -> NodeGroup:
    settings: dict[str, object] = {
        "region": "us-west-2",
        "priority": 10,
        "desired": 4,
        "instances": [instance("i-1")],
        "failures": [ScalingFailure(time=ago(minutes=1), reason=NO_CAPACITY)],
    }
    settings.update(overrides)
    return group("west", **settings)  # type: ignore[arg-type]


def test_a_failed_launch_backs_off_gives_back_unlaunched_capacity_and_spills_elsewhere() -> None:
    # given: west asked for 4 nodes, got 1, and AWS reports no capacity
    west = _failing_west()
    east = group("east", region="us-east-1", priority=20)
    # when
    result = run_plan(groups=[west, east], nodes=[node_of(west, "i-1")], pods=pending_pods(3, gpu=1))
    # then
    [backoff] = result.backoffs
    assert backoff.group == "west"
    assert backoff.health.backoff_until == NOW + timedelta(minutes=5)
    assert backoff.health.consecutive_failures == 1
    assert backoff.reasons[0].startswith("insufficient capacity: Launching a new EC2 instance")
    assert backoff.health.reason.startswith("insufficient capacity: ")
    assert [(g.group, g.from_desired, g.to_desired) for g in result.give_backs] == [("west", 4, 1)]
    # one pod fits the ready node; the launching slots of a backed-off group count for nothing
    assert scale_ups(result) == {"east": (0, 2)}


def test_backoff_doubles_with_each_check_that_finds_new_failures() -> None:
    # given: a first failure six minutes ago, backoff just over, and a new one
    previous = GroupHealth(
        backoff_until=ago(minutes=1), consecutive_failures=1, last_failure_at=ago(minutes=6)
    )
    west = _failing_west(
        failures=[ScalingFailure(time=ago(seconds=30), reason="InsufficientInstanceCapacity")]
    )
    # when
    result = run_plan(groups=[west], pods=pending_pods(1, gpu=1), health={"west": previous})
    # then
    [backoff] = result.backoffs
    assert backoff.health.consecutive_failures == 2
    assert backoff.health.backoff_until == NOW + timedelta(minutes=10)
    assert backoff.health.last_failure_at == ago(seconds=30)
    assert result.scale_ups == ()


def test_a_failure_already_counted_is_not_counted_again() -> None:
    # given: the health already records this failure
    west = _failing_west()
    counted = GroupHealth(
        backoff_until=ago(minutes=1) + timedelta(minutes=5),
        consecutive_failures=1,
        last_failure_at=ago(minutes=1),
    )
    # when
    result = run_plan(groups=[west], pods=pending_pods(5, gpu=1), health={"west": counted})
    # then: unchanged health, still backed off, still giving back
    assert result.backoffs == ()
    assert result.scale_ups == ()
    assert [g.to_desired for g in result.give_backs] == [1]


def test_failures_older_than_the_window_are_ignored() -> None:
    # given
    west = _failing_west(failures=[ScalingFailure(time=ago(hours=2), reason=NO_CAPACITY)], desired=1)
    # when
    result = run_plan(groups=[west], nodes=[node_of(west, "i-1")], pods=pending_pods(2, gpu=1))
    # then
    assert result.backoffs == ()
    assert scale_ups(result) == {"west": (1, 2)}


def test_an_instance_past_the_provision_timeout_backs_off_and_is_terminated_not_counted() -> None:
    # given: launched 20 minutes ago (timeout 15), never registered
    west = group("west", priority=10, instances=[instance("i-slow", "Pending", ago(minutes=20))])
    east = group("east", region="us-east-1", priority=20)
    # when
    result = run_plan(groups=[west, east], pods=pending_pods(1, gpu=1))
    # then
    [backoff] = result.backoffs
    assert backoff.health.backoff_until == NOW + timedelta(minutes=5)
    assert backoff.health.last_failure_at == ago(minutes=5)  # launch + timeout
    assert "provision timeout: instance i-slow" in backoff.reasons[0]
    [removal] = result.scale_downs
    assert (removal.node, removal.instance, removal.group) == (None, "i-slow", "west")
    assert "provision timeout" in removal.reasons[0]
    assert scale_ups(result) == {"east": (0, 1)}


def test_a_ready_node_still_without_gpus_past_the_timeout_times_out_too() -> None:
    # given
    west = group("west", instances=[instance("i-nogpu", launched=ago(minutes=20))])
    broken = node_of(west, "i-nogpu", gpus_ready=False)
    # when
    result = run_plan(groups=[west], nodes=[broken], pods=pending_pods(1, gpu=1))
    # then
    assert [(d.node, d.instance) for d in result.scale_downs] == [("node-i-nogpu", "i-nogpu")]
    assert result.backoffs[0].health.consecutive_failures == 1


def test_a_timed_out_node_that_runs_pods_is_never_removed() -> None:
    # given: CPU work landed on the node whose GPUs never showed up
    west = group("west", instances=[instance("i-nogpu", launched=ago(minutes=20))])
    broken = node_of(west, "i-nogpu", gpus_ready=False)
    busy = pod("cpu-work", cpu="1", node="node-i-nogpu")
    # when
    result = run_plan(groups=[west], nodes=[broken], pods=[busy])
    # then
    assert result.scale_downs == ()
    assert len(result.backoffs) == 1


def test_a_group_recovers_once_an_instance_launched_after_the_failure_comes_up() -> None:
    # given: backoff over, and a node launched after the last failure is ready
    previous = GroupHealth(
        backoff_until=ago(minutes=5), consecutive_failures=2, last_failure_at=ago(minutes=20)
    )
    west = group("west", instances=[instance("i-new", launched=ago(minutes=10))])
    # when
    result = run_plan(groups=[west], nodes=[node_of(west, "i-new")], health={"west": previous})
    # then
    [backoff] = result.backoffs
    assert backoff.health == GroupHealth(last_failure_at=ago(minutes=20))
    assert backoff.reasons[0].startswith("recovered")


def test_all_regions_in_backoff_scales_nothing_and_says_why() -> None:
    # given
    west = _failing_west(instances=[], desired=2)
    east = group(
        "east", region="us-east-1", failures=[ScalingFailure(time=ago(minutes=2), reason="VcpuLimitExceeded")]
    )
    # when
    result = run_plan(groups=[west, east], pods=pending_pods(2, gpu=1) + pending_pods(2, "g", gpu=1, job="g"))
    # then
    assert result.scale_ups == ()
    assert [b.group for b in result.backoffs] == ["east", "west"]
    assert [(g.group, g.to_desired) for g in result.give_backs] == [("west", 0)]
    assert len(result.unschedulable) == 4
    assert all("in backoff until" in u.reason for u in result.unschedulable)


def test_an_unknown_lifecycle_state_counts_as_in_flight_and_is_never_removed() -> None:
    # given: a state this code has never seen, on a booting and on an idle ready instance
    odd = group(
        "odd",
        instances=[
            instance("i-new", "Quarantined:Wait", ago(minutes=2)),
            instance("i-old", "Quarantined:Wait"),
        ],
    )
    idle = node_of(odd, "i-old", ready_since=ago(hours=2))
    # when
    result = run_plan(groups=[odd], nodes=[idle], pods=pending_pods(1, gpu=1, cpu="7"))
    # then: no crash, nothing launched twice, nothing removed
    assert result.scale_ups == ()
    assert result.scale_downs == ()


def test_an_unknown_state_past_the_timeout_neither_backs_off_nor_is_terminated() -> None:
    # given
    odd = group("odd", instances=[instance("i-stuck", "Quarantined:Wait", ago(hours=1))])
    # when
    result = run_plan(groups=[odd], pods=pending_pods(1, gpu=1))
    # then
    assert result.backoffs == () and result.scale_downs == ()
    assert scale_ups(result) == {"odd": (1, 2)}


def test_terminating_instances_are_not_capacity() -> None:
    # given
    leaving = group("leaving", desired=0, instances=[instance("i-bye", "Terminating:Wait")])
    # when
    result = run_plan(groups=[leaving], nodes=[node_of(leaving, "i-bye")], pods=pending_pods(1, gpu=1))
    # then
    assert scale_ups(result) == {"leaving": (0, 1)}
    assert result.scale_downs == ()


def test_now_must_be_timezone_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        run_plan(now=NOW.replace(tzinfo=None))


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        # west's instances never became nodes: the pod does not wait for its booting one, it spills to east
        ("provision timeout: no node joined the cluster 10m after launch", {"east": (0, 1)}),
        # west is short of capacity, but its one instance launched fine and boots: the pod waits
        # for the instance already on its way, nothing scales twice
        ("insufficient capacity: We currently do not have sufficient p3.2xlarge capacity", {}),
    ],
    ids=["nodes-do-not-join-not-waited-for", "short-of-capacity-still-counted"],
)
def test_booting_instances_of_a_backed_off_group(reason: str, expected: dict[str, tuple[int, int]]) -> None:
    # given: west is backed off and has one booting instance
    west = group("west", region="us-west-2", priority=10, desired=1, instances=[instance("i-9", launched=ago(minutes=1))])
    east = group("east", region="us-east-1", priority=20)
    health = {
        "west": GroupHealth(
            backoff_until=NOW + timedelta(minutes=10),
            consecutive_failures=1,
            last_failure_at=ago(minutes=2),
            reason=reason,
        )
    }
    # when
    result = run_plan(groups=[west, east], pods=pending_pods(1, gpu=1), health=health)
    # then
    assert scale_ups(result) == expected


# ---- the one backoff rule (planner.health.launch_backoff), as the lifecycle service applies it ----
# (moved here from tests/unit/test_drain.py: core.drain re-exports the planner's rule)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
PLANNER = Policy(backoff_base=timedelta(minutes=5), backoff_max=timedelta(minutes=30), failure_window=timedelta(hours=1))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_an_abandoned_launch_backs_a_healthy_group_off_for_the_base_time() -> None:
    health = launch_backoff(GroupHealth(), failed_at=at(600), reason="provision timeout", now=at(601), policy=PLANNER)
    assert health.backoff_until == at(601) + timedelta(minutes=5)
    assert health.consecutive_failures == 1 and health.last_failure_at == at(600)


def test_consecutive_abandoned_launches_double_the_backoff() -> None:
    previous = GroupHealth(backoff_until=at(900), consecutive_failures=2, last_failure_at=at(300), reason="x")
    health = launch_backoff(previous, failed_at=at(1200), reason="provision timeout", now=at(1201), policy=PLANNER)
    assert health.consecutive_failures == 3
    assert health.backoff_until == at(1201) + timedelta(minutes=20)


def test_a_failure_counted_already_changes_nothing_and_a_backoff_is_never_shortened() -> None:
    counted = GroupHealth(backoff_until=at(3000), consecutive_failures=1, last_failure_at=at(600), reason="x")
    assert launch_backoff(counted, failed_at=at(600), reason="y", now=at(700), policy=PLANNER) is counted
    long = GroupHealth(backoff_until=at(7200), consecutive_failures=1, last_failure_at=at(100), reason="x")
    health = launch_backoff(long, failed_at=at(600), reason="y", now=at(700), policy=PLANNER)
    assert health.backoff_until == at(7200) and health.consecutive_failures == 2


def test_a_failure_after_the_window_starts_the_count_again() -> None:
    old = GroupHealth(consecutive_failures=4, last_failure_at=at(0), reason="x")
    health = launch_backoff(old, failed_at=at(7200), reason="y", now=at(7201), policy=PLANNER)
    assert health.consecutive_failures == 1


def test_failures_in_a_row_double_the_backoff_up_to_the_maximum() -> None:
    health = GroupHealth()
    durations = []
    for step in range(5):
        health = launch_backoff(health, failed_at=at(60 * step), reason="r", now=at(60 * step), policy=PLANNER)
        assert health.backoff_until is not None
        durations.append(health.backoff_until - at(60 * step))
    assert durations == [timedelta(minutes=m) for m in (5, 10, 20, 30, 30)]
    assert health.consecutive_failures == 5


def test_a_failure_after_a_recovery_starts_the_count_again() -> None:
    recent = GroupHealth(consecutive_failures=3, last_failure_at=at(0), reason="old")
    assert launch_backoff(recent, failed_at=at(600), reason="new", now=at(600), policy=PLANNER).consecutive_failures == 4
    recovered = launch_backoff(recent, failed_at=at(600), reason="new", now=at(600), policy=PLANNER, recovered=True)
    assert recovered.consecutive_failures == 1


def test_the_drain_module_applies_the_planners_rule() -> None:
    from squall.core import drain

    assert drain.launch_backoff is launch_backoff
