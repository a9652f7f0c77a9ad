"""A deployment of real size: 40 teams, 30 node groups in four regions, synthesised within CloudFormation's limits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stacks.constants import (
    LAMBDA_ENVIRONMENT_LIMIT_BYTES,
    TEMPLATE_MAX_BYTES,
    TEMPLATE_MAX_OUTPUTS,
    TEMPLATE_MAX_RESOURCES,
)

from .scenario import ACCOUNT, NODE_SECURITY_GROUP, NODE_SUBNETS, large_context

REGIONS = ("us-west-2", "us-east-1", "eu-west-1", "ap-northeast-1")


def real_size_context(ca: str) -> dict[str, Any]:
    context = large_context(ca)
    context["regions"] = list(REGIONS)
    groups = []
    for i in range(30):
        region = REGIONS[i % len(REGIONS)]
        group = dict(context["nodeGroups"][i % len(context["nodeGroups"])])
        group.update(name=f"g{i}-{region.replace('-', '')}", region=region, asgName=f"squall-g{i}-{region}")
        group["priority"] = 10 * (i + 1)
        groups.append(group)
    context["nodeGroups"] = groups
    created = {
        "createGroups": True,
        "subnetIds": list(NODE_SUBNETS),
        "securityGroupIds": [NODE_SECURITY_GROUP],
    }
    context["capacity"] = {r: created if i % 2 else {"createGroups": False} for i, r in enumerate(REGIONS)}
    context["teams"] = {
        f"team{i}": {
            "namespace": f"team-{i}",
            "submitters": [f"arn:aws:iam::{ACCOUNT}:role/team-{i}-submitter"],
            "gpuQuota": 64,
            "weight": 1,
        }
        for i in range(40)
    }
    return context


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    from app import create_app
    from tests.certificates import cluster_ca

    outdir = tmp_path_factory.mktemp("cdk-real-size")
    context = {**real_size_context(cluster_ca()), "aws:cdk:bundling-stacks": []}
    app, _ = create_app(context=context, outdir=str(outdir))
    app.synth()
    yield {
        p.name: {"bytes": p.stat().st_size, **json.loads(p.read_text())}
        for p in Path(outdir).glob("*.template.json")
    }


def test_every_stack_is_synthesised_within_cloudformations_limits(
    templates: dict[str, dict[str, Any]],
) -> None:
    assert (
        len(templates) == 1 + 1 + 1 + len(REGIONS) + len(REGIONS) - 1
    )  # control plane, workloads, monitoring
    for name, template in templates.items():
        assert template["bytes"] <= TEMPLATE_MAX_BYTES, name
        assert len(template.get("Resources", {})) <= TEMPLATE_MAX_RESOURCES, name
        assert len(template.get("Outputs", {})) <= TEMPLATE_MAX_OUTPUTS, name


def test_every_function_environment_fits_lambdas_limit(templates: dict[str, dict[str, Any]]) -> None:
    functions = [
        resource["Properties"]
        for template in templates.values()
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Lambda::Function"
    ]
    assert len(functions) >= 5
    for function in functions:
        variables = function.get("Environment", {}).get("Variables", {})
        # a token's resolved value is unknown here; its JSON text is a generous stand-in
        assert (
            sum(len(k) + len(json.dumps(v)) for k, v in variables.items()) <= LAMBDA_ENVIRONMENT_LIMIT_BYTES
        )
