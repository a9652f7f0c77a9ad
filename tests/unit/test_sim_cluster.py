"""SimulatedCluster: the in-memory Kubernetes that the local runtime runs Squall against."""

from __future__ import annotations

import random
import re
from datetime import timedelta
from typing import Any

import pytest

from squall.core.errors import NotFoundError, PermanentError, RetryableError
from squall.core.jobs import JobStatus, Reason
from squall.core.kubestatus import Observation, observe
from squall.core.manifests import render
from squall.core.spec import JobSpec
from squall.local.clock import VirtualClock
from squall.local.cluster import SharedObjectChanged, SimulatedCluster
from squall.planner.quantity import parse_cpu_millicores, parse_whole_count
from squall.ports import Cluster

NS = "team-a"
GPU_NODE = {"cpu": "8", "memory": "60Gi", "nvidia.com/gpu": "4", "pods": "58"}
CPU_NODE = {"cpu": "4", "memory": "16Gi", "pods": "58"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
# Disruptions first, as Kubernetes evaluates the rules in order.
COUNT_DISRUPTIONS_FIRST: list[dict[str, Any]] = [
    {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]},
    {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "NotIn", "values": [0]}},
]


def make_cluster(**kwargs: Any) -> tuple[SimulatedCluster, VirtualClock]:
    clock = VirtualClock()
    return SimulatedCluster(clock=clock, **kwargs), clock


def job_manifest(
    name: str,
    *,
    job_id: str | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    gpu: int = 0,
    backoff_limit: int = 2,
    deadline: int | None = 3600,
    rules: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    node_affinity: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    ttl: int | None = None,
) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/managed-by": "squall",
        "squall.io/job-id": job_id or name,
        "squall.io/replica-type": "worker",
        "squall.io/replica-index": "0",
    }
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "trainer", "image": "reg.example.com/tf:1", "resources": {"requests": requests}}
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if node_affinity:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": node_affinity}]
                }
            }
        }
    if tolerations:
        pod_spec["tolerations"] = tolerations
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "podFailurePolicy": {"rules": rules if rules is not None else COUNT_DISRUPTIONS_FIRST},
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": spec,
    }


def squall_objects(job_id: str, **spec: Any) -> list[dict[str, Any]]:
    """What Squall's intake creates for a job, rendered by the real manifests module."""
    body = {"name": "train", "team": "research", "image": "reg.example.com/tf:1"} | spec
    return render(JobSpec.model_validate(body), job_id=job_id, namespace=NS)


def only_pod(cluster: SimulatedCluster, job_id: str) -> dict[str, Any]:
    pods = cluster.list_pods(job_id=job_id)
    assert len(pods) == 1, pods
    return pods[0]


def node_of(cluster: SimulatedCluster, job_id: str) -> str | None:
    return only_pod(cluster, job_id)["spec"].get("nodeName")


def k8s_job(cluster: SimulatedCluster, job_id: str) -> dict[str, Any]:
    jobs = cluster.list_jobs(job_id=job_id)
    assert len(jobs) == 1
    return jobs[0]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj["status"].get("conditions") or [] if c["type"] == kind), None)


def has_condition(obj: dict[str, Any] | None, kind: str, **fields: str) -> bool:
    found = condition(obj, kind) if obj is not None else None
    return found is not None and found.items() >= fields.items()


def observed(cluster: SimulatedCluster, job_id: str, *, replicas: int = 1) -> Observation:
    return observe(
        expected_replicas=replicas,
        k8s_jobs=cluster.list_jobs(job_id=job_id),
        pods=cluster.list_pods(job_id=job_id),
    )


def test_the_type_checker_holds_it_to_the_cluster_port() -> None:
    cluster: Cluster = make_cluster()[0]
    assert cluster.list_nodes() == []


# ---- objects ---------------------------------------------------------------------------


def test_create_is_idempotent_and_never_replaces_an_existing_object() -> None:
    # given
    cluster, _ = make_cluster()
    first = job_manifest("j1")
    second = job_manifest("j1", cpu="7")
    second["metadata"]["labels"]["extra"] = "x"

    # when
    created = [cluster.create(first), cluster.create(second)]

    # then
    assert created == [True, False]
    job = k8s_job(cluster, "j1")
    assert "extra" not in job["metadata"]["labels"]
    assert job["metadata"]["uid"] and job["metadata"]["creationTimestamp"].endswith("Z")
    assert len(cluster.list_pods(job_id="j1")) == 1


