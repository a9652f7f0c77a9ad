"""Kubernetes objects (as kubectl prints them) into the planner's Node and Pod.

Takes the dicts of `kubectl get nodes -o json` / `kubectl get pods -A -o json` (a List
with items), a plain list of objects, or one object; the kubernetes client's
`ApiClient().sanitize_for_serialization(obj)` gives the same shape. Plain data in,
plain data out: no kubernetes import here.

Read for a cluster (`cluster=NAME`, when the planner sees more than one), a node's
name becomes "NAME/node" and it carries the label CLUSTER_LABEL=NAME; a pod's node
name is qualified the same way and it asks for CLUSTER_LABEL=NAME in its node
selector, so it fits only that cluster's nodes and node groups; a replica Job's
admitted region becomes its site (planner/sites.py).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar, cast

from squall.conventions import (
    ADMITTED_REGION_ANNOTATION,
    CLUSTER_LABEL,
    CORDONED_AT_ANNOTATION,
    EMPTY_SINCE_ANNOTATION,
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    MIRROR_ANNOTATION,
    PRIORITY_ANNOTATION,
    REPLICAS_ANNOTATION,
    REQUEUED_ANNOTATION,
    SUBMITTED_AT_ANNOTATION,
    TEAM_LABEL,
)
from squall.planner.admission import ReplicaJob
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
from squall.planner.sites import qualified, site
from squall.planner.text import kind, shown

_INSTANCE_ID = re.compile(r"i-[0-9a-zA-Z]+")
_FRACTION = re.compile(r"(\.\d{6})\d+", re.ASCII)
_Parsed = TypeVar("_Parsed")
_Covariant = TypeVar("_Covariant", covariant=True)
# Times outside these are no time Kubernetes or AWS writes, and arithmetic on them overflows.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
# Pod priorities are 32-bit integers.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
_EMPTY: Mapping[str, Any] = {}
_MISSING = object()  # not parsed before (a parse may give None: a Job that is not Squall's)
_TIME_EXAMPLE = "expected ISO 8601, e.g. 2024-05-01T12:00:00Z"
# A listed object remembered by identity: the dict, its (uid, resourceVersion) and its parse.
_Entry = tuple[Mapping[str, Any], tuple[str, str], _Parsed]
# One of a list being parsed: the same, without a key when it is not to be remembered.
_Slot = tuple[Mapping[str, Any], tuple[str, str] | None, _Parsed]
_VALUE = operator.itemgetter(2)


class ParseCache(Generic[_Parsed]):
    """Parsed objects by uid and resourceVersion, for a process that lists the same ones again.

    The API server gives an object a new resourceVersion with every change, so an
    object listed again with the version it had parses to the same value (Node and
    Pod are frozen). A warm scale function lists every node and pod once per check;
    most are unchanged since the last one. Only what the latest list held is kept,
    and objects without a uid or resourceVersion are parsed every time.

    A lister may hand out the very same dict again while its object is unchanged
    (client-go's informers do, and the simulated cluster's shared lists), never one
    changed in place: such a dict is known by its identity alone, without reading
    it, so a list costs what changed since the last one. The dicts are held while
    remembered, so no other object can take one's id.
    """

    def __init__(self, parse: Callable[[Mapping[str, Any]], _Parsed], what: str) -> None:
        self._parse = parse
        self._what = what
        self._seen: dict[tuple[str, str], _Parsed] = {}
        self.hits = 0
        self.misses = 0
        self.unreadable: list[str] = []
        # Whether the latest list differed from the one before it (an object new, changed
        # or gone); True until a second list has been seen.
        self.changed = True
        self._lists = 0
        # The latest list's objects with a uid and version: id -> (the dict, its key, its parse).
        self._by_identity: dict[int, _Entry[_Parsed]] = {}
        # The latest list itself and its answer, when every object in it had a uid and version.
        self._last: tuple[tuple[Mapping[str, Any], ...], list[_Parsed]] | None = None

    def parse_all(
        self,
        doc: Mapping[str, Any] | Sequence[Any],
        *,
        unreadable: Callable[[Mapping[str, Any], str], _Parsed | None] | None = None,
    ) -> list[_Parsed]:
        """Every object of the list, parsed; ValueError naming the item and field for one it cannot read.

        With `unreadable`, an object it cannot read does not fail the whole list:
        `unreadable(item, why)` returns what stands in for it (or None to leave it
        out), and `self.unreadable` lists why, for the caller to log and count.
        """
        items = _items(doc, self._what)
        one = bool(items) and items[0] is doc  # one object, not a list: it has no index to name
        last = self._last
        if last is not None and len(items) == len(last[0]) and all(map(operator.is_, items, last[0])):
            # The very list of dicts again (a lister's unchanged answer): the same answer.
            self._lists += 1
            self.hits += len(items)
            self.unreadable = []
            self.changed = False
            return list(last[1])
        known = self._by_identity
        by_key = self._seen
        self.unreadable = []
        misses, first = self.misses, self._lists == 0
        self._lists += 1
        ids = list(map(id, items))
        # Each dict of the last list found by identity at C speed (its entry), None for the others:
        # a list that changed in a few objects costs a few parses, not a walk of every object.
        entries: list[_Slot[_Parsed] | None] = list(map(known.get, ids))
        came: list[tuple[tuple[str, str], _Parsed]] = []
        hits = len(items)  # less each object parsed below
        odd = False  # an object not remembered by identity: no uid or version, or unreadable
        for index in _nones(entries):  # in the list's order: misses and problems come as they did
            item = items[index]
            metadata = item.get("metadata")
            key: tuple[str, str] | None
            try:
                key = (metadata["uid"], metadata["resourceVersion"])  # type: ignore[index]
                value = by_key.get(key, _MISSING)
            except (KeyError, TypeError):  # no metadata, no uid or version, or not hashable
                key, value = None, _MISSING
            if value is _MISSING:
                self.misses += 1
                hits -= 1
                try:
                    value = _parse_item(self._parse, item, None if one else index)
                except ValueError as exc:
                    if unreadable is None:
                        raise
                    self.unreadable.append(str(exc))
                    stand_in = unreadable(item, str(exc))
                    if stand_in is not None:  # in its place; left out, its slot stays None
                        entries[index] = (item, None, stand_in)
                    odd = True
                    continue
            if key is not None and key[0] and key[1]:
                entries[index] = (item, key, value)  # type: ignore[assignment]
                came.append((key, value))  # type: ignore[arg-type]
            else:
                entries[index] = (item, None, value)  # type: ignore[assignment]
                odd = True
        by_identity: dict[int, _Entry[_Parsed]]
        if odd:
            by_identity, parsed = {}, []
            for ident, slot in zip(ids, entries, strict=True):
                if slot is None:
                    continue
                item, key, value = slot
                parsed.append(value)
                if key is not None:
                    by_identity[ident] = (item, key, value)
        else:  # every object remembered (a dict listed twice: its last place, as before)
            remembered = cast("list[_Entry[_Parsed]]", entries)
            parsed = list(map(_VALUE, remembered))
            by_identity = dict(zip(ids, remembered, strict=True))
        went = known.keys() - by_identity.keys()
        # The keys of the latest list: those of dicts gone dropped, those of dicts new added.
        for gone in went:
            by_key.pop(known[gone][1], None)
        by_key.update(came)
        self.hits += hits
        # Unchanged: nothing parsed anew, and every object of the last list here again.
        self.changed = (
            first or self.misses != misses or len(by_identity) != len(known) or bool(self.unreadable)
        )
        self._by_identity = by_identity
        # Every object kept by identity (each had a uid and version, none unreadable): the
        # same list again gives the same answer.
        self._last = (tuple(items), list(parsed)) if len(by_identity) == len(items) == len(parsed) else None
        return parsed


def _nones(values: list[Any]) -> Iterator[int]:
    """The indexes of the Nones in `values`, found at C speed; one given may be filled before the next."""
    index = -1
    while True:
        try:
            index = values.index(None, index + 1)
        except ValueError:
            return
        yield index


def parse_nodes(doc: Mapping[str, Any] | Sequence[Any], *, cluster: str | None = None) -> list[Node]:
    return _parse_all(doc, _for_cluster(parse_node, cluster), "node")


def parse_pods(doc: Mapping[str, Any] | Sequence[Any], *, cluster: str | None = None) -> list[Pod]:
    return _parse_all(doc, _for_cluster(parse_pod, cluster), "pod")


def parse_replica_jobs(
    doc: Mapping[str, Any] | Sequence[Any], *, cluster: str | None = None
) -> list[ReplicaJob]:
    """Squall's replica Jobs in a Job list (`kubectl get jobs -A -o json`); other Jobs are left out."""
    return [
        job for job in _parse_all(doc, _for_cluster(parse_replica_job, cluster), "job") if job is not None
    ]


