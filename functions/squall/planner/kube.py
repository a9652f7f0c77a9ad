"""Kubernetes objects (as kubectl prints them) into the planner's Node and Pod.

Takes the dicts of `kubectl get nodes -o json` / `kubectl get pods -A -o json` (a List
with items), a plain list of objects, or one object; the kubernetes client's
`ApiClient().sanitize_for_serialization(obj)` gives the same shape. Plain data in,
plain data out: no kubernetes import here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from squall.planner.model import (
    GPU_RESOURCE,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Resources,
    Taint,
    Toleration,
)
from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes, parse_whole_count

JOB_ID_LABEL = "squall.io/job-id"
CORDONED_AT_ANNOTATION = "squall.io/cordoned-at"
# Set by the scale function when it first finds a node empty: finished pods are
# deleted within a minute, so their finishedAt cannot carry a node's idle time.
EMPTY_SINCE_ANNOTATION = "squall.io/empty-since"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

_INSTANCE_ID = re.compile(r"i-[0-9a-zA-Z]+")
_FRACTION = re.compile(r"(\.\d{6})\d+")
_Parsed = TypeVar("_Parsed")


def parse_nodes(doc: Mapping[str, Any] | Sequence[Any]) -> list[Node]:
    return _parse_all(doc, parse_node, "node")


def parse_pods(doc: Mapping[str, Any] | Sequence[Any]) -> list[Pod]:
    return _parse_all(doc, parse_pod, "pod")


class ParseCache(Generic[_Parsed]):
    """Parsed objects by uid and resourceVersion, for a process that lists the same ones again.

    The API server gives an object a new resourceVersion with every change, so an
    object listed again with the version it had parses to the same value (Node and
    Pod are frozen). A warm scale function lists every node and pod once per check;
    most are unchanged since the last one. Only what the latest list held is kept,
    and objects without a uid or resourceVersion are parsed every time.
    """

    def __init__(self, parse: Callable[[Mapping[str, Any]], _Parsed], what: str) -> None:
        self._parse = parse
        self._what = what
        self._seen: dict[tuple[str, str], _Parsed] = {}
        self.hits = 0
        self.misses = 0

    def parse_all(self, doc: Mapping[str, Any] | Sequence[Any]) -> list[_Parsed]:
        earlier = self._seen
        seen: dict[tuple[str, str], _Parsed] = {}
        parsed = []
        for item in _items(doc, self._what):
            metadata = item.get("metadata")
            key: tuple[str, str] | None
            try:
                key = (metadata["uid"], metadata["resourceVersion"])  # type: ignore[index]
                value = earlier.get(key)
            except (KeyError, TypeError):  # no metadata, no uid or version, or not hashable
                key, value = None, None
            if value is None:
                self.misses += 1
                value = self._parse(item)
            else:
                self.hits += 1
            if key is not None and key[0] and key[1]:
                seen[key] = value
            parsed.append(value)
        self._seen = seen
        return parsed


def node_cache() -> ParseCache[Node]:
    return ParseCache(parse_node, "node")


def pod_cache() -> ParseCache[Pod]:
    return ParseCache(parse_pod, "pod")


def parse_node(obj: Mapping[str, Any]) -> Node:
    metadata = _mapping(obj, "metadata")
    name = _required_name(metadata, "node")
    try:
        spec = _mapping(obj, "spec")
        status = _mapping(obj, "status")
        annotations = _strings(metadata.get("annotations"))
        unschedulable = bool(spec.get("unschedulable", False))
        ready_condition = _condition(status, "Ready")
        return Node(
            name=name,
            allocatable=_node_allocatable(status),
            labels=_strings(metadata.get("labels")),
            taints=tuple(_taint(t) for t in _list(spec, "taints")),
            instance_id=instance_id_from_provider_id(str(spec.get("providerID") or "")),
            ready=ready_condition.get("status") == "True",
            unschedulable=unschedulable,
            cordoned_by_squall=unschedulable and CORDONED_AT_ANNOTATION in annotations,
            ready_since=parse_time(ready_condition.get("lastTransitionTime")),
            created_at=parse_time(metadata.get("creationTimestamp")),
            empty_since=parse_time(annotations.get(EMPTY_SINCE_ANNOTATION)),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"node {name}: {exc}") from exc


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    metadata = _mapping(obj, "metadata")
    name = _required_name(metadata, "pod")
    namespace = str(metadata.get("namespace") or "default")
    try:
        spec = _mapping(obj, "spec")
        status = _mapping(obj, "status")
        labels = _strings(metadata.get("labels"))
        return Pod(
            namespace=namespace,
            name=name,
            requests=pod_requests(spec),
            node_selector=_strings(spec.get("nodeSelector")),
            required_affinity=_required_affinity(spec),
            tolerations=tuple(_toleration(t) for t in _list(spec, "tolerations")),
            job_id=labels.get(JOB_ID_LABEL),
            node_name=spec.get("nodeName") or None,
            phase=str(status.get("phase") or "Pending"),
            daemonset=any(ref.get("kind") == "DaemonSet" for ref in _list(metadata, "ownerReferences")),
            mirror=MIRROR_ANNOTATION in _strings(metadata.get("annotations")),
            deleting=metadata.get("deletionTimestamp") is not None,
            finished_at=_last_finished(status),
            priority=int(spec.get("priority") or 0),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"pod {namespace}/{name}: {exc}") from exc


def instance_id_from_provider_id(provider_id: str) -> str | None:
    """'aws:///us-west-2a/i-0abc' -> 'i-0abc'; None for anything else."""
    if not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if _INSTANCE_ID.fullmatch(last) else None


def parse_time(value: object) -> datetime | None:
    """RFC 3339 as Kubernetes and AWS write it ('2024-05-01T12:00:00Z'); naive means UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(_FRACTION.sub(r"\1", text))
        except ValueError:
            raise ValueError(
                f"invalid time {value!r}: expected ISO 8601, e.g. 2024-05-01T12:00:00Z"
            ) from None
    else:
        raise ValueError(f"invalid time {value!r}: expected ISO 8601, e.g. 2024-05-01T12:00:00Z")
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for a pod: its containers (or its largest init step) + overhead.

    A request left out defaults to the limit, as the API server does for GPUs.
    """
    containers = [_container_requests(c, f"containers[{i}]") for i, c in enumerate(_list(spec, "containers"))]
    sidecars: list[tuple[int, int, int]] = []
    init_steps: list[tuple[int, int, int]] = []
    for i, container in enumerate(_list(spec, "initContainers")):
        requests = _container_requests(container, f"initContainers[{i}]")
        # Sidecars (restartPolicy Always) keep running next to the app containers.
        if container.get("restartPolicy") == "Always":
            sidecars.append(requests)
        else:
            init_steps.append(_add([*sidecars, requests]))
    running = _add([*containers, *sidecars])
    peak = tuple(max(r[i] for r in [running, *init_steps]) for i in range(3))
    overhead = _amounts(_mapping(spec, "overhead"), "overhead")
    cpu, memory, gpu = (peak[i] + overhead[i] for i in range(3))
    return Resources(cpu=cpu, memory=memory, gpu=gpu)


def _container_requests(container: Mapping[str, Any], where: str) -> tuple[int, int, int]:
    resources = _mapping(container, "resources")
    merged = {**_mapping(resources, "limits"), **_mapping(resources, "requests")}
    return _amounts(merged, f"{where}.resources")


def _amounts(values: Mapping[str, Any], where: str) -> tuple[int, int, int]:
    parsers: tuple[tuple[str, Callable[[Any], int]], ...] = (
        ("cpu", parse_cpu_millicores),
        ("memory", parse_memory_bytes),
        (GPU_RESOURCE, parse_whole_count),
    )
    amounts = []
    for key, parse in parsers:
        try:
            amounts.append(parse(values[key]) if key in values else 0)
        except ValueError as exc:
            raise ValueError(f"{where}.{key}: {exc}") from None
    return (amounts[0], amounts[1], amounts[2])


def _add(requests: Sequence[tuple[int, int, int]]) -> tuple[int, int, int]:
    return (sum(r[0] for r in requests), sum(r[1] for r in requests), sum(r[2] for r in requests))


def _node_allocatable(status: Mapping[str, Any]) -> Resources:
    values = _mapping(status, "allocatable") or _mapping(status, "capacity")
    cpu, memory, gpu = _amounts(values, "status.allocatable")
    try:
        pods = parse_whole_count(values["pods"]) if "pods" in values else 0
    except ValueError as exc:
        raise ValueError(f"status.allocatable.pods: {exc}") from None
    return Resources(cpu=cpu, memory=memory, gpu=gpu, pods=pods)


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in _list(status, "conditions"):
        if condition.get("type") == kind:
            return condition
    return {}


def _last_finished(status: Mapping[str, Any]) -> datetime | None:
    finished = [
        parse_time(_mapping(_mapping(s, "state"), "terminated").get("finishedAt"))
        for s in _list(status, "containerStatuses")
    ]
    return max((f for f in finished if f is not None), default=None)


def _taint(raw: Mapping[str, Any]) -> Taint:
    return Taint(
        key=str(raw.get("key", "")), value=str(raw.get("value") or ""), effect=str(raw.get("effect", ""))
    )


def _toleration(raw: Mapping[str, Any]) -> Toleration:
    return Toleration(
        key=str(raw.get("key") or ""),
        operator=str(raw.get("operator") or "Equal"),
        value=str(raw.get("value") or ""),
        effect=str(raw.get("effect") or ""),
    )


def _required_affinity(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    """Required node affinity terms. matchFields (by node name) are not modelled."""
    node_affinity = _mapping(_mapping(spec, "affinity"), "nodeAffinity")
    required = _mapping(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    return tuple(
        NodeSelectorTerm(
            match_expressions=tuple(
                NodeSelectorRequirement(
                    key=str(r["key"]),
                    operator=str(r["operator"]),
                    values=tuple(str(v) for v in r.get("values") or ()),
                )
                for r in _list(term, "matchExpressions")
            )
        )
        for term in _list(required, "nodeSelectorTerms")
    )


def _parse_all(
    doc: Mapping[str, Any] | Sequence[Any], parse: Callable[[Mapping[str, Any]], _Parsed], what: str
) -> list[_Parsed]:
    return [parse(item) for item in _items(doc, what)]


def _items(doc: Mapping[str, Any] | Sequence[Any], what: str) -> list[Mapping[str, Any]]:
    """The objects of a List, a plain list of objects, or one object."""
    if isinstance(doc, Mapping):
        # A List (whose items may be null when empty), or one object.
        items = doc.get("items", [doc]) or []
    elif isinstance(doc, Sequence) and not isinstance(doc, str):
        items = doc
    else:
        raise ValueError(f"expected a {what} list (kubectl -o json), got {type(doc).__name__}")
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise ValueError(f"expected 'items' to be a list of {what}s")
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValueError(f"items[{index}]: expected a {what} object, got {type(item).__name__}")
    return list(items)


def _required_name(metadata: Mapping[str, Any], what: str) -> str:
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} without metadata.name")
    return name


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{key}: expected an object, got {type(value).__name__}")
    return value


def _list(obj: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValueError(f"{key}: expected a list of objects")
    return value


def _strings(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object of strings, got {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}
