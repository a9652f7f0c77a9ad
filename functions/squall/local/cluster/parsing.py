"""A Job's pod template, parsed once when the Job is created, into what the scheduler reads.

Models: resource requests (the planner's `pod_requests`: containers, init steps,
sidecars, overhead), node selectors, required node affinity (matchExpressions, and
matchFields on metadata.name), tolerations, required pod affinity (label selector,
namespaces, an empty namespaceSelector for every namespace), the pod's priority, and
the keys under which the scheduler caches its answers. Requirements, taints and
tolerations are the planner's own types, so the scheduler can ask the planner's fit
predicates (squall.planner.fit).

Leaves out: preferred (scoring) affinities, pod anti-affinity, topology spread,
namespaceSelector with labels (namespaces are not objects here).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from squall.core.errors import PermanentError
from squall.planner.fit import requirement_holds
from squall.planner.kube import pod_requests
from squall.planner.model import NodeSelectorRequirement, Toleration

_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector: matchLabels and matchExpressions must all hold."""

    match_labels: tuple[tuple[str, str], ...]
    expressions: tuple[NodeSelectorRequirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            requirement_holds(r, labels) for r in self.expressions
        )


@dataclass(frozen=True, slots=True)
class NodeTerm:
    """A node selector term: every label and field requirement must hold."""

    labels: tuple[NodeSelectorRequirement, ...]
    fields: tuple[NodeSelectorRequirement, ...]

    def holds(self, *, name: str, labels: Mapping[str, str]) -> bool:
        return all(requirement_holds(r, labels) for r in self.labels) and all(
            requirement_holds(r, {"metadata.name": name}) for r in self.fields
        )


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    selector: Selector
    topology_key: str
    namespaces: frozenset[str] | None  # None: every namespace


@dataclass(frozen=True, slots=True)
class Template:
    """What every pod of one Job shares, parsed once when the Job is created."""

    cpu: int
    memory: int
    gpu: int
    priority: int
    node_selector: tuple[tuple[str, str], ...]
    node_terms: tuple[NodeTerm, ...]  # any one must hold; none: no constraint
    tolerations: tuple[Toleration, ...]
    pod_affinity: tuple[AffinityTerm, ...]
    self_affine: bool  # the pod matches its own affinity terms (may start a gang)
    placement_key: str  # same key, same nodes pass the label/taint filters
    class_key: str  # same key and same pod-affinity domains: same answer from the scheduler


