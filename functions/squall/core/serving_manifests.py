"""ModelService -> Kubernetes manifests, and where a rendered Service answers. Pure.

A model service is three objects in its job's team namespace, all named
``<name>-model`` (`serving.object_name`: a name no job's object can have): an apps/v1 Deployment running TensorFlow
Serving, a v1 Service exposing its REST (8501) and gRPC (8500) ports, and a
policy/v1 PodDisruptionBudget that lets a drain take one replica at a time.

The pod runs as the team's ``squall-job`` service account, which EKS Pod Identity
maps to the team's IAM role (it reads only ``teams/<team>/`` of its buckets). Its
init container ``fetch-model`` (Squall's worker image) copies the job's SavedModel
from the model URI, and nothing else, into an emptyDir at
``/models/<name>/<modelVersion>``; TensorFlow Serving serves ``/models/<name>``. The
init container exits 2 when there is no SavedModel at the source (its termination
message says so), 1 on any other failure; `serving_status.observe_serving` reads
that as ModelNotFound. No container runs privileged, escalates, keeps a capability
or runs as root, and both root filesystems are read-only.
"""

from __future__ import annotations

from typing import Any

from squall.conventions import MANAGED_BY_LABEL, MODEL_SERVICE_LABEL, TEAM_LABEL
from squall.core import serving
from squall.core.manifests import (
    SERVICE_ACCOUNT,
    container_resources,
    container_security_context,
    gpu_tolerations,
)
from squall.core.serving import ModelService
from squall.core.serving_requests import in_team_prefix, team_prefix
from squall.core.settings import ServingSettings
from squall.core.spec import is_service_name

KubeObject = dict[str, Any]

FETCH_CONTAINER = "fetch-model"
SERVING_CONTAINER = "serving"
FETCH_COMMAND = ("python", "-m", "trainer.fetch_model")
# TensorFlow Serving's image starts the server through a script that adds flags of its
# own; naming the binary makes these arguments the whole configuration.
SERVER_COMMAND = ("tensorflow_model_server",)
MODELS_VOLUME = "models"
TMP_VOLUME = "tmp"  # the root filesystems are read-only
FETCH_NO_SAVED_MODEL_EXIT = 2  # worker_images/tf_trainer/trainer/fetch_model.py
RUN_AS = 1000
PROGRESS_DEADLINE_SECONDS = 600
REVISION_HISTORY_LIMIT = 3
HTTP_PORT_NAME = "http"
GRPC_PORT_NAME = "grpc"

# The AWS Load Balancer Controller's annotations: an NLB to the pods' IPs, in the scheme
# the operator chose (internal by default: the models answer inside the VPC).
LB_TYPE_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-type"
LB_TARGET_TYPE_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
LB_SCHEME_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-scheme"


def model_service_labels(service: ModelService) -> dict[str, str]:
    return {MANAGED_BY_LABEL: "squall", MODEL_SERVICE_LABEL: service.name, TEAM_LABEL: service.team}


def model_service_selector(name: str) -> dict[str, str]:
    """The pods of one model service (the Deployment's, the Service's and the PDB's selector)."""
    return {MODEL_SERVICE_LABEL: name}


def render_model_service(service: ModelService, *, settings: ServingSettings) -> list[KubeObject]:
    """The Deployment, the Service and the PodDisruptionBudget of a model service, in that order.

    Raises ValueError while serving is not configured (no image or fetch image), and
    for a record no serve request could have made: the pod would run as the team's
    role, so its model must lie under the team's prefix whatever the record says.
    """
    if settings.image is None or settings.fetch_image is None:
        raise ValueError(settings.not_configured)
    if not is_service_name(service.name):
        raise ValueError(f"model service name {service.name[:80]!r} is not a valid name")
    if not in_team_prefix(service.model_uri, team=service.team):
        raise ValueError(
            f"model service {service.name}: its model {service.model_uri[:200]} is outside "
            f"{team_prefix(service.team)} of its bucket, the only prefix team {service.team}'s role reads"
        )
    return [
        _deployment(service, image=settings.image, fetch_image=settings.fetch_image),
        _service(service, settings=settings),
        _disruption_budget(service),
    ]


def _metadata(service: ModelService) -> dict[str, Any]:
    return {
        "name": serving.object_name(service.name),
        "namespace": service.namespace,
        "labels": model_service_labels(service),
    }


def _security_context() -> dict[str, Any]:
    return container_security_context() | {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "readOnlyRootFilesystem": True,
    }


