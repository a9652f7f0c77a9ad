"""No botocore exception leaks out of an AWS adapter: every method, every kind of failure.

Each adapter method is driven against botocore's Stubber (AWS answers with an error)
or with a botocore exception raised where the request would be sent (AWS never
answers), and must raise only Squall's own errors, chained, with one split of
retryable and permanent for every service (squall.adapters.aws.errors). The
Kubernetes adapter has the same test in test_cluster.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from botocore.stub import Stubber

from squall.adapters.aws import errors
from squall.adapters.aws.autoscaling import AutoScalingFleet
from squall.adapters.aws.drain_queue import SqsDrainQueue
from squall.adapters.aws.drain_store import DynamoDrainStore
from squall.adapters.aws.eventbridge import EventBridgeScaleRequests
from squall.adapters.aws.identity import IamPrincipals, describe_cluster
from squall.adapters.aws.job_store import DynamoJobStore
from squall.adapters.aws.jobs_queue import JobsQueue
from squall.adapters.aws.scale_state import DynamoScaleState
from squall.adapters.kubernetes.eks_auth import eks_token
from squall.core import drain
from squall.core.asg_events import DrainStepMessage
from squall.core.drain import DrainPolicy, Kind
from squall.core.errors import (
    ConflictError,
    DuplicateJobError,
    ItemTooLargeError,
    LifecycleActionGone,
    NotFoundError,
    PermanentError,
    RetryableError,
    SquallError,
)
from squall.core.jobs import Job, JobEvent, JobStatus
from squall.planner import GroupHealth
from squall.ports import GroupRef, LifecycleAction
from tests.job_records import job_record

pytestmark = pytest.mark.timeout(60)

REGION = "us-west-2"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
REF = GroupRef(name="p3-usw2", region=REGION)
TOKEN = "87654321-4321-4321-4321-210987654321"
LAUNCH_ACTION = LifecycleAction(ref=REF, hook_name="squall-launch", instance_id="i-0abc", token=TOKEN)
QUEUE_URL = f"https://sqs.{REGION}.amazonaws.com/123456789012/squall-drain"


def _client(service: str) -> Any:
    return boto3.client(
        service, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def _job() -> Job:
    return job_record("j-1", status=JobStatus.QUEUED, reason="WaitingForCapacity", at=T0)


def _event(version: int = 1) -> JobEvent:
    return JobEvent(
        job_id="j-1", version=version, at=T0, status=JobStatus.QUEUED, previous=None, reason="Submitted"
    )


def _drain_record(version: int = 1) -> drain.DrainRecord:
    action = LifecycleAction(
        ref=GroupRef(name="squall-p3-usw2", region=REGION),
        hook_name="squall-terminate",
        instance_id="i-0a1b2c3d4e5f60718",
        token=TOKEN,
    )
    started = drain.start(action, kind=Kind.TERMINATE, group="p3-usw2", started_at=T0, policy=DrainPolicy())
    return dataclasses.replace(started, version=version)


@dataclass(frozen=True)
class Method:
    service: str
    operation: str  # the client method the adapter calls first
    call: Callable[[Any], object]  # given the client, drives the adapter method


def _step() -> DrainStepMessage:
    return DrainStepMessage(instance_id="i-0a1b2c3d4e5f60718", step_id="s-1", version=1)


# Every public method of every AWS adapter, with the first operation it sends.
METHODS: dict[str, Method] = {
    "job_store.create": Method(
        "dynamodb", "put_item", lambda c: DynamoJobStore(c, "jobs").create(_job(), _event())
    ),
    "job_store.save": Method(
        "dynamodb", "transact_write_items", lambda c: DynamoJobStore(c, "jobs").save(_job(), _event(2))
    ),
    "job_store.get": Method("dynamodb", "get_item", lambda c: DynamoJobStore(c, "jobs").get("j-1")),
    "job_store.events": Method("dynamodb", "query", lambda c: DynamoJobStore(c, "jobs").events("j-1")),
    "job_store.list_by_status": Method(
        "dynamodb", "query", lambda c: DynamoJobStore(c, "jobs").list_by_status(JobStatus.QUEUED)
    ),
    "job_store.list_all": Method("dynamodb", "scan", lambda c: DynamoJobStore(c, "jobs").list_all()),
    "scale_state.acquire_lease": Method(
        "dynamodb",
        "put_item",
        lambda c: DynamoScaleState(c, "jobs").acquire_lease(
            name="scale", holder="me", now=T0, duration=timedelta(minutes=1)
        ),
    ),
    "scale_state.release_lease": Method(
        "dynamodb",
        "delete_item",
        lambda c: DynamoScaleState(c, "jobs").release_lease(name="scale", holder="me"),
    ),
    "scale_state.load_health": Method(
        "dynamodb", "query", lambda c: DynamoScaleState(c, "jobs").load_health()
    ),
    "scale_state.save_health": Method(
        "dynamodb", "put_item", lambda c: DynamoScaleState(c, "jobs").save_health("p3-usw2", GroupHealth())
    ),
    "scale_state.record_decision": Method(
        "dynamodb",
        "put_item",
        lambda c: DynamoScaleState(c, "jobs").record_decision(
            at=T0, trigger="schedule", dry_run=False, plan={}, acted={}
        ),
    ),
    "scale_state.decisions": Method(
        "dynamodb", "query", lambda c: DynamoScaleState(c, "jobs").decisions(day=T0)
    ),
    "drain_store.get": Method("dynamodb", "get_item", lambda c: DynamoDrainStore(c, "jobs").get("i-0a")),
    "drain_store.create": Method(
        "dynamodb", "put_item", lambda c: DynamoDrainStore(c, "jobs").create(_drain_record())
    ),
    "drain_store.save": Method(
        "dynamodb", "put_item", lambda c: DynamoDrainStore(c, "jobs").save(_drain_record(2))
    ),
    "drain_queue.send_step": Method(
        "sqs",
        "send_message",
        lambda c: SqsDrainQueue(c, queue_url=QUEUE_URL).send_step(_step(), delay=timedelta(seconds=30)),
    ),
    "drain_queue.retry_after": Method(
        "sqs",
        "change_message_visibility_batch",
        lambda c: SqsDrainQueue(c, queue_url=QUEUE_URL).retry_after(
            ["receipt-1"], delay=timedelta(seconds=30)
        ),
    ),
    "jobs_queue.send": Method("sqs", "send_message", lambda c: JobsQueue(c, QUEUE_URL).send("{}")),
    "eventbridge.request_scale_check": Method(
        "events",
        "put_events",
        lambda c: EventBridgeScaleRequests(c, bus_name="squall").request_scale_check(reason="t"),
    ),
    "identity.unique_id(role)": Method(
        "iam", "get_role", lambda c: IamPrincipals(c).unique_id("arn:aws:iam::123456789012:role/trainer")
    ),
    "identity.unique_id(user)": Method(
        "iam", "get_user", lambda c: IamPrincipals(c).unique_id("arn:aws:iam::123456789012:user/alice")
    ),
    "identity.describe_cluster": Method("eks", "describe_cluster", lambda c: describe_cluster(c, "squall")),
    "fleet.describe_groups": Method(
        "autoscaling",
        "describe_auto_scaling_groups",
        lambda c: AutoScalingFleet(lambda _: c).describe_groups([REF]),
    ),
    "fleet.recent_activities": Method(
        "autoscaling",
        "describe_scaling_activities",
        lambda c: AutoScalingFleet(lambda _: c).recent_activities([REF], since=T0),
    ),
    "fleet.describe_groups(launch times)": Method(
        "ec2",
        "describe_instances",
        lambda c: AutoScalingFleet(_one_group_client(), ec2_clients=lambda _: c).describe_groups([REF]),
    ),
    "fleet.set_desired_capacity": Method(
        "autoscaling",
        "set_desired_capacity",
        lambda c: AutoScalingFleet(lambda _: c).set_desired_capacity(ref=REF, desired=1),
    ),
    "fleet.terminate_instance": Method(
        "autoscaling",
        "terminate_instance_in_auto_scaling_group",
        lambda c: AutoScalingFleet(lambda _: c).terminate_instance(region=REGION, instance_id="i-0abc"),
    ),
    "fleet.set_scale_in_protection": Method(
        "autoscaling",
        "set_instance_protection",
        lambda c: AutoScalingFleet(lambda _: c).set_scale_in_protection(
            ref=REF, instance_ids=["i-0abc"], protected=True
        ),
    ),
    "fleet.complete_lifecycle_action": Method(
        "autoscaling",
        "complete_lifecycle_action",
        lambda c: AutoScalingFleet(lambda _: c).complete_lifecycle_action(LAUNCH_ACTION, "CONTINUE"),
    ),
    "fleet.record_lifecycle_heartbeat": Method(
        "autoscaling",
        "record_lifecycle_action_heartbeat",
        lambda c: AutoScalingFleet(lambda _: c).record_lifecycle_heartbeat(LAUNCH_ACTION),
    ),
}


def _one_group_client() -> Callable[[str], Any]:
    """An autoscaling client that answers one group with one instance (for the EC2 lookups)."""
    client = _client("autoscaling")
    stub = Stubber(client)
    stub.add_response(
        "describe_auto_scaling_groups",
        {
            "AutoScalingGroups": [
                {
                    "AutoScalingGroupName": REF.name,
                    "MinSize": 0,
                    "MaxSize": 4,
                    "DesiredCapacity": 1,
                    "DefaultCooldown": 300,
                    "AvailabilityZones": ["us-west-2a"],
                    "HealthCheckType": "EC2",
                    "CreatedTime": T0,
                    "Instances": [
                        {
                            "InstanceId": "i-0abc",
                            "AvailabilityZone": "us-west-2a",
                            "LifecycleState": "InService",
                            "HealthStatus": "Healthy",
                            "ProtectedFromScaleIn": False,
                        }
                    ],
                }
            ]
        },
    )
    stub.activate()
    return lambda _: client


# AWS answered: (error code, HTTP status, message) -> the kind of Squall error.
ANSWERS: dict[str, tuple[str, int, str, type[SquallError]]] = {
    "throttled": ("ThrottlingException", 400, "Rate exceeded", RetryableError),
    "throttled (query style)": ("Throttling", 400, "Rate exceeded", RetryableError),
    "too many requests": ("SomethingNew", 429, "Too Many Requests", RetryableError),
    "server error": ("InternalFailure", 500, "An internal error occurred.", RetryableError),
    "unavailable": ("ServiceUnavailable", 503, "Service is unavailable.", RetryableError),
    "access denied": ("AccessDeniedException", 403, "not authorized to perform", PermanentError),
    "validation": ("ValidationException", 400, "1 validation error detected", PermanentError),
    "not found": ("ResourceNotFoundException", 400, "Requested resource not found", PermanentError),
}

# AWS never answered, or botocore refused to send: the exception -> the kind of Squall error.
BOTOCORE: dict[str, tuple[Callable[[], BotoCoreError], type[SquallError]]] = {
    "endpoint unreachable": (
        lambda: EndpointConnectionError(endpoint_url=f"https://example.{REGION}.amazonaws.com"),
        RetryableError,
    ),
    "connect timeout": (lambda: ConnectTimeoutError(endpoint_url="https://example"), RetryableError),
    "read timeout": (lambda: ReadTimeoutError(endpoint_url="https://example"), RetryableError),
    "credentials not fetched": (
        lambda: CredentialRetrievalError(provider="container-role", error_msg="timed out"),
        RetryableError,
    ),
    "no credentials": (NoCredentialsError, PermanentError),
    "invalid parameters": (
        lambda: ParamValidationError(report="Invalid length for parameter"),
        PermanentError,
    ),
}


def _assert_squall(raised: BaseException, expected: type[SquallError]) -> None:
    assert isinstance(raised, SquallError), f"{type(raised).__module__}.{type(raised).__name__} leaked out"
    assert isinstance(raised, expected), f"{type(raised).__name__} ({raised}) is not a {expected.__name__}"
    if expected is PermanentError:
        assert not isinstance(raised, RetryableError)
    assert isinstance(raised.__cause__, ClientError | BotoCoreError)


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_aws_answers_leave_every_adapter_method_as_squall_errors(method: str, answer: str) -> None:
    # given: AWS answers the method's call with an error
    spec = METHODS[method]
    code, status, message, expected = ANSWERS[answer]
    client = _client(spec.service)
    stub = Stubber(client)
    stub.add_client_error(spec.operation, code, message, http_status_code=status)
    # when
    with stub, pytest.raises(Exception) as raised:
        spec.call(client)
    # then
    _assert_squall(raised.value, expected)
    assert code in str(raised.value)


@pytest.mark.parametrize("failure", sorted(BOTOCORE))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_botocore_failures_leave_every_adapter_method_as_squall_errors(method: str, failure: str) -> None:
    # given: the request never reaches AWS
    spec = METHODS[method]
    make, expected = BOTOCORE[failure]
    client = _client(spec.service)

    def fail(**_: Any) -> None:
        raise make()

    client.meta.events.register("before-call", fail)
    # when
    with pytest.raises(Exception) as raised:
        spec.call(client)
    # then
    _assert_squall(raised.value, expected)


# ---- the refinements each adapter adds on top of the general rule ------------------------


def _conditional(operation: str, client: Any) -> Stubber:
    stub = Stubber(client)
    stub.add_client_error(operation, "ConditionalCheckFailedException", "The conditional request failed", 400)
    return stub


def test_a_failed_condition_is_a_conflict_or_a_duplicate_or_a_lost_lease() -> None:
    client = _client("dynamodb")
    with _conditional("put_item", client), pytest.raises(DuplicateJobError):
        DynamoJobStore(client, "jobs").create(_job(), _event())
    with _conditional("put_item", client), pytest.raises(ConflictError) as raised:
        DynamoDrainStore(client, "jobs").save(_drain_record(2))
    assert isinstance(raised.value.__cause__, ClientError)
    with _conditional("put_item", client):
        assert (
            DynamoScaleState(client, "jobs").acquire_lease(
                name="scale", holder="me", now=T0, duration=timedelta(minutes=1)
            )
            is False
        )
    with _conditional("delete_item", client):
        DynamoScaleState(client, "jobs").release_lease(name="scale", holder="me")


def _cancelled(*reasons: dict[str, str]) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
            "CancellationReasons": list(reasons),
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "TransactWriteItems",
    )


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        (({"Code": "ConditionalCheckFailed"}, {"Code": "None"}), ConflictError),
        (({"Code": "None"}, {"Code": "TransactionConflict"}), RetryableError),
        (({"Code": "ThrottlingError"}, {"Code": "None"}), RetryableError),
        (({"Code": "ConditionalCheckFailed"}, {"Code": "TransactionConflict"}), ConflictError),
        (
            (
                {
                    "Code": "ValidationError",
                    "Message": "Item size to update has exceeded the maximum allowed size",
                },
            ),
            ItemTooLargeError,
        ),
        (({"Code": "ValidationError", "Message": "Type mismatch"},), PermanentError),
    ],
)
def test_a_cancelled_transaction_is_decided_by_its_reasons(
    reasons: tuple[dict[str, str], ...], expected: type[SquallError]
) -> None:
    client = _client("dynamodb")

    def cancel(**_: Any) -> None:
        raise _cancelled(*reasons)

    client.meta.events.register("before-call", cancel)
    with pytest.raises(SquallError) as raised:
        DynamoJobStore(client, "jobs").save(_job(), _event(2))
    assert type(raised.value) is expected


def test_auto_scalings_own_words_are_refined_but_throttling_stays_retryable() -> None:
    client = _client("autoscaling")
    fleet = AutoScalingFleet(lambda _: client)
    stub = Stubber(client)
    stub.add_client_error(
        "complete_lifecycle_action",
        "ValidationError",
        "No active Lifecycle Action found with instance ID i-0abc",
        400,
    )
    stub.add_client_error(
        "terminate_instance_in_auto_scaling_group",
        "ValidationError",
        "Instance Id not found - No managed instance found for instance ID: i-0abc",
        400,
    )
    stub.add_client_error(
        "complete_lifecycle_action", "Throttling", "Rate exceeded: No active Lifecycle Action found", 400
    )
    with stub:
        untokened = LifecycleAction(ref=REF, hook_name="h", instance_id="i-0abc", token=None)
        with pytest.raises(LifecycleActionGone):
            fleet.complete_lifecycle_action(untokened, "CONTINUE")
        with pytest.raises(NotFoundError):
            fleet.terminate_instance(region=REGION, instance_id="i-0abc")
        with pytest.raises(RetryableError):
            fleet.complete_lifecycle_action(untokened, "CONTINUE")


class _FailingSession:
    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    def client(self, *_: Any, **__: Any) -> Any:
        raise self._exc


@pytest.mark.parametrize("failure", sorted(BOTOCORE))
def test_the_eks_token_follows_the_same_split(failure: str) -> None:
    make, expected = BOTOCORE[failure]
    with pytest.raises(Exception) as raised:
        eks_token(cluster_name="squall", region=REGION, session=_FailingSession(make()))  # type: ignore[arg-type]
    _assert_squall(raised.value, expected)


# ---- the translator itself -------------------------------------------------------------


def test_the_translator_chains_names_what_was_done_and_passes_squall_errors_through() -> None:
    exc = ClientError(
        {
            "Error": {"Code": "ThrottlingException", "Message": "slow down"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "Query",
    )
    with (
        pytest.raises(RetryableError, match="read jobs: ThrottlingException: slow down") as raised,
        errors.translated("read jobs"),
    ):
        raise exc
    assert raised.value.__cause__ is exc
    mine = PermanentError("ours")
    with pytest.raises(PermanentError) as passed, errors.translated("read jobs"):
        raise mine
    assert passed.value is mine


def test_a_rule_is_not_asked_about_a_retryable_answer() -> None:
    asked: list[str] = []

    def rule(exc: ClientError, text: str) -> SquallError | None:
        asked.append(text)
        return ConflictError(text)

    throttled = ClientError(
        {"Error": {"Code": "Throttling"}, "ResponseMetadata": {"HTTPStatusCode": 400}}, "Op"
    )
    denied = ClientError(
        {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "Op"
    )
    assert type(errors.translate("x", throttled, rules=[rule])) is RetryableError
    assert asked == []
    assert type(errors.translate("x", denied, rules=[rule])) is ConflictError
    assert asked == ["x: AccessDenied"]
