"""The settings the infrastructure tests synthesise, and what a synthesis yields."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacks.config import load_cdk_json_context

HOME = "us-west-2"
REMOTE = "us-east-1"
PRIVATE_SUBNETS = ("subnet-0a000000000000001", "subnet-0a000000000000002")
NODE_SUBNETS = ("subnet-0b000000000000001", "subnet-0b000000000000002")
NODE_SECURITY_GROUP = "sg-0c000000000000001"
FAKE_CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkZBS0UKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
ACCOUNT = "123456789012"
SUBMITTER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/research/trainer"
SUBMITTER_USER = f"arn:aws:iam::{ACCOUNT}:user/alice"
SUBMITTER_ID = "AROAEXAMPLEROLEID0001"
THIRD = "eu-west-1"
DATA_BUCKET = "shared-datasets-123456789012"


def full_context() -> dict[str, Any]:
    """cdk.json's settings with every optional feature switched on."""
    context = copy.deepcopy(load_cdk_json_context())
    context["clusters"][0]["certificateAuthority"] = FAKE_CA
    context["vpc"] = {"vpcId": "vpc-0a1b2c3d", "subnetIds": [PRIVATE_SUBNETS[0], PRIVATE_SUBNETS[1]]}
    context["nodeGroups"].append(
        {
            "name": "g5-use1-spot",
            "region": REMOTE,
            "asgName": "squall-g5-use1-spot",
            "instanceType": "g5.12xlarge",
            "allocatable": {"cpu": "47", "memory": "180Gi", "nvidia.com/gpu": 4, "pods": 234},
            "labels": {"squall.io/accelerator": "a10g", "squall.io/capacity": "spot"},
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
            "priority": 30,
            "minSize": 0,
            "maxSize": 8,
            "spot": True,
            # its prices from EC2's price APIs (the scale function may ask them)
            "priceFrom": "ec2",
        }
    )
    context["capacity"][REMOTE] = {
        "createGroups": True,
        "subnetIds": list(NODE_SUBNETS),
        "securityGroupIds": [NODE_SECURITY_GROUP],
    }
    context["alarms"]["email"] = "gpu-oncall@example.com"
    # One team that only some principals may submit for, with a GPU quota, a weight and a monthly
    # budget; one open to any.
    context["teams"] = {
        "research": {
            "namespace": "team-research",
            "submitters": [SUBMITTER_ROLE, SUBMITTER_USER, SUBMITTER_ID],
            "gpuQuota": 16,
            "weight": 2,
            "budget": {"monthly": 20000},
        },
        "vision": "team-vision",
    }
    # The app installs the Pod Identity Agent and the log agent, and jobs may use a bucket of the team's own.
    context["podIdentityAgent"] = "install"
    context["logAgent"] = "install"
    context["artifacts"]["buckets"] = [DATA_BUCKET]
    return context


def large_context(ca: str) -> dict[str, Any]:
    """A real-size deployment: ten node groups in three regions, a real certificate, created groups."""
    context = copy.deepcopy(load_cdk_json_context())
    context["clusters"][0]["certificateAuthority"] = ca
    context["regions"] = [HOME, REMOTE, THIRD]
    shapes = [
        ("p4d", "p4d.24xlarge", {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": 8, "pods": 737}, "a100"),
        ("p5", "p5.48xlarge", {"cpu": "191", "memory": "1900Gi", "nvidia.com/gpu": 8, "pods": 100}, "h100"),
        ("g5", "g5.12xlarge", {"cpu": "47", "memory": "180Gi", "nvidia.com/gpu": 4, "pods": 234}, "a10g"),
        ("g6e", "g6e.12xlarge", {"cpu": "47", "memory": "360Gi", "nvidia.com/gpu": 4, "pods": 234}, "l40s"),
    ]
    groups = []
    for i in range(10):
        region = (HOME, REMOTE, THIRD)[i % 3]
        family, instance_type, allocatable, accelerator = shapes[i % len(shapes)]
        name = f"{family}-{region.replace('-', '')}-{i}"
        groups.append(
            {
                "name": name,
                "region": region,
                "asgName": f"squall-{name}",
                "instanceType": instance_type,
                "allocatable": allocatable,
                "labels": {
                    "squall.io/accelerator": accelerator,
                    "squall.io/capacity": "spot" if i % 4 == 3 else "on-demand",
                    "node.kubernetes.io/instance-type": instance_type,
                },
                "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                "priority": 10 * (i + 1),
                "minSize": 0,
                "maxSize": 32,
                "spot": i % 4 == 3,
                "pricePerHour": 32.77,
            }
        )
    context["nodeGroups"] = groups
    context["capacity"] = {
        HOME: {"createGroups": False},
        REMOTE: {
            "createGroups": True,
            "subnetIds": list(NODE_SUBNETS),
            "securityGroupIds": [NODE_SECURITY_GROUP],
        },
        THIRD: {"createGroups": False},
    }
    context["teams"] = {
        f"team{i}": {
            "namespace": f"team-{i}",
            "submitters": [f"arn:aws:iam::{ACCOUNT}:role/team-{i}-submitter"],
        }
        for i in range(12)
    }
    # Researchers may filter the whole application log group.
    context["researcherLogAccess"] = "group"
    return context


@dataclass
class Synthesis:
    app: Any
    stacks: Any  # stacks.deployment.SquallStacks
    outdir: Path

    def template(self, stack: Any) -> Any:
        from aws_cdk.assertions import Template

        return Template.from_stack(stack)


@dataclass
class AppRun:
    returncode: int
    output: str
    outdir: Path
