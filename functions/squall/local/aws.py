"""The embedded AWS endpoint: moto's server on a loopback port, with Squall's resources.

boto3 reaches it through AWS_ENDPOINT_URL, so the adapters run unchanged. The
resources mirror what the CDK stacks create: the names the stacks give them for
the default prefix, the same key schema and index, the same redrive (receive
counts from squall/resources.py). Visibility timeouts are the stack's too, but
kept on the virtual clock by the local queues (squall/local/queues.py): moto's
own never run out. Beside them: the artifacts bucket (code archives, checkpoints,
event files) and the log group the cluster's log agent writes container output to
(core/logstreams.py), which the local runtime's real pods write to.

The endpoint is not open to whatever can reach 127.0.0.1: each `local_endpoint`
makes credentials of its own (`LocalCredentials.generate`: a random access key and
secret), and its gate (local/endpoint_guard.py) refuses every request not signed
with them, every request from a web page (an `Origin` header) or through a name that
is not loopback (DNS rebinding), and moto's `/moto-api/`. moto's global CORS is off.
The runtime, its real pods and `squall local up`'s exports carry those credentials.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import string
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from moto.moto_server import werkzeug_app
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from squall.core import logstreams, resources
from squall.core.queue import (
    QUEUE_INDEX,
    QUEUE_INDEX_ATTRIBUTES,
    QUEUE_INDEX_PARTITION_KEY,
    QUEUE_INDEX_SORT_KEY,
)
from squall.local.endpoint_guard import EndpointGuard
from squall.local.queues import MOTO_VISIBILITY_TIMEOUT_SECONDS

PREFIX = "squall"  # cdk.json's default prefix
REGION = "us-west-2"
ACCOUNT = "123456789012"
TABLE = resources.table_name(PREFIX)
JOBS_QUEUE = resources.jobs_queue_name(PREFIX)
DEAD_LETTER_QUEUE = resources.dead_letter_queue_name(JOBS_QUEUE)
DRAIN_QUEUE = resources.drain_queue_name(PREFIX)
MAX_RECEIVE_COUNT = resources.JOBS_MAX_RECEIVE_COUNT
ARTIFACTS_BUCKET = f"{PREFIX}-artifacts"
CLUSTER_NAME = "squall"  # what the CLI assumes when SQUALL_CLUSTER_NAME is not set
LOG_GROUP = logstreams.log_group(CLUSTER_NAME)

CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
)


@dataclass(frozen=True)
class LocalCredentials:
    """One local endpoint's credentials: only requests signed with them reach moto.

    The session token is not checked; it is set so that a token already in the
    shell's environment is not sent along with these keys.
    """

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    region: str = REGION

    @classmethod
    def generate(cls) -> LocalCredentials:
        alphabet = string.ascii_uppercase + string.digits
        return cls(
            access_key_id="SQUALL" + "".join(secrets.choice(alphabet) for _ in range(14)),
            secret_access_key=secrets.token_urlsafe(30),
            session_token=secrets.token_urlsafe(30),
        )

    def environment(self) -> dict[str, str]:
        """What boto3's default chain reads them from."""
        return dict(
            zip(
                CREDENTIAL_VARIABLES,
                (self.access_key_id, self.secret_access_key, self.session_token, self.region, self.region),
                strict=True,
            )
        )


_credentials: dict[str, LocalCredentials] = {}  # by endpoint, while it runs
_credentials_lock = threading.Lock()


def endpoint_credentials(endpoint: str) -> LocalCredentials | None:
    """The credentials of the local endpoint at `endpoint` in this process; None for another."""
    with _credentials_lock:
        return _credentials.get(endpoint)


@dataclass(frozen=True)
class LocalResources:
    endpoint: str
    table_name: str
    jobs_queue_url: str
    dead_letter_queue_url: str
    drain_queue_url: str
    artifacts_bucket: str = ARTIFACTS_BUCKET
    cluster_name: str = CLUSTER_NAME
    log_group: str = LOG_GROUP


class EndpointError(RuntimeError):
    """The local endpoint could not start (its port is taken, say)."""


