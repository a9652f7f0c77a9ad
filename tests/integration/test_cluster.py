"""KubernetesCluster over HTTP against a local Kubernetes API stand-in (kmock)."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import kmock
import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import OpenApiException

from squall.adapters.kubernetes.cluster import KubernetesCluster
from squall.adapters.kubernetes.eks_auth import CachedToken, build_api_client
from squall.core.errors import NotFoundError, PermanentError, RetryableError, SquallError
from squall.core.manifests import render
from squall.core.spec import parse_spec
from squall.ports import Cluster, KubeObject

from .kube_resources import EVICTION, JOBS, NODES, NS, PODS, SERVICES
from .kube_server import KubeApi, running_kube_api

pytestmark = pytest.mark.timeout(30)


def manifests(job_id: str, *, workers: int = 2) -> list[KubeObject]:
    spec = parse_spec(
        {
            "name": "mnist",
            "team": "research",
            "image": "registry.example.com/tf-trainer:1.0",
            "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1},
            "replicas": {"chief": 1, "worker": {"count": workers}},
        },
        teams=["research"],
        registries=["registry.example.com"],
    )
    return render(spec, job_id=job_id, namespace=NS)


def pod(name: str, *, job_id: str | None = None, node: str | None = None, namespace: str = NS) -> KubeObject:
    labels = {"app.kubernetes.io/managed-by": "squall", "squall.io/job-id": job_id} if job_id else {}
    spec = {"nodeName": node} if node else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def node(name: str) -> KubeObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"role": "gpu"}},
        "spec": {},
    }


def names(objects: list[KubeObject]) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in objects)


# ==== create ========================================================================


def test_create_stores_every_job_and_service_as_rendered(cluster: KubernetesCluster, kube: KubeApi) -> None:
    # given
    objects = manifests("mnist")

    # when
    created = [cluster.create(obj) for obj in objects]

    # then
    assert created == [True] * 6
    assert names(kube.objects("batch/v1/jobs", NS)) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
    assert names(kube.objects("v1/services", NS)) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
    # Through the client's models and back, nothing of the manifest is lost or renamed.
    for obj in objects:
        resource = "batch/v1/jobs" if obj["kind"] == "Job" else "v1/services"
        assert kube.get(resource, NS, obj["metadata"]["name"]) == obj
    posts = kube.requests("post", JOBS)
    assert [r.url.path for r in posts] == [f"/apis/batch/v1/namespaces/{NS}/jobs"] * 3
    assert all(r.headers["Content-Type"] == "application/json" for r in posts)


def test_creating_an_existing_object_is_success_without_a_second_object(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given
    job = manifests("mnist")[0]
    assert cluster.create(job) is True
    # another spec of the same job and replica: its owner labels agree, other labels may not
    changed = {
        **job,
        "metadata": {**job["metadata"], "labels": {**job["metadata"]["labels"], "changed": "yes"}},
    }

    # when
    again = cluster.create(changed)

    # then
    assert again is False
    assert len(kube.requests("post", JOBS)) == 2  # the second request did reach the server
    assert kube.objects("batch/v1/jobs", NS) == [job]  # and changed nothing


def test_create_refuses_kinds_it_does_not_manage(cluster: KubernetesCluster, kube: KubeApi) -> None:
    with pytest.raises(PermanentError, match="only batch/v1 Jobs and v1 Services"):
        cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}})
    with pytest.raises(PermanentError, match=r"metadata\.name and metadata\.namespace"):
        cluster.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}})
    assert kube.requests("post") == []


def test_a_manifest_the_api_schema_rejects_is_permanent(cluster: KubernetesCluster, kube: KubeApi) -> None:
    job = {**manifests("mnist")[0], "spek": {}}

    with pytest.raises(PermanentError, match=rf"create Job {NS}/mnist-chief-0: invalid request") as info:
        cluster.create(job)

    assert not isinstance(info.value, RetryableError)
    assert info.value.__cause__ is not None
    assert kube.requests("post") == []


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (429, "TooManyRequests", RetryableError),
        (500, "InternalError", RetryableError),
        (503, "ServiceUnavailable", RetryableError),
        (504, "Timeout", RetryableError),
        (400, "BadRequest", PermanentError),
        (403, "Forbidden", PermanentError),
        (422, "Invalid", PermanentError),
        (404, "NotFound", NotFoundError),
    ],
)
def test_create_failures_map_to_squall_errors(
    cluster: KubernetesCluster, kube: KubeApi, status: int, reason: str, error: type[SquallError]
) -> None:
    # given
    kube.fail("post", JOBS, status=status, reason=reason, message="the server says no")

    # when
    with pytest.raises(error) as info:
        cluster.create(manifests("mnist")[1])

    # then
    message = str(info.value)
    assert message.startswith(f"create Job {NS}/mnist-worker-0: {status} ")
    assert message.endswith(": the server says no")
    if error is PermanentError:
        assert not isinstance(info.value, (RetryableError, NotFoundError))
    assert isinstance(info.value.__cause__, OpenApiException)


def test_a_failure_then_a_retry_creates_the_object(cluster: KubernetesCluster, kube: KubeApi) -> None:
    job = manifests("mnist")[0]
    kube.fail("post", JOBS, status=500, times=1)

    with pytest.raises(RetryableError, match="500 Internal Server Error"):
        cluster.create(job)
    # The stand-in stored it anyway (as a real server may have before failing): the retry is a no-op.
    assert cluster.create(job) is False
    assert names(kube.objects("batch/v1/jobs")) == ["mnist-chief-0"]


# ==== lists: selectors and pages =====================================================


def test_list_jobs_asks_the_server_for_squall_jobs_of_one_job(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given
    for obj in manifests("mnist") + manifests("cifar", workers=1):
        cluster.create(obj)
    foreign = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "backup", "namespace": NS}}
    kube.put(foreign)
    other_ns = {
        **manifests("mnist")[0],
        "metadata": {**manifests("mnist")[0]["metadata"], "namespace": "team-b"},
    }
    kube.put(other_ns)

    # when
    of_one_job = cluster.list_jobs(namespace=NS, job_id="mnist")
    managed = cluster.list_jobs()

    # then
    assert names(of_one_job) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
    assert names(managed) == [
        "cifar-chief-0",
        "cifar-worker-0",
        "mnist-chief-0",
        "mnist-chief-0",
        "mnist-worker-0",
        "mnist-worker-1",
    ]
    assert all(job["kind"] == "Job" and job["apiVersion"] == "batch/v1" for job in managed)
    first, second = kube.requests("get", JOBS)
    assert first.url.path == f"/apis/batch/v1/namespaces/{NS}/jobs"
    assert first.params["labelSelector"] == "app.kubernetes.io/managed-by=squall,squall.io/job-id=mnist"
    assert second.url.path == "/apis/batch/v1/jobs"
    assert second.params["labelSelector"] == "app.kubernetes.io/managed-by=squall"


def test_list_pods_filters_on_the_server_by_job_and_by_node(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given
    kube.put(pod("mnist-worker-0-abc", job_id="mnist", node="gpu-1"))
    kube.put(pod("mnist-worker-1-def", job_id="mnist"))
    kube.put(pod("cifar-chief-0-ghi", job_id="cifar", node="gpu-1"))
    kube.put(pod("coredns-1", node="gpu-2", namespace="kube-system"))

    # when / then
    assert names(cluster.list_pods(job_id="mnist")) == ["mnist-worker-0-abc", "mnist-worker-1-def"]
    assert names(cluster.list_pods(node_name="gpu-1")) == ["cifar-chief-0-ghi", "mnist-worker-0-abc"]
    assert names(cluster.list_pods(namespace=NS, job_id="mnist", node_name="gpu-1")) == ["mnist-worker-0-abc"]
    assert names(cluster.list_pods(namespace="kube-system")) == ["coredns-1"]
    assert len(cluster.list_pods()) == 4
    by_job, by_node, both, _in_ns, everything = kube.requests("get", PODS)
    assert by_job.url.path == "/api/v1/pods"
    assert by_job.params["labelSelector"] == "squall.io/job-id=mnist"
    assert "fieldSelector" not in by_job.params
    assert by_node.params["fieldSelector"] == "spec.nodeName=gpu-1"
    assert "labelSelector" not in by_node.params
    assert both.url.path == f"/api/v1/namespaces/{NS}/pods"
    assert (both.params["labelSelector"], both.params["fieldSelector"]) == (
        "squall.io/job-id=mnist",
        "spec.nodeName=gpu-1",
    )
    assert "labelSelector" not in everything.params and "fieldSelector" not in everything.params


def test_lists_follow_continue_tokens_to_the_last_page(api_client: ApiClient, kube: KubeApi) -> None:
    # given
    cluster = KubernetesCluster(api_client, page_size=2)
    for i in range(5):
        kube.put(node(f"node-{i}"))
        kube.put(pod(f"pod-{i}", job_id="big"))

    # when
    nodes = cluster.list_nodes()
    pods = cluster.list_pods(job_id="big")

    # then
    assert names(nodes) == [f"node-{i}" for i in range(5)]
    assert all(n["kind"] == "Node" and n["apiVersion"] == "v1" for n in nodes)
    assert names(pods) == [f"pod-{i}" for i in range(5)]
    node_pages = kube.requests("get", NODES)
    assert [r.params["limit"] for r in node_pages] == ["2", "2", "2"]
    assert "continue" not in node_pages[0].params
    assert node_pages[1].params["continue"] and node_pages[2].params["continue"]
    pod_pages = kube.requests("get", PODS)
    assert len(pod_pages) == 3
    assert all(r.params["labelSelector"] == "squall.io/job-id=big" for r in pod_pages)


def test_get_node_returns_the_node_or_none(cluster: KubernetesCluster, kube: KubeApi) -> None:
    kube.put(node("gpu-1"))

    assert cluster.get_node("gpu-1") == node("gpu-1")
    assert cluster.get_node("gpu-9") is None


# ==== delete ========================================================================


def test_delete_job_objects_removes_jobs_and_services_of_one_job(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given
    for obj in manifests("mnist") + manifests("cifar", workers=1):
        cluster.create(obj)

    # when
    deleted = cluster.delete_job_objects(namespace=NS, job_id="mnist")

    # then
    assert deleted == 6
    assert names(kube.objects("batch/v1/jobs")) == ["cifar-chief-0", "cifar-worker-0"]
    assert names(kube.objects("v1/services")) == ["cifar-chief-0", "cifar-worker-0"]
    job_deletes = kube.requests("delete", JOBS)
    assert len(job_deletes) == 3
    assert all(r.params["propagationPolicy"] == "Background" for r in job_deletes)
    assert len(kube.requests("delete", SERVICES)) == 3
    listed = kube.requests("get", JOBS) + kube.requests("get", SERVICES)
    assert {r.params["labelSelector"] for r in listed} == {
        "app.kubernetes.io/managed-by=squall,squall.io/job-id=mnist"
    }


def test_delete_job_objects_is_idempotent(cluster: KubernetesCluster, kube: KubeApi) -> None:
    for obj in manifests("mnist"):
        cluster.create(obj)
    assert cluster.delete_job_objects(namespace=NS, job_id="mnist") == 6

    assert cluster.delete_job_objects(namespace=NS, job_id="mnist") == 0
    assert cluster.delete_job_objects(namespace=NS, job_id="never-created") == 0


def test_an_object_gone_between_list_and_delete_is_not_an_error(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given: the TTL controller removes a Job after we listed it
    for obj in manifests("mnist", workers=1):
        cluster.create(obj)
    kube.fail("delete", JOBS, kmock.name("mnist-worker-0"), status=404, reason="NotFound")

    # when
    deleted = cluster.delete_job_objects(namespace=NS, job_id="mnist")

    # then
    assert deleted == 3  # one Job was not there to delete
    assert kube.objects("v1/services") == []


def test_delete_failures_are_retryable(cluster: KubernetesCluster, kube: KubeApi) -> None:
    for obj in manifests("mnist", workers=1):
        cluster.create(obj)
    kube.fail("delete", SERVICES, status=503, reason="ServiceUnavailable")

    with pytest.raises(RetryableError, match=f"delete Service {NS}/mnist-chief-0: 503"):
        cluster.delete_job_objects(namespace=NS, job_id="mnist")


# ==== suspended Jobs: admission's patches ===========================================

REGION_AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["us-west-2"]}
                    ]
                }
            ]
        }
    }
}


def suspended(manifest: KubeObject) -> KubeObject:
    return {**manifest, "spec": {**manifest["spec"], "suspend": True}}


def test_a_suspended_job_is_created_then_placed_and_resumed_with_merge_patches(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given: a replica Job created suspended
    job = suspended(manifests("mnist")[0])
    name = job["metadata"]["name"]
    assert cluster.create(job) is True
    stored = kube.get("batch/v1/jobs", NS, name)
    assert stored is not None and stored["spec"]["suspend"] is True

    # when: admission writes the region into the pod template, then resumes
    placement = {
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {"topology.kubernetes.io/region": "us-west-2"},
                    "affinity": REGION_AFFINITY,
                }
            }
        }
    }
    placed = cluster.patch_job(namespace=NS, name=name, patch=placement)
    resumed = cluster.patch_job(namespace=NS, name=name, patch={"spec": {"suspend": False}})

    # then: each patch went as a JSON merge patch of that Job, exactly as given
    first, second = kube.requests("patch", JOBS)
    for request in (first, second):
        assert request.url.path == f"/apis/batch/v1/namespaces/{NS}/jobs/{name}"
        assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert first.data == placement
    assert second.data == {"spec": {"suspend": False}}
    # and the server merged them: the rest of the template is as created
    template = resumed["spec"]["template"]
    assert template["spec"]["nodeSelector"]["topology.kubernetes.io/region"] == "us-west-2"
    for key, value in job["spec"]["template"]["spec"].get("nodeSelector", {}).items():
        assert template["spec"]["nodeSelector"][key] == value
    assert template["spec"]["affinity"]["nodeAffinity"] == REGION_AFFINITY["nodeAffinity"]
    assert template["spec"]["containers"] == job["spec"]["template"]["spec"]["containers"]
    assert template["metadata"] == job["spec"]["template"]["metadata"]
    assert placed["spec"]["suspend"] is True and resumed["spec"]["suspend"] is False
    assert (resumed["apiVersion"], resumed["kind"]) == ("batch/v1", "Job")
    assert kube.get("batch/v1/jobs", NS, name) == resumed


def test_a_patch_the_api_server_refuses_as_invalid_is_permanent_and_names_the_field(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given: the API server's answer to a scheduling change of a Job that has started
    job = manifests("mnist")[0]
    cluster.create(job)
    message = (
        f'Job.batch "{job["metadata"]["name"]}" is invalid: spec.template: Invalid value: '
        "core.PodTemplateSpec{...}: field is immutable"
    )
    kube.fail("patch", JOBS, status=422, reason="Invalid", message=message)

    # when / then
    with pytest.raises(PermanentError) as info:
        cluster.patch_job(
            namespace=NS,
            name=job["metadata"]["name"],
            patch={"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}},
        )
    assert f"patch Job {NS}/{job['metadata']['name']}: 422" in str(info.value)
    assert "spec.template: Invalid value" in str(info.value) and "field is immutable" in str(info.value)
    assert not isinstance(info.value, NotFoundError)


def test_patching_a_missing_job_is_not_found(cluster: KubernetesCluster) -> None:
    with pytest.raises(NotFoundError, match=f"patch Job {NS}/nope: 404"):
        cluster.patch_job(namespace=NS, name="nope", patch={"spec": {"suspend": False}})


@pytest.mark.parametrize(
    ("status", "expected"), [(429, RetryableError), (503, RetryableError), (409, PermanentError)]
)
def test_patch_job_failures_map_to_squall_errors(
    cluster: KubernetesCluster, kube: KubeApi, status: int, expected: type[SquallError]
) -> None:
    cluster.create(manifests("mnist")[0])
    kube.fail("patch", JOBS, status=status)

    with pytest.raises(expected):
        cluster.patch_job(namespace=NS, name="mnist-chief-0", patch={"spec": {"suspend": False}})


# ==== nodes and evictions ============================================================


def test_patch_node_cordons_and_uncordons_with_a_strategic_merge_patch(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given
    kube.put(node("gpu-1"))
    cordon = {
        "spec": {"unschedulable": True},
        "metadata": {"annotations": {"squall.io/cordoned-at": "2025-01-01T00:00:00Z"}},
    }

    # when
    cordoned = cluster.patch_node("gpu-1", cordon)

    # then
    assert cordoned["spec"]["unschedulable"] is True
    assert cordoned["metadata"]["annotations"] == {"squall.io/cordoned-at": "2025-01-01T00:00:00Z"}
    assert cordoned["metadata"]["labels"] == {"role": "gpu"}
    assert kube.get("v1/nodes", None, "gpu-1") == cordoned
    (patch,) = kube.requests("patch", NODES)
    assert patch.url.path == "/api/v1/nodes/gpu-1"
    assert patch.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert patch.data == cordon

    # when: uncordon (null deletes a key in a merge patch)
    uncordoned = cluster.patch_node(
        "gpu-1",
        {"spec": {"unschedulable": None}, "metadata": {"annotations": {"squall.io/cordoned-at": None}}},
    )

    # then
    assert "unschedulable" not in uncordoned["spec"]
    assert uncordoned["metadata"].get("annotations") in ({}, None)


def test_patching_a_missing_node_is_not_found(cluster: KubernetesCluster) -> None:
    with pytest.raises(NotFoundError, match="patch Node gpu-9: 404"):
        cluster.patch_node("gpu-9", {"spec": {"unschedulable": True}})


def test_evict_posts_a_policy_v1_eviction_and_the_pod_goes(cluster: KubernetesCluster, kube: KubeApi) -> None:
    # given
    kube.put(pod("mnist-worker-0-abc", job_id="mnist", node="gpu-1"))

    # when
    accepted = cluster.evict(namespace=NS, name="mnist-worker-0-abc")

    # then
    assert accepted is True
    assert kube.objects("v1/pods") == []
    (request,) = kube.requests("post", EVICTION)
    assert request.url.path == f"/api/v1/namespaces/{NS}/pods/mnist-worker-0-abc/eviction"
    assert request.data == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "mnist-worker-0-abc", "namespace": NS},
    }


def test_evict_refused_by_a_disruption_budget_is_false(cluster: KubernetesCluster, kube: KubeApi) -> None:
    kube.put(pod("mnist-worker-0-abc", job_id="mnist", node="gpu-1"))
    kube.fail(
        "post",
        EVICTION,
        status=429,
        reason="TooManyRequests",
        message="Cannot evict pod as it would violate the pod's disruption budget.",
    )

    assert cluster.evict(namespace=NS, name="mnist-worker-0-abc") is False
    assert names(kube.objects("v1/pods")) == ["mnist-worker-0-abc"]


def test_evicting_a_pod_that_is_gone_is_success(cluster: KubernetesCluster, kube: KubeApi) -> None:
    assert cluster.evict(namespace=NS, name="long-gone") is True
    assert len(kube.requests("post", EVICTION)) == 1  # the server did answer 404


def test_evict_errors_other_than_429_and_404_are_raised(cluster: KubernetesCluster, kube: KubeApi) -> None:
    kube.put(pod("p", node="gpu-1"))
    kube.fail("post", EVICTION, status=500, reason="InternalError", message="multiple budgets match")

    with pytest.raises(RetryableError, match=f"evict Pod {NS}/p: 500 .*: multiple budgets match"):
        cluster.evict(namespace=NS, name="p")


# ==== transport: auth, timeouts, a server that is down, nothing leaks ===============


def test_the_bearer_token_is_sent_and_refreshed(kube: KubeApi) -> None:
    # given: tokens are refreshed after 10 minutes of a fake clock
    now = [0.0]
    issued: list[str] = []

    def fetch() -> str:
        issued.append(f"token-{len(issued) + 1}")
        return issued[-1]

    token = CachedToken(fetch, monotonic=lambda: now[0])
    with build_api_client(host=kube.url, token_provider=token) as client:
        cluster = KubernetesCluster(client)

        # when
        cluster.list_nodes()
        now[0] += 9 * 60
        cluster.list_nodes()
        now[0] += 60
        cluster.list_nodes()

    # then
    sent = [r.headers.get("Authorization") for r in kube.requests("get", NODES)]
    assert sent == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]


def _free_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


EVERY_METHOD: dict[str, Callable[[Cluster], Any]] = {
    "create": lambda c: c.create(manifests("mnist")[0]),
    "delete_job_objects": lambda c: c.delete_job_objects(namespace=NS, job_id="mnist"),
    "list_jobs": lambda c: c.list_jobs(namespace=NS, job_id="mnist"),
    "list_pods": lambda c: c.list_pods(node_name="gpu-1"),
    "list_nodes": lambda c: c.list_nodes(),
    "get_node": lambda c: c.get_node("gpu-1"),
    "patch_node": lambda c: c.patch_node("gpu-1", {"spec": {"unschedulable": True}}),
    "patch_job": lambda c: c.patch_job(
        namespace=NS, name="mnist-worker-0", patch={"spec": {"suspend": False}}
    ),
    "evict": lambda c: c.evict(namespace=NS, name="p"),
}


def test_a_server_that_is_down_is_retryable() -> None:
    with build_api_client(host=_free_port_url()) as client:
        cluster = KubernetesCluster(client)

        with pytest.raises(
            RetryableError, match=f"create Job {NS}/mnist-chief-0: NewConnectionError"
        ) as info:
            cluster.create(manifests("mnist")[0])

    assert "Connection refused" in str(info.value)
    assert info.value.__cause__ is not None


FAILURES = ["500", "403", "not-json", "hung", "refused"]


def _break(kube: KubeApi, failure: str) -> None:
    """From now on, every request fails this way."""
    if failure == "not-json":
        kube.answer(status=200, body=b"<html>the gateway says hi</html>")
    elif failure == "hung":
        kube.delay(seconds=1.5)
    elif failure != "refused":
        kube.fail(status=int(failure))


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("method", EVERY_METHOD)
def test_no_client_exception_leaks_from_any_method(kube: KubeApi, method: str, failure: str) -> None:
    # given: data every method needs, then a server that fails every request
    kube.put(node("gpu-1"))
    kube.put(pod("p", job_id="mnist", node="gpu-1"))
    kube.put(manifests("mnist")[1])  # the Job patch_job patches; create's Job is not there yet
    _break(kube, failure)
    url = _free_port_url() if failure == "refused" else kube.url

    with build_api_client(host=url) as client:
        # A read timeout shorter than the hang proves that every method sets one.
        timeout = (2.0, 0.3) if failure == "hung" else (2.0, 10.0)
        cluster = KubernetesCluster(client, request_timeout=timeout)

        # when
        with pytest.raises(SquallError) as info:
            EVERY_METHOD[method](cluster)

    # then
    expected = PermanentError if failure == "403" else RetryableError
    assert isinstance(info.value, expected)
    assert info.value.__cause__ is not None
    assert type(info.value.__cause__).__module__.split(".")[0] in {"kubernetes", "urllib3", "json"}


# ==== the stand-in itself (other tests and the local runtime reuse it) ==============


def test_the_stand_in_stops_its_thread_even_when_the_body_fails() -> None:
    before = set(threading.enumerate())

    with pytest.raises(ZeroDivisionError), running_kube_api() as (url, _):
        with urllib.request.urlopen(f"{url}/version", timeout=2) as response:
            assert json.load(response)["major"] == "1"
        1 / 0  # noqa: B018

    assert set(threading.enumerate()) == before
    with pytest.raises(OSError), urllib.request.urlopen(f"{url}/version", timeout=2):
        pass


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gpu", ["a"]),
        ("tier==gpu", ["a"]),
        ("tier!=gpu", ["b", "c"]),
        ("tier in (gpu, cpu)", ["a", "b"]),
        ("tier notin (gpu)", ["b", "c"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("team=x,tier in (gpu,cpu)", ["a"]),
    ],
)
def test_the_stand_in_honours_label_selectors(kube: KubeApi, selector: str, expected: list[str]) -> None:
    kube.put({**pod("a"), "metadata": {"name": "a", "namespace": NS, "labels": {"tier": "gpu", "team": "x"}}})
    kube.put({**pod("b"), "metadata": {"name": "b", "namespace": NS, "labels": {"tier": "cpu", "team": "y"}}})
    kube.put({**pod("c"), "metadata": {"name": "c", "namespace": NS, "labels": {"team": "x"}}})

    query = urllib.parse.urlencode({"labelSelector": selector})
    with urllib.request.urlopen(f"{kube.url}/api/v1/namespaces/{NS}/pods?{query}", timeout=2) as response:
        items = json.load(response)["items"]

    assert names(items) == expected


def test_the_stand_in_rejects_a_selector_it_cannot_parse(kube: KubeApi) -> None:
    query = urllib.parse.urlencode({"labelSelector": "tier in gpu"})

    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{kube.url}/api/v1/pods?{query}", timeout=2)

    assert info.value.code == 400
    info.value.close()