def test_create_does_not_keep_a_reference_to_the_callers_manifest() -> None:
    cluster, _ = make_cluster()
    manifest = job_manifest("j1")
    cluster.create(manifest)

    manifest["metadata"]["labels"]["squall.io/job-id"] = "changed"

    assert k8s_job(cluster, "j1")["metadata"]["labels"]["squall.io/job-id"] == "j1"


def test_create_refuses_what_kubernetes_would_refuse_and_stores_nothing() -> None:
    cluster, _ = make_cluster()
    bad_quantity = job_manifest("j1", memory="lots")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}}

    for manifest in (bad_quantity, pod, {"kind": "Job", "apiVersion": "batch/v1", "metadata": {}}):
        with pytest.raises(PermanentError):
            cluster.create(manifest)

    assert cluster.list_jobs() == [] and cluster.list_pods() == []


def test_delete_job_objects_removes_jobs_services_and_pods_and_is_idempotent() -> None:
    # given a distributed job: 3 Jobs and 3 Services
    cluster, _ = make_cluster()
    for manifest in squall_objects("mnist-1", replicas={"chief": 1, "worker": 2}):
        cluster.create(manifest)
    cluster.create(job_manifest("other"))

    # when
    first = cluster.delete_job_objects(namespace=NS, job_id="mnist-1")
    again = cluster.delete_job_objects(namespace=NS, job_id="mnist-1")

    # then
    assert (first, again) == (6, 0)
    assert cluster.list_jobs(job_id="mnist-1") == [] and cluster.list_pods(job_id="mnist-1") == []
    assert cluster.list_services() == []
    assert len(cluster.list_pods()) == 1  # the other job's pod


def test_delete_frees_the_node_for_the_next_pod() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("first", cpu="3"))
    cluster.create(job_manifest("second", cpu="3"))
    cluster.advance()
    assert node_of(cluster, "second") is None

    cluster.delete_job_objects(namespace=NS, job_id="first")
    cluster.advance()

    assert node_of(cluster, "second") == "n1"


def test_pods_are_named_labelled_and_owned_like_the_job_controller_does() -> None:
    cluster, _ = make_cluster(seed=7)
    cluster.create(job_manifest("train-abc"))

    pod = only_pod(cluster, "train-abc")
    job = k8s_job(cluster, "train-abc")

    assert re.fullmatch(r"train-abc-[bcdfghjklmnpqrstvwxz2456789]{5}", pod["metadata"]["name"])
    labels = pod["metadata"]["labels"]
    assert labels["job-name"] == labels["batch.kubernetes.io/job-name"] == "train-abc"
    assert labels["squall.io/job-id"] == "train-abc"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (
        owner.items()
        >= {
            "kind": "Job",
            "name": "train-abc",
            "uid": job["metadata"]["uid"],
            "controller": True,
        }.items()
    )
    assert pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]
    assert job["status"]["active"] == 1
    # The same seed gives the same names: replays are reproducible.
    again, _ = make_cluster(seed=7)
    again.create(job_manifest("train-abc"))
    assert only_pod(again, "train-abc")["metadata"]["name"] == pod["metadata"]["name"]


def test_lists_are_copies_that_callers_cannot_use_to_change_the_cluster() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1"))

    pod = cluster.list_pods()[0]
    pod["metadata"]["labels"]["squall.io/job-id"] = "changed"
    pod["status"]["phase"] = "Running"
    pod["spec"]["nodeName"] = "n1"
    node = cluster.list_nodes()[0]
    node["spec"]["unschedulable"] = True
    node["metadata"]["labels"]["x"] = "y"
    cluster.list_jobs()[0]["status"]["failed"] = 5

    assert only_pod(cluster, "j1")["status"]["phase"] == "Pending"
    assert "nodeName" not in only_pod(cluster, "j1")["spec"]
    assert cluster.get_node("n1") == cluster.list_nodes()[0]
    assert "unschedulable" not in cluster.list_nodes()[0]["spec"]
    assert "failed" not in k8s_job(cluster, "j1")["status"]


