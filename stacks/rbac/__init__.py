"""Kubernetes RBAC and aws-auth mappings for the Squall functions.

``squall-rbac.yaml`` beside this module holds the cluster-scoped part; the
team namespaces come from the deployment's settings, so the RoleBindings are
rendered here, with the ``squall-job`` service account of each team namespace
(the job pods' identity, stacks/pod_identity.py). ``python -m stacks.rbac``
prints the whole set for ``kubectl apply -f -``; ``python -m stacks.rbac --aws-auth ACCOUNT`` prints the
``mapRoles`` entries for clusters that use the aws-auth ConfigMap instead of
access entries. No aws_cdk import: this runs without starting jsii.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from stacks import constants
from stacks.config import SquallConfig

MANAGED_BY = {"app.kubernetes.io/managed-by": "squall"}
READ_ROLE = "squall-jobs-read"
WRITE_ROLE = "squall-jobs-write"
GANG_RELEASE_ROLE = "squall-gang-release"
# The roles bound in each team namespace, and the group each is bound to.
NAMESPACED_ROLES = (
    (READ_ROLE, constants.KUBERNETES_JOBS_GROUP),
    (WRITE_ROLE, constants.KUBERNETES_JOBS_GROUP),
    (GANG_RELEASE_ROLE, constants.KUBERNETES_GANGS_GROUP),
)


def base_manifests() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(constants.RBAC_MANIFEST.read_text()) if doc]


def team_role_binding(
    namespace: str, role: str = WRITE_ROLE, group: str = constants.KUBERNETES_JOBS_GROUP
) -> dict[str, Any]:
    """Binds one of Squall's ClusterRoles to one Kubernetes group in one team namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }


def job_service_account(namespace: str) -> dict[str, Any]:
    """The service account Squall's job pods run under; EKS Pod Identity maps it to the namespace's role.

    It is bound to no Kubernetes role: the pods get AWS credentials through it, and
    no rights in the cluster.
    """
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": constants.JOB_SERVICE_ACCOUNT,
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
    }


def render_rbac(teams: Mapping[str, str]) -> list[dict[str, Any]]:
    namespaces = sorted(set(teams.values()))
    return (
        base_manifests()
        + [team_role_binding(ns, role, group) for ns in namespaces for role, group in NAMESPACED_ROLES]
        + [job_service_account(ns) for ns in namespaces]
    )


def role_arn(account: str, role_name: str) -> str:
    return f"arn:aws:iam::{account}:role/{role_name}"


def function_role_name(config: SquallConfig, handler: str) -> str:
    """The fixed name stacks/functions.py gives each function's role."""
    return f"{constants.function_name(config.prefix, handler)}-{config.home_region}"


def aws_auth_map_roles(config: SquallConfig, account: str) -> list[dict[str, Any]]:
    """aws-auth ``mapRoles`` entries equivalent to the access entries the stack creates."""
    entries: list[dict[str, Any]] = [
        {
            "rolearn": role_arn(account, function_role_name(config, handler)),
            "username": f"squall:{handler}",
            "groups": list(groups),
        }
        for handler, groups in constants.KUBERNETES_GROUPS.items()
    ]
    if config.creates_groups:
        entries.append(
            {
                "rolearn": role_arn(account, constants.node_role_name(config.prefix, config.home_region)),
                "username": "system:node:{{EC2PrivateDNSName}}",
                "groups": ["system:bootstrappers", "system:nodes"],
            }
        )
    return entries


def dump(documents: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)
