"""SimulatedCluster's scheduler: resources, selectors, affinity, taints, readiness, packing, gangs."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from squall.core.errors import NotFoundError
from squall.planner.quantity import parse_cpu_millicores, parse_whole_count

from .sim import (
    CPU_NODE,
    GPU_NODE,
    GPU_TAINT,
    NS,
    condition,
    has_condition,
    job_manifest,
    make_cluster,
    node_of,
    one_node_cluster,
    only_pod,
    squall_objects,
)

# ---- the scheduler ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allocatable", "request_kwargs"),
    [
        ({"cpu": "4", "memory": "64Gi"}, {"cpu": "3"}),
        ({"cpu": "64", "memory": "10Gi"}, {"memory": "6Gi"}),
        ({"cpu": "64", "memory": "64Gi", "nvidia.com/gpu": "1"}, {"gpu": 1}),
        ({"cpu": "64", "memory": "64Gi", "pods": "1"}, {}),
    ],
    ids=["cpu", "memory", "gpu", "pods-per-node"],
)
def test_a_node_takes_only_what_fits(allocatable: dict[str, str], request_kwargs: dict[str, Any]) -> None:
    # given one node with room for one pod
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=allocatable)
    cluster.create(job_manifest("first", **request_kwargs))
    cluster.create(job_manifest("second", **request_kwargs))

    # when
    summary = cluster.advance()

    # then the second pod waits, and says why as kube-scheduler does
    assert summary.scheduled == 1
    assert node_of(cluster, "first") == "n1"
    waiting = only_pod(cluster, "second")
    assert "nodeName" not in waiting["spec"]
    assert has_condition(waiting, "PodScheduled", status="False", reason="Unschedulable")


def test_node_selector_picks_only_labelled_nodes() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="a", allocatable=CPU_NODE)
    cluster.add_node(name="b", allocatable=CPU_NODE, labels={"squall.io/node-group": "p3"})
    cluster.create(job_manifest("j1", node_selector={"squall.io/node-group": "p3"}))

    cluster.advance()

    assert node_of(cluster, "j1") == "b"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"key": "zone", "operator": "In", "values": ["west"]}, "west-node"),
        ({"key": "zone", "operator": "NotIn", "values": ["west"]}, "east-node"),
        ({"key": "spot", "operator": "Exists"}, "east-node"),
        ({"key": "spot", "operator": "DoesNotExist"}, "west-node"),
        ({"key": "zone", "operator": "In", "values": ["north"]}, None),
    ],
)
def test_required_node_affinity(expression: dict[str, Any], expected: str | None) -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="east-node", allocatable=CPU_NODE, labels={"zone": "east", "spot": "true"})
    cluster.add_node(name="west-node", allocatable=CPU_NODE, labels={"zone": "west"})
    cluster.create(job_manifest("j1", node_affinity=[expression]))

    cluster.advance()

    assert node_of(cluster, "j1") == expected


@pytest.mark.parametrize(
    ("tolerations", "schedules"),
    [
        (None, False),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], True),
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true"}], True),
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "false"}], False),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"operator": "Exists"}], True),
    ],
    ids=["none", "exists", "equal", "equal-wrong-value", "other-effect", "tolerate-all"],
)
def test_taints_keep_off_pods_that_do_not_tolerate_them(
    tolerations: list[dict[str, Any]] | None, schedules: bool
) -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="gpu", allocatable=GPU_NODE, taints=GPU_TAINT)
    cluster.create(job_manifest("j1", tolerations=tolerations))

    cluster.advance()

    assert node_of(cluster, "j1") == ("gpu" if schedules else None)


def test_prefer_no_schedule_does_not_block() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE, taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    cluster.create(job_manifest("j1"))

    cluster.advance()

    assert node_of(cluster, "j1") == "n1"


def test_cordoned_nodes_take_no_new_pods_until_uncordoned() -> None:
    # given a node cordoned the way Squall cordons
    cluster, _ = one_node_cluster()
    node = cluster.patch_node(
        "n1",
        {
            "spec": {"unschedulable": True},
            "metadata": {"annotations": {"squall.io/cordoned-at": "2026-01-05T09:00:00Z"}},
        },
    )
    assert node["spec"]["unschedulable"] is True
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in node["spec"]["taints"]
    cluster.create(job_manifest("j1"))
    cluster.advance()
    assert node_of(cluster, "j1") is None

    # when uncordoned (a null annotation deletes it)
    node = cluster.patch_node(
        "n1", {"spec": {"unschedulable": None}, "metadata": {"annotations": {"squall.io/cordoned-at": None}}}
    )
    cluster.advance()

    # then
    assert "unschedulable" not in node["spec"] and "taints" not in node["spec"]
    assert "squall.io/cordoned-at" not in node["metadata"].get("annotations", {})
    assert node_of(cluster, "j1") == "n1"


def test_patch_node_merges_labels_and_refuses_unknown_nodes() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE, labels={"a": "1", "b": "2"})

    node = cluster.patch_node("n1", {"metadata": {"labels": {"b": None, "c": "3"}}})

    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "a": "1", "c": "3"}
    with pytest.raises(NotFoundError):
        cluster.patch_node("missing", {"spec": {"unschedulable": True}})


def test_not_ready_nodes_take_no_pods_until_ready() -> None:
    cluster, clock = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE, ready=False)
    cluster.create(job_manifest("j1"))
    cluster.advance()
    node = cluster.get_node("n1")
    assert node is not None and has_condition(node, "Ready", status="False")
    assert node["spec"]["taints"] == [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    assert node_of(cluster, "j1") is None

    clock.advance(timedelta(seconds=30))
    cluster.set_ready("n1", True)
    cluster.advance()

    node = cluster.get_node("n1")
    assert node is not None
    ready = condition(node, "Ready")
    assert ready is not None and ready["status"] == "True"
    assert ready["lastTransitionTime"] == "2026-01-05T09:00:30Z"
    assert node_of(cluster, "j1") == "n1"


def test_gpu_pods_wait_until_the_gpus_are_allocatable() -> None:
    # given a Ready node whose device plugin has not registered the GPUs yet
    cluster, _ = make_cluster()
    cluster.add_node(name="g1", allocatable=GPU_NODE, taints=GPU_TAINT, gpus_ready=False)
    cluster.create(squall_objects("gpu-job", resources={"cpu": "2", "memory": "8Gi", "gpu": 1})[0])
    cluster.advance()
    node = cluster.get_node("g1")
    assert node is not None and node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    assert node_of(cluster, "gpu-job") is None

    # when
    cluster.set_gpus_ready("g1")
    cluster.advance()

    # then
    node = cluster.get_node("g1")
    assert node is not None and node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node_of(cluster, "gpu-job") == "g1"


def test_pods_pack_onto_the_most_allocated_node_and_ties_go_by_name() -> None:
    cluster, _ = make_cluster()
    for name in ("c", "b", "a"):
        cluster.add_node(name=name, allocatable=CPU_NODE)
    cluster.create(job_manifest("first", cpu="2"))
    cluster.advance()
    cluster.create(job_manifest("second", cpu="1"))
    cluster.advance()

    assert node_of(cluster, "first") == "a"  # three empty nodes: the first name
    assert node_of(cluster, "second") == "a"  # the fuller node, not an empty one


def test_a_gang_stays_in_the_region_of_its_first_pod() -> None:
    # given a small east node the first pod packs onto, and a roomy west node
    cluster, _ = make_cluster()
    region = "topology.kubernetes.io/region"
    cluster.add_node(
        name="east-1",
        allocatable=GPU_NODE | {"nvidia.com/gpu": "1"},
        labels={region: "us-east-1"},
        taints=GPU_TAINT,
    )
    cluster.add_node(name="west-1", allocatable=GPU_NODE, labels={region: "us-west-2"}, taints=GPU_TAINT)
    for manifest in squall_objects(
        "gang", replicas={"chief": 1, "worker": 2}, resources={"cpu": "1", "memory": "1Gi", "gpu": 1}
    ):
        cluster.create(manifest)
    lone = squall_objects("lone", resources={"cpu": "1", "memory": "1Gi", "gpu": 1})[0]
    cluster.create(lone)

    # when
    cluster.advance()

    # then the workers wait for room in us-east-1 although us-west-2 has room
    placed = {
        p["metadata"]["labels"]["squall.io/replica-type"]: p["spec"].get("nodeName")
        for p in cluster.list_pods(job_id="gang")
    }
    assert placed == {"chief": "east-1", "worker": None}
    assert node_of(cluster, "lone") == "west-1"  # not a gang member: no constraint

    # when another us-east-1 node joins
    cluster.add_node(name="east-2", allocatable=GPU_NODE, labels={region: "us-east-1"}, taints=GPU_TAINT)
    cluster.advance()

    # then
    workers = [
        p["spec"].get("nodeName")
        for p in cluster.list_pods(job_id="gang")
        if "worker" in p["metadata"]["name"]
    ]
    assert workers == ["east-2", "east-2"]


def test_higher_priority_pods_are_scheduled_first() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable={"cpu": "1", "memory": "8Gi"})
    low, high = job_manifest("low"), job_manifest("high")
    high["spec"]["template"]["spec"]["priority"] = 100
    cluster.create(low)
    cluster.create(high)

    cluster.advance()

    assert (node_of(cluster, "high"), node_of(cluster, "low")) == ("n1", None)


def test_random_churn_never_overcommits_a_node() -> None:
    # given a seeded mix of arrivals, node losses, evictions and deletions
    rng = random.Random(11)
    cluster, clock = make_cluster(pod_backoff=timedelta(seconds=5))
    shapes = [GPU_NODE, CPU_NODE, GPU_NODE | {"nvidia.com/gpu": "1", "pods": "3"}]
    for step in range(250):
        roll = rng.random()
        nodes = [n["metadata"]["name"] for n in cluster.list_nodes()]
        if roll < 0.05 or not nodes:
            cluster.add_node(
                name=f"n{step:03d}", allocatable=rng.choice(shapes), gpus_ready=rng.random() < 0.8
            )
        elif roll < 0.08:
            cluster.remove_node(rng.choice(nodes))
        elif roll < 0.10:
            cluster.set_gpus_ready(rng.choice(nodes))
        elif roll < 0.45:
            job_id = f"j{step:03d}"
            cluster.set_behaviour(job_id, run_for=timedelta(seconds=rng.randint(10, 600)))
            for manifest in squall_objects(
                job_id,
                resources={"cpu": str(rng.randint(1, 6)), "memory": "4Gi", "gpu": rng.randint(0, 2)},
                replicas={"worker": rng.randint(1, 3)},
            ):
                cluster.create(manifest)
        elif roll < 0.50 and (pods := cluster.list_pods()):
            pod = rng.choice(pods)["metadata"]
            cluster.evict(namespace=pod["namespace"], name=pod["name"])
        elif roll < 0.55 and (jobs := cluster.list_jobs()):
            cluster.delete_job_objects(
                namespace=NS, job_id=rng.choice(jobs)["metadata"]["labels"]["squall.io/job-id"]
            )
        clock.advance(timedelta(seconds=rng.randint(0, 30)))
        cluster.advance()

        # then no node ever holds more than it has
        used: dict[str, list[int]] = {}
        for pod in cluster.list_pods():
            node = pod["spec"].get("nodeName")
            if node and pod["status"]["phase"] in ("Pending", "Running"):
                requests = pod["spec"]["containers"][0]["resources"]["requests"]
                totals = used.setdefault(node, [0, 0, 0])
                totals[0] += parse_cpu_millicores(requests["cpu"])
                totals[1] += parse_whole_count(requests.get("nvidia.com/gpu", 0))
                totals[2] += 1
        for node in cluster.list_nodes():
            cpu, gpus, count = used.get(node["metadata"]["name"], [0, 0, 0])
            allocatable = node["status"]["allocatable"]
            assert cpu <= parse_cpu_millicores(allocatable["cpu"])
            assert gpus <= parse_whole_count(allocatable.get("nvidia.com/gpu", 0))
            assert count <= parse_whole_count(allocatable["pods"])
    stats = cluster.stats()
    assert stats["jobs_complete"] > 0 and stats["gpus_in_use"] <= stats["gpus_allocatable"]