def replica_job_cache(cluster: str | None = None) -> ParseCache[ReplicaJob | None]:
    return ParseCache(_for_cluster(parse_replica_job, cluster), "job")


def node_cache(cluster: str | None = None) -> ParseCache[Node]:
    return ParseCache(_for_cluster(parse_node, cluster), "node")


def pod_cache(cluster: str | None = None) -> ParseCache[Pod]:
    return ParseCache(_for_cluster(parse_pod, cluster), "pod")


class _ObjectParser(Protocol[_Covariant]):
    def __call__(self, obj: Mapping[str, Any], *, cluster: str | None = None) -> _Covariant: ...


def _for_cluster(
    parse: _ObjectParser[_Parsed], cluster: str | None
) -> Callable[[Mapping[str, Any]], _Parsed]:
    """The parser as one cluster's objects are read (itself, for no cluster)."""
    return parse if not cluster else functools.partial(parse, cluster=cluster)


def parse_node(obj: Mapping[str, Any], *, cluster: str | None = None) -> Node:
    """A Node object; ValueError names the node and the field (`spec.taints[0].effect: ...`).

    With `cluster`: named "<cluster>/<name>", labelled CLUSTER_LABEL=<cluster>.
    """
    _check_kind(obj, "node")
    metadata = _object(obj, "metadata", "")
    name = qualified(_required_name(metadata, "node"), cluster)
    try:
        spec = _object(obj, "spec", "")
        status = _object(obj, "status", "")
        annotations = _string_map(metadata, "annotations", "metadata.")
        unschedulable = _flag(spec, "unschedulable", "spec.")
        ready_condition, ready_where = _condition(status, "Ready")
        labels = _string_map(metadata, "labels", "metadata.")
        if cluster:
            labels[CLUSTER_LABEL] = cluster
        return Node(
            name=name,
            allocatable=_node_allocatable(status),
            labels=labels,
            taints=tuple(
                _taint(t, f"spec.taints[{i}]") for i, t in enumerate(_objects(spec, "taints", "spec."))
            ),
            instance_id=instance_id_from_provider_id(_text(spec, "providerID", "spec.")),
            ready=ready_condition.get("status") == "True",
            unschedulable=unschedulable,
            cordoned_by_squall=unschedulable and CORDONED_AT_ANNOTATION in annotations,
            ready_since=_time(ready_condition, "lastTransitionTime", ready_where),
            created_at=_time(metadata, "creationTimestamp", "metadata."),
            empty_since=_time(annotations, EMPTY_SINCE_ANNOTATION, "metadata.annotations."),
        )
    except ValueError as exc:
        raise ValueError(f"node {name}: {exc}") from None


