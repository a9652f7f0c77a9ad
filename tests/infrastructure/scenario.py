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


def full_context() -> dict[str, Any]:
    """cdk.json's settings with every optional feature switched on."""
    context = copy.deepcopy(load_cdk_json_context())
    context["cluster"]["certificateAuthority"] = FAKE_CA
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
        }
    )
    context["capacity"][REMOTE] = {
        "createGroups": True,
        "subnetIds": list(NODE_SUBNETS),
        "securityGroupIds": [NODE_SECURITY_GROUP],
    }
    context["alarms"]["email"] = "gpu-oncall@example.com"
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
