"""The scheduler's node indexes, kept in step with every bind, release and resize.

Models: which nodes hold pods (and which of those have a GPU free), and the empty
nodes grouped by shape (allocatable cpu, memory, GPUs, pods) and sorted by name. Empty
nodes of one shape all score the same, so the scheduler looks at the first of each
shape that passes its filters instead of at every node: what keeps a replay of a
large fleet fast.

Leaves out: anything kube-scheduler's own cache does for scoring plugins Squall does
not rely on (image locality, inter-pod scoring, topology spread).
"""

from __future__ import annotations

import bisect

from squall.local.cluster.state import Shape, StoredNode


class NodeIndex:
    def __init__(self) -> None:
        self.busy: dict[str, StoredNode] = {}
        self.busy_gpu_free: dict[str, StoredNode] = {}
        self.empty: dict[Shape, list[str]] = {}

    def update(self, node: StoredNode) -> None:
        """Keep the indexes in step after a node's use or size changed."""
        name = node.name
        if node.holding:
            self._set_empty_shape(node, None)
            self.busy[name] = node
            if node.free_gpu > 0:
                self.busy_gpu_free[name] = node
            else:
                self.busy_gpu_free.pop(name, None)
        else:
            self.busy.pop(name, None)
            self.busy_gpu_free.pop(name, None)
            self._set_empty_shape(node, (node.cpu, node.memory, node.gpu, node.max_pods))

    def forget(self, node: StoredNode) -> None:
        self._set_empty_shape(node, None)
        self.busy.pop(node.name, None)
        self.busy_gpu_free.pop(node.name, None)

    def _set_empty_shape(self, node: StoredNode, shape: Shape | None) -> None:
        if node.empty_shape == shape:
            return
        if node.empty_shape is not None:
            names = self.empty[node.empty_shape]
            del names[bisect.bisect_left(names, node.name)]
            if not names:
                del self.empty[node.empty_shape]
        if shape is not None:
            bisect.insort(self.empty.setdefault(shape, []), node.name)
        node.empty_shape = shape
