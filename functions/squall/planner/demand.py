"""Pending pods as the planner packs them: shapes of identical pods, and gangs.

Pods with the same requests, node selector, affinity and tolerations are one shape and
are packed together ("8 pods of this shape need 1 node"), so the planner's work
grows with the number of shapes, not of pods. Pods sharing a `squall.io/job-id` are a
gang: all of them go to one region.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from squall.planner.fit import affinity_mismatch, selector_mismatch, untolerated_taint
from squall.planner.model import NodeSelectorTerm, Pod, Taint, Toleration, Vector, describe_vector


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PodShape:
    """What makes two pending pods interchangeable for placement.

    Shapes are interned by build_demand (one object per distinct shape), so identity is
    equality, and hashing one is cheap.
    """

    request: Vector  # pods is always 1
    node_selector: tuple[tuple[str, str], ...]
    affinity: tuple[NodeSelectorTerm, ...]
    tolerations: tuple[Toleration, ...]

    def placement_mismatch(self, labels: Mapping[str, str], taints: Iterable[Taint]) -> str | None:
        """Why labels or taints keep this shape off a node, ignoring its size."""
        reason = selector_mismatch(self.node_selector, labels)
        if reason is None:
            reason = affinity_mismatch(self.affinity, labels)
        if reason is None:
            taint = untolerated_taint(self.tolerations, taints)
            if taint is not None:
                reason = f"untolerated taint {taint.describe()}"
        return reason

    def label_keys(self) -> set[str]:
        keys = {key for key, _ in self.node_selector}
        for term in self.affinity:
            keys.update(r.key for r in term.match_expressions)
        return keys

    def describe(self) -> str:
        return describe_vector(self.request)


@dataclass(slots=True, kw_only=True)
class Gang:
    """The pending pods of one job, placed in one region or not at all."""

    job_id: str
    pods_by_shape: dict[PodShape, list[Pod]]
    # Set when replicas of the job already run somewhere: the rest must join them (a site:
    # the region, of its cluster when the planner sees several; planner/sites.py).
    region: str | None = None
    priority: int = 0

    @property
    def size(self) -> int:
        return sum(len(pods) for pods in self.pods_by_shape.values())

    def pods(self) -> list[Pod]:
        return [pod for pods in self.pods_by_shape.values() for pod in pods]


@dataclass(slots=True, kw_only=True)
class Demand:
    """Pending pods: free ones by shape, and gangs."""

    free: dict[PodShape, list[Pod]] = field(default_factory=dict)
    gangs: list[Gang] = field(default_factory=list)


def build_demand(pending: Iterable[Pod], *, job_regions: Mapping[str, str]) -> Demand:
    """Group pending pods into shapes; pods of multi-pod (or already running) jobs into gangs.

    job_regions maps a job id to the region where its replicas already run.
    """
    interned: dict[tuple[object, ...], PodShape] = {}
    by_job: dict[str, list[Pod]] = {}
    loose: list[Pod] = []
    # Highest priority first, so that what does not fit is what matters least.
    for pod in sorted(pending, key=lambda p: (-p.priority, p.namespace, p.name)):
        if pod.job_id is None:
            loose.append(pod)
        else:
            by_job.setdefault(pod.job_id, []).append(pod)
    demand = Demand()
    for job_id, pods in by_job.items():
        region = job_regions.get(job_id)
        if len(pods) == 1 and region is None:
            loose.extend(pods)
            continue
        gang = Gang(job_id=job_id, pods_by_shape={}, region=region, priority=max(p.priority for p in pods))
        for pod in pods:
            gang.pods_by_shape.setdefault(shape_of(pod, interned), []).append(pod)
        demand.gangs.append(gang)
    for pod in sorted(loose, key=lambda p: (-p.priority, p.namespace, p.name)):
        demand.free.setdefault(shape_of(pod, interned), []).append(pod)
    return demand


def shape_of(pod: Pod, interned: dict[tuple[object, ...], PodShape]) -> PodShape:
    requests = pod.requests
    selector = tuple(sorted(pod.node_selector.items())) if pod.node_selector else ()
    key = (requests.cpu, requests.memory, requests.gpu, selector, pod.required_affinity, pod.tolerations)
    shape = interned.get(key)
    if shape is None:
        shape = PodShape(
            request=(requests.cpu, requests.memory, requests.gpu, 1),
            node_selector=selector,
            affinity=pod.required_affinity,
            tolerations=pod.tolerations,
        )
        interned[key] = shape
    return shape
