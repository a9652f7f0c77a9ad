"""The deployment a `squall` command talks to: its jobs table, jobs queue and buckets, named
by the environment (the CDK app's outputs; `squall local up` prints them), reached through
the AWS adapters with boto3's default chain. Nothing here imports boto3 itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from squall.cli.errors import CommandError

TABLE_ENV = "SQUALL_TABLE_NAME"
QUEUE_ENV = "SQUALL_JOBS_QUEUE_URL"
ARTIFACTS_ENV = "SQUALL_ARTIFACTS_BUCKET"
CLUSTER_ENV = "SQUALL_CLUSTER_NAME"
DEFAULT_CLUSTER = "squall"


def aws_client(service: str) -> Any:
    from squall.adapters.aws.clients import aws_client as make

    return make(service)


def table_name() -> str:
    table = os.environ.get(TABLE_ENV)
    if not table:
        raise CommandError(f"{TABLE_ENV} is not set: point it at the deployment's jobs table")
    return table


def jobs_queue_url() -> str:
    queue = os.environ.get(QUEUE_ENV)
    if not queue:
        raise CommandError(f"{QUEUE_ENV} is not set: point it at the deployment's jobs queue")
    return queue


def artifacts_bucket() -> str:
    """The bucket `submit --code` stores code archives in."""
    bucket = os.environ.get(ARTIFACTS_ENV, "").strip()
    if not bucket:
        raise CommandError(
            f"{ARTIFACTS_ENV} is not set: point it at the deployment's artifacts bucket "
            "(the CDK app's output; `squall local up` prints it) to submit with --code"
        )
    return bucket


def cluster_name() -> str:
    """The EKS cluster whose log group holds the jobs' container output (default "squall")."""
    name = os.environ.get(CLUSTER_ENV, "").strip() or DEFAULT_CLUSTER
    if len(name) > 100 or not all(c.isalnum() or c in "-_" for c in name):
        raise CommandError(
            f"{CLUSTER_ENV}: expected an EKS cluster name (letters, digits, '-', '_'), got {name[:60]!r}"
        )
    return name


def _jobs_table() -> tuple[Any, str]:
    """A DynamoDB client and the jobs table, named (SQUALL_TABLE_NAME) before a client is made."""
    table = table_name()
    return aws_client("dynamodb"), table


def job_store() -> Any:
    """The deployment's jobs and their events."""
    from squall.adapters.aws.job_store import DynamoJobStore

    return DynamoJobStore(*_jobs_table())


def scale_state() -> Any:
    """The scale check's state (its decision records are in the jobs table too)."""
    from squall.adapters.aws.scale_state import DynamoScaleState

    return DynamoScaleState(*_jobs_table())


def service_store() -> Any:
    """The deployment's model service records (the jobs table, ``pk=SERVICE#<name>``)."""
    from squall.adapters.aws.model_service_store import DynamoModelServiceStore

    return DynamoModelServiceStore(*_jobs_table())


def saved_models() -> Any:
    """Where the SavedModels are (S3): asked before a serve request is sent."""
    from squall.adapters.aws.saved_models import S3SavedModels

    return S3SavedModels(aws_client("s3"))


def send_to_jobs_queue(body: Mapping[str, Any], *, what: str = "the request") -> str:
    """Put `body` on the jobs queue as JSON; the message's id."""
    url = jobs_queue_url()
    try:
        text = json.dumps(body)
    except (TypeError, ValueError) as exc:  # a YAML timestamp, say: JSON has none
        raise CommandError(f"{what} cannot be sent as JSON: {exc}") from exc
    from squall.adapters.aws.jobs_queue import JobsQueue

    return JobsQueue(aws_client("sqs"), url).send(text)
