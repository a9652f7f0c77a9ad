"""Names and sizes of the AWS resources a Squall deployment has, in one place for both sides.

The CDK stacks build the queues, the table and the functions from these
(stacks/constants.py re-exports them), and the local runtime creates and plays
the same resources with them (squall.local): a message that fails comes back
after the queue's own visibility timeout, the redrive happens on the same
receive, the queues carry the names the stacks give them. The simulator then
shows what a deployment would do, races between a retry and a lifecycle hook
included. Plain Python: no boto3, no aws_cdk.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

# -- functions ------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSpec:
    handler: str
    description: str
    timeout_seconds: int
    memory_mb: int = 512  # the kubernetes client alone takes ~60 MB; 512 MB buys CPU too
    reserved_concurrency: int | None = None
    # Asynchronous invocations (EventBridge): how long an event may wait, and how
    # often a failed one is retried. None keeps Lambda's defaults (6 h, 2 retries).
    max_event_age_seconds: int | None = None
    async_retries: int | None = None


SUBMIT = "submit"
SCALE = "scale"
LIFECYCLE = "lifecycle"
DRAIN = "drain"
RECONCILE = "reconcile"


def _handler(name: str) -> str:
    """A function's entry point: ``handler`` in its module squall/handlers/<name>.py."""
    return f"squall.handlers.{name}.handler"


def _on_event(name: str, description: str) -> FunctionSpec:
    """A function that a queue's batch or one Auto Scaling event invokes: a minute for each."""
    return FunctionSpec(handler=_handler(name), description=description, timeout_seconds=60)


def _scheduled_check(
    *,
    name: str,
    description: str,
    memory_mb: int = FunctionSpec.memory_mb,
    reserved_concurrency: int | None = None,
) -> FunctionSpec:
    """A function the one-minute schedule runs (stacks/triggers.py)."""
    return FunctionSpec(
        handler=_handler(name),
        description=description,
        # Shorter than the one-minute schedule, so one check ends before the next.
        timeout_seconds=50,
        memory_mb=memory_mb,
        reserved_concurrency=reserved_concurrency,
        # A check that waited two minutes is stale (the schedule has run a newer
        # one), and a failed one is superseded by the next minute's.
        max_event_age_seconds=120,
        async_retries=0,
    )


FUNCTIONS: dict[str, FunctionSpec] = {
    SUBMIT: _on_event(SUBMIT, "Records queued jobs in the job table's queue"),
    SCALE: _scheduled_check(
        name=SCALE,
        description="Admits queued jobs to a cluster and plans GPU capacity in every region",
        # One full vCPU (Lambda gives CPU in proportion to memory): reading a queue of 100,000
        # jobs is about 4.3 s of CPU (botocore parsing 52 pages; bench_queue_read.py), which
        # would be 8-9 s at 1,024 MB.
        memory_mb=1769,
        # One planner at a time: two concurrent plans would both launch for the
        # same pending pods.
        reserved_concurrency=1,
    ),
    # The event's maximum age follows the hooks' timeouts (stacks/functions.py):
    # past them Auto Scaling has answered the action itself.
    LIFECYCLE: _on_event(LIFECYCLE, "Answers Auto Scaling launch and terminate lifecycle hooks"),
    DRAIN: _on_event(DRAIN, "Continues long node drains from the delayed drain queue"),
    RECONCILE: _scheduled_check(
        name=RECONCILE, description="Brings job records in line with Kubernetes and retries lost jobs"
    ),
}
# What Lambda does with a failed asynchronous invocation when the function does not say.
LAMBDA_DEFAULT_ASYNC_RETRIES = 2


def function_name(prefix: str, handler: str) -> str:
    return f"{prefix}-{handler}"


def async_retries(handler: str) -> int:
    """How often Lambda retries a failed asynchronous (EventBridge) invocation of a function."""
    retries = FUNCTIONS[handler].async_retries
    return LAMBDA_DEFAULT_ASYNC_RETRIES if retries is None else retries


# -- queues ---------------------------------------------------------------------------

# AWS recommends a visibility timeout of at least six times the consumer's timeout,
# so a message is not redelivered while a throttled batch is still being retried.
VISIBILITY_TIMEOUT_FACTOR = 6
JOBS_BATCH_SIZE = 10
DRAIN_BATCH_SIZE = 10
# Bounds the load the submit function puts on the Kubernetes API during a burst.
SUBMIT_MAX_CONCURRENCY = 5
JOBS_MAX_RECEIVE_COUNT = 5
DRAIN_MAX_RECEIVE_COUNT = 10
DEAD_LETTER_RETENTION_DAYS = 14
# SQS's largest message body (the queues set it explicitly); the local queues refuse
# a longer one as SQS does, and intake never needs to read more.
SQS_MAX_MESSAGE_BYTES = 1024 * 1024


def visibility_timeout(consumer: str) -> timedelta:
    """A queue's visibility timeout: how long a message its consumer failed stays hidden."""
    return timedelta(seconds=FUNCTIONS[consumer].timeout_seconds * VISIBILITY_TIMEOUT_FACTOR)


JOBS_VISIBILITY_TIMEOUT = visibility_timeout(SUBMIT)
DRAIN_VISIBILITY_TIMEOUT = visibility_timeout(DRAIN)


def jobs_queue_name(prefix: str) -> str:
    return f"{prefix}-jobs"


def drain_queue_name(prefix: str) -> str:
    return f"{prefix}-drain"


def dead_letter_queue_name(queue_name: str) -> str:
    return f"{queue_name}-dlq"


def lifecycle_failures_queue_name(prefix: str) -> str:
    """Where lifecycle events land that the lifecycle function could not handle."""
    return f"{prefix}-lifecycle-failures"


def event_failures_queue_name(prefix: str, region: str) -> str:
    """Where a region's rules put Auto Scaling events they could not deliver."""
    return f"{prefix}-events-failed-{region}"


# -- Auto Scaling groups ---------------------------------------------------------------

# Every group Squall manages carries MANAGED_BY_TAG=<prefix>: the groups it creates
# get it from the capacity stack, existing ones from the platform team. The
# functions may change a group (desired capacity, terminations, lifecycle answers)
# only when it does.
MANAGED_BY_TAG = "squall.io/managed-by"
NODE_GROUP_TAG = "squall.io/node-group"

# -- table ----------------------------------------------------------------------------


def table_name(prefix: str) -> str:
    return f"{prefix}-jobs"
