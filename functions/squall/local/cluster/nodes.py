"""Nodes: a kubelet joining, readiness, the GPU device plugin, patches, and a node going.

Models: a node registering with its allocatable resources (GPUs reported only once
the NVIDIA device plugin registers them), the Ready condition, the node lifecycle
controller's taints for not-ready and cordoned nodes (it owns them: a patch cannot
remove them), a JSON merge patch of labels, annotations, unschedulable, taints and
the rest of spec (providerID is immutable), and a removed node's pods failed as PodGC
fails them (DisruptionTarget, DeletionByPodGC, no exit code: the kubelet is gone).

Leaves out: node leases and heartbeats, NoExecute evictions by the taint manager,
conditions other than Ready, and capacity that differs from allocatable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from squall.conventions import GPU_RESOURCE
from squall.core.errors import NotFoundError, PermanentError
from squall.local.cluster.conditions import changed_condition
from squall.local.cluster.index import NodeIndex
from squall.local.cluster.parsing import taint_dicts
from squall.local.cluster.pods import PodLifecycle
from squall.local.cluster.scheduler import Scheduler
from squall.local.cluster.state import (
    DELETED_BY_POD_GC,
    HOSTNAME_LABEL,
    NOT_READY_TAINT,
    TERMINAL,
    UNSCHEDULABLE_TAINT,
    ClusterState,
    StoredNode,
)
from squall.local.cluster.views import json_copy, merge
from squall.planner.model import Taint
from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes, parse_whole_count
from squall.ports import KubeObject

_DEFAULT_MAX_PODS = 110
_CONTROLLER_TAINTS = (NOT_READY_TAINT, UNSCHEDULABLE_TAINT)


class NodeLifecycle:
    def __init__(
        self, state: ClusterState, index: NodeIndex, pods: PodLifecycle, scheduler: Scheduler
    ) -> None:
        self._state = state
        self._index = index
        self._pods = pods
        self._scheduler = scheduler

    def get(self, name: str) -> StoredNode:
        node = self._state.nodes.get(name)
        if node is None:
            raise NotFoundError(f"node {name} not found")
        return node

    def add(
        self,
        *,
        name: str,
        allocatable: Mapping[str, str | int],
        labels: Mapping[str, str] | None,
        taints: Iterable[Mapping[str, str]] | None,
        provider_id: str | None,
        ready: bool,
        gpus_ready: bool,
    ) -> KubeObject:
        state = self._state
        if name in state.nodes:
            raise ValueError(f"node {name} exists already")
        cpu = parse_cpu_millicores(allocatable.get("cpu", 0))
        memory = parse_memory_bytes(allocatable.get("memory", 0))
        gpus = parse_whole_count(allocatable.get(GPU_RESOURCE, 0))
        max_pods = parse_whole_count(allocatable.get("pods", _DEFAULT_MAX_PODS))
        now = state.now()
        node_labels = {HOSTNAME_LABEL: name, **dict(labels or {})}
        resources = {k: str(v) for k, v in allocatable.items()}
        resources.setdefault("pods", str(max_pods))
        obj: KubeObject = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": state.new_metadata(name=name, namespace=None, at=now, labels=node_labels),
            "spec": {"providerID": provider_id} if provider_id else {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [],
            },
        }
        node = StoredNode(
            name=name,
            obj=obj,
            labels=obj["metadata"]["labels"],
            user_taints=[dict(t) for t in taint_dicts(list(taints or []))],
            taints=(),
            cpu=cpu,
            memory=memory,
            gpu_installed=gpus,
            gpu=0,
            free_cpu=cpu,
            free_memory=memory,
            free_gpu=0,
            free_pods=max_pods,
            max_pods=max_pods,
            ready=ready,
            unschedulable=False,
        )
        state.nodes[name] = node
        _set_ready_condition(node, ready=ready, at=now)
        self._set_gpus(node, ready=gpus_ready)
        self._refresh(node)
        state.event(now, "Node", "", name, "RegisteredNode", f"Node {name} joined the cluster")
        return json_copy(obj)

    def remove(self, name: str, *, reason: str) -> int:
        state = self._state
        node = self.get(name)
        now = state.now()
        disrupted = 0
        for key in list(node.pods):
            pod = state.pods[key]
            if pod.phase in TERMINAL:
                # PodGC deletes orphaned pods, finished ones included.
                self._pods.remove(pod)
                continue
            # The kubelet is gone with the node: no container reports an exit code.
            self._pods.disrupt(
                pod,
                at=now,
                reason=DELETED_BY_POD_GC,
                message="PodGC: node no longer exists",
                exit_code=None,
            )
            disrupted += 1
        node.holding = 0
        self._index.forget(node)
        del state.nodes[name]
        state.next_resource_version()
        self._scheduler.forget_placements()
        state.event(now, "Node", "", name, "RemovingNode", f"Node {name} removed: {reason}")
        return disrupted

    def set_ready(self, name: str, ready: bool) -> None:
        node = self.get(name)
        if node.ready != ready:
            node.ready = ready
            now = self._state.now()
            _set_ready_condition(node, ready=ready, at=now)
            self._refresh(node)
            self._state.event(now, "Node", "", name, "NodeReady" if ready else "NodeNotReady")

    def set_gpus_ready(self, name: str, ready: bool) -> None:
        node = self.get(name)
        self._set_gpus(node, ready=ready)
        self._state.touch(node)
        self._state.schedule_dirty = True

    def patch(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        node = self._state.nodes.get(name)
        if node is None:
            raise NotFoundError(f"node {name} not found")
        if not isinstance(patch, Mapping):
            raise PermanentError("a node patch must be an object")
        metadata = patch.get("metadata") or {}
        spec = patch.get("spec") or {}
        if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
            raise PermanentError("metadata and spec of a node patch must be objects")
        for section in ("labels", "annotations"):
            changes = metadata.get(section)
            if changes is None:
                continue
            if not isinstance(changes, Mapping) or not all(
                isinstance(v, str) or v is None for v in changes.values()
            ):
                raise PermanentError(f"metadata.{section} must map names to strings (or null to delete)")
            merge(node.obj["metadata"].setdefault(section, {}), changes)
        if "unschedulable" in spec:
            value = spec["unschedulable"]
            if value is not None and not isinstance(value, bool):
                raise PermanentError("spec.unschedulable must be a boolean")
            node.unschedulable = bool(value)
        if "taints" in spec:
            # The lifecycle controller owns its own taints and puts them back anyway.
            node.user_taints = [
                dict(t) for t in taint_dicts(spec["taints"] or []) if t["key"] not in _CONTROLLER_TAINTS
            ]
        # A strategic merge leaves the rest of spec alone; providerID and podCIDR are
        # immutable, so anything else is stored as sent.
        for key, value in spec.items():
            if key not in ("unschedulable", "taints", "providerID"):
                merge(node.obj["spec"], {key: value})
        node.labels = node.obj["metadata"]["labels"]
        self._refresh(node)
        return json_copy(node.obj)

    def _set_gpus(self, node: StoredNode, *, ready: bool) -> None:
        allocatable = node.gpu_installed if ready else 0
        node.free_gpu += allocatable - node.gpu
        node.gpu = allocatable
        self._index.update(node)
        if node.gpu_installed:
            # Until the device plugin registers, the node reports no GPUs at all.
            for section in ("capacity", "allocatable"):
                node.obj["status"][section][GPU_RESOURCE] = str(allocatable)

    def _refresh(self, node: StoredNode) -> None:
        """Re-derive the lifecycle taints and what the scheduler caches about nodes."""
        system: list[dict[str, Any]] = []
        if not node.ready:
            system.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
        if node.unschedulable:
            system.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        taints = node.user_taints + system
        spec = node.obj["spec"]
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        else:
            spec.pop("taints", None)
        if node.unschedulable:
            spec["unschedulable"] = True
        else:
            spec.pop("unschedulable", None)
        node.taints = tuple(Taint(key=t["key"], value=t.get("value", ""), effect=t["effect"]) for t in taints)
        self._state.touch(node)
        self._scheduler.forget_placements()
        self._state.schedule_dirty = True


def _set_ready_condition(node: StoredNode, *, ready: bool, at: datetime) -> None:
    node.obj["status"]["conditions"] = [
        changed_condition(
            "Ready",
            true=ready,
            at=at,
            reason="KubeletReady" if ready else "KubeletNotReady",
            message="kubelet is posting ready status" if ready else "container runtime not ready",
            seen_field="lastHeartbeatTime",
        )
    ]
