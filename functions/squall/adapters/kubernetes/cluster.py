"""KubernetesCluster: the `Cluster` and `ServingCluster` ports on the official ``kubernetes`` client.

Responses are read raw (``_preload_content=False``) and decoded with ``json``:
the dicts are exactly what the API server sent, camelCase and lossless. The
client's model round trip (deserialize, then ``sanitize_for_serialization``)
would drop fields newer than the client, and deserializing thousands of pods
into models is the slowest part of a list on a large cluster.

Requests go through the ``ApiClient`` as raw REST calls (`_RawApi`), not through
the generated ``BatchV1Api``/``CoreV1Api`` classes: those import the model classes of
every operation they declare (hundreds of pydantic modules, most of a cold start)
to describe responses this adapter never deserializes. Only a create validates its
manifest against the API's schema, and imports that one kind's model on first use.

Every call carries a (connect, read) timeout, so a hung API server costs a
Lambda seconds, not its whole time budget; every third-party exception leaves
as a `squall.core.errors` type, chained, with a message naming what was being done.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING, Any, Final

import pydantic
import urllib3
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException, OpenApiException

from squall.conventions import JOB_ID_LABEL, MANAGED_BY_LABEL, MODEL_SERVICE_LABEL
from squall.core.errors import NotFoundError, PermanentError, RetryableError, SquallError
from squall.core.manifests import job_selector, name_taken, owned_alike
from squall.ports import Cluster, KubeObject, ServingCluster

DEFAULT_REQUEST_TIMEOUT: Final = (3.0, 15.0)  # seconds: (connect, read)
DEFAULT_PAGE_SIZE: Final = 500
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"

# Transient answers: throttled (429), server trouble (5xx), the server's own timeout
# (408, 504), an expired continue token or resourceVersion (410: a fresh list works).
_RETRYABLE_STATUSES: Final = frozenset({408, 410, 429})
_MESSAGE_LIMIT: Final = 300

_Response = tuple[int, Any]


class KubernetesCluster:
    """The `squall.ports.ServingCluster` port (a `Cluster` too) over a ``kubernetes.client.ApiClient``.

    The composition root builds the ApiClient (host, TLS, bearer token) and owns
    it; this adapter only issues requests through it.
    """

    def __init__(
        self,
        api_client: ApiClient,
        /,
        *,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        # One raw client under the generated APIs' names: each call still says which API it goes to.
        self._batch = self._core = self._apps = self._policy = _RawApi(api_client)
        self._timeout = request_timeout
        self._page_size = page_size

    # ==== writes =====================================================================

    def create(self, manifest: KubeObject) -> bool:
        kind = manifest.get("kind")
        metadata = manifest.get("metadata") or {}
        namespace, name = metadata.get("namespace"), metadata.get("name")
        doing = f"create {kind} {namespace}/{name}"
        if not namespace or not name:
            raise PermanentError(f"{doing}: metadata.name and metadata.namespace are required")
        creators: dict[tuple[object, object], tuple[Callable[..., Any], Any, Callable[..., Any]]] = {
            ("batch/v1", "Job"): (
                self._batch.create_namespaced_job,
                "V1Job",
                self._batch.read_namespaced_job,
            ),
            ("v1", "Service"): (
                self._core.create_namespaced_service,
                "V1Service",
                self._core.read_namespaced_service,
            ),
            ("apps/v1", "Deployment"): (
                self._apps.create_namespaced_deployment,
                "V1Deployment",
                self._apps.read_namespaced_deployment,
            ),
            ("policy/v1", "PodDisruptionBudget"): (
                self._policy.create_namespaced_pod_disruption_budget,
                "V1PodDisruptionBudget",
                self._policy.read_namespaced_pod_disruption_budget,
            ),
        }
        found = creators.get((manifest.get("apiVersion"), kind))
        if found is None:
            raise PermanentError(
                f"{doing}: only batch/v1 Jobs and v1 Services (and for model services apps/v1 "
                "Deployments and policy/v1 PodDisruptionBudgets) are created"
            )
        create, model, read = found
        with _translated(doing):
            body: Any = _model(model).model_validate(manifest)
        status, _ = self._call(
            doing, create, tolerate={409}, namespace=namespace, body=body, _headers=_json_body()
        )
        if status != 409:
            return True
        # AlreadyExists: kept only when its labels say it is that very job's or service's;
        # anyone else's object under the name is neither adopted nor deleted.
        status, existing = self._call(
            f"read {kind} {namespace}/{name}", read, tolerate={404}, namespace=namespace, name=name
        )
        if status == 404 or not isinstance(existing, dict):
            raise RetryableError(f"{doing}: it existed, then was gone when read; creating it again may work")
        if not owned_alike(manifest, existing):
            raise PermanentError(f"{doing}: {name_taken(manifest, existing)}")
        return False

    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        selector = job_selector(job_id)
        jobs = self._list(
            f"list Jobs of job {job_id} in {namespace}",
            self._batch.list_namespaced_job,
            namespace=namespace,
            label_selector=selector,
        )
        services = self._list(
            f"list Services of job {job_id} in {namespace}",
            self._core.list_namespaced_service,
            namespace=namespace,
            label_selector=selector,
        )
        deletions: list[tuple[str, Callable[..., Any], KubeObject, dict[str, Any]]] = [
            # Background propagation: the Job's pods go too.
            *(
                ("Job", self._batch.delete_namespaced_job, job, {"propagation_policy": "Background"})
                for job in jobs
            ),
            *(("Service", self._core.delete_namespaced_service, service, {}) for service in services),
        ]
        return sum(
            self._delete(kind, delete, namespace=namespace, obj=obj, options=options)
            for kind, delete, obj, options in deletions
        )

    def delete_model_service_objects(self, *, namespace: str, model_service: str) -> int:
        # By label, not by the deterministic name: only what carries Squall's labels goes.
        selector = _model_service_selector(model_service)
        kinds: list[tuple[str, Callable[..., Any], Callable[..., Any], dict[str, Any]]] = [
            # Background propagation: the Deployment's ReplicaSets and their pods go too.
            (
                "Deployment",
                self._apps.list_namespaced_deployment,
                self._apps.delete_namespaced_deployment,
                {"propagation_policy": "Background"},
            ),
            ("Service", self._core.list_namespaced_service, self._core.delete_namespaced_service, {}),
            (
                "PodDisruptionBudget",
                self._policy.list_namespaced_pod_disruption_budget,
                self._policy.delete_namespaced_pod_disruption_budget,
                {},
            ),
        ]
        deleted = 0
        for kind, list_kind, delete, options in kinds:
            found = self._list(
                f"list {kind}s of model service {model_service} in {namespace}",
                list_kind,
                namespace=namespace,
                label_selector=selector,
            )
            deleted += sum(
                self._delete(kind, delete, namespace=namespace, obj=obj, options=options) for obj in found
            )
        return deleted

    def _delete(
        self,
        kind: str,
        delete: Callable[..., Any],
        *,
        namespace: str,
        obj: KubeObject,
        options: dict[str, Any],
    ) -> bool:
        """Delete one object; False when it was gone already (404)."""
        name = obj["metadata"]["name"]
        status, _ = self._call(
            f"delete {kind} {namespace}/{name}",
            delete,
            tolerate={404},
            name=name,
            namespace=namespace,
            **options,
        )
        return status != 404

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        _, node = self._call(
            f"patch Node {name}",
            self._core.patch_node,
            name=name,
            body=dict(patch),
            _content_type=STRATEGIC_MERGE_PATCH,
        )
        return _with_type(node, api_version="v1", kind="Node")

    def patch_job(self, *, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        # A JSON merge patch, not a strategic one: the same meaning on every API server
        # version (lists such as tolerations or nodeSelectorTerms are replaced whole).
        _, job = self._call(
            f"patch Job {namespace}/{name}",
            self._batch.patch_namespaced_job,
            name=name,
            namespace=namespace,
            body=dict(patch),
            _content_type=MERGE_PATCH,
        )
        return _with_type(job, api_version="batch/v1", kind="Job")

    def evict(self, *, namespace: str, name: str) -> bool:
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        status, _ = self._call(
            f"evict Pod {namespace}/{name}",
            self._core.create_namespaced_pod_eviction,
            tolerate={404, 429},
            name=name,
            namespace=namespace,
            body=eviction,
            _headers=_json_body(),
        )
        # 404: the pod is gone already; 429: a PodDisruptionBudget says not now.
        return status != 429

    # ==== reads ======================================================================

    def list_jobs(self, *, namespace: str | None = None, job_id: str | None = None) -> list[KubeObject]:
        selector = job_selector(job_id) if job_id is not None else f"{MANAGED_BY_LABEL}=squall"
        doing = f"list Jobs{_scope(namespace=namespace, job_id=job_id)}"
        if namespace is None:
            jobs = self._list(doing, self._batch.list_job_for_all_namespaces, label_selector=selector)
        else:
            jobs = self._list(
                doing, self._batch.list_namespaced_job, namespace=namespace, label_selector=selector
            )
        return [_with_type(job, api_version="batch/v1", kind="Job") for job in jobs]

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        job_id: str | None = None,
        node_name: str | None = None,
    ) -> list[KubeObject]:
        selectors: dict[str, str] = {}
        if job_id is not None:
            selectors["label_selector"] = f"{JOB_ID_LABEL}={job_id}"
        if node_name is not None:
            selectors["field_selector"] = f"spec.nodeName={node_name}"
        doing = f"list Pods{_scope(namespace=namespace, job_id=job_id, node_name=node_name)}"
        if namespace is None:
            pods = self._list(doing, self._core.list_pod_for_all_namespaces, **selectors)
        else:
            pods = self._list(doing, self._core.list_namespaced_pod, namespace=namespace, **selectors)
        return [_with_type(pod, api_version="v1", kind="Pod") for pod in pods]

    def list_nodes(self) -> list[KubeObject]:
        nodes = self._list("list Nodes", self._core.list_node)
        return [_with_type(node, api_version="v1", kind="Node") for node in nodes]

    def get_node(self, name: str) -> KubeObject | None:
        status, node = self._call(f"get Node {name}", self._core.read_node, tolerate={404}, name=name)
        return None if status == 404 else _with_type(node, api_version="v1", kind="Node")

    def list_deployments(
        self, *, namespace: str | None = None, model_service: str | None = None
    ) -> list[KubeObject]:
        selector = (
            _model_service_selector(model_service)
            if model_service is not None
            else f"{MANAGED_BY_LABEL}=squall,{MODEL_SERVICE_LABEL}"
        )
        doing = f"list Deployments{_scope(namespace=namespace, model_service=model_service)}"
        if namespace is None:
            deployments = self._list(
                doing, self._apps.list_deployment_for_all_namespaces, label_selector=selector
            )
        else:
            deployments = self._list(
                doing, self._apps.list_namespaced_deployment, namespace=namespace, label_selector=selector
            )
        return [_with_type(obj, api_version="apps/v1", kind="Deployment") for obj in deployments]

    def list_model_service_pods(self, *, namespace: str, model_service: str) -> list[KubeObject]:
        pods = self._list(
            f"list Pods{_scope(namespace=namespace, model_service=model_service)}",
            self._core.list_namespaced_pod,
            namespace=namespace,
            label_selector=f"{MODEL_SERVICE_LABEL}={model_service}",
        )
        return [_with_type(pod, api_version="v1", kind="Pod") for pod in pods]

    def get_service(self, *, namespace: str, name: str) -> KubeObject | None:
        status, service = self._call(
            f"get Service {namespace}/{name}",
            self._core.read_namespaced_service,
            tolerate={404},
            name=name,
            namespace=namespace,
        )
        return None if status == 404 else _with_type(service, api_version="v1", kind="Service")

    # ==== plumbing ===================================================================

    def _list(self, doing: str, method: Callable[..., Any], /, **kwargs: Any) -> list[KubeObject]:
        """Every item of a list, page by page (``limit`` + ``continue``)."""
        items: list[KubeObject] = []
        token: str | None = None
        while True:
            _, page = self._call(doing, method, limit=self._page_size, _continue=token, **kwargs)
            if not isinstance(page, dict):
                raise RetryableError(f"{doing}: the API server answered with no list")
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    def _call(
        self,
        doing: str,
        method: Callable[..., Any],
        /,
        *,
        tolerate: Collection[int] = (),
        **kwargs: Any,
    ) -> _Response:
        """One API request: (HTTP status, decoded JSON body).

        A status in `tolerate` comes back as (status, None) instead of an error.
        """
        with _translated(doing):
            try:
                response = method(**kwargs, _preload_content=False, _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status in tolerate:
                    return exc.status, None
                raise
            try:
                data = response.data
            finally:
                response.release_conn()
            return response.status, json.loads(data) if data else None


# The operations this adapter issues, by the generated client's names: (HTTP method, path).
_OPERATIONS: Final[dict[str, tuple[str, str]]] = {
    "create_namespaced_job": ("POST", "/apis/batch/v1/namespaces/{namespace}/jobs"),
    "list_namespaced_job": ("GET", "/apis/batch/v1/namespaces/{namespace}/jobs"),
    "list_job_for_all_namespaces": ("GET", "/apis/batch/v1/jobs"),
    "patch_namespaced_job": ("PATCH", "/apis/batch/v1/namespaces/{namespace}/jobs/{name}"),
    "delete_namespaced_job": ("DELETE", "/apis/batch/v1/namespaces/{namespace}/jobs/{name}"),
    "create_namespaced_service": ("POST", "/api/v1/namespaces/{namespace}/services"),
    "list_namespaced_service": ("GET", "/api/v1/namespaces/{namespace}/services"),
    "read_namespaced_service": ("GET", "/api/v1/namespaces/{namespace}/services/{name}"),
    "read_namespaced_job": ("GET", "/apis/batch/v1/namespaces/{namespace}/jobs/{name}"),
    "read_namespaced_deployment": ("GET", "/apis/apps/v1/namespaces/{namespace}/deployments/{name}"),
    "read_namespaced_pod_disruption_budget": (
        "GET",
        "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}",
    ),
    "delete_namespaced_service": ("DELETE", "/api/v1/namespaces/{namespace}/services/{name}"),
    "list_namespaced_pod": ("GET", "/api/v1/namespaces/{namespace}/pods"),
    "list_pod_for_all_namespaces": ("GET", "/api/v1/pods"),
    "create_namespaced_pod_eviction": ("POST", "/api/v1/namespaces/{namespace}/pods/{name}/eviction"),
    "list_node": ("GET", "/api/v1/nodes"),
    "read_node": ("GET", "/api/v1/nodes/{name}"),
    "patch_node": ("PATCH", "/api/v1/nodes/{name}"),
    "create_namespaced_deployment": ("POST", "/apis/apps/v1/namespaces/{namespace}/deployments"),
    "list_namespaced_deployment": ("GET", "/apis/apps/v1/namespaces/{namespace}/deployments"),
    "list_deployment_for_all_namespaces": ("GET", "/apis/apps/v1/deployments"),
    "delete_namespaced_deployment": ("DELETE", "/apis/apps/v1/namespaces/{namespace}/deployments/{name}"),
    "create_namespaced_pod_disruption_budget": (
        "POST",
        "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
    ),
    "list_namespaced_pod_disruption_budget": (
        "GET",
        "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
    ),
    "delete_namespaced_pod_disruption_budget": (
        "DELETE",
        "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}",
    ),
}
# Query parameters by the generated client's argument names.
_QUERY: Final = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "propagation_policy": "propagationPolicy",
}


class _RawApi:
    """The generated client's operations as raw requests through the ApiClient.

    Called as the generated methods are with ``_preload_content=False``: the
    urllib3 response comes back unread, and a status outside 2xx raises the
    client's own ApiException, with the server's body.
    """

    def __init__(self, api_client: ApiClient) -> None:
        self._client = api_client

    def __getattr__(self, operation: str) -> Callable[..., Any]:
        if operation not in _OPERATIONS:
            raise AttributeError(f"no Kubernetes operation {operation!r}")
        return partial(self._request, *_OPERATIONS[operation])

    def _request(
        self,
        method: str,
        path: str,
        /,
        *,
        namespace: str | None = None,
        name: str | None = None,
        body: Any = None,
        _headers: Mapping[str, str] | None = None,
        _content_type: str | None = None,
        _request_timeout: Any = None,
        _preload_content: bool = False,
        **query: Any,
    ) -> Any:
        headers = {"Accept": "application/json", **(_headers or {})}
        if _content_type is not None:
            headers["Content-Type"] = _content_type
        elif body is not None:
            headers.setdefault("Content-Type", "application/json")
        path_params = {
            key: value for key, value in (("namespace", namespace), ("name", name)) if value is not None
        }
        request = self._client.param_serialize(
            method=method,
            resource_path=path,
            path_params=path_params,
            query_params=[(_QUERY[key], value) for key, value in query.items() if value is not None],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response


def _model(name: str) -> Any:
    """The client's model class `name`, imported on first use (its module and the models it nests)."""
    return getattr(import_module("kubernetes.client.models"), name)


