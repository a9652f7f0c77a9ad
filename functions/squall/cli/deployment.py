"""The deployment a `squall` command talks to: its jobs table, jobs queue, buckets and
clusters, named by the environment (the CDK app's outputs; `squall local up` prints them,
`squall local env` again), reached through the AWS adapters with boto3's default chain.
Nothing here imports boto3 itself.

The clusters are SQUALL_CLUSTERS, a JSON list of `{name, region}` (cdk.json's `clusters`,
less what only the functions need); a deployment of one cluster may name it with
SQUALL_CLUSTER_NAME instead (default "squall"), in boto3's default region.

A name that is not set, or a local endpoint (AWS_ENDPOINT_URL on loopback) where nothing
listens any more, is said with what to do about it: which command prints the
environment of the local runtime that runs, or starts one.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from squall.cli.errors import EXIT_FAILED, CommandError
from squall.core import documents
from squall.planner.inputs import AWS_REGION, CLUSTER_NAME

TABLE_ENV = "SQUALL_TABLE_NAME"
QUEUE_ENV = "SQUALL_JOBS_QUEUE_URL"
ARTIFACTS_ENV = "SQUALL_ARTIFACTS_BUCKET"
CLUSTER_ENV = "SQUALL_CLUSTER_NAME"
CLUSTERS_ENV = "SQUALL_CLUSTERS"
DEFAULT_CLUSTER = "squall"
ENDPOINT_ENV = "AWS_ENDPOINT_URL"
LOCAL_ENV_COMMAND = 'eval "$(squall local env)"'
LOCAL_UP_COMMAND = 'eval "$(squall local up)"'


def aws_client(service: str, *, region: str | None = None) -> Any:
    """A client of `service` in `region` (None: boto3's default one, the deployment's)."""
    from squall.adapters.aws.clients import aws_client as make

    if (stopped := stopped_local_endpoint()) is not None:
        raise CommandError(stopped, code=EXIT_FAILED)
    return make(service) if region is None else make(service, region=region)


def local_hint() -> str:
    """What points this shell at a local runtime: the one that runs, or how to start one."""
    from squall.local import control

    try:
        state = control.running(control.state_dir(None))
    except OSError:
        state = None
    if state is not None:
        return f"a local runtime is running ({state.get('endpoint')}): `{LOCAL_ENV_COMMAND}` points this shell at it"
    return f"for a local runtime, `{LOCAL_UP_COMMAND}`"


def stopped_local_endpoint() -> str | None:
    """What to say when AWS_ENDPOINT_URL is a loopback endpoint that nothing answers on; else None."""
    endpoint = os.environ.get(ENDPOINT_ENV, "").strip()
    try:
        parts = urlsplit(endpoint)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if not host or not _is_loopback(host):
        return None
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError:
        pass
    return (
        f"nothing answers on {endpoint} ({ENDPOINT_ENV}): the local runtime there is stopped "
        f"(`squall local down` stops it and discards its jobs); {local_hint()}"
    )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def table_name() -> str:
    table = os.environ.get(TABLE_ENV)
    if not table:
        raise CommandError(f"{TABLE_ENV} is not set: point it at the deployment's jobs table; {local_hint()}")
    return table


def jobs_queue_url() -> str:
    queue = os.environ.get(QUEUE_ENV)
    if not queue:
        raise CommandError(f"{QUEUE_ENV} is not set: point it at the deployment's jobs queue; {local_hint()}")
    return queue


def artifacts_bucket() -> str:
    """The bucket `submit --code` stores code archives in."""
    bucket = os.environ.get(ARTIFACTS_ENV, "").strip()
    if not bucket:
        raise CommandError(
            f"{ARTIFACTS_ENV} is not set: point it at the deployment's artifacts bucket "
            f"(the CDK app's output) to submit with --code; {local_hint()}"
        )
    return bucket


def cluster_name() -> str:
    """The one cluster SQUALL_CLUSTER_NAME names (default "squall")."""
    name = os.environ.get(CLUSTER_ENV, "").strip() or DEFAULT_CLUSTER
    if not CLUSTER_NAME.fullmatch(name):
        raise CommandError(
            f"{CLUSTER_ENV}: expected an EKS cluster name (letters, digits, '-', '_'), got {name[:60]!r}"
        )
    return name


@dataclass(frozen=True)
class ClusterPlace:
    """One cluster of the deployment: its name (which names its log group) and its region."""

    name: str
    region: str | None = None  # None: boto3's default region (SQUALL_CLUSTER_NAME's cluster)


def clusters() -> list[ClusterPlace]:
    """The deployment's clusters, in its configuration's order: SQUALL_CLUSTERS, else SQUALL_CLUSTER_NAME's one."""
    text = os.environ.get(CLUSTERS_ENV, "").strip()
    if not text:
        return [ClusterPlace(cluster_name())]
    listed = _read_clusters(text)
    legacy = os.environ.get(CLUSTER_ENV, "").strip()
    if legacy and legacy not in {c.name for c in listed}:
        raise CommandError(
            f"{CLUSTER_ENV} names cluster {legacy[:60]!r}, which {CLUSTERS_ENV} does not list "
            f"({', '.join(c.name for c in listed)}): unset {CLUSTER_ENV} or make them agree"
        )
    return listed


def _read_clusters(text: str) -> list[ClusterPlace]:
    try:
        value = documents.parse_json(text, source=CLUSTERS_ENV)
    except documents.DocumentError as exc:
        raise CommandError(f"{exc} (the variable holds JSON)") from None
    if not isinstance(value, list) or not value:
        raise CommandError(
            f'{CLUSTERS_ENV}: expected a non-empty JSON list of {{"name", "region"}}, got {documents.kind(value)}'
        )
    found: list[ClusterPlace] = []
    for index, entry in enumerate(value):
        where = f"{CLUSTERS_ENV}[{index}]"
        if not isinstance(entry, dict):
            raise CommandError(
                f"{where}: expected an object with name and region, got {documents.kind(entry)}"
            )
        name, region = entry.get("name"), entry.get("region")
        if not isinstance(name, str) or not CLUSTER_NAME.fullmatch(name):
            raise CommandError(
                f"{where}.name: expected an EKS cluster name (letters, digits, '-', '_'), got {_given(name)}"
            )
        if not isinstance(region, str) or not AWS_REGION.fullmatch(region):
            raise CommandError(
                f"{where}.region: expected an AWS region such as us-east-1, got {_given(region)}"
            )
        if any(c.name == name for c in found):
            raise CommandError(f"{where}.name: cluster {name} is listed twice")
        found.append(ClusterPlace(name, region))
    return found


def _given(value: object) -> str:
    """A refused value as a message shows it: a string quoted, anything else by its kind."""
    return documents.shown(value) if isinstance(value, str) else documents.kind(value)


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