def parse_pod(obj: Mapping[str, Any], *, cluster: str | None = None) -> Pod:
    """A Pod object; ValueError names the pod and the field (`spec.nodeName: ...`).

    With `cluster`: its node named "<cluster>/<node>", and CLUSTER_LABEL=<cluster> in its
    node selector (it fits only that cluster's nodes and node groups).
    """
    _check_kind(obj, "pod")
    metadata = _object(obj, "metadata", "")
    name = _required_name(metadata, "pod")
    namespace = _text(metadata, "namespace", "metadata.", name=f"pod {name}") or "default"
    try:
        spec = _object(obj, "spec", "")
        status = _object(obj, "status", "")
        labels = _string_map(metadata, "labels", "metadata.")
        owners = _objects(metadata, "ownerReferences", "metadata.")
        node_selector = _string_map(spec, "nodeSelector", "spec.")
        node_name = _text(spec, "nodeName", "spec.") or None
        if cluster:
            node_selector[CLUSTER_LABEL] = cluster
            node_name = qualified(node_name, cluster) if node_name else None
        return Pod(
            namespace=namespace,
            name=name,
            requests=pod_requests(spec),
            node_selector=node_selector,
            required_affinity=_required_affinity(spec),
            tolerations=tuple(
                _toleration(t, f"spec.tolerations[{i}]")
                for i, t in enumerate(_objects(spec, "tolerations", "spec."))
            ),
            job_id=labels.get(JOB_ID_LABEL),
            node_name=node_name,
            phase=_text(status, "phase", "status.") or "Pending",
            daemonset=any(
                _text(ref, "kind", f"metadata.ownerReferences[{i}].") == "DaemonSet"
                for i, ref in enumerate(owners)
            ),
            mirror=MIRROR_ANNOTATION in _string_map(metadata, "annotations", "metadata."),
            deleting=_time(metadata, "deletionTimestamp", "metadata.") is not None,
            finished_at=_last_finished(status),
            priority=_priority(spec),
        )
    except ValueError as exc:
        raise ValueError(f"pod {namespace}/{name}: {exc}") from None


