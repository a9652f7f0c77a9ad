"""AutoScalingFleet against moto (groups in two regions) and botocore's Stubber.

moto implements groups, desired capacity, termination and scale-in protection,
so those run against it, and the same contract runs against FakeFleet so the
fake cannot drift from the adapter. moto has no lifecycle actions and returns no
scaling activities: those, the exact request parameters, and the translation of
AWS errors into Squall errors run against the Stubber with AWS-worded answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
from botocore.stub import Stubber
from moto import mock_aws

from squall.adapters.aws.autoscaling import AutoScalingFleet
from squall.core.errors import LifecycleActionGone, NotFoundError, PermanentError, RetryableError, SquallError
from squall.ports import Fleet, GroupRef, LifecycleAction
from tests.fakes.fleet import FakeFleet

pytestmark = pytest.mark.timeout(120)

WEST, EAST = "us-west-2", "us-east-1"
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
TOKEN = "5a1b2c3d-0000-4000-8000-00000000abcd"  # 36 characters, as AWS requires
NO_CAPACITY = (
    "We currently do not have sufficient p3.2xlarge capacity in the Availability Zone you "
    "requested (us-west-2a). Our system will be working on provisioning additional capacity. "
    "You can currently get p3.2xlarge capacity by not specifying an Availability Zone in your "
    "request or choosing us-west-2b, us-west-2c. Launching EC2 instance failed."
)


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", WEST)


class CountingClients:
    """The region -> client factory the composition root hands in, counting API calls."""

    def __init__(self, service: str = "autoscaling") -> None:
        self.service = service
        self.calls: Counter[tuple[str, str]] = Counter()
        self._clients: dict[str, Any] = {}

    def __call__(self, region: str) -> Any:
        if region not in self._clients:
            client = boto3.client(
                self.service, region_name=region, config=Config(retries={"total_max_attempts": 1})
            )
            client.meta.events.register(
                f"before-call.{client.meta.service_model.service_id.hyphenize()}",
                self._counter(region),
            )
            self._clients[region] = client
        return self._clients[region]

    def _counter(self, region: str) -> Callable[..., None]:
        def count(model: Any, **_: Any) -> None:
            self.calls[(region, model.name)] += 1

        return count


# --- the moto world ----------------------------------------------------------------


class World:
    """Lays out groups for a contract test and hands over the Fleet to test."""

    fleet: Fleet

    def group(
        self,
        name: str,
        region: str,
        *,
        size: int,
        max_size: int = 10,
        tags: dict[str, str] | None = None,
    ) -> tuple[GroupRef, list[str]]:
        """A group of ``size`` instances: its reference and its instance ids."""
        return self._lay_out(name, region, size, max_size, tags or {})

    def _lay_out(
        self, name: str, region: str, size: int, max_size: int, tags: dict[str, str]
    ) -> tuple[GroupRef, list[str]]:
        raise NotImplementedError


class MotoWorld(World):
    def __init__(self) -> None:
        self.clients = CountingClients()
        self.ec2_clients = CountingClients("ec2")
        self.fleet: Fleet = AutoScalingFleet(self.clients, ec2_clients=self.ec2_clients)
        self._launch_specs: dict[str, dict[str, Any]] = {}

    def _lay_out(
        self, name: str, region: str, size: int, max_size: int, tags: dict[str, str]
    ) -> tuple[GroupRef, list[str]]:
        client = boto3.client("autoscaling", region_name=region)
        client.create_auto_scaling_group(
            AutoScalingGroupName=name,
            MinSize=0,
            MaxSize=max_size,
            DesiredCapacity=size,
            AvailabilityZones=[f"{region}a"],
            Tags=[{"Key": key, "Value": value, "PropagateAtLaunch": False} for key, value in tags.items()],
            **self._launch_spec(region),
        )
        raw = client.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
        instances = raw["AutoScalingGroups"][0]["Instances"]
        return GroupRef(name=name, region=region), [i["InstanceId"] for i in instances]

    def _launch_spec(self, region: str) -> dict[str, Any]:
        """A launch template in us-west-2, a launch configuration elsewhere."""
        if region not in self._launch_specs:
            ec2 = boto3.client("ec2", region_name=region)
            image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
            if region == WEST:
                ec2.create_launch_template(
                    LaunchTemplateName="squall-gpu",
                    LaunchTemplateData={"ImageId": image, "InstanceType": "p3.2xlarge"},
                )
                spec: dict[str, Any] = {
                    "LaunchTemplate": {"LaunchTemplateName": "squall-gpu", "Version": "$Latest"}
                }
            else:
                boto3.client("autoscaling", region_name=region).create_launch_configuration(
                    LaunchConfigurationName="squall-gpu", ImageId=image, InstanceType="p3.2xlarge"
                )
                spec = {"LaunchConfigurationName": "squall-gpu"}
            self._launch_specs[region] = spec
        return self._launch_specs[region]


class FakeWorld(World):
    def __init__(self) -> None:
        self.fake = FakeFleet()
        self.fleet: Fleet = self.fake
        self._next_id = 0

    def _lay_out(
        self, name: str, region: str, size: int, max_size: int, tags: dict[str, str]
    ) -> tuple[GroupRef, list[str]]:
        ref = self.fake.add_group(name, region, desired=size, max_size=max_size, tags=tags)
        ids = []
        for _ in range(size):
            self._next_id += 1
            ids.append(self.fake.add_instance(ref, f"i-{self._next_id:017x}").instance_id)
        return ref, ids


@pytest.fixture
def moto_world() -> Iterator[MotoWorld]:
    with mock_aws():
        yield MotoWorld()


@pytest.fixture(params=["moto", "fake"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    if request.param == "fake":
        yield FakeWorld()
        return
    with mock_aws():
        yield MotoWorld()


# --- the contract, against moto and against the fake -------------------------------


def test_describe_groups_reads_sizes_instances_and_tags_in_both_regions(world: World) -> None:
    # given
    west, west_ids = world.group("p3-usw2", WEST, size=2, max_size=16, tags={"team": "research"})
    east, east_ids = world.group("p3-use1", EAST, size=1)
    missing = GroupRef(name="no-such-group", region=WEST)

    # when
    groups = world.fleet.describe_groups([east, missing, west, east])

    # then: missing omitted, duplicates collapsed, order as asked
    assert [g.ref for g in groups] == [east, west]
    east_group, west_group = groups
    assert (west_group.desired, west_group.min_size, west_group.max_size) == (2, 0, 16)
    assert west_group.tags == {"team": "research"}
    assert sorted(i.instance_id for i in west_group.instances) == sorted(west_ids)
    assert [i.instance_id for i in east_group.instances] == east_ids
    for group in groups:
        for instance in group.instances:
            assert (instance.group, instance.region) == (group.name, group.region)
            assert instance.lifecycle_state == "InService"
            assert instance.health_status == "Healthy"
            assert instance.availability_zone == f"{group.region}a"
            assert instance.protected_from_scale_in is False


def test_set_desired_capacity_changes_the_group(world: World) -> None:
    ref, _ = world.group("p3-usw2", WEST, size=0)

    world.fleet.set_desired_capacity(ref=ref, desired=3)

    assert world.fleet.describe_groups([ref])[0].desired == 3


def test_terminate_with_decrement_removes_the_instance_and_shrinks_desired(world: World) -> None:
    ref, (victim, survivor) = world.group("p3-usw2", WEST, size=2)

    world.fleet.terminate_instance(region=WEST, instance_id=victim, decrement=True)

    group = world.fleet.describe_groups([ref])[0]
    assert group.desired == 1
    states = {i.instance_id: i.lifecycle_state for i in group.instances}
    assert states.get(victim, "Terminating").startswith("Terminating")
    assert states[survivor] == "InService"


def test_terminate_without_decrement_keeps_desired(world: World) -> None:
    ref, (victim,) = world.group("p3-use1", EAST, size=1)

    world.fleet.terminate_instance(region=EAST, instance_id=victim, decrement=False)

    assert world.fleet.describe_groups([ref])[0].desired == 1


def test_scale_in_protection_is_set_and_lifted(world: World) -> None:
    ref, (first, second) = world.group("p3-usw2", WEST, size=2)

    world.fleet.set_scale_in_protection(ref=ref, instance_ids=[first], protected=True)
    protected = {
        i.instance_id: i.protected_from_scale_in for i in world.fleet.describe_groups([ref])[0].instances
    }
    world.fleet.set_scale_in_protection(ref=ref, instance_ids=[first], protected=False)
    lifted = {
        i.instance_id: i.protected_from_scale_in for i in world.fleet.describe_groups([ref])[0].instances
    }

    assert protected == {first: True, second: False}
    assert lifted == {first: False, second: False}


# --- moto only: call counts and launch times ---------------------------------------


def test_describe_groups_batches_100_names_per_call_and_one_region_per_client(
    moto_world: MotoWorld,
) -> None:
    # given: 130 groups in one region, 2 in the other
    west = [moto_world.group(f"g-{n:03d}", WEST, size=0)[0] for n in range(130)]
    east = [moto_world.group(f"g-{n:03d}", EAST, size=0)[0] for n in range(2)]
    refs = [*west, *east, GroupRef(name="no-such-group", region=EAST)]

    # when
    groups = moto_world.fleet.describe_groups(refs)

    # then: two calls in us-west-2 (100 + 30 names), one in us-east-1
    assert [g.ref for g in groups] == [*west, *east]
    assert moto_world.clients.calls == Counter(
        {(WEST, "DescribeAutoScalingGroups"): 2, (EAST, "DescribeAutoScalingGroups"): 1}
    )


def test_describe_groups_of_nothing_calls_nothing(moto_world: MotoWorld) -> None:
    assert moto_world.fleet.describe_groups([]) == []
    assert moto_world.clients.calls == Counter()


def test_launch_times_come_from_ec2_in_one_call_per_region(moto_world: MotoWorld) -> None:
    # given
    west, _ = moto_world.group("p3-usw2", WEST, size=2)
    east, _ = moto_world.group("p3-use1", EAST, size=1)
    started = datetime.now(UTC)

    # when
    groups = moto_world.fleet.describe_groups([west, east])

    # then
    launch_times = [i.launch_time for g in groups for i in g.instances]
    assert len(launch_times) == 3
    for launch_time in launch_times:
        assert launch_time is not None
        assert abs(launch_time - started) < timedelta(minutes=5)
    assert moto_world.ec2_clients.calls == Counter(
        {(WEST, "DescribeInstances"): 1, (EAST, "DescribeInstances"): 1}
    )


def test_launch_times_are_unknown_without_ec2_clients(moto_world: MotoWorld) -> None:
    ref, _ = moto_world.group("p3-usw2", WEST, size=1)

    (group,) = AutoScalingFleet(moto_world.clients).describe_groups([ref])

    assert [i.launch_time for i in group.instances] == [None]


# --- Stubber: exact requests, activities, lifecycle actions, errors ----------------


@dataclass
class Stubbed:
    fleet: AutoScalingFleet
    stubs: dict[str, Stubber]
    clients: dict[str, Any]

    def __getitem__(self, region: str) -> Stubber:
        return self.stubs[region]


@pytest.fixture
def stubbed() -> Iterator[Stubbed]:
    clients = {
        region: boto3.client(
            "autoscaling", region_name=region, config=Config(retries={"total_max_attempts": 1})
        )
        for region in (WEST, EAST)
    }
    stubs = {region: Stubber(client) for region, client in clients.items()}
    for stub in stubs.values():
        stub.activate()
    yield Stubbed(fleet=AutoScalingFleet(clients.__getitem__), stubs=stubs, clients=clients)
    for stub in stubs.values():
        stub.assert_no_pending_responses()
        stub.deactivate()


def _activity(
    activity_id: str,
    group: str,
    *,
    status: str,
    started: datetime,
    ended: datetime | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "ActivityId": activity_id,
        "AutoScalingGroupName": group,
        "Description": f"Launching a new EC2 instance: {activity_id}",
        "Cause": "At 2024-05-01T11:50:00Z a user request update of AutoScalingGroup constraints "
        "to min: 0, max: 16, desired: 1 changing the desired capacity from 0 to 1.",
        "StartTime": started,
        "StatusCode": status,
        "Progress": 100 if status in ("Successful", "Failed", "Cancelled") else 30,
    }
    if ended is not None:
        raw["EndTime"] = ended
    if message is not None:
        raw["StatusMessage"] = message
    return raw


def test_set_desired_capacity_ignores_cooldowns(stubbed: Stubbed) -> None:
    stubbed[WEST].add_response(
        "set_desired_capacity",
        {},
        {"AutoScalingGroupName": "p3-usw2", "DesiredCapacity": 4, "HonorCooldown": False},
    )

    stubbed.fleet.set_desired_capacity(ref=GroupRef(name="p3-usw2", region=WEST), desired=4)


def test_negative_desired_capacity_is_refused_without_a_call(stubbed: Stubbed) -> None:
    with pytest.raises(PermanentError):
        stubbed.fleet.set_desired_capacity(ref=GroupRef(name="p3-usw2", region=WEST), desired=-1)


def test_terminate_asks_for_decrement_by_default(stubbed: Stubbed) -> None:
    stubbed[EAST].add_response(
        "terminate_instance_in_auto_scaling_group",
        {"Activity": _activity("a-1", "p3-use1", status="InProgress", started=NOW)},
        {"InstanceId": "i-0abc", "ShouldDecrementDesiredCapacity": True},
    )

    stubbed.fleet.terminate_instance(region=EAST, instance_id="i-0abc")


def test_terminating_an_instance_no_group_holds_is_not_found(stubbed: Stubbed) -> None:
    stubbed[WEST].add_client_error(
        "terminate_instance_in_auto_scaling_group",
        service_error_code="ValidationError",
        service_message="Instance Id not found - No managed instance found for instance ID: i-0gone",
    )

    with pytest.raises(NotFoundError) as raised:
        stubbed.fleet.terminate_instance(region=WEST, instance_id="i-0gone")
    assert isinstance(raised.value.__cause__, ClientError)


def test_scale_in_protection_goes_50_instances_a_call(stubbed: Stubbed) -> None:
    ids = [f"i-{n:017x}" for n in range(120)]
    for batch in (ids[:50], ids[50:100], ids[100:]):
        stubbed[WEST].add_response(
            "set_instance_protection",
            {},
            {"AutoScalingGroupName": "p3-usw2", "InstanceIds": batch, "ProtectedFromScaleIn": True},
        )

    stubbed.fleet.set_scale_in_protection(
        ref=GroupRef(name="p3-usw2", region=WEST), instance_ids=[*ids, ids[0]], protected=True
    )


def test_scale_in_protection_of_no_instance_calls_nothing(stubbed: Stubbed) -> None:
    stubbed.fleet.set_scale_in_protection(
        ref=GroupRef(name="p3-usw2", region=WEST), instance_ids=[], protected=True
    )


def test_recent_activities_keep_aws_words_and_stop_at_the_first_old_finished_one(
    stubbed: Stubbed,
) -> None:
    # given: in-progress first (one of them older than the cutoff), then newest first
    since = NOW - timedelta(minutes=10)
    stubbed[WEST].add_response(
        "describe_scaling_activities",
        {
            "Activities": [
                _activity(
                    "a-old-running",
                    "p3-usw2",
                    status="MidLifecycleAction",
                    started=NOW - timedelta(hours=2),
                ),
                _activity(
                    "a-running",
                    "p3-usw2",
                    status="PreInService",
                    started=NOW - timedelta(minutes=1),
                ),
                _activity(
                    "a-failed",
                    "p3-usw2",
                    status="Failed",
                    started=NOW - timedelta(minutes=3),
                    ended=NOW - timedelta(minutes=2),
                    message=NO_CAPACITY,
                ),
                _activity(
                    "a-old-done",
                    "p3-usw2",
                    status="Successful",
                    started=NOW - timedelta(hours=1),
                    ended=NOW - timedelta(minutes=59),
                ),
            ],
            # a next page exists, but nothing on it can be recent: it is never asked for
            "NextToken": "page-2",
        },
        {"AutoScalingGroupName": "p3-usw2", "MaxRecords": 100},
    )

    # when
    activities = stubbed.fleet.recent_activities([GroupRef(name="p3-usw2", region=WEST)], since=since)

    # then
    assert [a.activity_id for a in activities] == ["a-running", "a-failed"]
    running, failed = activities
    assert (running.status_code, running.finished, running.end_time) == (
        "PreInService",
        False,
        None,
    )
    assert failed.failed and failed.finished
    assert failed.status_message == NO_CAPACITY
    assert (failed.group, failed.region) == ("p3-usw2", WEST)
    assert failed.start_time == NOW - timedelta(minutes=3)
    assert failed.end_time == NOW - timedelta(minutes=2)
    assert failed.description == "Launching a new EC2 instance: a-failed"


def test_recent_activities_page_on_while_activities_are_recent(stubbed: Stubbed) -> None:
    since = NOW - timedelta(minutes=30)
    recent = [
        _activity(f"a-{n}", "p3-use1", status="Successful", started=NOW - timedelta(minutes=n), ended=NOW)
        for n in range(1, 4)
    ]
    stubbed[EAST].add_response(
        "describe_scaling_activities",
        {"Activities": recent[:2], "NextToken": "page-2"},
        {"AutoScalingGroupName": "p3-use1", "MaxRecords": 100},
    )
    stubbed[EAST].add_response(
        "describe_scaling_activities",
        {"Activities": [recent[2]]},
        {"AutoScalingGroupName": "p3-use1", "MaxRecords": 100, "NextToken": "page-2"},
    )
    stubbed[WEST].add_response(
        "describe_scaling_activities",
        {"Activities": [_activity("a-w", "p3-usw2", status="Cancelled", started=NOW, ended=NOW)]},
        {"AutoScalingGroupName": "p3-usw2", "MaxRecords": 100},
    )

    activities = stubbed.fleet.recent_activities(
        [GroupRef(name="p3-use1", region=EAST), GroupRef(name="p3-usw2", region=WEST)],
        since=since.replace(tzinfo=None),  # naive means UTC, as in AWS
    )

    assert [(a.activity_id, a.region) for a in activities] == [
        ("a-1", EAST),
        ("a-2", EAST),
        ("a-3", EAST),
        ("a-w", WEST),
    ]


@pytest.mark.parametrize(("token", "result"), [(TOKEN, "CONTINUE"), (None, "ABANDON")])
def test_complete_lifecycle_action_sends_the_token_only_when_there_is_one(
    stubbed: Stubbed, token: str | None, result: Any
) -> None:
    expected = {
        "AutoScalingGroupName": "p3-usw2",
        "LifecycleHookName": "squall-terminate",
        "InstanceId": "i-0abc",
        "LifecycleActionResult": result,
    }
    if token:
        expected["LifecycleActionToken"] = token
    stubbed[WEST].add_response("complete_lifecycle_action", {}, expected)

    action = LifecycleAction(
        ref=GroupRef(name="p3-usw2", region=WEST),
        hook_name="squall-terminate",
        instance_id="i-0abc",
        token=token,
    )
    stubbed.fleet.complete_lifecycle_action(action, result)


def test_heartbeat_names_the_action(stubbed: Stubbed) -> None:
    stubbed[EAST].add_response(
        "record_lifecycle_action_heartbeat",
        {},
        {
            "AutoScalingGroupName": "p3-use1",
            "LifecycleHookName": "squall-terminate",
            "InstanceId": "i-0abc",
            "LifecycleActionToken": TOKEN,
        },
    )

    stubbed.fleet.record_lifecycle_heartbeat(
        LifecycleAction(
            ref=GroupRef(name="p3-use1", region=EAST),
            hook_name="squall-terminate",
            instance_id="i-0abc",
            token=TOKEN,
        )
    )


@pytest.mark.parametrize(
    "message",
    [
        f"No active Lifecycle Action found with token {TOKEN}",
        "No active Lifecycle Action found with instance ID i-0abc",
    ],
)
@pytest.mark.parametrize("method", ["complete", "heartbeat"])
def test_an_action_no_longer_pending_is_gone(stubbed: Stubbed, method: str, message: str) -> None:
    ref = GroupRef(name="p3-usw2", region=WEST)
    with pytest.raises(LifecycleActionGone) as raised:
        if method == "complete":
            stubbed[WEST].add_client_error("complete_lifecycle_action", "ValidationError", message)
            stubbed.fleet.complete_lifecycle_action(
                LifecycleAction(ref=ref, hook_name="squall-launch", instance_id="i-0abc", token=TOKEN),
                "CONTINUE",
            )
        else:
            stubbed[WEST].add_client_error("record_lifecycle_action_heartbeat", "ValidationError", message)
            stubbed.fleet.record_lifecycle_heartbeat(
                LifecycleAction(ref=ref, hook_name="squall-terminate", instance_id="i-0abc", token=TOKEN)
            )
    assert isinstance(raised.value, PermanentError)
    assert isinstance(raised.value.__cause__, ClientError)


@pytest.mark.parametrize(
    ("code", "status", "message", "expected"),
    [
        ("Throttling", 400, "Rate exceeded", RetryableError),
        ("ThrottlingException", 400, "Rate exceeded", RetryableError),
        ("RequestLimitExceeded", 400, "Request limit exceeded.", RetryableError),
        (
            "ResourceContention",
            500,
            "You already have a pending update to an Auto Scaling resource.",
            RetryableError,
        ),
        ("ScalingActivityInProgress", 400, "Scaling activity in progress", RetryableError),
        ("InternalFailure", 500, "An internal error occurred.", RetryableError),
        ("ServiceUnavailable", 503, "Service is unavailable.", RetryableError),
        ("SomethingNew", 502, "Bad gateway", RetryableError),
        (
            "ValidationError",
            400,
            "New SetDesiredCapacity value 20 is above max value 16 for the AutoScalingGroup.",
            PermanentError,
        ),
        (
            "AccessDenied",
            403,
            "User is not authorized to perform: autoscaling:SetDesiredCapacity",
            PermanentError,
        ),
        ("ValidationError", 400, "AutoScalingGroup name not found - null", NotFoundError),
    ],
)
def test_aws_errors_become_squall_errors(
    stubbed: Stubbed, code: str, status: int, message: str, expected: type[SquallError]
) -> None:
    stubbed[WEST].add_client_error("set_desired_capacity", code, message, http_status_code=status)

    with pytest.raises(SquallError) as raised:
        stubbed.fleet.set_desired_capacity(ref=GroupRef(name="p3-usw2", region=WEST), desired=20)

    assert type(raised.value) is expected
    assert code in str(raised.value) and message in str(raised.value)
    assert isinstance(raised.value.__cause__, ClientError)


# Every method of the port, with the operation(s) it calls on the client.
REF = GroupRef(name="p3-usw2", region=WEST)
LAUNCH_ACTION = LifecycleAction(ref=REF, hook_name="squall-launch", instance_id="i-0abc", token=TOKEN)
CALLS: dict[str, tuple[str, Callable[[Fleet], object]]] = {
    "describe_groups": ("describe_auto_scaling_groups", lambda f: f.describe_groups([REF])),
    "recent_activities": (
        "describe_scaling_activities",
        lambda f: f.recent_activities([REF], since=NOW),
    ),
    "set_desired_capacity": (
        "set_desired_capacity",
        lambda f: f.set_desired_capacity(ref=REF, desired=1),
    ),
    "terminate_instance": (
        "terminate_instance_in_auto_scaling_group",
        lambda f: f.terminate_instance(region=WEST, instance_id="i-0abc"),
    ),
    "set_scale_in_protection": (
        "set_instance_protection",
        lambda f: f.set_scale_in_protection(ref=REF, instance_ids=["i-0abc"], protected=True),
    ),
    "complete_lifecycle_action": (
        "complete_lifecycle_action",
        lambda f: f.complete_lifecycle_action(LAUNCH_ACTION, "CONTINUE"),
    ),
    "record_lifecycle_heartbeat": (
        "record_lifecycle_action_heartbeat",
        lambda f: f.record_lifecycle_heartbeat(LAUNCH_ACTION),
    ),
}


def _unreachable(**_: Any) -> None:
    raise EndpointConnectionError(endpoint_url=f"https://autoscaling.{WEST}.amazonaws.com")


@pytest.mark.parametrize("failure", ["throttled", "rejected", "unreachable"])
@pytest.mark.parametrize("method", sorted(CALLS))
def test_no_botocore_exception_leaks_out_of_any_method(stubbed: Stubbed, method: str, failure: str) -> None:
    # given
    operation, call = CALLS[method]
    if failure == "throttled":
        stubbed[WEST].add_client_error(operation, "Throttling", "Rate exceeded", http_status_code=400)
    elif failure == "rejected":
        stubbed[WEST].add_client_error(operation, "AccessDenied", "not authorized", http_status_code=403)
    else:
        stubbed[WEST].deactivate()
        stubbed.clients[WEST].meta.events.register("before-call.auto-scaling", _unreachable)

    # when
    with pytest.raises(SquallError) as raised:
        call(stubbed.fleet)

    # then
    expected = PermanentError if failure == "rejected" else RetryableError
    assert isinstance(raised.value, expected)
    assert isinstance(raised.value.__cause__, ClientError | BotoCoreError)


def test_invalid_parameters_caught_by_botocore_are_permanent(stubbed: Stubbed) -> None:
    with pytest.raises(PermanentError) as raised:
        stubbed.fleet.terminate_instance(region=WEST, instance_id="i-" + "0" * 30)
    assert isinstance(raised.value.__cause__, BotoCoreError)


def test_a_client_factory_failure_is_translated_too() -> None:
    def misconfigured(region: str) -> Any:
        return boto3.client("autoscaling", region_name=f"{region} ")

    with pytest.raises(PermanentError) as raised:
        AutoScalingFleet(misconfigured).describe_groups([REF])
    assert isinstance(raised.value.__cause__, BotoCoreError)
