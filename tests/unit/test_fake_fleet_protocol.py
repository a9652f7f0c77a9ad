"""FakeFleet is a Fleet (mypy checks the assignment below) and models what callers rely on.

The shared contract with the real adapter (describe, desired, terminate,
protection) runs against both in tests/integration/test_fleet.py; this file
covers what only the fake can show without AWS: recorded calls, ``next_error``,
activities by time, and lifecycle actions that are pending only once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squall.core.errors import LifecycleActionGone, NotFoundError, PermanentError, RetryableError
from squall.ports import Fleet, GroupRef, LifecycleAction, ScalingActivity
from tests.fakes.fleet import FakeFleet, FleetCall

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
WEST = "us-west-2"


def _fleet() -> tuple[FakeFleet, GroupRef]:
    fake = FakeFleet()
    ref = fake.add_group("p3-usw2", WEST, desired=2, min_size=1, max_size=4)
    fake.add_instance(ref, "i-1")
    fake.add_instance(ref, "i-2", lifecycle_state="Terminating:Wait")
    return fake, ref


def test_the_fake_is_held_to_the_fleet_protocol() -> None:
    fleet: Fleet = FakeFleet()  # mypy fails here if a signature drifts

    assert fleet.describe_groups([GroupRef(name="none", region=WEST)]) == []


def test_calls_are_recorded_and_next_error_fails_only_the_next_call() -> None:
    # given
    fake, ref = _fleet()
    fake.next_error = RetryableError("Rate exceeded")

    # when / then
    with pytest.raises(RetryableError):
        fake.set_desired_capacity(ref=ref, desired=3)
    assert fake.group(ref).desired == 2
    fake.set_desired_capacity(ref=ref, desired=3)

    assert fake.group(ref).desired == 3
    assert fake.calls == [
        FleetCall("set_desired_capacity", {"ref": ref, "desired": 3}),
        FleetCall("set_desired_capacity", {"ref": ref, "desired": 3}),
    ]


def test_desired_outside_min_max_or_of_a_missing_group_is_refused() -> None:
    fake, ref = _fleet()

    with pytest.raises(PermanentError):
        fake.set_desired_capacity(ref=ref, desired=5)
    with pytest.raises(NotFoundError):
        fake.set_desired_capacity(ref=GroupRef(name="other", region=WEST), desired=1)


def test_terminate_decrements_once_and_respects_min() -> None:
    fake, ref = _fleet()

    fake.terminate_instance(region=WEST, instance_id="i-1")
    fake.terminate_instance(region=WEST, instance_id="i-1")  # again: nothing more happens

    assert fake.group(ref).desired == 1
    assert fake.instance("i-1").lifecycle_state == "Terminating"
    fake.add_instance(ref, "i-3")
    with pytest.raises(PermanentError, match="min size"):
        fake.terminate_instance(region=WEST, instance_id="i-3")
    with pytest.raises(NotFoundError):
        fake.terminate_instance(region=WEST, instance_id="i-unknown")
    with pytest.raises(NotFoundError):
        fake.terminate_instance(region="us-east-1", instance_id="i-3")


def test_protection_of_an_instance_outside_the_group_is_not_found() -> None:
    fake, ref = _fleet()

    with pytest.raises(NotFoundError):
        fake.set_scale_in_protection(ref=ref, instance_ids=["i-1", "i-9"], protected=True)
    assert fake.instance("i-1").protected_from_scale_in is False


def test_recent_activities_are_those_started_since_newest_first() -> None:
    # given
    fake, ref = _fleet()
    other = fake.add_group("p3-use1", "us-east-1")

    def activity(activity_id: str, group: GroupRef, minutes_ago: int) -> ScalingActivity:
        return ScalingActivity(
            activity_id=activity_id,
            group=group.name,
            region=group.region,
            status_code="Failed",
            status_message="We currently do not have sufficient p3.2xlarge capacity ...",
            description="Launching a new EC2 instance.  Status Reason: ...",
            start_time=NOW - timedelta(minutes=minutes_ago),
            end_time=NOW - timedelta(minutes=minutes_ago),
        )

    fake.add_activities(
        [
            activity("old", ref, 60),
            activity("a", ref, 5),
            activity("b", ref, 1),
            activity("e", other, 2),
        ]
    )

    # when
    found = fake.recent_activities([other, ref], since=NOW - timedelta(minutes=10))

    # then
    assert [a.activity_id for a in found] == ["e", "b", "a"]
    assert all(a.failed for a in found)


def test_a_lifecycle_action_can_be_completed_once() -> None:
    # given: i-2 waits on the terminate hook
    fake, ref = _fleet()

    action = LifecycleAction(ref=ref, hook_name="squall-terminate", instance_id="i-2", token=None)

    def heartbeat() -> None:
        fake.record_lifecycle_heartbeat(action)

    def complete() -> None:
        fake.complete_lifecycle_action(action, "CONTINUE")

    # when
    heartbeat()
    complete()

    # then
    assert fake.instance("i-2").lifecycle_state == "Terminating:Proceed"
    with pytest.raises(LifecycleActionGone):
        complete()
    with pytest.raises(LifecycleActionGone):
        heartbeat()


@pytest.mark.parametrize(("result", "after"), [("CONTINUE", "Pending:Proceed"), ("ABANDON", "Terminating")])
def test_completing_a_launch_moves_the_instance_on(result: str, after: str) -> None:
    fake, ref = _fleet()
    fake.add_instance(ref, "i-new", lifecycle_state="Pending:Wait")

    fake.complete_lifecycle_action(
        LifecycleAction(ref=ref, hook_name="squall-launch", instance_id="i-new", token=None),
        "CONTINUE" if result == "CONTINUE" else "ABANDON",
    )

    assert fake.instance("i-new").lifecycle_state == after


def test_groups_handed_out_do_not_share_mutable_tags() -> None:
    fake = FakeFleet()
    ref = fake.add_group("g", WEST, tags={"team": "research"})

    fake.describe_groups([ref])[0].tags["team"] = "changed"

    assert fake.group(ref).tags == {"team": "research"}
