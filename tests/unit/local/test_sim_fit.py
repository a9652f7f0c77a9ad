"""The simulated scheduler and the planner share one fit predicate set (squall.planner.fit).

The planner decides which nodes a pending pod could go to; the simulated scheduler
binds it. If the two read a pod's constraints differently, a replay would scale up
for pods that then never schedule (or the reverse), so these tests hold them to the
same answer, and to what the API server accepts.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from squall.core.errors import PermanentError
from squall.planner.fit import affinity_mismatch, resource_shortfall, selector_mismatch, untolerated_taint
from squall.planner.kube import parse_node, parse_pod

from .sim import CPU_NODE, job_manifest, make_cluster, one_node_cluster, only_pod

LABEL_CHOICES: list[dict[str, str]] = [{}, {"zone": "a"}, {"zone": "b", "size": "4"}, {"size": "9"}]
TAINT_CHOICES: list[list[dict[str, str]]] = [
    [],
    [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    [{"key": "spot", "value": "yes", "effect": "NoExecute"}],
    [{"key": "soft", "effect": "PreferNoSchedule"}],
]
SELECTOR_CHOICES: list[dict[str, str] | None] = [None, {"zone": "a"}, {"zone": "b"}]
AFFINITY_CHOICES: list[list[dict[str, Any]] | None] = [
    None,
    [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
    [{"key": "zone", "operator": "NotIn", "values": ["a"]}],
    [{"key": "size", "operator": "Exists"}],
    [{"key": "size", "operator": "DoesNotExist"}],
    [{"key": "size", "operator": "Gt", "values": ["5"]}],
    [{"key": "size", "operator": "Lt", "values": ["5"]}],
]
TOLERATION_CHOICES: list[list[dict[str, str]] | None] = [
    None,
    [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    [{"key": "spot", "operator": "Equal", "value": "yes"}],
    [{"operator": "Exists"}],
    [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "false"}],
]


def planner_says_it_fits(pod_obj: dict[str, Any], node_obj: dict[str, Any]) -> bool:
    pod, node = parse_pod(pod_obj), parse_node(node_obj)
    return (
        resource_shortfall(pod.requests.vector(), node.allocatable.vector()) is None
        and selector_mismatch(tuple(pod.node_selector.items()), node.labels) is None
        and affinity_mismatch(pod.required_affinity, node.labels) is None
        and untolerated_taint(pod.tolerations, node.taints) is None
    )


@pytest.mark.timeout(60)
def test_the_scheduler_binds_exactly_where_the_planners_predicates_say_a_pod_fits() -> None:
    # given every combination of node labels and taints with pod constraints (a sample)
    combinations = list(
        itertools.product(
            LABEL_CHOICES, TAINT_CHOICES, SELECTOR_CHOICES, AFFINITY_CHOICES, TOLERATION_CHOICES
        )
    )
    sample = random.Random(7).sample(combinations, 400)
    outcomes = set()
    for labels, taints, selector, affinity, tolerations in sample:
        cluster, _ = make_cluster()
        node = cluster.add_node(name="n1", allocatable=CPU_NODE, labels=labels, taints=taints)
        cluster.create(
            job_manifest("j1", node_selector=selector, node_affinity=affinity, tolerations=tolerations)
        )

        # when
        cluster.advance()

        # then
        pod = only_pod(cluster, "j1")
        bound = pod["spec"].get("nodeName") == "n1"
        assert bound == planner_says_it_fits(pod, node), (labels, taints, selector, affinity, tolerations)
        outcomes.add(bound)
    assert outcomes == {True, False}  # the sample holds both answers


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (
            "affinity",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]
                    }
                }
            },
        ),
        ("tolerations", [{"key": "spot", "operator": "Like"}]),
        ("tolerations", [{"key": "spot", "operator": "Exists", "effect": "Sometimes"}]),
    ],
)
def test_constraints_the_api_server_and_the_planner_refuse_are_refused_and_nothing_is_stored(
    field: str, value: Any
) -> None:
    cluster, _ = make_cluster()
    manifest = job_manifest("j1")
    manifest["spec"]["template"]["spec"][field] = value

    with pytest.raises(PermanentError, match="invalid pod scheduling constraints"):
        cluster.create(manifest)

    assert cluster.list_jobs() == [] and cluster.list_pods() == []


def test_a_sidecar_holds_its_requests_next_to_the_app_container_as_the_planner_counts_them() -> None:
    # given a 4-CPU node and a pod of 3 CPUs plus a 2-CPU sidecar (an init container that keeps running)
    cluster, _ = one_node_cluster()
    manifest = job_manifest("j1", cpu="3")
    manifest["spec"]["template"]["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "image": "reg.example.com/proxy:1",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "2"}},
        },
    ]
    cluster.create(manifest)

    # when
    cluster.advance()

    # then 5 CPUs do not fit into 4, as the planner says
    pod = only_pod(cluster, "j1")
    assert "nodeName" not in pod["spec"]
    assert parse_pod(pod).requests.cpu == 5000
