"""The embedded AWS endpoint: moto's server on a free loopback port, with Squall's resources.

boto3 reaches it through AWS_ENDPOINT_URL, so the adapters run unchanged. The
resources mirror what the CDK stacks create: the names the stacks give them for
the default prefix, the same key schema and index, the same redrive (receive
counts from squall/resources.py). Visibility timeouts are the stack's too, but
kept on the virtual clock by the local queues (squall/local/queues.py): moto's
own never run out.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from squall.core import resources
from squall.local.queues import MOTO_VISIBILITY_TIMEOUT_SECONDS

PREFIX = "squall"  # cdk.json's default prefix
REGION = "us-west-2"
ACCOUNT = "123456789012"
TABLE = resources.table_name(PREFIX)
JOBS_QUEUE = resources.jobs_queue_name(PREFIX)
DEAD_LETTER_QUEUE = resources.dead_letter_queue_name(JOBS_QUEUE)
DRAIN_QUEUE = resources.drain_queue_name(PREFIX)
MAX_RECEIVE_COUNT = resources.JOBS_MAX_RECEIVE_COUNT

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}


@dataclass(frozen=True)
class LocalResources:
    endpoint: str
    table_name: str
    jobs_queue_url: str
    dead_letter_queue_url: str
    drain_queue_url: str


@contextmanager
def local_endpoint() -> Iterator[str]:
    """Run moto's server on 127.0.0.1 (a free port) and point boto3 at it for the duration."""
    # werkzeug logs every request to stderr: noise in a demo, and slow in a replay.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto keeps its state per process, not per server: start from nothing.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10)
    saved = {k: os.environ.get(k) for k in [*FAKE_CREDENTIALS, "AWS_ENDPOINT_URL"]}
    os.environ.update(FAKE_CREDENTIALS)
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def client(service: str, endpoint: str, *, region: str = REGION) -> Any:
    return boto3.session.Session().client(service, endpoint_url=endpoint, region_name=region)


def create_resources(endpoint: str) -> LocalResources:
    """The jobs and drain queues with their dead-letter queues, and the jobs table."""
    sqs = client("sqs", endpoint)
    jobs_url, dlq_url = _queue_pair(sqs, JOBS_QUEUE, max_receive_count=resources.JOBS_MAX_RECEIVE_COUNT)
    drain_url, _ = _queue_pair(sqs, DRAIN_QUEUE, max_receive_count=resources.DRAIN_MAX_RECEIVE_COUNT)
    create_table(client("dynamodb", endpoint), TABLE)
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
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            # The stack's visibility timeout is kept on the virtual clock (local/queues.py).
            "VisibilityTimeout": str(MOTO_VISIBILITY_TIMEOUT_SECONDS),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}),
        },
    )["QueueUrl"]
    return url, dlq_url


def create_table(dynamodb: Any, name: str) -> None:
    """The table as stacks/ defines it: pk/sk, the status index, TTL on expiresAt."""
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk", "gsi1pk", "gsi1sk")
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
            }
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
        ec2 = boto3.session.Session().client("ec2", endpoint_url=endpoint, region_name=group.region)
        autoscaling = boto3.session.Session().client(
            "autoscaling", endpoint_url=endpoint, region_name=group.region
        )
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