def parse_replica_job(obj: Mapping[str, Any], *, cluster: str | None = None) -> ReplicaJob | None:
    """A batch/v1 Job Squall created, for admission; None for a Job that is not Squall's.

    Its pod template is read as a pending pod named after the Job (what its pod will ask
    for); ValueError names the Job and the field. With `cluster`, the pod is read for
    that cluster and the admitted region becomes its site there.
    """
    _check_kind(obj, "job")
    metadata = _object(obj, "metadata", "")
    name = _required_name(metadata, "job")
    namespace = _text(metadata, "namespace", "metadata.", name=f"job {name}") or "default"
    labels = _string_map(metadata, "labels", "metadata.")
    job_id = labels.get(JOB_ID_LABEL)
    if labels.get(MANAGED_BY_LABEL) != "squall" or not job_id:
        return None
    try:
        annotations = _string_map(metadata, "annotations", "metadata.")
        spec = _object(obj, "spec", "")
        status = _object(obj, "status", "")
        template = _object(spec, "template", "spec.")
        template_metadata = _object(template, "metadata", "spec.template.")
        pod = parse_pod(
            {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": _string_map(template_metadata, "labels", "spec.template.metadata."),
                },
                "spec": _object(template, "spec", "spec.template."),
            },
            cluster=cluster,
        )
        conditions = _objects(status, "conditions", "status.")
        ended = [
            c for c in conditions if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        ]
        finished = bool(ended)
        finished_at = _time(status, "completionTime", "status.")
        if finished and finished_at is None:
            finished_at = _time(ended[0], "lastTransitionTime", "status.conditions[].")
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and (type(deadline) is not int or deadline <= 0):
            raise ValueError(f"spec.activeDeadlineSeconds: expected a positive count, got {deadline!r:.40}")
        return ReplicaJob(
            name=name,
            namespace=namespace,
            job_id=job_id,
            team=labels.get(TEAM_LABEL, ""),
            priority=_annotation_int(annotations, PRIORITY_ANNOTATION, 0, 100),
            submitted_at=_time(annotations, SUBMITTED_AT_ANNOTATION, "metadata.annotations.")
            or _time(metadata, "creationTimestamp", "metadata."),
            requeued=annotations.get(REQUEUED_ANNOTATION) == "true",
            replicas=_annotation_int(annotations, REPLICAS_ANNOTATION, 1, 10_000, default=1),
            suspended=_flag(spec, "suspend", "spec."),
            started=(started_at := _time(status, "startTime", "status.")) is not None,
            started_at=started_at,
            finished=finished,
            finished_at=finished_at,
            max_runtime=timedelta(seconds=deadline) if deadline is not None else None,
            admitted_region=_admitted_site(annotations, cluster),
            pod=dataclasses.replace(pod, job_id=job_id),
        )
    except ValueError as exc:
        raise ValueError(f"job {namespace}/{name}: {exc}") from None


