"""Reconcile reads running jobs' squall-metric lines: FilterLogEvents (and DescribeLogStreams) on the
clusters' application log groups, each in its cluster's region, and nowhere else; no other function may."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from squall.core.logstreams import log_group
from stacks import constants
from stacks.config import SquallConfig
from stacks.functions import METRIC_LINES_ACTIONS

from .helpers import actions_of, function_statements, statements_with
from .scenario import Synthesis, full_context

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template(full: Synthesis) -> Template:
    return full.template(full.stacks.control_plane)


def _arn_text(resource: object) -> str:
    """A resource as the template writes it (a string, or Fn::Join of parts), flattened to text."""
    if isinstance(resource, str):
        return resource
    if isinstance(resource, dict) and "Fn::Join" in resource:
        separator, parts = resource["Fn::Join"]
        return separator.join(_arn_text(p) for p in parts)
    if isinstance(resource, dict) and "Ref" in resource:
        return "{" + resource["Ref"] + "}"
    return str(resource)


def test_reconcile_may_filter_the_clusters_application_log_groups_only(
    full: Synthesis, template: Template
) -> None:
    raw = template.to_json()
    fns = full.stacks.control_plane.functions.by_handler
    statements = function_statements(raw, fns[constants.RECONCILE])
    (grant,) = statements_with(statements, "logs:FilterLogEvents")
    assert sorted(grant["Action"]) == sorted(METRIC_LINES_ACTIONS)
    assert "Condition" not in grant
    config = SquallConfig.from_context(full_context())
    resources = sorted(_arn_text(r) for r in grant["Resource"])
    expected = sorted(
        f"arn:{{AWS::Partition}}:logs:{cluster.region}:{{AWS::AccountId}}:log-group:{log_group(cluster.name)}{suffix}"
        for cluster in config.clusters
        for suffix in ("", ":*")
    )
    assert resources == expected
    # no other function reads any log group's events
    for handler, function in fns.items():
        if handler != constants.RECONCILE:
            assert "logs:FilterLogEvents" not in actions_of(function_statements(raw, function)), handler
