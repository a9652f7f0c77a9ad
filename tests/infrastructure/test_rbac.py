"""The Kubernetes RBAC the functions need: valid, least privilege, bound to their groups."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from stacks import constants
from stacks.config import SquallConfig, load_cdk_json_context
from stacks.rbac import aws_auth_map_roles, render_rbac
from stacks.rbac.__main__ import main

from .helpers import CAPACITY_GRANTS, rbac_grants

TEAMS = {"research": "team-research", "vision": "team-vision", "nlp": "team-research"}


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    return render_rbac(TEAMS)


def _by(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {
        f"{m['metadata'].get('namespace', '')}/{m['metadata']['name']}": m
        for m in manifests
        if m["kind"] == kind
    }


def test_every_manifest_is_valid_kubernetes(manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_no_wildcards_anywhere(manifests: list[dict[str, Any]]) -> None:
    for role in _by(manifests, "ClusterRole").values():
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], role["metadata"]["name"]


def test_capacity_group_reads_pods_cordons_nodes_and_evicts(manifests: list[dict[str, Any]]) -> None:
    roles = _by(manifests, "ClusterRole")
    assert rbac_grants(roles["/squall-capacity"]) == CAPACITY_GRANTS
    binding = _by(manifests, "ClusterRoleBinding")["/squall-capacity"]
    assert binding["subjects"] == [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Group",
            "name": constants.KUBERNETES_CAPACITY_GROUP,
        }
    ]


def test_jobs_group_reads_and_writes_only_in_team_namespaces(manifests: list[dict[str, Any]]) -> None:
    roles = _by(manifests, "ClusterRole")
    write = rbac_grants(roles["/squall-jobs-write"])
    # Jobs are admission's to create (the scale function); a model service's Service is submit's
    assert ("batch", "jobs", "create") not in write and ("batch", "jobs", "delete") in write
    assert ("", "services", "create") in write
    assert not any(resource in ("pods", "nodes", "secrets") for _, resource, _ in write)
    read = rbac_grants(roles["/squall-jobs-read"])
    assert {verb for _, _, verb in read} == {"get", "list"}
    assert {resource for _, resource, _ in read} == {"jobs", "pods"}
    # Neither is bound cluster-wide: the jobs functions list namespace by namespace.
    cluster_bound = {b["roleRef"]["name"] for b in _by(manifests, "ClusterRoleBinding").values()}
    assert cluster_bound == {"squall-capacity", "squall-nodes-read"}
    # Cluster-wide, the jobs group only reads nodes (reconcile prices a job by its pods' nodes).
    nodes_read = _by(manifests, "ClusterRoleBinding")["/squall-nodes-read"]
    assert nodes_read["subjects"][0]["name"] == constants.KUBERNETES_JOBS_GROUP
    assert rbac_grants(roles["/squall-nodes-read"]) == {("", "nodes", "get"), ("", "nodes", "list")}
    bindings = _by(manifests, "RoleBinding")
    jobs_bindings = {
        k: b for k, b in bindings.items() if b["subjects"][0]["name"] == constants.KUBERNETES_JOBS_GROUP
    }
    assert sorted(jobs_bindings) == [
        "team-research/squall-jobs-read",
        "team-research/squall-jobs-write",
        "team-vision/squall-jobs-read",
        "team-vision/squall-jobs-write",
    ]
    for key, binding in jobs_bindings.items():
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": key.split("/")[1],
        }


def test_scale_may_admit_and_release_gangs_in_team_namespaces_only(manifests: list[dict[str, Any]]) -> None:
    # The scale function creates an admitted job's Jobs and Services (services/admission.py;
    # get after a 409), lists Jobs for the quotas, and deletes a stranded gang's (_release).
    assert constants.KUBERNETES_GANGS_GROUP in constants.KUBERNETES_GROUPS["scale"]
    release = rbac_grants(_by(manifests, "ClusterRole")["/squall-gang-release"])
    assert release == {
        ("batch", "jobs", "get"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        ("", "services", "get"),
        ("", "services", "list"),
        ("", "services", "create"),
        ("", "services", "delete"),
    }
    bindings = {
        k: b
        for k, b in _by(manifests, "RoleBinding").items()
        if b["subjects"][0]["name"] == constants.KUBERNETES_GANGS_GROUP
    }
    assert sorted(bindings) == ["team-research/squall-gang-release", "team-vision/squall-gang-release"]
    # Only the scale function is in that group, and no role patches Jobs any more (admission
    # creates them pinned to their region, let go): Jobs are never patched anywhere.
    assert [
        h for h, groups in constants.KUBERNETES_GROUPS.items() if constants.KUBERNETES_GANGS_GROUP in groups
    ] == ["scale"]
    patching = {
        name
        for name, role in _by(manifests, "ClusterRole").items()
        if ("batch", "jobs", "patch") in rbac_grants(role)
    }
    assert patching == set()


def test_the_scale_function_lists_jobs_only_where_its_role_may() -> None:
    # Its settings scope its Job lists to the team namespaces (runtime.NamespacedCluster),
    # its pods stay cluster-wide (squall-capacity).
    from stacks.functions import function_settings

    config = SquallConfig.from_context(load_cdk_json_context())
    settings = function_settings(config, "scale")
    assert settings["namespaces"] == sorted(set(config.teams.values()))
    assert settings["cluster_wide_pods"] is True


def test_every_group_a_function_is_mapped_to_is_bound(manifests: list[dict[str, Any]]) -> None:
    bound = {
        subject["name"]
        for kind in ("ClusterRoleBinding", "RoleBinding")
        for binding in _by(manifests, kind).values()
        for subject in binding["subjects"]
    }
    mapped = {g for groups in constants.KUBERNETES_GROUPS.values() for g in groups}
    assert mapped == bound


def test_aws_auth_entries_name_the_fixed_role_names() -> None:
    config = SquallConfig.from_context(load_cdk_json_context())
    entries = {e["username"]: e for e in aws_auth_map_roles(config, "123456789012")}
    assert entries["squall:scale"] == {
        "rolearn": "arn:aws:iam::123456789012:role/squall-scale-us-west-2",
        "username": "squall:scale",
        "groups": ["squall-capacity", "squall-gangs"],
    }
    assert len(entries) == 5  # no node role: the default creates no groups


def test_command_prints_manifests_for_kubectl(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    printed = capsys.readouterr().out
    assert "kind: ClusterRole" in printed
    assert "namespace: team-research" in printed


def test_every_team_namespace_gets_the_job_service_account_with_no_rights(
    manifests: list[dict[str, Any]],
) -> None:
    # Job pods run as squall-job (core/manifests.py); EKS Pod Identity maps it to the
    # namespace's role (stacks/pod_identity.py). In the cluster it may do nothing.
    accounts = _by(manifests, "ServiceAccount")
    assert sorted(accounts) == ["team-research/squall-job", "team-vision/squall-job"]
    assert all(
        a["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "squall"} for a in accounts.values()
    )
    subjects = [
        subject
        for kind in ("ClusterRoleBinding", "RoleBinding")
        for binding in _by(manifests, kind).values()
        for subject in binding["subjects"]
    ]
    assert all(subject["kind"] == "Group" for subject in subjects)
    assert constants.JOB_SERVICE_ACCOUNT == "squall-job"