def _admitted_site(annotations: Mapping[str, str], cluster: str | None) -> str | None:
    region = annotations.get(ADMITTED_REGION_ANNOTATION)
    if not region:
        return None
    return site(region, cluster or "")


def _annotation_int(annotations: Mapping[str, str], key: str, low: int, high: int, default: int = 0) -> int:
    raw = annotations.get(key)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValueError(
            f"metadata.annotations.{key}: expected a whole number from {low} to {high}, got {shown(raw)}"
        )
    return int(raw)


def instance_id_from_provider_id(provider_id: str) -> str | None:
    """'aws:///us-west-2a/i-0abc' -> 'i-0abc'; None for anything else."""
    if not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if _INSTANCE_ID.fullmatch(last) else None


def parse_time(value: object) -> datetime | None:
    """RFC 3339 as Kubernetes and AWS write it ('2024-05-01T12:00:00Z'); naive means UTC.

    Only times from 1970 to 9000 are accepted: nothing else is a time Kubernetes or AWS
    writes, and the planner adds and subtracts durations from them.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        if "." in text:
            text = _FRACTION.sub(r"\1", text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"invalid time {shown(value)}: {_TIME_EXAMPLE}") from None
    elif isinstance(value, date):  # YAML's unquoted 2024-01-01: a day, no time of day
        raise ValueError(f"invalid time {value} (a date without a time of day): {_TIME_EXAMPLE}")
    else:
        raise ValueError(f"invalid time {shown(value)} ({kind(value)}): {_TIME_EXAMPLE}")
    if moment.utcoffset() is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        within = EARLIEST <= moment < LATEST
    except OverflowError:  # an offset that takes it past year 1 or 9999
        within = False
    if not within:
        written = value if isinstance(value, datetime) else shown(value)  # a YAML timestamp as written
        raise ValueError(f"invalid time {written}: must be between 1970 and 9000")
    return moment


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for a pod: its containers (or its largest init step) + overhead.

    A request left out defaults to the limit, as the API server does for GPUs.
    """
    containers = [
        _container_requests(c, f"spec.containers[{i}]")
        for i, c in enumerate(_objects(spec, "containers", "spec."))
    ]
    sidecars: list[tuple[int, int, int]] = []
    init_steps: list[tuple[int, int, int]] = []
    for i, container in enumerate(_objects(spec, "initContainers", "spec.")):
        where = f"spec.initContainers[{i}]"
        requests = _container_requests(container, where)
        # Sidecars (restartPolicy Always) keep running next to the app containers.
        if _text(container, "restartPolicy", where + ".") == "Always":
            sidecars.append(requests)
        else:
            init_steps.append(_add([*sidecars, requests]))
    running = _add([*containers, *sidecars]) if sidecars or len(containers) != 1 else containers[0]
    if init_steps:
        running = (
            max(running[0], *(s[0] for s in init_steps)),
            max(running[1], *(s[1] for s in init_steps)),
            max(running[2], *(s[2] for s in init_steps)),
        )
    overhead = spec.get("overhead")
    if overhead is not None:
        extra = _amounts(_object(spec, "overhead", "spec."), _EMPTY, "spec.overhead.")
        running = (running[0] + extra[0], running[1] + extra[1], running[2] + extra[2])
    return Resources(cpu=running[0], memory=running[1], gpu=running[2])


def _container_requests(container: Mapping[str, Any], where: str) -> tuple[int, int, int]:
    resources = _object(container, "resources", where + ".")
    if not resources:
        return (0, 0, 0)
    where += ".resources."
    return _amounts(
        _object(resources, "requests", where),
        _object(resources, "limits", where),
        where + "requests.",
        where + "limits.",
    )


