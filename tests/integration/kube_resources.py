"""The kmock criteria KubernetesCluster's tests match the stand-in's requests by, and their namespace."""

from __future__ import annotations

import kmock

NS = "team-a"
JOBS = kmock.resource("batch/v1/jobs")
DEPLOYMENTS = kmock.resource("apps/v1/deployments")
SERVICES = kmock.resource("v1/services")
PDBS = kmock.resource("policy/v1/poddisruptionbudgets")
PODS = kmock.resource("v1/pods")
NODES = kmock.resource("v1/nodes")
EVICTION = kmock.subresource("eviction")
