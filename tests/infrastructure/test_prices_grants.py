"""Node groups with ``priceFrom: ec2``: the scale function may ask EC2 their prices, only then, and
reconcile reads the groups it costs jobs with.

The ``full`` synthesis has one such group (its spot group); cdk.json's defaults (the plain
``python app.py``) have none.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from stacks import constants
from stacks.config import SquallConfig
from stacks.functions import function_settings

from .helpers import actions_of, function_statements, statements_with
from .scenario import REMOTE, AppRun, Synthesis, full_context

pytestmark = pytest.mark.slow

PRICE_ACTIONS = ("ec2:DescribeSpotPriceHistory", "pricing:GetProducts")


@pytest.fixture(scope="module")
def template(full: Synthesis) -> Template:
    return full.template(full.stacks.control_plane)


def test_the_scale_function_may_ask_spot_prices_in_squall_regions_and_the_price_list_in_us_east_1(
    full: Synthesis, template: Template
) -> None:
    raw = template.to_json()
    fns = full.stacks.control_plane.functions.by_handler
    statements = function_statements(raw, fns[constants.SCALE])
    (spot,) = statements_with(statements, "ec2:DescribeSpotPriceHistory")
    assert spot["Action"] == "ec2:DescribeSpotPriceHistory"
    assert spot["Resource"] == "*"
    assert spot["Condition"] == {"StringEquals": {"aws:RequestedRegion": ["us-west-2", REMOTE]}}
    (price_list,) = statements_with(statements, "pricing:GetProducts")
    assert price_list["Action"] == "pricing:GetProducts"
    assert price_list["Resource"] == "*"
    assert price_list["Condition"] == {"StringEquals": {"aws:RequestedRegion": ["us-east-1"]}}
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Action": "pricing:GetProducts", "Effect": "Allow", "Resource": "*"})]
                )
            }
        },
    )
    # and no other function may
    for handler, function in fns.items():
        if handler != constants.SCALE:
            assert not set(PRICE_ACTIONS) & actions_of(function_statements(raw, function)), handler


def test_without_such_a_group_no_function_may_ask_prices(default_app: AppRun) -> None:
    assert default_app.returncode == 0, default_app.output
    templates = sorted(default_app.outdir.glob("*.template.json"))
    assert templates
    for path in templates:
        text = path.read_text()
        assert not any(action in text for action in PRICE_ACTIONS), path.name


def test_reconcile_reads_the_node_groups_it_prices_jobs_with() -> None:
    config = SquallConfig.from_context(full_context())
    groups: list[dict[str, Any]] = function_settings(config, constants.RECONCILE)["node_groups"]
    assert [g["name"] for g in groups] == [g.name for g in config.node_groups]
    assert [g.get("priceFrom") for g in groups] == [None, None, "ec2"]
    assert groups == function_settings(config, constants.SCALE)["node_groups"]
