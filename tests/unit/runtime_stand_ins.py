"""The composition root's Services for the tests of how it wires a service, not of what the service does."""

from __future__ import annotations

from typing import Any

from squall.core.settings import Settings
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.runtime import Services

# What stands in for a port that the wiring under test only passes on, never calls.
STAND_IN: Any = object()


def services_on_a_simulated_cluster(settings: Settings, **ports: Any) -> Services:
    """Services over an empty simulated cluster on a virtual clock; the store, metrics and scale
    requests are STAND_IN unless `ports` names them, as it names any other port."""
    clock = VirtualClock()
    return Services(
        settings=settings,
        clock=clock,
        clusters={"local": SimulatedCluster(clock=clock)},
        **({"store": STAND_IN, "metrics": STAND_IN, "scale_requests": STAND_IN} | ports),
    )