@contextmanager
def local_endpoint(*, port: int = 0) -> Iterator[str]:
    """Run moto's server on 127.0.0.1, behind its gate, and point boto3 at it for the duration.

    `port` 0 takes a free one; another must be free, else EndpointError says so. The
    endpoint's credentials (new ones each time) are in this process's environment
    while it runs, and `endpoint_credentials(endpoint)` returns them.
    """
    if not 0 <= port <= 65535:
        raise EndpointError(f"port must be 0..65535, got {port}")
    # werkzeug logs every request to stderr: noise in a demo, and slow in a replay.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # moto answers every CORS preflight with the caller's Origin unless this is set
    # (read as each service's app is made); the gate refuses any Origin besides.
    werkzeug_app.DISABLE_GLOBAL_CORS = True
    credentials = LocalCredentials.generate()
    app = EndpointGuard(
        DomainDispatcherApplication(create_backend_app),
        access_key=credentials.access_key_id,
        secret_key=credentials.secret_access_key,
    )
    # What moto's ThreadedMotoServer does, with the socket bound here: a port that is
    # taken fails this call (werkzeug exits its thread instead, and start() would hang).
    try:
        server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    except (OSError, SystemExit) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "address already in use"
        raise EndpointError(f"cannot listen on 127.0.0.1:{port}: {reason}") from None
    # moto keeps its state per process, not per server: start from nothing. (In this
    # process: the gate closes /moto-api/reset to HTTP.)
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()
    thread = threading.Thread(target=server.serve_forever, name="moto-server", daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    with _credentials_lock:
        _credentials[endpoint] = credentials
    saved = {k: os.environ.get(k) for k in [*CREDENTIAL_VARIABLES, "AWS_ENDPOINT_URL"]}
    os.environ.update(credentials.environment())
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    # boto3's default session keeps the credentials it read first (another endpoint's,
    # in a process that runs several): boto3.client() reads these from a new one.
    boto3.DEFAULT_SESSION = None
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        boto3.DEFAULT_SESSION = None
        server.shutdown()
        thread.join()
        server.server_close()
        with _credentials_lock:
            _credentials.pop(endpoint, None)


def client(service: str, endpoint: str, *, region: str = REGION) -> Any:
    """A boto3 client for the local endpoint, signing with its credentials when it runs in this process."""
    credentials = endpoint_credentials(endpoint)
    if credentials is None:
        return boto3.session.Session().client(service, endpoint_url=endpoint, region_name=region)
    return boto3.session.Session(
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key,
        aws_session_token=credentials.session_token,
    ).client(service, endpoint_url=endpoint, region_name=region)


def create_resources(endpoint: str) -> LocalResources:
    """The jobs and drain queues with their dead-letter queues, the jobs table, the
    artifacts bucket and the cluster's application log group."""
    sqs = client("sqs", endpoint)
    jobs_url, dlq_url = _queue_pair(sqs, JOBS_QUEUE, max_receive_count=resources.JOBS_MAX_RECEIVE_COUNT)
    drain_url, _ = _queue_pair(sqs, DRAIN_QUEUE, max_receive_count=resources.DRAIN_MAX_RECEIVE_COUNT)
    create_table(client("dynamodb", endpoint), TABLE)
    client("s3", endpoint).create_bucket(
        Bucket=ARTIFACTS_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    client("logs", endpoint).create_log_group(logGroupName=LOG_GROUP)
    return LocalResources(
        endpoint=endpoint,
        table_name=TABLE,
        jobs_queue_url=jobs_url,
        dead_letter_queue_url=dlq_url,
        drain_queue_url=drain_url,
    )


def _queue_pair(sqs: Any, name: str, *, max_receive_count: int) -> tuple[str, str]:
    """A queue and its dead-letter queue, redriven as stacks/queues.py redrives them."""
    dlq_url = sqs.create_queue(QueueName=resources.dead_letter_queue_name(name))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            # The stack's visibility timeout is kept on the virtual clock (local/queues.py).
            "VisibilityTimeout": str(MOTO_VISIBILITY_TIMEOUT_SECONDS),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
            ),
        },
    )["QueueUrl"]
    return url, dlq_url


def create_table(dynamodb: Any, name: str) -> None:
    """The table as stacks/ defines it: pk/sk, the status and queue indexes, TTL on expiresAt."""
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": "S"}
            for a in ("pk", "sk", "gsi1pk", "gsi1sk", QUEUE_INDEX_PARTITION_KEY, QUEUE_INDEX_SORT_KEY)
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "status-index",
                "KeySchema": [
                    {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                    {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": QUEUE_INDEX,
                "KeySchema": [
                    {"AttributeName": QUEUE_INDEX_PARTITION_KEY, "KeyType": "HASH"},
                    {"AttributeName": QUEUE_INDEX_SORT_KEY, "KeyType": "RANGE"},
                ],
                "Projection": {
                    "ProjectionType": "INCLUDE",
                    "NonKeyAttributes": list(QUEUE_INDEX_ATTRIBUTES),
                },
            },
        ],
    )
    dynamodb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiresAt"}
    )


def create_groups(endpoint: str, groups: Any) -> None:
    """An Auto Scaling group per node group (min 0), each with its own launch template.

    `groups` are planner NodeGroups; the group is created empty in its region.
    """
    for group in groups:
        ec2 = client("ec2", endpoint, region=group.region)
        autoscaling = client("autoscaling", endpoint, region=group.region)
        template_name = f"{group.asg_name or group.name}-lt"
        ec2.create_launch_template(
            LaunchTemplateName=template_name,
            LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": group.instance_type},
        )
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=group.asg_name or group.name,
            LaunchTemplate={"LaunchTemplateName": template_name, "Version": "$Latest"},
            MinSize=group.min_size,
            MaxSize=group.max_size,
            DesiredCapacity=max(group.min_size, group.desired),
            AvailabilityZones=[f"{group.region}a", f"{group.region}b"],
            # The tags the stack's groups carry; Squall's role may change only groups
            # tagged squall.io/managed-by=<prefix>.
            Tags=[
                {
                    "Key": key,
                    "Value": value,
                    "PropagateAtLaunch": True,
                    "ResourceId": group.asg_name or group.name,
                    "ResourceType": "auto-scaling-group",
                }
                for key, value in ((resources.NODE_GROUP_TAG, group.name), (resources.MANAGED_BY_TAG, PREFIX))
            ],
        )