@contextmanager
def _translated(doing: str) -> Iterator[None]:
    """Turn every client, transport and decoding failure into a Squall error."""
    try:
        yield
    except SquallError:
        raise
    except ApiException as exc:
        raise _status_error(doing, exc) from exc
    except (OpenApiException, pydantic.ValidationError) as exc:
        # The request could not even be built: a manifest the API's schema rejects.
        raise PermanentError(f"{doing}: invalid request: {_shorten(str(exc))}") from exc
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        # Refused, reset, timed out, TLS trouble: the API server may answer next time.
        cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason else exc
        raise RetryableError(f"{doing}: {type(cause).__name__}: {_shorten(str(cause))}") from exc
    except ValueError as exc:  # a body that is not JSON: a proxy's error page, a cut stream
        raise RetryableError(f"{doing}: unreadable response: {_shorten(str(exc))}") from exc


def _json_body() -> dict[str, str]:
    # The generated client sends POST bodies without a Content-Type. A fresh dict
    # each time: the client adds its own headers (the bearer token too) to it.
    return {"Content-Type": "application/json"}


def _status_error(doing: str, exc: ApiException) -> SquallError:
    status = exc.status or 0
    message = f"{doing}: {status} {exc.reason or ''}".rstrip()
    detail = _status_message(exc.body)
    if detail:
        message = f"{message}: {detail}"
    if status == 0:
        # The client raises status 0 for TLS failures (transport) and for requests
        # it cannot encode (ours to fix).
        if "SSLError" in str(exc.reason):
            return RetryableError(message)
        return PermanentError(message)
    if status == 404:
        return NotFoundError(message)
    if status in _RETRYABLE_STATUSES or status >= 500:
        return RetryableError(message)
    return PermanentError(message)


