"""The jobs queue and the drain queue, each with its dead-letter queue."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks import constants


class JobQueues(Construct):
    """Jobs queue (job specs and commands) and drain queue (delayed drain steps).

    A message that keeps failing lands in the queue's dead-letter queue after
    ``maxReceiveCount`` attempts; the dead-letter queue accepts redrives from
    its source queue only, so `aws sqs start-message-move-task` puts fixed
    messages back where they came from.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        submit_timeout: cdk.Duration,
        drain_timeout: cdk.Duration,
    ) -> None:
        super().__init__(scope, construct_id)
        self.jobs_dead_letters, self.jobs = self._queue_pair(
            "Jobs",
            constants.jobs_queue_name(prefix),
            consumer_timeout=submit_timeout,
            max_receive_count=constants.JOBS_MAX_RECEIVE_COUNT,
        )
        # The sender sets each message's DelaySeconds (the next drain step).
        self.drain_dead_letters, self.drain = self._queue_pair(
            "Drain",
            constants.drain_queue_name(prefix),
            consumer_timeout=drain_timeout,
            max_receive_count=constants.DRAIN_MAX_RECEIVE_COUNT,
        )

    @property
    def dead_letter_queues(self) -> tuple[sqs.Queue, ...]:
        return (self.jobs_dead_letters, self.drain_dead_letters)

    def _queue_pair(
        self,
        construct_id: str,
        name: str,
        *,
        consumer_timeout: cdk.Duration,
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
            enforce_ssl=True,
            visibility_timeout=cdk.Duration.seconds(
                consumer_timeout.to_seconds() * constants.VISIBILITY_TIMEOUT_FACTOR
            ),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dead_letters, max_receive_count=max_receive_count),
        )
        return dead_letters, queue