def parse_template(pod_spec: Mapping[str, Any], *, namespace: str, labels: Mapping[str, str]) -> Template:
    try:
        requests = pod_requests(pod_spec)
    except (ValueError, TypeError, AttributeError) as exc:
        raise PermanentError(f"invalid resource requests: {exc}") from exc
    cpu, memory, gpu = requests.cpu, requests.memory, requests.gpu
    try:
        node_selector = tuple(
            sorted((str(k), str(v)) for k, v in (pod_spec.get("nodeSelector") or {}).items())
        )
        tolerations = tuple(
            Toleration(
                key=t.get("key") or "",
                operator=t.get("operator") or "Equal",
                value=t.get("value") or "",
                effect=t.get("effect") or "",
            )
            for t in pod_spec.get("tolerations") or []
        )
        affinity = pod_spec.get("affinity") or {}
        node_affinity = (affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        node_terms = tuple(
            NodeTerm(
                labels=tuple(_requirement(r) for r in term.get("matchExpressions") or []),
                fields=tuple(_requirement(r) for r in term.get("matchFields") or []),
            )
            for term in (node_affinity or {}).get("nodeSelectorTerms") or []
        )
        pod_affinity = tuple(
            _affinity_term(term, namespace=namespace)
            for term in (affinity.get("podAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or []
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise PermanentError(f"invalid pod scheduling constraints: {exc}") from exc
    priority = pod_spec.get("priority", 0)
    self_affine = all(
        (term.namespaces is None or namespace in term.namespaces) and term.selector.matches(labels)
        for term in pod_affinity
    )
    placement_key = json.dumps(
        [node_selector, pod_spec.get("tolerations") or [], node_affinity or {}],
        sort_keys=True,
        default=str,
    )
    # Pod affinity is left out: the scheduler adds the domains it resolved, so a gang
    # that may still go anywhere shares its class with any pod of the same shape.
    class_key = json.dumps([cpu, memory, gpu, placement_key])
    return Template(
        cpu=cpu,
        memory=memory,
        gpu=gpu,
        priority=priority if isinstance(priority, int) else 0,
        node_selector=node_selector,
        node_terms=node_terms,
        tolerations=tolerations,
        pod_affinity=pod_affinity,
        self_affine=self_affine,
        placement_key=placement_key,
        class_key=class_key,
    )


def label_selector(match_labels: Mapping[str, str]) -> Selector:
    return Selector(match_labels=tuple(sorted(match_labels.items())), expressions=())


_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def parse_selector(raw: object, *, field: str, empty_ok: bool) -> Selector:
    """A metav1.LabelSelector (matchLabels, matchExpressions); PermanentError names `field` when it is not one.

    `empty_ok`: an empty selector selects every pod (a PodDisruptionBudget's); else it is refused (a Deployment's).
    """
    if not isinstance(raw, Mapping):
        raise PermanentError(f"{field}: Required value: a label selector (matchLabels, matchExpressions)")
    labels = raw.get("matchLabels") or {}
    expressions = raw.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise PermanentError(f"{field}.matchLabels: Invalid value: must map label names to strings")
    if not isinstance(expressions, list):
        raise PermanentError(f"{field}.matchExpressions: Invalid value: must be a list")
    parsed: list[NodeSelectorRequirement] = []
    for index, expression in enumerate(expressions):
        where = f"{field}.matchExpressions[{index}]"
        if not isinstance(expression, Mapping) or not isinstance(expression.get("key"), str):
            raise PermanentError(f"{where}.key: Required value")
        operator = expression.get("operator")
        if operator not in _SELECTOR_OPERATORS:
            raise PermanentError(
                f"{where}.operator: Unsupported value: {operator!r}: supported values: "
                + ", ".join(sorted(_SELECTOR_OPERATORS))
            )
        values = expression.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise PermanentError(f"{where}.values: Invalid value: must be a list of strings")
        if (operator in ("In", "NotIn")) != bool(values):
            raise PermanentError(f"{where}.values: Invalid value: In and NotIn need values, the others none")
        parsed.append(NodeSelectorRequirement(key=expression["key"], operator=operator, values=tuple(values)))
    if not labels and not parsed and not empty_ok:
        raise PermanentError(f"{field}: Invalid value: empty selector is invalid for deployment")
    return Selector(match_labels=tuple(sorted(labels.items())), expressions=tuple(parsed))


def _requirement(raw: Mapping[str, Any]) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(
        key=raw["key"],
        operator=raw["operator"],
        values=tuple(str(v) for v in raw.get("values") or ()),
    )


def _affinity_term(raw: Mapping[str, Any], *, namespace: str) -> AffinityTerm:
    selector = raw.get("labelSelector") or {}
    namespaces: frozenset[str] | None
    if raw.get("namespaceSelector") == {}:
        namespaces = None  # an empty namespace selector means every namespace
    else:
        namespaces = frozenset(raw.get("namespaces") or [namespace])
    return AffinityTerm(
        selector=Selector(
            match_labels=tuple(sorted((selector.get("matchLabels") or {}).items())),
            expressions=tuple(_requirement(r) for r in selector.get("matchExpressions") or []),
        ),
        topology_key=raw["topologyKey"],
        namespaces=namespaces,
    )


def taint_dicts(raw: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Node taints as the API stores them, each checked: a key and a known effect."""
    taints: list[dict[str, Any]] = []
    for taint in raw:
        if (
            not isinstance(taint, Mapping)
            or not taint.get("key")
            or taint.get("effect") not in _TAINT_EFFECTS
        ):
            raise ValueError(
                f"a taint needs a key and an effect NoSchedule|PreferNoSchedule|NoExecute: {taint!r}"
            )
        entry: dict[str, Any] = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value"):
            entry["value"] = str(taint["value"])
        taints.append(entry)
    return taints
