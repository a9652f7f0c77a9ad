"""kube-scheduler's stand-in, and the Eviction API's PodDisruptionBudget check.

Models: a queue of pending pods, higher priority first, then oldest; filters for
resources, node selectors, required node affinity and taints (the planner's own fit
predicates, squall.planner.fit, so the planner and the simulated scheduler cannot
disagree on what fits), and required pod affinity (a gang in one region: the first
pod of a gang may go anywhere); among the nodes that pass, the MostAllocated score
(the fullest node first, ties by name). A class of pods that found no node in a pass
finds none later in it, so it is not tried again. An eviction must leave every
budget covering the pod satisfied (healthy: Ready; an unhealthy pod may go while the
budget is met); a budget's percentage is of the pods it covers, rounded up.

Leaves out: preemption, pod anti-affinity, preferred (scoring) affinities, topology
spread, image locality, and the taint manager's NoExecute evictions.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from datetime import datetime

from squall.conventions import JOB_ID_LABEL
from squall.local.cluster.index import NodeIndex
from squall.local.cluster.parsing import Selector, Template
from squall.local.cluster.state import (
    RUNNING,
    TERMINAL,
    ClusterState,
    Key,
    StoredNode,
    StoredPod,
    set_condition,
)
from squall.planner.fit import selector_mismatch, untolerated_taint

Domains = list[tuple[str, set[str]]]


class Scheduler:
    def __init__(self, state: ClusterState, index: NodeIndex) -> None:
        self._state = state
        self._index = index
        # Per placement key, the nodes that pass the label and taint filters.
        self._placements: dict[str, frozenset[str]] = {}

    def forget_placements(self) -> None:
        """A node came, went, or changed its labels or taints: filter answers are stale."""
        self._placements.clear()

    def schedule(self, now: datetime) -> int:
        state = self._state
        if not state.pending or not state.schedule_dirty:
            return 0
        state.schedule_dirty = False
        # Resources only shrink during a pass, so a class of pods that found no node
        # once in this pass finds none later in it either.
        unschedulable: set[Hashable] = set()
        bound = 0
        pending = list(state.pending.values())
        if len(state.priorities) > 1:
            # kube-scheduler's queue: higher priority first, then oldest first.
            pending.sort(key=lambda p: (-p.owner.template.priority, p.seq))
        for pod in pending:
            template = pod.owner.template
            domains = self._affinity_domains(pod)
            scheduling_class: Hashable = (
                template.class_key
                if domains is None
                else (template.class_key, tuple((k, frozenset(v)) for k, v in domains))
            )
            node = None if scheduling_class in unschedulable else self._pick_node(pod, domains)
            if node is None:
                unschedulable.add(scheduling_class)
                self._mark_unschedulable(pod, now)
                continue
            self._bind(pod, node, now)
            bound += 1
        return bound

    def budgets_allow(self, pod: StoredPod) -> bool:
        """policy/v1 Eviction: every budget covering the pod must allow one more disruption."""
        for pdb in self._state.pdbs:
            if pdb.namespace != pod.key[0] or not pdb.selector.matches(pod.labels):
                continue
            if pdb.always_allow_unhealthy and not _healthy(pod):
                continue
            covered = [
                p
                for p in self._pods_matching(pdb.selector, frozenset({pdb.namespace}))
                if p.phase not in TERMINAL
            ]
            healthy = sum(1 for p in covered if _healthy(p))
            if pdb.max_unavailable is not None:
                desired = max(len(covered) - _scaled(pdb.max_unavailable, len(covered)), 0)
            else:
                desired = _scaled(pdb.min_available or 0, len(covered))
            # An unhealthy pod may go while the budget is met (IfHealthyBudget).
            allowed = healthy - desired >= 1 if _healthy(pod) else healthy >= desired
            if not allowed:
                return False
        return True

    def _pick_node(self, pod: StoredPod, domains: Domains | None) -> StoredNode | None:
        """The node kube-scheduler would pick: the most allocated that fits, ties by name.

        Partly used nodes are looked at one by one (for a GPU pod only those with a GPU
        free); empty nodes of one shape all score the same, so only the first of each
        shape (by name) that passes the filters is looked at.
        """
        template = pod.owner.template
        if domains is not None and any(not values for _, values in domains):
            return None
        cpu, memory, gpu = template.cpu, template.memory, template.gpu
        names = self._placement(template)
        best: StoredNode | None = None
        best_score = -1.0

        def consider(node: StoredNode) -> None:
            nonlocal best, best_score
            score = _most_allocated(node, cpu=cpu, memory=memory, gpu=gpu)
            if score > best_score or (score == best_score and best is not None and node.name < best.name):
                best, best_score = node, score

        # The resource filter is the planner's fit_count(free, request) >= 1, written out
        # inline: it runs for every candidate node of every pending pod of a replay.
        for node in (self._index.busy_gpu_free if gpu else self._index.busy).values():
            if node.free_gpu < gpu or node.free_cpu < cpu or node.free_memory < memory or node.free_pods < 1:
                continue
            if node.name in names and (domains is None or _in_domains(node, domains)):
                consider(node)
        for (shape_cpu, shape_memory, shape_gpu, shape_pods), empty in self._index.empty.items():
            if shape_gpu < gpu or shape_cpu < cpu or shape_memory < memory or shape_pods < 1:
                continue
            for name in empty:
                node = self._state.nodes[name]
                if name in names and (domains is None or _in_domains(node, domains)):
                    consider(node)
                    break
        return best

    def _placement(self, template: Template) -> frozenset[str]:
        """Nodes that pass the label and taint filters; cached until a node changes."""
        cached = self._placements.get(template.placement_key)
        if cached is None:
            cached = frozenset(
                node.name for node in self._state.nodes.values() if placement_fits(template, node)
            )
            self._placements[template.placement_key] = cached
        return cached

    def _affinity_domains(self, pod: StoredPod) -> Domains | None:
        """Per required pod-affinity term, the topology values the pod may go to; None: anywhere."""
        template = pod.owner.template
        if not template.pod_affinity:
            return None
        domains: Domains = []
        for term in template.pod_affinity:
            values: set[str] = set()
            for other in self._pods_matching(term.selector, term.namespaces):
                if other.node is not None and other.phase not in TERMINAL:
                    value = other.node.labels.get(term.topology_key)
                    if value is not None:
                        values.add(value)
            domains.append((term.topology_key, values))
        # The first pod of a gang may go anywhere, as kube-scheduler lets it.
        if template.self_affine and all(not values for _, values in domains):
            return None
        return domains

    def _pods_matching(self, selector: Selector, namespaces: frozenset[str] | None) -> Iterator[StoredPod]:
        state = self._state
        job_id = dict(selector.match_labels).get(JOB_ID_LABEL)
        keys: Iterable[Key] = state.pods_by_id.get(job_id, ()) if job_id is not None else state.pods
        for key in keys:
            if namespaces is not None and key[0] not in namespaces:
                continue
            pod = state.pods[key]
            if selector.matches(pod.labels):
                yield pod

    def _mark_unschedulable(self, pod: StoredPod, now: datetime) -> None:
        status = pod.obj["status"]
        if any(c.get("type") == "PodScheduled" for c in status.get("conditions") or ()):
            return
        set_condition(
            status,
            "PodScheduled",
            "False",
            now,
            reason="Unschedulable",
            message=f"0/{len(self._state.nodes)} nodes are available to schedule the pod.",
        )
        self._state.touch(pod)

    def _bind(self, pod: StoredPod, node: StoredNode, now: datetime) -> None:
        state = self._state
        template = pod.owner.template
        node.free_cpu -= template.cpu
        node.free_memory -= template.memory
        node.free_gpu -= template.gpu
        node.free_pods -= 1
        node.holding += 1
        self._index.update(node)
        node.pods[pod.key] = None
        pod.node = node
        pod.holds_resources = True
        pod.obj["spec"]["nodeName"] = node.name
        pod.obj["status"]["hostIP"] = _host_ip(node.name)
        set_condition(pod.obj["status"], "PodScheduled", "True", now)
        state.touch(pod)
        del state.pending[pod.key]
        state.to_start[pod.key] = pod
        state.event(
            now,
            "Pod",
            pod.key[0],
            pod.key[1],
            "Scheduled",
            f"Successfully assigned {pod.key[0]}/{pod.key[1]} to {node.name}",
        )


def placement_fits(template: Template, node: StoredNode) -> bool:
    """Taints, node selector and required node affinity: the planner's predicates."""
    if untolerated_taint(template.tolerations, node.taints) is not None:
        return False
    if selector_mismatch(template.node_selector, node.labels) is not None:
        return False
    return not template.node_terms or any(
        term.holds(name=node.name, labels=node.labels) for term in template.node_terms
    )


