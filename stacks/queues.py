"""The jobs queue and the drain queue, each with its dead-letter queue, and the failure queues."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from stacks import constants


class JobQueues(Construct):
    """Jobs queue (job specs and commands) and drain queue (delayed drain steps).

    A message that keeps failing lands in the queue's dead-letter queue after
    ``maxReceiveCount`` attempts; the dead-letter queue accepts redrives from
    its source queue only, so `aws sqs start-message-move-task` puts fixed
    messages back where they came from. Visibility timeouts and receive counts
    are squall/resources.py's, which the local runtime plays too.

    When a team names its submitters, the jobs queue refuses SendMessage from
    every other principal (an explicit Deny, which no identity policy in the
    account can override); the submit function then checks each message's
    SenderId against the team the body names.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        submitter_arns: Sequence[str] = (),
        submitter_ids: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.jobs_dead_letters, self.jobs = self._queue_pair(
            "Jobs",
            constants.jobs_queue_name(prefix),
            visibility_timeout=constants.JOBS_VISIBILITY_TIMEOUT.total_seconds(),
            max_receive_count=constants.JOBS_MAX_RECEIVE_COUNT,
        )
        # The sender sets each message's DelaySeconds (the next drain step).
        self.drain_dead_letters, self.drain = self._queue_pair(
            "Drain",
            constants.drain_queue_name(prefix),
            visibility_timeout=constants.DRAIN_VISIBILITY_TIMEOUT.total_seconds(),
            max_receive_count=constants.DRAIN_MAX_RECEIVE_COUNT,
        )
        if submitter_arns or submitter_ids:
            self.jobs.add_to_resource_policy(only_submitters_send(self.jobs, submitter_arns, submitter_ids))

    @property
    def dead_letter_queues(self) -> tuple[sqs.Queue, ...]:
        return (self.jobs_dead_letters, self.drain_dead_letters)

    def _queue_pair(
        self,
        construct_id: str,
        name: str,
        *,
        visibility_timeout: float,
        max_receive_count: int,
    ) -> tuple[sqs.Queue, sqs.Queue]:
        stack = cdk.Stack.of(self)
        # By ARN rather than by reference: the source queue already refers to its
        # dead-letter queue, and a reference back would be a cycle.
        source_arn = stack.format_arn(service="sqs", resource=name)
        dead_letters = sqs.Queue(
            self,
            f"{construct_id}DeadLetters",
            queue_name=constants.dead_letter_queue_name(name),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            max_message_size_bytes=constants.SQS_MAX_MESSAGE_BYTES,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(constants.DEAD_LETTER_RETENTION_DAYS),
            redrive_allow_policy=sqs.RedriveAllowPolicy(
                redrive_permission=sqs.RedrivePermission.BY_QUEUE,
                source_queues=[sqs.Queue.from_queue_arn(self, f"{construct_id}SourceRef", source_arn)],
            ),
        )
        queue = sqs.Queue(
            self,
            construct_id,
            queue_name=name,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            max_message_size_bytes=constants.SQS_MAX_MESSAGE_BYTES,
            enforce_ssl=True,
            visibility_timeout=cdk.Duration.seconds(int(visibility_timeout)),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dead_letters, max_receive_count=max_receive_count),
        )
        return dead_letters, queue


def only_submitters_send(
    queue: sqs.IQueue, submitter_arns: Sequence[str], submitter_ids: Sequence[str]
) -> iam.PolicyStatement:
    """Deny SendMessage to every principal that is not one of the teams' submitters.

    A role's sessions carry the role's ARN as aws:PrincipalArn; a submitter named
    by unique id is matched on aws:userid (the id, then ``:<session>`` for a role).
    Conditions of one statement must all hold to deny, so matching either lets a
    principal send.
    """
    conditions: dict[str, object] = {}
    if submitter_arns:
        conditions["ArnNotLike"] = {"aws:PrincipalArn": sorted(set(submitter_arns))}
    if submitter_ids:
        ids = sorted(set(submitter_ids))
        conditions["StringNotLike"] = {"aws:userid": [*ids, *(f"{i}:*" for i in ids)]}
    return iam.PolicyStatement(
        sid="OnlyTeamSubmittersSend",
        effect=iam.Effect.DENY,
        principals=[iam.AnyPrincipal()],
        actions=["sqs:SendMessage"],
        resources=[queue.queue_arn],
        conditions=conditions,
    )


def failed_events_queue(scope: Construct, construct_id: str, *, queue_name: str, what: str) -> sqs.Queue:
    """A queue where events that could not be handled land, kept for two weeks with an alarm on it."""
    queue = sqs.Queue(
        scope,
        construct_id,
        queue_name=queue_name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=cdk.Duration.days(constants.FAILED_EVENT_RETENTION_DAYS),
    )
    NagSuppressions.add_resource_suppressions(
        queue,
        [
            NagPackSuppression(
                id="AwsSolutions-SQS3",
                reason=(
                    f"This queue is itself a dead-letter queue: {what} that could not be handled "
                    "land here, and an alarm on its depth tells the operators."
                ),
            )
        ],
    )
    return queue
