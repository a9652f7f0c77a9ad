"""KubernetesCluster's model-service calls (the ServingCluster port) over HTTP against kmock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kmock
import pytest
from kubernetes.client import ApiClient

from squall.adapters.kubernetes.cluster import KubernetesCluster
from squall.adapters.kubernetes.eks_auth import build_api_client
from squall.core.errors import NotFoundError, PermanentError, RetryableError, SquallError
from squall.ports import KubeObject, ServingCluster

from .kube_resources import DEPLOYMENTS, NS, PDBS, PODS, SERVICES
from .kube_server import KubeApi

pytestmark = pytest.mark.timeout(30)

MANAGED = "app.kubernetes.io/managed-by"
SERVICE_LABEL = "squall.io/model-service"


def labels(name: str) -> dict[str, str]:
    return {MANAGED: "squall", SERVICE_LABEL: name, "squall.io/team": "research"}


def model_service_objects(name: str, *, namespace: str = NS) -> list[KubeObject]:
    """A model service's Deployment, Service and PodDisruptionBudget, of the serving contract's shape."""
    object_name = f"model-{name}"
    selector = {SERVICE_LABEL: name}
    metadata = {"name": object_name, "namespace": namespace, "labels": labels(name)}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": dict(metadata),
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels(name)},
                "spec": {
                    "serviceAccountName": "squall-job",
                    "automountServiceAccountToken": False,
                    "initContainers": [
                        {
                            "name": "fetch-model",
                            "image": "registry.example.com/squall/worker:1",
                            "command": ["python", "-m", "trainer.fetch_model"],
                            "args": ["--source", "s3://b/teams/research/j", "--target", f"/models/{name}/1"],
                        }
                    ],
                    "containers": [
                        {
                            "name": "serving",
                            "image": "registry.example.com/tensorflow/serving:2.16.1",
                            "args": ["--port=8500", "--rest_api_port=8501", f"--model_name={name}"],
                            "ports": [
                                {"name": "grpc", "containerPort": 8500},
                                {"name": "http", "containerPort": 8501},
                            ],
                            "readinessProbe": {"httpGet": {"path": f"/v1/models/{name}", "port": 8501}},
                            "resources": {
                                "requests": {"cpu": "1", "memory": "2Gi"},
                                "limits": {"memory": "2Gi"},
                            },
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": dict(metadata),
        "spec": {
            "type": "LoadBalancer",
            "selector": selector,
            "ports": [
                {"name": "http", "port": 8501, "targetPort": 8501, "protocol": "TCP"},
                {"name": "grpc", "port": 8500, "targetPort": 8500, "protocol": "TCP"},
            ],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": dict(metadata),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
    }
    return [deployment, service, pdb]


def serving_pod(name: str, *, service: str | None, namespace: str = NS) -> KubeObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(service) if service else {}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }


def names(objects: list[KubeObject]) -> list[str]:
    return sorted(f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}" for obj in objects)


def resource(obj: KubeObject) -> str:
    return {
        "Deployment": "apps/v1/deployments",
        "Service": "v1/services",
        "PodDisruptionBudget": "policy/v1/poddisruptionbudgets",
    }[obj["kind"]]


# ==== create ========================================================================


def test_create_stores_a_deployment_service_and_budget_as_rendered(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given
    objects = model_service_objects("mnist")

    # when
    created = [cluster.create(obj) for obj in objects]

    # then
    assert created == [True, True, True]
    for obj in objects:
        # Through the client's models and back, nothing of the manifest is lost or renamed.
        assert kube.get(resource(obj), NS, "model-mnist") == obj
    paths = [r.url.path for r in kube.requests("post")]
    assert paths == [
        f"/apis/apps/v1/namespaces/{NS}/deployments",
        f"/api/v1/namespaces/{NS}/services",
        f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets",
    ]
    assert all(r.headers["Content-Type"] == "application/json" for r in kube.requests("post"))


def test_creating_them_again_is_false_and_changes_nothing(cluster: KubernetesCluster, kube: KubeApi) -> None:
    objects = model_service_objects("mnist")
    for obj in objects:
        cluster.create(obj)

    again = [cluster.create(obj) for obj in model_service_objects("mnist")]

    assert again == [False, False, False]
    assert len(kube.requests("post")) == 6  # every second request reached the server
    assert kube.objects("apps/v1/deployments", NS) == [objects[0]]


def test_a_deployment_the_api_schema_rejects_is_permanent_and_nothing_is_sent(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    deployment = {**model_service_objects("mnist")[0], "spek": {}}

    with pytest.raises(PermanentError, match=rf"create Deployment {NS}/model-mnist: invalid request") as info:
        cluster.create(deployment)

    assert not isinstance(info.value, RetryableError) and info.value.__cause__ is not None
    assert kube.requests("post") == []


def test_other_kinds_are_still_refused(cluster: KubernetesCluster, kube: KubeApi) -> None:
    with pytest.raises(PermanentError, match="only batch/v1 Jobs and v1 Services"):
        cluster.create(
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s", "namespace": NS}}
        )
    with pytest.raises(PermanentError, match="only batch/v1 Jobs and v1 Services"):
        # a Deployment under a version it is not served as
        cluster.create(
            {
                "apiVersion": "extensions/v1beta1",
                "kind": "Deployment",
                "metadata": {"name": "d", "namespace": NS},
            }
        )
    assert kube.requests("post") == []


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, RetryableError), (503, RetryableError), (403, PermanentError), (422, PermanentError)],
)
@pytest.mark.parametrize("kind", [DEPLOYMENTS, PDBS])
def test_create_failures_map_to_squall_errors(
    cluster: KubernetesCluster, kube: KubeApi, kind: kmock.resource, status: int, error: type[SquallError]
) -> None:
    kube.fail("post", kind, status=status, message="the server says no")
    objects = {obj["kind"]: obj for obj in model_service_objects("mnist")}
    obj = objects["Deployment" if kind == DEPLOYMENTS else "PodDisruptionBudget"]

    with pytest.raises(error) as info:
        cluster.create(obj)

    assert str(info.value).startswith(f"create {obj['kind']} {NS}/model-mnist: {status} ")
    assert str(info.value).endswith(": the server says no")
    if error is PermanentError:
        assert not isinstance(info.value, RetryableError)


# ==== reads =========================================================================


def test_list_deployments_asks_for_squall_model_services(cluster: KubernetesCluster, kube: KubeApi) -> None:
    # given: two model services in two namespaces, and Deployments that are not Squall's
    for obj in model_service_objects("mnist") + model_service_objects("cifar", namespace="team-b"):
        cluster.create(obj)
    unmanaged = {**model_service_objects("theirs")[0]}
    unmanaged["metadata"] = {"name": "theirs", "namespace": NS, "labels": {SERVICE_LABEL: "theirs"}}
    no_service = {**model_service_objects("other")[0]}
    no_service["metadata"] = {"name": "plain", "namespace": NS, "labels": {MANAGED: "squall"}}
    kube.put(unmanaged)
    kube.put(no_service)

    # when / then
    everything = cluster.list_deployments()
    assert names(everything) == ["team-a/model-mnist", "team-b/model-cifar"]
    assert {(d["apiVersion"], d["kind"]) for d in everything} == {("apps/v1", "Deployment")}
    assert names(cluster.list_deployments(namespace="team-b")) == ["team-b/model-cifar"]
    assert names(cluster.list_deployments(model_service="mnist")) == ["team-a/model-mnist"]
    assert cluster.list_deployments(namespace="team-b", model_service="mnist") == []
    selectors = [(r.url.path, r.params["labelSelector"]) for r in kube.requests("get", DEPLOYMENTS)]
    assert selectors == [
        ("/apis/apps/v1/deployments", f"{MANAGED}=squall,{SERVICE_LABEL}"),
        ("/apis/apps/v1/namespaces/team-b/deployments", f"{MANAGED}=squall,{SERVICE_LABEL}"),
        ("/apis/apps/v1/deployments", f"{MANAGED}=squall,{SERVICE_LABEL}=mnist"),
        ("/apis/apps/v1/namespaces/team-b/deployments", f"{MANAGED}=squall,{SERVICE_LABEL}=mnist"),
    ]


def test_list_deployments_follows_continue_tokens(api_client: ApiClient, kube: KubeApi) -> None:
    cluster = KubernetesCluster(api_client, page_size=2)
    for index in range(5):
        cluster.create(model_service_objects(f"m{index}")[0])

    assert len(cluster.list_deployments()) == 5
    assert len(kube.requests("get", DEPLOYMENTS)) == 3


def test_list_model_service_pods_lists_that_service_pods_only(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    for name, service, namespace in [
        ("model-mnist-7d4b9c8f6d-x2x4z", "mnist", NS),
        ("model-mnist-7d4b9c8f6d-q9m2w", "mnist", NS),
        ("model-cifar-5f6b7c8d9f-aaaaa", "cifar", NS),
        ("model-mnist-7d4b9c8f6d-zzzzz", "mnist", "team-b"),
        ("train-worker-0-abcde", None, NS),
    ]:
        kube.put(serving_pod(name, service=service, namespace=namespace))

    pods = cluster.list_model_service_pods(namespace=NS, model_service="mnist")

    assert names(pods) == ["team-a/model-mnist-7d4b9c8f6d-q9m2w", "team-a/model-mnist-7d4b9c8f6d-x2x4z"]
    assert {(p["apiVersion"], p["kind"]) for p in pods} == {("v1", "Pod")}
    (request,) = kube.requests("get", PODS)
    assert (request.url.path, request.params["labelSelector"]) == (
        f"/api/v1/namespaces/{NS}/pods",
        f"{SERVICE_LABEL}=mnist",
    )


def test_get_service_returns_the_service_with_its_status_or_none(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    service = model_service_objects("mnist")[1]
    kube.put({**service, "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}})

    found = cluster.get_service(namespace=NS, name="model-mnist")

    assert found is not None
    assert found["status"]["loadBalancer"]["ingress"] == [{"hostname": "lb.example.com"}]
    assert (found["apiVersion"], found["kind"]) == ("v1", "Service")
    assert cluster.get_service(namespace=NS, name="model-none") is None
    assert cluster.get_service(namespace="team-b", name="model-mnist") is None


# ==== delete ========================================================================


def test_delete_model_service_objects_removes_its_three_objects_only(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    # given
    for obj in model_service_objects("mnist") + model_service_objects("cifar"):
        cluster.create(obj)

    # when
    deleted = cluster.delete_model_service_objects(namespace=NS, model_service="mnist")

    # then
    assert deleted == 3
    for kind in ("apps/v1/deployments", "v1/services", "policy/v1/poddisruptionbudgets"):
        assert names(kube.objects(kind)) == ["team-a/model-cifar"]
    (deployment_delete,) = kube.requests("delete", DEPLOYMENTS)
    assert deployment_delete.params["propagationPolicy"] == "Background"
    listed = kube.requests("get", DEPLOYMENTS) + kube.requests("get", SERVICES) + kube.requests("get", PDBS)
    assert {r.params["labelSelector"] for r in listed} == {f"{MANAGED}=squall,{SERVICE_LABEL}=mnist"}
    # and again: nothing left
    assert cluster.delete_model_service_objects(namespace=NS, model_service="mnist") == 0


def test_an_object_gone_between_list_and_delete_is_not_an_error(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    for obj in model_service_objects("mnist"):
        cluster.create(obj)
    kube.fail("delete", PDBS, kmock.name("model-mnist"), status=404, reason="NotFound")

    assert cluster.delete_model_service_objects(namespace=NS, model_service="mnist") == 2


def test_an_object_not_labelled_as_squall_is_left_alone(cluster: KubernetesCluster, kube: KubeApi) -> None:
    theirs = model_service_objects("mnist")[0]
    theirs["metadata"] = {**theirs["metadata"], "labels": {SERVICE_LABEL: "mnist"}}
    kube.put(theirs)

    assert cluster.delete_model_service_objects(namespace=NS, model_service="mnist") == 0
    assert len(kube.objects("apps/v1/deployments")) == 1


def test_delete_failures_are_retryable(cluster: KubernetesCluster, kube: KubeApi) -> None:
    for obj in model_service_objects("mnist"):
        cluster.create(obj)
    kube.fail("delete", DEPLOYMENTS, status=503, reason="ServiceUnavailable")

    with pytest.raises(RetryableError, match=f"delete Deployment {NS}/model-mnist: 503"):
        cluster.delete_model_service_objects(namespace=NS, model_service="mnist")


def test_a_missing_namespace_answered_404_to_a_list_is_not_found(
    cluster: KubernetesCluster, kube: KubeApi
) -> None:
    kube.fail("get", PODS, status=404, reason="NotFound")

    with pytest.raises(NotFoundError):
        cluster.list_model_service_pods(namespace=NS, model_service="mnist")


# ==== no client exception leaks ======================================================

SERVING_METHODS: dict[str, Callable[[ServingCluster], Any]] = {
    "create_deployment": lambda c: c.create(model_service_objects("mnist")[0]),
    "create_pdb": lambda c: c.create(model_service_objects("mnist")[2]),
    "list_deployments": lambda c: c.list_deployments(),
    "list_deployments_namespaced": lambda c: c.list_deployments(namespace=NS, model_service="mnist"),
    "list_model_service_pods": lambda c: c.list_model_service_pods(namespace=NS, model_service="mnist"),
    "get_service": lambda c: c.get_service(namespace=NS, name="model-mnist"),
    "delete_model_service_objects": lambda c: c.delete_model_service_objects(
        namespace=NS, model_service="mnist"
    ),
}


@pytest.mark.parametrize("failure", ["500", "403", "not-json"])
@pytest.mark.parametrize("method", SERVING_METHODS)
def test_no_client_exception_leaks_from_the_serving_methods(kube: KubeApi, method: str, failure: str) -> None:
    if failure == "not-json":
        kube.answer(status=200, body=b"<html>the gateway says hi</html>")
    else:
        kube.fail(status=int(failure))

    with build_api_client(host=kube.url) as client:
        cluster: ServingCluster = KubernetesCluster(client, request_timeout=(2.0, 10.0))
        with pytest.raises(SquallError) as info:
            SERVING_METHODS[method](cluster)

    assert isinstance(info.value, PermanentError if failure == "403" else RetryableError)
    assert type(info.value.__cause__).__module__.split(".")[0] in {"kubernetes", "urllib3", "json"}
