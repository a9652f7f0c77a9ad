"""SimulatedCluster objects and lists: creation, deletion, copies and shared views."""

from __future__ import annotations

import re

import pytest

from squall.core.errors import PermanentError
from squall.local.cluster import SharedObjectChanged
from squall.ports import Cluster

from .sim import (
    CPU_NODE,
    NS,
    job_manifest,
    k8s_job,
    make_cluster,
    node_of,
    one_node_cluster,
    only_pod,
    squall_objects,
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
    cluster, _ = one_node_cluster()
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
    cluster, _ = one_node_cluster()
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
    cluster, _ = one_node_cluster()
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
    cluster, _ = one_node_cluster(lists="shared")
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
    cluster, _ = one_node_cluster(lists="shared")
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
    cluster, _ = one_node_cluster(lists="checked")
    cluster.list_nodes()[0]["metadata"]["labels"]["x"] = "y"
    with pytest.raises(SharedObjectChanged, match=r"/n1 at resourceVersion \d+: metadata changed"):
        cluster.list_nodes()


def test_list_mode_must_be_one_the_cluster_knows() -> None:
    with pytest.raises(ValueError, match="lists must be one of checked, copies, shared, not 'mine'"):
        make_cluster(lists="mine")


def test_list_filters_by_namespace_job_and_node() -> None:
    cluster, _ = one_node_cluster()
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