def _deployment(service: ModelService, *, image: str, fetch_image: str) -> KubeObject:
    name = service.name
    target = serving.model_path(name=name, model_version=service.model_version)
    fetch: dict[str, Any] = {
        "name": FETCH_CONTAINER,
        "image": fetch_image,
        "command": list(FETCH_COMMAND),
        "args": ["--source", service.model_uri, "--target", target],
        # As much as the server: a large SavedModel is copied with room to spare, and the
        # pod asks for no more than its server does. GPUs are the server's alone.
        "resources": container_resources(cpu=service.cpu, memory=service.memory, gpus=0),
        "securityContext": _security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": MODELS_VOLUME, "mountPath": serving.MODEL_BASE_PATH},
            {"name": TMP_VOLUME, "mountPath": "/tmp"},
        ],
    }
    server: dict[str, Any] = {
        "name": SERVING_CONTAINER,
        "image": image,
        "command": list(SERVER_COMMAND),
        "args": [
            f"--port={serving.GRPC_PORT}",
            f"--rest_api_port={serving.REST_PORT}",
            f"--model_name={name}",
            f"--model_base_path={serving.MODEL_BASE_PATH}/{name}",
        ],
        "ports": [
            {"name": GRPC_PORT_NAME, "containerPort": serving.GRPC_PORT, "protocol": "TCP"},
            {"name": HTTP_PORT_NAME, "containerPort": serving.REST_PORT, "protocol": "TCP"},
        ],
        # Ready once the model's version is AVAILABLE: the status endpoint answers 200 then.
        "readinessProbe": {
            "httpGet": {"path": f"/v1/models/{name}", "port": serving.REST_PORT},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "resources": container_resources(cpu=service.cpu, memory=service.memory, gpus=service.gpus),
        "securityContext": _security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": MODELS_VOLUME, "mountPath": serving.MODEL_BASE_PATH, "readOnly": True},
            {"name": TMP_VOLUME, "mountPath": "/tmp"},
        ],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        # No Kubernetes API token (Pod Identity mounts a token of its own for S3).
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [{"name": MODELS_VOLUME, "emptyDir": {}}, {"name": TMP_VOLUME, "emptyDir": {}}],
        "initContainers": [fetch],
        "containers": [server],
    }
    if service.gpus > 0:
        pod_spec["tolerations"] = gpu_tolerations()
    labels = model_service_labels(service)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(service),
        "spec": {
            "replicas": service.replicas,
            "selector": {"matchLabels": model_service_selector(name)},
            "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
            "revisionHistoryLimit": REVISION_HISTORY_LIMIT,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _service(service: ModelService, *, settings: ServingSettings) -> KubeObject:
    metadata = _metadata(service)
    spec: dict[str, Any] = {
        "type": settings.service_type,
        "selector": model_service_selector(service.name),
        "ports": [
            {
                "name": HTTP_PORT_NAME,
                "port": serving.REST_PORT,
                "targetPort": HTTP_PORT_NAME,
                "protocol": "TCP",
            },
            {
                "name": GRPC_PORT_NAME,
                "port": serving.GRPC_PORT,
                "targetPort": GRPC_PORT_NAME,
                "protocol": "TCP",
            },
        ],
    }
    if settings.service_type == "LoadBalancer":
        metadata["annotations"] = {
            LB_TYPE_ANNOTATION: "external",
            LB_TARGET_TYPE_ANNOTATION: "ip",
            LB_SCHEME_ANNOTATION: settings.load_balancer_scheme,
        }
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def _disruption_budget(service: ModelService) -> KubeObject:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(service),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": model_service_selector(service.name)},
            # A replica that is not serving anyway (crash-looping, still loading) never holds up a drain.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def service_endpoints(kube_service: KubeObject) -> tuple[str, str] | None:
    """``(rest_url, grpc_target)`` of a rendered Service as the API server reports it, or None.

    A LoadBalancer Service answers at its first ingress (hostname, else ip); when that
    ingress lists ``ports``, its i-th port stands for the i-th of ``spec.ports``. None
    while the load balancer has no ingress yet. Any other type answers at its in-cluster
    DNS name on the spec's ports.
    """
    metadata = kube_service.get("metadata") or {}
    spec = kube_service.get("spec") or {}
    spec_ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    if spec.get("type") == "LoadBalancer":
        ingresses = ((kube_service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        ingress = ingresses[0] if ingresses and isinstance(ingresses[0], dict) else {}
        host = ingress.get("hostname") or ingress.get("ip")
        if not isinstance(host, str) or not host:
            return None
        ports = _ports(spec_ports, ingress_ports=ingress.get("ports"))
    else:
        name, namespace = metadata.get("name"), metadata.get("namespace")
        if not isinstance(name, str) or not isinstance(namespace, str):
            return None
        host = f"{name}.{namespace}.svc"
        ports = _ports(spec_ports, ingress_ports=None)
    if ports is None:
        return None
    http, grpc = ports
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"http://{host}:{http}", f"{host}:{grpc}"


def _ports(spec_ports: list[dict[str, Any]], *, ingress_ports: Any) -> tuple[int, int] | None:
    """The (http, grpc) port numbers, by name (else by TensorFlow Serving's port numbers)."""
    numbers: list[Any] = [p.get("port") for p in spec_ports]
    if isinstance(ingress_ports, list) and ingress_ports:
        if len(ingress_ports) != len(spec_ports):
            return None  # not every port has its ingress yet
        numbers = [p.get("port") if isinstance(p, dict) else None for p in ingress_ports]
    found: dict[str, int] = {}
    for wanted, default in ((HTTP_PORT_NAME, serving.REST_PORT), (GRPC_PORT_NAME, serving.GRPC_PORT)):
        index = next(
            (i for i, p in enumerate(spec_ports) if p.get("name") == wanted),
            next((i for i, p in enumerate(spec_ports) if p.get("port") == default), None),
        )
        if index is None or not _is_port(numbers[index]):
            return None
        found[wanted] = numbers[index]
    return found[HTTP_PORT_NAME], found[GRPC_PORT_NAME]


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536
