"""The simulated Kubernetes cluster of the local runtime; see simulated.py for the parts.

`from squall.local.cluster import SimulatedCluster` (and the value types and
constants below) is the package's public face; its modules are its own business.
"""

from squall.local.cluster.checkpoints import SimulatedCheckpoints
from squall.local.cluster.simulated import DEFAULT_CLUSTER_NAME, SimulatedCluster
from squall.local.cluster.state import (
    DELETED_BY_POD_GC,
    DISRUPTION_TARGET,
    EVICTED_BY_API,
    FAILED,
    HOSTNAME_LABEL,
    NOT_READY_TAINT,
    PENDING,
    RUNNING,
    SIGTERM_EXIT_CODE,
    SUCCEEDED,
    UNSCHEDULABLE_TAINT,
    AdvanceSummary,
    Behaviour,
    ClusterCall,
    ClusterEvent,
)
from squall.local.cluster.views import SharedObjectChanged

__all__ = [
    "DEFAULT_CLUSTER_NAME",
    "DELETED_BY_POD_GC",
    "DISRUPTION_TARGET",
    "EVICTED_BY_API",
    "FAILED",
    "HOSTNAME_LABEL",
    "NOT_READY_TAINT",
    "PENDING",
    "RUNNING",
    "SIGTERM_EXIT_CODE",
    "SUCCEEDED",
    "UNSCHEDULABLE_TAINT",
    "AdvanceSummary",
    "Behaviour",
    "ClusterCall",
    "ClusterEvent",
    "SharedObjectChanged",
    "SimulatedCheckpoints",
    "SimulatedCluster",
]
