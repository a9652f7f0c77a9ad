"""The job table: jobs, their events, the queue, group backoff and drain state (single table)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from stacks import constants


class JobTable(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, prefix: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            table_name=constants.table_name(prefix),
            partition_key=_string(constants.TABLE_PARTITION_KEY),
            sort_key=_string(constants.TABLE_SORT_KEY),
            # Bursty by nature: idle for hours, then thousands of writes a minute.
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            # Finished jobs and their events expire after the retention the
            # functions write into expiresAt.
            time_to_live_attribute=constants.TTL_ATTRIBUTE,
            # The job history is the audit trail: keep it if the stack goes.
            deletion_protection=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.table.add_global_secondary_index(
            index_name=constants.STATUS_INDEX,
            partition_key=_string(constants.STATUS_INDEX_PARTITION_KEY),
            sort_key=_string(constants.STATUS_INDEX_SORT_KEY),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        # Sparse: only a queued job's item carries its keys, so the scale check reads the
        # queue (and only what admission needs of it) without touching the rest of the table.
        self.table.add_global_secondary_index(
            index_name=constants.QUEUE_INDEX,
            partition_key=_string(constants.QUEUE_INDEX_PARTITION_KEY),
            sort_key=_string(constants.QUEUE_INDEX_SORT_KEY),
            projection_type=dynamodb.ProjectionType.INCLUDE,
            non_key_attributes=list(constants.QUEUE_INDEX_ATTRIBUTES),
        )


def _string(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)