def _in_domains(node: StoredNode, domains: Domains) -> bool:
    return all(node.labels.get(key) in values for key, values in domains)


def _healthy(pod: StoredPod) -> bool:
    # The disruption controller counts Ready pods as healthy.
    return pod.phase == RUNNING and pod.ready and "deletionTimestamp" not in pod.obj["metadata"]


def _scaled(value: int | str, total: int) -> int:
    """A budget's whole number, or its percentage of `total` rounded up, as the disruption controller does."""
    if isinstance(value, int):
        return value
    return -(-int(value.rstrip("%")) * total // 100)


def _most_allocated(node: StoredNode, *, cpu: int, memory: int, gpu: int) -> float:
    """kube-scheduler's MostAllocated score: how full the node would be with the pod.

    GPUs count only for pods that ask for them, so CPU-only pods do not crowd onto GPU nodes.
    """
    score = _used_fraction(node.cpu, node.free_cpu - cpu) + _used_fraction(
        node.memory, node.free_memory - memory
    )
    if gpu:
        score += _used_fraction(node.gpu, node.free_gpu - gpu)
    return score


def _used_fraction(total: int, free_after: int) -> float:
    return (total - free_after) / total if total > 0 else 1.0


def _host_ip(node_name: str) -> str:
    # A stable made-up address per node: enough for anything that only displays it.
    digest = sum(node_name.encode()) * 2654435761 % (1 << 16)
    return f"10.0.{digest >> 8}.{digest & 0xFF}"
