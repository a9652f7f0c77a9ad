"""v1 Services (a LoadBalancer's status) and policy/v1 PodDisruptionBudgets created from manifests.

Models: a Service of type LoadBalancer given an address at once, as a load balancer
controller gives one once its load balancer exists: `status.loadBalancer.ingress:
[{"ip": "127.0.0.1", "ports": [{"port": P, "protocol": "TCP"}, ...]}]`, one port per
spec port in order: where the pod runner serves the first ready pod of the Service's
selector for real, the loopback port it listens on for that port's targetPort (the
runner's optional `ports(pod)`), else the spec port. Other Services have an empty
`status.loadBalancer`. A PodDisruptionBudget from a manifest (selector, maxUnavailable
or minAvailable as a number or a percentage, unhealthyPodEvictionPolicy) counts for
evictions exactly as one added with `add_pdb` (scheduler.py).

Leaves out: Endpoints and EndpointSlices, NodePorts, session affinity, externalTrafficPolicy,
a load balancer taking time to come up, and a budget's status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from squall.conventions import MODEL_SERVICE_LABEL
from squall.core.errors import PermanentError
from squall.local.cluster.parsing import label_selector, parse_selector
from squall.local.cluster.state import TERMINAL, ClusterState, Key, Pdb, StoredPod
from squall.local.cluster.views import thaw_manifest
from squall.ports import KubeObject

LOOPBACK = "127.0.0.1"
Ports = Callable[[KubeObject], "Mapping[int, int] | None"]


def load_balancer_status(state: ClusterState, service: KubeObject, ports: Ports | None) -> dict[str, Any]:
    """The Service's status.loadBalancer as the cluster shows it now."""
    spec = service.get("spec") or {}
    if spec.get("type") != "LoadBalancer":
        return {}
    spec_ports = [p for p in spec.get("ports") or [] if isinstance(p, Mapping)]
    pod = _first_ready_pod(state, service["metadata"].get("namespace"), spec.get("selector") or {})
    listening = ports(pod.obj) if pod is not None and ports is not None else None
    ingress_ports = [
        {"port": _served_port(port, pod, listening), "protocol": str(port.get("protocol") or "TCP")}
        for port in spec_ports
    ]
    return {"ingress": [{"ip": LOOPBACK, "ports": ingress_ports}]}


def _first_ready_pod(
    state: ClusterState, namespace: str | None, selector: Mapping[str, Any]
) -> StoredPod | None:
    if not isinstance(selector, Mapping) or not selector:
        return None  # a Service without a selector has no pods of its own
    matching = label_selector({str(k): str(v) for k, v in selector.items()})
    service = selector.get(MODEL_SERVICE_LABEL)
    keys: Iterable[Key] = state.pods_by_service.get(str(service), {}) if service is not None else state.pods
    candidates = [
        pod
        for key in keys
        if key[0] == namespace
        and (pod := state.pods[key]).ready
        and pod.phase not in TERMINAL
        and matching.matches(pod.labels)
    ]
    return min(candidates, key=lambda pod: pod.seq) if candidates else None


def _served_port(port: Mapping[str, Any], pod: StoredPod | None, listening: Mapping[int, int] | None) -> Any:
    spec_port = port.get("port")
    if pod is None or not listening:
        return spec_port
    target = port.get("targetPort", spec_port)
    if isinstance(target, str):  # a named container port
        target = next(
            (
                p.get("containerPort")
                for c in pod.obj["spec"].get("containers") or []
                for p in c.get("ports") or []
                if p.get("name") == target
            ),
            None,
        )
    served = listening.get(target) if isinstance(target, int) else None
    return served if served is not None else spec_port


def parse_pdb(key: Key, manifest: Mapping[str, Any]) -> tuple[KubeObject, Pdb]:
    """A policy/v1 PodDisruptionBudget's object and the budget evictions check; PermanentError names the field."""
    name = key[1]
    obj = thaw_manifest(manifest)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise _invalid(name, "spec", "Required value")
    max_unavailable = _budget_value(name, spec, "maxUnavailable")
    min_available = _budget_value(name, spec, "minAvailable")
    if (max_unavailable is None) == (min_available is None):
        raise _invalid(name, "spec", "Invalid value: give exactly one of minAvailable and maxUnavailable")
    try:
        selector = parse_selector(spec.get("selector"), field="spec.selector", empty_ok=True)
    except PermanentError as exc:
        raise PermanentError(f'PodDisruptionBudget.policy "{name}" is invalid: {exc}') from None
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy not in (None, "IfHealthyBudget", "AlwaysAllow"):
        raise _invalid(
            name,
            "spec.unhealthyPodEvictionPolicy",
            f'Unsupported value: {policy!r}: supported values: "AlwaysAllow", "IfHealthyBudget"',
        )
    return obj, Pdb(
        key[0],
        selector,
        max_unavailable,
        min_available,
        name=name,
        always_allow_unhealthy=policy == "AlwaysAllow",
    )


def _budget_value(name: str, spec: Mapping[str, Any], field: str) -> int | str | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit() and int(value[:-1]) <= 100:
        return value
    raise _invalid(
        name, f"spec.{field}", f"Invalid value: {value!r}: a whole number >= 0, or a percentage 0%..100%"
    )


def _invalid(name: str, field: str, detail: str) -> PermanentError:
    return PermanentError(f'PodDisruptionBudget.policy "{name}" is invalid: {field}: {detail}')