def _amounts(
    values: Mapping[str, Any], defaults: Mapping[str, Any], where: str, defaults_where: str = ""
) -> tuple[int, int, int]:
    """cpu, memory and GPUs of `values`, each defaulting to the one in `defaults` (a request to its limit)."""
    amounts = [0, 0, 0]
    for slot, (key, parse) in enumerate(_PARSERS):
        if key in values:
            value, path = values[key], where
        elif key in defaults:
            value, path = defaults[key], defaults_where
        else:
            continue
        try:
            amounts[slot] = parse(value)
        except ValueError as exc:
            raise ValueError(f"{path}{key}: {exc}") from None
    return (amounts[0], amounts[1], amounts[2])


_PARSERS: tuple[tuple[str, Callable[[Any], int]], ...] = (
    ("cpu", parse_cpu_millicores),
    ("memory", parse_memory_bytes),
    (GPU_RESOURCE, parse_whole_count),
)


def _add(requests: Sequence[tuple[int, int, int]]) -> tuple[int, int, int]:
    return (sum(r[0] for r in requests), sum(r[1] for r in requests), sum(r[2] for r in requests))


def _node_allocatable(status: Mapping[str, Any]) -> Resources:
    key = "allocatable"
    values = _object(status, key, "status.")
    if not values:
        key = "capacity"
        values = _object(status, key, "status.")
    cpu, memory, gpu = _amounts(values, _EMPTY, f"status.{key}.")
    try:
        pods = parse_whole_count(values["pods"]) if "pods" in values else 0
    except ValueError as exc:
        raise ValueError(f"status.{key}.pods: {exc}") from None
    return Resources(cpu=cpu, memory=memory, gpu=gpu, pods=pods)


def _condition(status: Mapping[str, Any], kind: str) -> tuple[Mapping[str, Any], str]:
    """The condition of that type, and its path."""
    for i, condition in enumerate(_objects(status, "conditions", "status.")):
        where = f"status.conditions[{i}]."
        if _text(condition, "type", where) == kind:
            _text(condition, "status", where)
            return condition, where
    return _EMPTY, ""


def _last_finished(status: Mapping[str, Any]) -> datetime | None:
    latest = None
    for i, container in enumerate(_objects(status, "containerStatuses", "status.")):
        where = f"status.containerStatuses[{i}]."
        state = _object(container, "state", where)
        if "terminated" in state:
            terminated = _object(state, "terminated", where + "state.")
            finished = _time(terminated, "finishedAt", where + "state.terminated.")
            if finished is not None and (latest is None or finished > latest):
                latest = finished
    return latest


def _priority(spec: Mapping[str, Any]) -> int:
    value = spec.get("priority")
    if value is None:
        return 0
    low, high = PRIORITY_RANGE
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"spec.priority: expected a whole number from {low} to {high}, got {shown(value)}")
    return value


def _taint(raw: Mapping[str, Any], where: str) -> Taint:
    prefix = where + "."
    key = _text(raw, "key", prefix, required=True)
    value = _text(raw, "value", prefix)
    effect = _text(raw, "effect", prefix, required=True)
    try:
        return Taint(key=key, value=value, effect=effect)
    except ValueError as exc:
        raise ValueError(f"{prefix}effect: {exc}") from None


def _toleration(raw: Mapping[str, Any], where: str) -> Toleration:
    # Most pods carry the same few tolerations: each distinct one is checked and built once.
    fields = (raw.get("key"), raw.get("operator"), raw.get("value"), raw.get("effect"))
    try:
        known = _TOLERATIONS.get(fields)
    except TypeError:  # a list or an object where a string belongs: said below
        known = None
    if known is not None:
        return known
    prefix = where + "."
    key, operator, value, effect = (
        _text(raw, name, prefix) for name in ("key", "operator", "value", "effect")
    )
    try:
        toleration = Toleration(key=key, operator=operator or "Equal", value=value, effect=effect)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if len(_TOLERATIONS) < _REMEMBERED:
        _TOLERATIONS[fields] = toleration
    return toleration