def test_nested_status_in_a_list_is_a_copy_too() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1"))
    cluster.advance()

    pod = only_pod(cluster, "j1")
    pod["status"]["conditions"][0]["status"] = "Unknown"
    pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = "never"
    pod["metadata"]["ownerReferences"][0]["name"] = "someone-else"

    again = only_pod(cluster, "j1")
    assert {c["status"] for c in again["status"]["conditions"]} == {"True"}
    assert again["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == "2026-01-05T09:00:00Z"
    assert again["metadata"]["ownerReferences"][0]["name"] == "j1"


def test_shared_lists_hand_out_the_same_object_until_it_changes() -> None:
    cluster, _ = make_cluster(lists="shared")
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.add_node(name="n2", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1"))
    pod, job, (n1, n2) = only_pod(cluster, "j1"), k8s_job(cluster, "j1"), cluster.list_nodes()

    assert only_pod(cluster, "j1") is pod and k8s_job(cluster, "j1") is job
    cluster.patch_node("n2", {"spec": {"unschedulable": True}})
    cluster.advance()  # binds the pod to n1

    bound = only_pod(cluster, "j1")
    assert bound is not pod and bound["spec"]["nodeName"] == "n1" and "nodeName" not in pod["spec"]
    again_n1, again_n2 = cluster.list_nodes()
    assert again_n1 is n1 and again_n2 is not n2 and again_n2["spec"]["unschedulable"] is True


def test_shared_whole_lists_follow_deletions() -> None:
    # given a shared list answered once
    cluster, _ = make_cluster(lists="shared")
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.add_node(name="n2", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1"))
    first = cluster.list_pods()
    assert len(first) == 1 and cluster.list_pods() == first and cluster.list_pods() is not first
    # when the job goes and a node leaves, nothing else changing
    cluster.delete_job_objects(namespace=NS, job_id="j1")
    cluster.remove_node("n2")
    # then the next answers say so
    assert cluster.list_pods() == []
    assert [n["metadata"]["name"] for n in cluster.list_nodes()] == ["n1"]


def test_checked_lists_catch_a_caller_changing_a_shared_object() -> None:
    cluster, _ = make_cluster(lists="checked")
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.list_nodes()[0]["metadata"]["labels"]["x"] = "y"
    with pytest.raises(SharedObjectChanged, match=r"/n1 at resourceVersion \d+: metadata changed"):
        cluster.list_nodes()


def test_list_mode_must_be_one_the_cluster_knows() -> None:
    with pytest.raises(ValueError, match="lists must be one of checked, copies, shared, not 'mine'"):
        make_cluster(lists="mine")


def test_list_filters_by_namespace_job_and_node() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.add_node(name="n2", allocatable={"cpu": "1", "memory": "1Gi"})
    cluster.create(job_manifest("big", cpu="3"))
    cluster.create(job_manifest("small", cpu="1", memory="1Gi"))
    other = job_manifest("elsewhere")
    other["metadata"]["namespace"] = "team-b"
    cluster.create(other)
    cluster.advance()

    assert [p["metadata"]["labels"]["job-name"] for p in cluster.list_pods(node_name="n2")] == ["small"]
    assert {j["metadata"]["name"] for j in cluster.list_jobs(namespace="team-b")} == {"elsewhere"}
    assert cluster.list_pods(namespace="team-b", job_id="big") == []
    assert cluster.list_pods(node_name="missing") == []


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
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
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


# ---- running, finishing, failing --------------------------------------------------------


def test_a_pod_runs_for_its_behaviour_and_the_job_completes() -> None:
    # given
    cluster, clock = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.set_behaviour("j1", run_for=timedelta(minutes=5))
    cluster.create(job_manifest("j1"))
    started = cluster.advance()
    assert started.started == 1
    pod = only_pod(cluster, "j1")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == "2026-01-05T09:00:00Z"
    assert cluster.next_event_time() == clock.now() + timedelta(minutes=5)

    # when not quite yet, then exactly on time
    clock.advance(timedelta(minutes=4, seconds=59))
    assert cluster.advance().finished == 0
    clock.advance(timedelta(seconds=1))
    summary = cluster.advance()

    # then
    assert summary.finished == 1 and summary.jobs_finished == 1
    pod = only_pod(cluster, "j1")
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["finishedAt"] == "2026-01-05T09:05:00Z"
    job = k8s_job(cluster, "j1")
    assert job["status"]["succeeded"] == 1 and "active" not in job["status"]
    assert has_condition(job, "Complete", status="True")
    assert cluster.next_event_time() is None


def test_a_late_advance_finishes_pods_at_their_own_time() -> None:
    cluster, clock = make_cluster(default_run_for=timedelta(seconds=30))
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1"))
    cluster.advance()

    clock.advance(timedelta(hours=1))
    cluster.advance()

    terminated = only_pod(cluster, "j1")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["finishedAt"] == "2026-01-05T09:00:30Z"


def test_an_application_error_fails_the_job_through_the_pod_failure_policy() -> None:
    # given Squall's own Job manifest and a trainer that exits 1
    cluster, clock = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.set_behaviour("bad-1", run_for=timedelta(seconds=10), exit_code=1)
    for manifest in squall_objects("bad-1"):
        cluster.create(manifest)
    cluster.advance()

    # when
    clock.advance(timedelta(seconds=10))
    cluster.advance()

    # then
    job = k8s_job(cluster, "bad-1")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "PodFailurePolicy"
    assert "exit code 1" in failed["message"]
    assert job["status"]["failed"] == 1
    pod = only_pod(cluster, "bad-1")  # an application failure keeps its pod for the logs
    assert pod["status"]["phase"] == "Failed"
    seen = observed(cluster, "bad-1")
    assert (seen.status, seen.reason) == (JobStatus.FAILED, Reason.APPLICATION_ERROR)


def test_a_lost_node_fails_its_pods_with_disruption_target_and_the_job_retries() -> None:
    # given a running pod
    cluster, clock = make_cluster(default_run_for=timedelta(minutes=10))
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1", backoff_limit=2))
    cluster.advance()
    lost_pod = only_pod(cluster, "j1")["metadata"]["name"]

    # when its node goes
    assert cluster.remove_node("n1", reason="spot reclaim") == 1

    # then the pod failed as PodGC fails it, and the Job counted it
    events = [e for e in cluster.events if e.name == lost_pod and e.reason == "DeletionByPodGC"]
    assert len(events) == 1
    job = k8s_job(cluster, "j1")
    assert job["status"]["failed"] == 1 and condition(job, "Failed") is None
    assert cluster.list_pods(job_id="j1") == []  # PodGC deleted it; the replacement comes after back-off
    assert cluster.next_event_time() == clock.now() + timedelta(seconds=10)

    # when the back-off passed and capacity is back
    clock.advance(timedelta(seconds=10))
    cluster.add_node(name="n2", allocatable=CPU_NODE)
    cluster.advance()

    # then a replacement runs and later succeeds
    replacement = only_pod(cluster, "j1")
    assert replacement["metadata"]["name"] != lost_pod
    assert replacement["spec"]["nodeName"] == "n2" and replacement["status"]["phase"] == "Running"
    clock.advance(timedelta(minutes=10))
    cluster.advance()
    seen = observed(cluster, "j1")
    assert (seen.status, seen.retries_used) == (JobStatus.SUCCEEDED, 1)


def test_the_disruption_target_condition_is_what_the_policy_sees() -> None:
    # An Ignore rule on DisruptionTarget only spares the retry if the condition is set.
    cluster, _ = make_cluster(pod_backoff=timedelta(0))
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    rules = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    cluster.create(job_manifest("j1", backoff_limit=0, rules=rules))
    cluster.advance()

    cluster.remove_node("n1")

    job = k8s_job(cluster, "j1")
    assert "failed" not in job["status"] and condition(job, "Failed") is None
    assert only_pod(cluster, "j1")["status"]["phase"] == "Pending"


def test_retries_exhausted_fail_the_job_with_backoff_limit_exceeded() -> None:
    # given a job with one retry
    cluster, _ = make_cluster(pod_backoff=timedelta(0))
    for manifest in squall_objects("flaky-1", retries=1):
        cluster.create(manifest)

    # when two nodes are lost under it in turn
    for name in ("n1", "n2"):
        cluster.add_node(name=name, allocatable=CPU_NODE)
        cluster.advance()
        assert node_of(cluster, "flaky-1") == name
        cluster.remove_node(name)

    # then
    job = k8s_job(cluster, "flaky-1")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2
    seen = observed(cluster, "flaky-1")
    # The one retry allowed was used; the pod that failed the Job last is no retry.
    assert (seen.status, seen.reason, seen.retries_used) == (JobStatus.FAILED, Reason.RETRIES_EXHAUSTED, 1)


def test_replacements_back_off_exponentially() -> None:
    cluster, clock = make_cluster()
    cluster.create(job_manifest("j1", backoff_limit=5))
    delays = []
    for number in range(3):
        cluster.add_node(name=f"n{number}", allocatable=CPU_NODE)
        cluster.advance()
        cluster.remove_node(f"n{number}")
        due = cluster.next_event_time()
        assert due is not None
        delays.append(due - clock.now())
        clock.advance_to(due)
        cluster.advance()

    assert delays == [timedelta(seconds=10), timedelta(seconds=20), timedelta(seconds=40)]


def test_active_deadline_kills_the_pod_and_fails_the_job() -> None:
    # given a job that never finds a node
    cluster, clock = make_cluster()
    cluster.create(job_manifest("slow", deadline=120))
    assert cluster.next_event_time() == clock.now() + timedelta(seconds=120)

    # when
    clock.advance(timedelta(seconds=120))
    summary = cluster.advance()

    # then
    assert summary.jobs_finished == 1
    job = k8s_job(cluster, "slow")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    assert cluster.list_pods(job_id="slow") == []
    assert observed(cluster, "slow").reason == "DeadlineExceeded"


def test_finished_jobs_go_after_their_ttl() -> None:
    cluster, clock = make_cluster(default_run_for=timedelta(seconds=10))
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1", ttl=60))
    cluster.advance()
    clock.advance(timedelta(seconds=10))
    cluster.advance()
    assert cluster.next_event_time() == clock.now() + timedelta(seconds=60)

    clock.advance(timedelta(seconds=60))
    cluster.advance()

    assert cluster.list_jobs() == [] and cluster.list_pods() == []


def test_an_image_error_leaves_the_pod_pending_with_image_pull_back_off() -> None:
    # given
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.set_behaviour("img-1", image_error=True)
    for manifest in squall_objects("img-1"):
        cluster.create(manifest)

    # when
    cluster.advance()

    # then
    pod = only_pod(cluster, "img-1")
    assert pod["spec"]["nodeName"] == "n1" and pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    seen = observed(cluster, "img-1")
    assert (seen.status, seen.reason) == (JobStatus.QUEUED, Reason.IMAGE_PULL_BACK_OFF)

    # when the image becomes pullable
    cluster.set_behaviour("img-1")
    cluster.advance()

    # then
    assert only_pod(cluster, "img-1")["status"]["phase"] == "Running"


# ---- evictions --------------------------------------------------------------------------


def test_eviction_is_refused_while_a_disruption_budget_would_be_violated() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1"))
    cluster.advance()
    cluster.add_pdb(NS, {"squall.io/job-id": "j1"}, max_unavailable=0)
    name = only_pod(cluster, "j1")["metadata"]["name"]

    assert cluster.evict(namespace=NS, name=name) is False
    assert only_pod(cluster, "j1")["status"]["phase"] == "Running"


def test_an_evicted_pod_counts_as_a_disruption_and_is_replaced() -> None:
    # given a running pod and a budget that allows one disruption
    cluster, clock = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.create(job_manifest("j1"))
    cluster.advance()
    cluster.add_pdb(NS, {"squall.io/job-id": "j1"}, max_unavailable=1)
    name = only_pod(cluster, "j1")["metadata"]["name"]

    # when
    evicted = cluster.evict(namespace=NS, name=name)

    # then
    assert evicted is True
    assert [e.reason for e in cluster.events if e.name == name][-1] == "EvictionByEvictionAPI"
    assert k8s_job(cluster, "j1")["status"]["failed"] == 1
    clock.advance(timedelta(seconds=10))
    cluster.advance()
    replacement = only_pod(cluster, "j1")
    assert replacement["metadata"]["name"] != name and replacement["status"]["phase"] == "Running"
    assert cluster.evict(namespace=NS, name=name) is True  # gone already


def test_policy_rules_apply_in_order_so_fail_job_first_catches_an_evicted_container() -> None:
    # Kubernetes evaluates podFailurePolicy rules in order: an evicted trainer exits
    # 143 (SIGTERM), which a FailJob rule on exit codes NotIn [0] matches before a
    # later Count rule on DisruptionTarget gets a say.
    cluster, _ = make_cluster()
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    fail_job_first = list(reversed(COUNT_DISRUPTIONS_FIRST))
    cluster.create(job_manifest("j1", rules=fail_job_first))
    cluster.advance()

    cluster.evict(namespace=NS, name=only_pod(cluster, "j1")["metadata"]["name"])

    failed = condition(k8s_job(cluster, "j1"), "Failed")
    assert failed is not None and failed["reason"] == "PodFailurePolicy"
    assert "exit code 143" in failed["message"]


def test_evicting_a_pod_that_is_gone_is_success() -> None:
    cluster, _ = make_cluster()

    assert cluster.evict(namespace=NS, name="nobody") is True


# ---- faults, stats, the reconcile reader ------------------------------------------------


def test_next_error_is_raised_once_by_the_next_port_call() -> None:
    cluster, _ = make_cluster()
    cluster.next_error = RetryableError("API server throttled")

    with pytest.raises(RetryableError):
        cluster.list_pods()

    assert cluster.list_pods() == []
    assert [c.method for c in cluster.calls] == ["list_pods", "list_pods"]


def test_fail_calls_fails_one_method_a_number_of_times() -> None:
    cluster, _ = make_cluster()
    cluster.fail_calls("create", RetryableError("503"), times=2)

    for _ in range(2):
        with pytest.raises(RetryableError):
            cluster.create(job_manifest("j1"))
    assert cluster.list_jobs() == []  # other methods are unaffected

    assert cluster.create(job_manifest("j1")) is True
    with pytest.raises(ValueError, match="not a Cluster port method"):
        cluster.fail_calls("craete", RetryableError("typo"))


def test_stats_count_nodes_pods_and_gpus() -> None:
    cluster, _ = make_cluster()
    cluster.add_node(name="g1", allocatable=GPU_NODE, taints=GPU_TAINT)
    cluster.add_node(name="g2", allocatable=GPU_NODE, taints=GPU_TAINT, gpus_ready=False)
    cluster.add_node(name="c1", allocatable=CPU_NODE, ready=False)
    cluster.patch_node("g2", {"spec": {"unschedulable": True}})
    for job_id in ("a", "b"):
        cluster.create(squall_objects(job_id, resources={"cpu": "1", "memory": "1Gi", "gpu": 3})[0])
    cluster.advance()

    stats = cluster.stats()

    assert (
        stats.items()
        >= {
            "nodes": 3,
            "nodes_ready": 2,
            "nodes_cordoned": 1,
            "pods_running": 1,
            "pods_pending": 1,
            "pods_unscheduled": 1,
            "gpus_allocatable": 4,
            "gpus_in_use": 3,
            "jobs_created": 2,
            "jobs_active": 2,
        }.items()
    )


def test_observe_reads_the_simulated_objects_through_a_whole_distributed_job() -> None:
    # given a distributed job (chief, worker, ps) and room for it
    cluster, clock = make_cluster(default_run_for=timedelta(minutes=5))
    cluster.add_node(
        name="g1",
        allocatable=GPU_NODE,
        taints=GPU_TAINT,
        labels={"topology.kubernetes.io/region": "us-west-2"},
    )
    cluster.add_node(name="c1", allocatable=CPU_NODE, labels={"topology.kubernetes.io/region": "us-west-2"})
    replicas = {
        "chief": 1,
        "worker": 1,
        "ps": {"count": 1, "resources": {"cpu": "1", "memory": "1Gi", "gpu": 0}},
    }
    for manifest in squall_objects(
        "dist-1", replicas=replicas, resources={"cpu": "1", "memory": "1Gi", "gpu": 1}
    ):
        cluster.create(manifest)
    seen = observed(cluster, "dist-1", replicas=3)
    assert (seen.status, seen.reason) == (JobStatus.QUEUED, Reason.WAITING_FOR_CAPACITY)

    # when the pods start
    cluster.advance()

    # then
    seen = observed(cluster, "dist-1", replicas=3)
    assert (seen.status, seen.running_replicas) == (JobStatus.RUNNING, 3)
    assert {p["spec"]["nodeName"] for p in cluster.list_pods(job_id="dist-1")} == {"g1", "c1"}

    # when they finish
    clock.advance(timedelta(minutes=5))
    cluster.advance()

    # then
    seen = observed(cluster, "dist-1", replicas=3)
    assert (seen.status, seen.reason, seen.retries_used) == (JobStatus.SUCCEEDED, Reason.COMPLETED, 0)
