"""Where the local runtime keeps its AWS state: moto's server, or memory for big replays.

`moto_backend` puts the production adapters (DynamoDB, SQS, Auto Scaling, S3) on the
embedded endpoint, so the handlers' code meets the real services' APIs and limits;
`memory_backend` keeps the same ports in memory, for replays too long for a server
round trip per call (it has no S3: serve requests are refused there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from squall.adapters.aws.autoscaling import AutoScalingFleet
from squall.adapters.aws.cost_ledger import DynamoCostLedger
from squall.adapters.aws.drain_store import DynamoDrainStore
from squall.adapters.aws.job_store import DynamoJobStore
from squall.adapters.aws.model_service_store import DynamoModelServiceStore
from squall.adapters.aws.saved_models import S3SavedModels
from squall.adapters.aws.scale_state import DynamoScaleState
from squall.core import resources as deployed
from squall.core.jobs import Job
from squall.local.aws import (
    ACCOUNT,
    JOBS_QUEUE,
    MAX_RECEIVE_COUNT,
    REGION,
    LocalResources,
    client,
    create_groups,
    create_resources,
)
from squall.local.cost_ledger import InMemoryCostLedger
from squall.local.memory import InMemoryAutoScaling, InMemoryDrainStore, InMemoryJobStore, InMemoryScaleState
from squall.local.model_service_store import InMemoryModelServiceStore
from squall.local.queues import LocalQueue, MemoryQueue, SqsQueue
from squall.planner import NodeGroup
from squall.ports import CostLedger, DrainStore, JobStore, ModelServiceStore, SavedModels, ScaleState


class LocalJobStore(JobStore, Protocol):
    """The job store, and the whole listing the local runtime shows (both stores have it)."""

    def list_all(self, *, limit: int = ...) -> list[Job]: ...


@dataclass
class Backend:
    """The runtime's AWS state, behind the same ports the functions use."""

    name: str
    store: LocalJobStore
    scale_state: ScaleState
    queue: LocalQueue
    autoscaling: Any  # what LocalFleet drives: AutoScalingFleet on moto, or InMemoryAutoScaling
    create_groups: Callable[[list[NodeGroup]], None]
    drain_store: DrainStore
    resources: LocalResources | None = None
    model_services: ModelServiceStore | None = None
    saved_models: SavedModels | None = None  # None where there is no S3 (serve requests refused)
    cost_ledger: CostLedger | None = None  # what teams spent and the fleet's overhead (in the job table)


def moto_backend(endpoint: str) -> Backend:
    local = create_resources(endpoint)
    dynamodb = client("dynamodb", endpoint)
    regional: dict[str, Any] = {}

    def autoscaling_client(region: str) -> Any:
        if region not in regional:
            regional[region] = client("autoscaling", endpoint, region=region)
        return regional[region]

    return Backend(
        name="moto",
        store=DynamoJobStore(dynamodb, local.table_name),
        scale_state=DynamoScaleState(dynamodb, local.table_name),
        queue=SqsQueue(
            client("sqs", endpoint),
            url=local.jobs_queue_url,
            dead_letter_url=local.dead_letter_queue_url,
            visibility_timeout=deployed.JOBS_VISIBILITY_TIMEOUT,
        ),
        autoscaling=AutoScalingFleet(autoscaling_client),
        create_groups=lambda groups: create_groups(endpoint, groups),
        drain_store=DynamoDrainStore(dynamodb, local.table_name),
        resources=local,
        model_services=DynamoModelServiceStore(dynamodb, local.table_name),
        saved_models=S3SavedModels(client("s3", endpoint)),
        cost_ledger=DynamoCostLedger(dynamodb, local.table_name),
    )


def memory_backend() -> Backend:
    autoscaling = InMemoryAutoScaling()

    def create(groups: list[NodeGroup]) -> None:
        for g in groups:
            autoscaling.create_group(
                name=g.asg_name or g.name,
                region=g.region,
                min_size=g.min_size,
                max_size=g.max_size,
                desired=g.desired,
            )

    return Backend(
        name="memory",
        store=InMemoryJobStore(),
        scale_state=InMemoryScaleState(),
        queue=MemoryQueue(
            arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:{JOBS_QUEUE}",
            max_receive_count=MAX_RECEIVE_COUNT,
            visibility_timeout=deployed.JOBS_VISIBILITY_TIMEOUT,
        ),
        autoscaling=autoscaling,
        create_groups=create,
        drain_store=InMemoryDrainStore(),
        model_services=InMemoryModelServiceStore(),
        cost_ledger=InMemoryCostLedger(),
    )