_TOLERATIONS: dict[tuple[object, ...], Toleration] = {}
_REMEMBERED = 4096


def _required_affinity(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    """Required node affinity terms. matchFields (by node name) are not modelled."""
    affinity = spec.get("affinity")
    if affinity is None:
        return ()
    where = "spec.affinity.nodeAffinity."
    node_affinity = _object(_object(spec, "affinity", "spec."), "nodeAffinity", "spec.affinity.")
    required = _object(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", where)
    where += "requiredDuringSchedulingIgnoredDuringExecution."
    terms = []
    for t, term in enumerate(_objects(required, "nodeSelectorTerms", where)):
        term_where = f"{where}nodeSelectorTerms[{t}]."
        terms.append(
            NodeSelectorTerm(
                match_expressions=tuple(
                    _requirement(r, f"{term_where}matchExpressions[{i}]")
                    for i, r in enumerate(_objects(term, "matchExpressions", term_where))
                )
            )
        )
    return tuple(terms)


def _requirement(raw: Mapping[str, Any], where: str) -> NodeSelectorRequirement:
    prefix = where + "."
    key = _text(raw, "key", prefix, required=True)
    operator = _text(raw, "operator", prefix, required=True)
    values = raw.get("values")
    if values is None:
        values = []
    elif not isinstance(values, list) or not all(type(v) is str for v in values):
        raise ValueError(f"{prefix}values: expected a list of strings, got {shown(values)}")
    try:
        return NodeSelectorRequirement(key=key, operator=operator, values=tuple(values))
    except ValueError as exc:
        raise ValueError(f"{prefix}operator: {exc}") from None


# ---- reading fields, each problem named by its path -------------------------------------------


def _parse_all(
    doc: Mapping[str, Any] | Sequence[Any], parse: Callable[[Mapping[str, Any]], _Parsed], what: str
) -> list[_Parsed]:
    items = _items(doc, what)
    one = bool(items) and items[0] is doc  # one object, not a list: it has no index to name
    return [_parse_item(parse, item, None if one else index) for index, item in enumerate(items)]


def _parse_item(
    parse: Callable[[Mapping[str, Any]], _Parsed], item: Mapping[str, Any], index: int | None
) -> _Parsed:
    try:
        return parse(item)
    except ValueError as exc:
        if index is None:
            raise
        raise ValueError(f"items[{index}]: {exc}") from None


# What each reader takes: the kind and apiVersion of its objects, and the kubectl command that lists them.
_KINDS = {
    "node": ("Node", "v1", "kubectl get nodes -o json"),
    "pod": ("Pod", "v1", "kubectl get pods -A -o json"),
    "job": ("Job", "batch/v1", "kubectl get jobs -A -o json"),
}


def _check_kind(obj: Mapping[str, Any], what: str) -> None:
    """Refuse an object of another kind (a Pod given where Jobs are read), rather than misreading it.

    Only a kind that is there is checked: the API server leaves it out of a list's
    items (and so does the kubernetes client's serialization), kubectl writes it in.
    """
    found = obj.get("kind")
    expected, version, command = _KINDS[what]
    if found is not None and found != expected:
        api = obj.get("apiVersion")
        of = f" ({_word(api)})" if api else ""
        raise ValueError(
            f"is a {_word(found)}{of} where {expected}s ({version}) were expected, as `{command}` prints them"
        )


def _word(value: object) -> str:
    """A kind or apiVersion as written when it is one (Pod, batch/v1), else as `shown`."""
    if (
        isinstance(value, str)
        and 0 < len(value) <= 63
        and value.isascii()
        and value.replace("/", "").replace(".", "").isalnum()
    ):
        return value
    return shown(value)


def _items(doc: Mapping[str, Any] | Sequence[Any], what: str) -> list[Mapping[str, Any]]:
    """The objects of a List, a plain list of objects, or one object."""
    if isinstance(doc, Mapping):
        found = doc.get("kind")
        if "items" in doc or (isinstance(found, str) and found.endswith("List")):
            expected, version, command = _KINDS[what]
            if isinstance(found, str) and found not in ("List", f"{expected}List"):
                raise ValueError(
                    f"kind: a {_word(found)} where a {expected}List or List ({version}) was expected,"
                    f" as `{command}` prints it"
                )
            # A List without items, or with items null, is an empty one: kubectl prints
            # `"items": []` for none, but a Go nil slice is written as null, and the
            # kubernetes client's sanitize_for_serialization drops null fields, so an
            # empty List can come with items null or none at all. Reading it as one
            # object (the List itself) named an item that is not there.
            items = doc.get("items")
            if items is None:
                items = []
        else:
            items = [doc]
    elif isinstance(doc, list):
        items = doc
    else:
        raise ValueError(f"expected a {what} list (kubectl -o json), got {kind(doc)}")
    if not isinstance(items, list):
        raise ValueError(f"items: expected a list of {what}s, got {kind(items)}")
    if not set(map(type, items)) <= _DICT:  # at C speed for the usual list of dicts
        for index, item in enumerate(items):
            if type(item) is not dict and not isinstance(item, Mapping):
                raise ValueError(f"items[{index}]: expected a {what} object, got {kind(item)}")
    return items


_DICT = frozenset({dict})


def _required_name(metadata: Mapping[str, Any], what: str) -> str:
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{what} without metadata.name" + (f" (got {shown(name)})" if name is not None else "")
        )
    return name


def _object(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if type(value) is dict:  # what a parsed document holds: the common case, checked first
        return value
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}{key}: expected an object, got {kind(value)}")
    return value


def _objects(obj: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}{key}: expected a list of objects, got {kind(value)}")
    for index, item in enumerate(value):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise ValueError(f"{where}{key}[{index}]: expected an object, got {kind(item)}")
    return value


def _text(obj: Mapping[str, Any], key: str, where: str, *, required: bool = False, name: str = "") -> str:
    value = obj.get(key)
    if type(value) is str:
        if required and not value:
            raise ValueError(f"{where}{key}: must not be empty")
        return value
    if value is None:
        if required:
            raise ValueError(f"{where}{key}: required")
        return ""
    context = f"{name}: " if name else ""
    raise ValueError(f"{context}{where}{key}: expected a string, got {kind(value)} {shown(value)}")


def _flag(obj: Mapping[str, Any], key: str, where: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if type(value) is not bool:
        raise ValueError(f"{where}{key}: expected true or false, got {kind(value)} {shown(value)}")
    return value


def _string_map(obj: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = obj.get(key)
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ValueError(f"{where}{key}: expected an object of strings, got {kind(value)}")
    for name, text in value.items():
        if type(name) is not str:
            raise ValueError(f"{where}{key}: names must be strings, got {kind(name)} {shown(name)}")
        if type(text) is not str:
            raise ValueError(f"{where}{key}.{name}: expected a string, got {kind(text)} {shown(text)}")
    return dict(value)


def _time(obj: Mapping[str, Any], key: str, where: str) -> datetime | None:
    value = obj.get(key)
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise ValueError(f"{where}{key}: {exc}") from None


def busy_stand_in(item: Mapping[str, Any], why: str, *, cluster: str | None = None) -> Pod | None:
    """What a pod the planner cannot read counts as: bound to its node, so that node is never
    taken for empty (a scale-down must never remove a node that may be busy); not bound, it is
    left out (nothing is bought for a pod whose requests cannot be read). With `cluster`, its
    node is named as parse_pod names it for that cluster.
    """
    metadata = item.get("metadata") if isinstance(item.get("metadata"), Mapping) else {}
    spec = item.get("spec") if isinstance(item.get("spec"), Mapping) else {}
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if not isinstance(node, str) or not node:
        return None
    namespace, name = metadata.get("namespace"), metadata.get("name")  # type: ignore[union-attr]
    return Pod(
        namespace=namespace if isinstance(namespace, str) else "(unreadable)",
        name=name if isinstance(name, str) else "(unreadable)",
        node_name=qualified(node, cluster),
        phase="Running",
    )
