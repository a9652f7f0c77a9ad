"""The embedded AWS endpoint: moto's server on a free loopback port, with Squall's resources.

boto3 reaches it through AWS_ENDPOINT_URL, so the adapters run unchanged. The
resources mirror what the CDK stacks create (same key schema, index, redrive).
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

REGION = "us-west-2"
TABLE = "squall-jobs"
JOBS_QUEUE = "squall-jobs"
DEAD_LETTER_QUEUE = "squall-jobs-dlq"
DRAIN_QUEUE = "squall-drains"
MAX_RECEIVE_COUNT = 3

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
    """The jobs queue with its dead-letter queue, the drain queue and the jobs table."""
    sqs = client("sqs", endpoint)
    dlq_url = sqs.create_queue(QueueName=DEAD_LETTER_QUEUE)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    jobs_url = sqs.create_queue(
        QueueName=JOBS_QUEUE,
        Attributes={
            # Failed messages come back at once locally: the clock is virtual.
            "VisibilityTimeout": "0",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}
            ),
        },
    )["QueueUrl"]
    drain_url = sqs.create_queue(QueueName=DRAIN_QUEUE)["QueueUrl"]
    create_table(client("dynamodb", endpoint), TABLE)
    return LocalResources(
        endpoint=endpoint,
        table_name=TABLE,
        jobs_queue_url=jobs_url,
        dead_letter_queue_url=dlq_url,
        drain_queue_url=drain_url,
    )


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
            Tags=[
                {
                    "Key": "squall.io/node-group",
                    "Value": group.name,
                    "PropagateAtLaunch": True,
                    "ResourceId": group.asg_name or group.name,
                    "ResourceType": "auto-scaling-group",
                }
            ],
        )