def _status_message(body: object) -> str:
    """The ``message`` of a Kubernetes Status body, else the body's start."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body.strip():
        return ""
    try:
        decoded = json.loads(body)
    except ValueError:
        return _shorten(body)
    if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
        return _shorten(decoded["message"])
    return _shorten(body)


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


def _model_service_selector(model_service: str) -> str:
    return f"{MANAGED_BY_LABEL}=squall,{MODEL_SERVICE_LABEL}={model_service}"


def _scope(
    *,
    namespace: str | None,
    job_id: str | None = None,
    node_name: str | None = None,
    model_service: str | None = None,
) -> str:
    parts = [
        f"in {namespace}" if namespace is not None else "in all namespaces",
        f"of job {job_id}" if job_id is not None else "",
        f"of model service {model_service}" if model_service is not None else "",
        f"on node {node_name}" if node_name is not None else "",
    ]
    return "".join(f" {part}" for part in parts if part)


def _with_type(obj: Any, *, api_version: str, kind: str) -> KubeObject:
    """Items of a list come without apiVersion/kind; kubectl -o json prints them, so do we."""
    if not isinstance(obj, dict):
        raise RetryableError(f"expected a {kind} object from the API server, got {type(obj).__name__}")
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", kind)
    return obj


if TYPE_CHECKING:

    def _held_to_the_port(cluster: KubernetesCluster) -> Cluster:
        return cluster  # mypy fails here when the adapter drifts from the Cluster protocol

    def _held_to_the_serving_port(cluster: KubernetesCluster) -> ServingCluster:
        return cluster  # and here when it drifts from the ServingCluster protocol
