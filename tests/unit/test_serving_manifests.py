"""A model service's manifests (core/serving_manifests.py): valid upstream, never privileged, team-scoped."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest

from squall.core.serving import new_service
from squall.core.serving_manifests import render_model_service, service_endpoints
from squall.core.settings import ServingSettings

K8S_VERSION = "1.32.0"
MODEL_URI = "s3://squall-artifacts/teams/vision/outputs/mnist-0a1b2c3d"
SETTINGS = ServingSettings(
    image="registry.example.com/squall/tensorflow-serving:2.18.0",
    fetch_image="registry.example.com/squall/tf-trainer:1.4.0",
)


def service(**fields: Any) -> Any:
    record, _ = new_service(
        name="mnist",
        team="vision",
        namespace="team-vision",
        job_id="mnist-0a1b2c3d",
        model_uri=MODEL_URI,
        model_version=3,
        replicas=2,
        gpus=0,
        cpu="2",
        memory="4Gi",
        at=datetime(2026, 12, 1, tzinfo=UTC),
    )
    return dataclasses.replace(record, **fields)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objects}


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    return spec


VARIANTS = {
    "cpu": {},
    "gpu": {"gpus": 8, "cpu": "16", "memory": "120Gi"},
    "longest-name": {"name": "m" * 40, "replicas": 20, "model_version": 1_000_000},
}


@pytest.mark.parametrize("fields", VARIANTS.values(), ids=VARIANTS.keys())
@pytest.mark.parametrize("service_type", ["LoadBalancer", "ClusterIP"])
def test_the_three_manifests_validate_against_the_upstream_schemas(
    fields: dict[str, Any], service_type: str
) -> None:
    settings = SETTINGS.model_copy(update={"service_type": service_type})
    objects = render_model_service(service(**fields), settings=settings)
    assert [(o["apiVersion"], o["kind"]) for o in objects] == [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("policy/v1", "PodDisruptionBudget"),
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert obj["metadata"]["name"] == fields.get("name", "mnist") + "-model"
        assert len(obj["metadata"]["name"]) <= 63
        assert obj["metadata"]["namespace"] == "team-vision"
        assert obj["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "squall",
            "squall.io/model-service": fields.get("name", "mnist"),
            "squall.io/team": "vision",
        }


def test_schema_validation_would_catch_a_broken_deployment() -> None:
    deployment = render_model_service(service(), settings=SETTINGS)[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8500"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


@pytest.mark.parametrize("fields", VARIANTS.values(), ids=VARIANTS.keys())
def test_no_container_runs_privileged_or_as_root(fields: dict[str, Any]) -> None:
    pod = pod_spec(render_model_service(service(**fields), settings=SETTINGS))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    containers = [*pod["initContainers"], *pod["containers"]]
    assert [c["name"] for c in containers] == ["fetch-model", "serving"]
    for container in containers:
        context = container["securityContext"]
        assert context["privileged"] is False
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["runAsNonRoot"] is True
        assert context["readOnlyRootFilesystem"] is True
    for forbidden in ("hostNetwork", "hostPID", "hostIPC", "hostAliases"):
        assert forbidden not in pod
    assert all("hostPath" not in volume for volume in pod["volumes"])


def test_the_pod_runs_as_the_team_identity_and_fetches_only_the_model_uri() -> None:
    pod = pod_spec(render_model_service(service(), settings=SETTINGS))
    assert pod["serviceAccountName"] == "squall-job"
    assert pod["automountServiceAccountToken"] is False
    fetch = pod["initContainers"][0]
    assert fetch["image"] == SETTINGS.fetch_image
    assert fetch["command"] == ["python", "-m", "trainer.fetch_model"]
    assert fetch["args"] == ["--source", MODEL_URI, "--target", "/models/mnist/3"]
    assert "env" not in fetch  # nothing else to read: the source is the one URI
    uris = [arg for arg in fetch["args"] if arg.startswith("s3://")]
    assert uris == [MODEL_URI]
    assert MODEL_URI.startswith("s3://squall-artifacts/teams/vision/")
    assert {"name": "models", "emptyDir": {}} in pod["volumes"]
    assert {"name": "models", "mountPath": "/models"} in fetch["volumeMounts"]


def test_the_server_is_tensorflow_serving_on_its_two_ports_ready_on_the_model_status() -> None:
    pod = pod_spec(render_model_service(service(), settings=SETTINGS))
    server = pod["containers"][0]
    assert server["name"] == "serving"
    assert server["image"] == SETTINGS.image
    assert server["args"] == [
        "--port=8500",
        "--rest_api_port=8501",
        "--model_name=mnist",
        "--model_base_path=/models/mnist",
    ]
    assert [(p["name"], p["containerPort"]) for p in server["ports"]] == [("grpc", 8500), ("http", 8501)]
    assert server["readinessProbe"]["httpGet"] == {"path": "/v1/models/mnist", "port": 8501}
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in server["volumeMounts"]


def test_resources_are_requested_as_for_jobs() -> None:
    cpu_pod = pod_spec(render_model_service(service(), settings=SETTINGS))
    assert cpu_pod["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"memory": "4Gi"},
    }
    assert "tolerations" not in cpu_pod
    gpu_pod = pod_spec(render_model_service(service(gpus=2), settings=SETTINGS))
    assert gpu_pod["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "4Gi", "nvidia.com/gpu": "2"},
    }
    assert gpu_pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # the copy asks for no GPU and no more than the server
    assert "nvidia.com/gpu" not in gpu_pod["initContainers"][0]["resources"]["requests"]


def test_the_deployment_service_and_budget_select_the_service_pods() -> None:
    deployment, kube_service, budget = render_model_service(service(), settings=SETTINGS)
    selector = {"squall.io/model-service": "mnist"}
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"] == {"matchLabels": selector}
    assert deployment["spec"]["progressDeadlineSeconds"] == 600
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items()
    assert template_labels["squall.io/team"] == "vision"
    assert kube_service["spec"]["selector"] == selector
    assert [(p["name"], p["port"]) for p in kube_service["spec"]["ports"]] == [("http", 8501), ("grpc", 8500)]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == {"matchLabels": selector}


def test_the_service_type_and_load_balancer_scheme_come_from_the_settings() -> None:
    kube_service = render_model_service(service(), settings=SETTINGS)[1]
    assert kube_service["spec"]["type"] == "LoadBalancer"
    assert (
        kube_service["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"]
        == "internal"
    )
    public = SETTINGS.model_copy(update={"load_balancer_scheme": "internet-facing"})
    annotations = render_model_service(service(), settings=public)[1]["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internet-facing"
    in_cluster = render_model_service(
        service(), settings=SETTINGS.model_copy(update={"service_type": "ClusterIP"})
    )[1]
    assert in_cluster["spec"]["type"] == "ClusterIP"
    assert "annotations" not in in_cluster["metadata"]


def test_rendering_is_deterministic_and_refused_while_serving_is_not_configured() -> None:
    assert render_model_service(service(), settings=SETTINGS) == render_model_service(
        service(), settings=SETTINGS
    )
    for unset in ({"image": None}, {"fetch_image": None}):
        with pytest.raises(ValueError, match="serving is not configured"):
            render_model_service(service(), settings=SETTINGS.model_copy(update=unset))


@pytest.mark.parametrize(
    "uri",
    [
        "s3://squall-artifacts/teams/research/outputs/mnist-0a1b2c3d",
        "s3://squall-artifacts/outputs/mnist-0a1b2c3d",
        "s3://squall-artifacts/teams/vision/../research/mnist-0a1b2c3d",
    ],
)
def test_a_record_whose_model_lies_outside_the_team_prefix_is_never_rendered(uri: str) -> None:
    with pytest.raises(ValueError, match="outside teams/vision/"):
        render_model_service(service(model_uri=uri), settings=SETTINGS)


def test_a_record_with_a_name_no_request_could_give_is_never_rendered() -> None:
    with pytest.raises(ValueError, match="not a valid name"):
        render_model_service(service(name="Bad_Name"), settings=SETTINGS)


# ---- service_endpoints -------------------------------------------------------


def rendered(service_type: str = "LoadBalancer", **status: Any) -> dict[str, Any]:
    kube_service = render_model_service(
        service(), settings=SETTINGS.model_copy(update={"service_type": service_type})
    )[1]
    # as the API server returns it: a cluster IP, node ports for a LoadBalancer, a status
    kube_service["spec"]["clusterIP"] = "10.100.7.12"
    if service_type == "LoadBalancer":
        for number, port in enumerate(kube_service["spec"]["ports"]):
            port["nodePort"] = 30080 + number
    kube_service["status"] = {"loadBalancer": status} if status else {"loadBalancer": {}}
    return kube_service


def test_a_load_balancer_answers_at_its_hostname() -> None:
    host = "k8s-teamvisi-modelmni-0123456789-abcdef.elb.us-west-2.amazonaws.com"
    assert service_endpoints(rendered(ingress=[{"hostname": host}])) == (
        f"http://{host}:8501",
        f"{host}:8500",
    )


def test_a_load_balancer_answers_at_its_ip() -> None:
    assert service_endpoints(rendered(ingress=[{"ip": "10.0.3.4", "ipMode": "VIP"}])) == (
        "http://10.0.3.4:8501",
        "10.0.3.4:8500",
    )
    assert service_endpoints(rendered(ingress=[{"ip": "fd00::1"}])) == (
        "http://[fd00::1]:8501",
        "[fd00::1]:8500",
    )


def test_an_ingress_with_ports_maps_them_in_the_spec_order() -> None:
    ingress = {
        "ip": "127.0.0.1",
        "ports": [{"port": 41001, "protocol": "TCP"}, {"port": 41002, "protocol": "TCP"}],
    }
    assert service_endpoints(rendered(ingress=[ingress])) == ("http://127.0.0.1:41001", "127.0.0.1:41002")


def test_the_first_ingress_is_the_one() -> None:
    ingresses = [{"hostname": "first.example"}, {"hostname": "second.example"}]
    assert service_endpoints(rendered(ingress=ingresses)) == (
        "http://first.example:8501",
        "first.example:8500",
    )


def test_a_cluster_ip_service_answers_at_its_dns_name() -> None:
    assert service_endpoints(rendered("ClusterIP")) == (
        "http://mnist-model.team-vision.svc:8501",
        "mnist-model.team-vision.svc:8500",
    )


@pytest.mark.parametrize(
    "load_balancer",
    [{}, {"ingress": []}, {"ingress": [{}]}, {"ingress": [{"hostname": ""}]}],
    ids=["no-status", "empty", "no-address", "empty-hostname"],
)
def test_a_load_balancer_without_an_ingress_has_no_endpoints_yet(load_balancer: dict[str, Any]) -> None:
    kube_service = rendered()
    kube_service["status"] = {"loadBalancer": load_balancer} if load_balancer else {}
    assert service_endpoints(kube_service) is None


def test_an_ingress_listing_fewer_ports_than_the_spec_has_no_endpoints_yet() -> None:
    ingress = {"ip": "127.0.0.1", "ports": [{"port": 41001, "protocol": "TCP"}]}
    assert service_endpoints(rendered(ingress=[ingress])) is None
