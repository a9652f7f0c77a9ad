"""Small readers over synthesised CloudFormation templates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_


def logical_id(construct: Any) -> str:
    """The logical id of an L2 construct's CloudFormation resource."""
    resource = construct.node.default_child
    return cdk.Stack.of(construct).resolve(resource.logical_id)


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_statements(template: dict[str, Any], role: iam.IRole) -> list[dict[str, Any]]:
    """Every statement of the policies attached to `role` in this template."""
    role_id = logical_id(role)
    statements: list[dict[str, Any]] = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def function_statements(template: dict[str, Any], function: lambda_.Function) -> list[dict[str, Any]]:
    assert function.role is not None
    return role_statements(template, function.role)


def actions_of(statements: list[dict[str, Any]]) -> set[str]:
    return {action for s in statements if s["Effect"] == "Allow" for action in as_list(s["Action"])}


def statements_with(statements: list[dict[str, Any]], action: str) -> list[dict[str, Any]]:
    return [s for s in statements if action in as_list(s["Action"])]


def policy_statements(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every statement of every policy document anywhere in a template."""
    if isinstance(node, dict):
        statements = node.get("Statement")
        if isinstance(statements, list) and "Version" in node:
            for statement in statements:
                yield path, statement
        for key, value in node.items():
            yield from policy_statements(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from policy_statements(value, f"{path}[{index}]")


# The capacity group's ClusterRole, and no more: it reads pods, cordons nodes and evicts.
CAPACITY_GRANTS = {
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "patch"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods/eviction", "create"),
}


def rbac_grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """A Role's or ClusterRole's rules as (apiGroup, resource, verb) triples."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
