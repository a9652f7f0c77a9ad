"""Model services over two clusters: each placed where it can run, kept and removed in its own cluster.

Two simulated clusters on one virtual clock, "a" (configured first) and "b", behind the
model service store on moto. A service's record names its cluster; reconcile follows each
service there, and a cluster that cannot be reached leaves its services as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from squall.adapters.aws.job_store import to_item
from squall.adapters.aws.model_service_store import service_from_item, service_values
from squall.core.errors import PermanentError
from squall.core.serving import ClusterRoom, ModelService, ServiceStatus, choose_serving_cluster
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.planner.kube import parse_node, parse_pod
from squall.planner.model import Node, NodeGroup, Pod, Resources
from squall.services.intake import IntakeOutcome
from squall.services.serving import ServingReport
from tests.integration.serving_world import ServingWorld, a_service, serving_world

pytestmark = pytest.mark.timeout(120)

SMALL = {"cpu": "2", "memory": "8Gi", "pods": "58"}  # a's only node: one 1-CPU replica or two
LARGE = {"cpu": "16", "memory": "64Gi", "pods": "58"}
GROUP_B = NodeGroup(
    name="m5-b",
    region="us-east-1",
    instance_type="m5.4xlarge",
    allocatable=Resources(cpu=16_000, memory=64 << 30, pods=58),
    max_size=4,
    cluster="b",
)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def clusters(clock: VirtualClock) -> dict[str, SimulatedCluster]:
    a = SimulatedCluster(clock=clock, name="a", region="us-west-2")
    b = SimulatedCluster(clock=clock, name="b", region="us-east-1")
    a.add_node(name="cpu-0", allocatable=SMALL)
    b.add_node(name="cpu-0", allocatable=LARGE)  # node names are each cluster's own
    return {"a": a, "b": b}


@pytest.fixture
def world(
    aws_credentials: None, clock: VirtualClock, clusters: dict[str, SimulatedCluster]
) -> Iterator[ServingWorld]:
    for made in serving_world(clusters["a"], clock=clock):
        made.serving = replace(made.serving, clusters=clusters, groups=(GROUP_B,))
        yield made


def advance(world: ServingWorld, clusters: dict[str, SimulatedCluster], minutes: float = 1) -> None:
    world.clock.advance(timedelta(minutes=minutes))
    for cluster in clusters.values():
        cluster.advance()


def record(world: ServingWorld, name: str, *, replicas: int = 1, cpu: str = "1") -> ModelService:
    """A first record as a serve request writes it, placed as intake places it, and its objects made."""
    service, event = a_service(name, at=world.clock.now(), job_id=f"train-{name}")
    service = world.serving.placed(dataclasses.replace(service, replicas=replicas, cpu=cpu))
    world.services.create(service, dataclasses.replace(event))
    world.serving.create_objects(service)
    return service


def deployments(cluster: SimulatedCluster) -> list[str]:
    return sorted(d["metadata"]["name"] for d in cluster.list_deployments())


def settle(world: ServingWorld, clusters: dict[str, SimulatedCluster], runs: int = 3) -> ServingReport:
    report = ServingReport()
    for _ in range(runs):
        advance(world, clusters)
        report = world.reconciler().run()
    return report


# ---- placement ----------------------------------------------------------------------------


def test_a_service_goes_to_the_cluster_where_its_replicas_fit_now(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    # given a, configured first, with room for one 1-CPU replica more or less, and b with room for many
    small = record(world, "small", replicas=1, cpu="1")
    big = record(world, "big", replicas=3, cpu="2")
    # then the one that fits a stays in a, the one that does not goes to b
    assert (small.cluster, big.cluster) == ("a", "b")
    assert world.services.get("big").cluster == "b"
    assert deployments(clusters["a"]) == ["small-model"] and deployments(clusters["b"]) == ["big-model"]
    # and reconcile follows each in its own cluster, to SERVING with its own endpoints
    report = settle(world, clusters)
    assert report.unreachable == [] and report.cleaned == []
    assert {n: world.services.get(n).status for n in ("small", "big")} == {
        "small": ServiceStatus.SERVING,
        "big": ServiceStatus.SERVING,
    }
    assert deployments(clusters["a"]) == ["small-model"] and deployments(clusters["b"]) == ["big-model"]


def test_a_cluster_that_cannot_be_read_is_not_chosen(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    clusters["a"].outage(until=world.clock.now() + timedelta(minutes=5))
    service, _ = a_service("small", at=world.clock.now())
    assert world.serving.placed(service).cluster == "b"


def test_clusters_that_will_not_list_their_nodes_are_placed_by_their_groups(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    # given a role that may not list nodes in either cluster (403): only b has a group that can grow
    for cluster in clusters.values():
        cluster.fail_calls("list_nodes", PermanentError("nodes is forbidden"), times=5)
    service, _ = a_service("small", at=world.clock.now())
    assert world.serving.placed(service).cluster == "b"


def test_a_record_from_before_clusters_is_the_first_clusters(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    # given a record written before records named a cluster (as a redelivered serve finds it)
    service, event = a_service("old", at=world.clock.now())
    assert service.cluster is None
    world.services.create(service, event)
    world.serving.create_objects(service)
    # then its objects are in the first cluster, and reconcile keeps them there
    assert deployments(clusters["a"]) == ["old-model"] and deployments(clusters["b"]) == []
    settle(world, clusters)
    assert world.services.get("old").status is ServiceStatus.SERVING
    assert deployments(clusters["a"]) == ["old-model"] and deployments(clusters["b"]) == []


# ---- an unreachable cluster ----------------------------------------------------------------


def test_reconcile_with_b_unreachable_leaves_bs_services_alone_and_follows_as(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    # given a service in each cluster, both serving
    record(world, "small")
    record(world, "big", replicas=3, cpu="2")
    settle(world, clusters)
    big = world.services.get("big")
    assert big.status is ServiceStatus.SERVING and big.cluster == "b"
    # when b's API goes down, and a's service loses its Deployment meanwhile
    outage_ends = world.clock.now() + timedelta(minutes=10)
    clusters["b"].outage(until=outage_ends)
    clusters["a"].delete_model_service_objects(namespace="team-research", model_service="small")
    advance(world, clusters, minutes=5)
    report = world.reconciler().run()
    # then b is reported, its service neither failed, re-created nor touched
    assert report.unreachable == ["b"] and report.left == ["big"]
    assert any(e.startswith("cluster b:") for e in report.errors)
    assert world.services.get("big") == big
    # and a's service is followed all the same: its objects made again, in a only
    assert report.recreated == ["small"]
    assert deployments(clusters["a"]) == ["small-model"]
    # when b answers again
    advance(world, clusters, minutes=6)
    report = world.reconciler().run()
    # then its service is as it was: one Deployment, in b, still serving
    assert report.unreachable == [] and report.left == [] and report.recreated == []
    assert world.services.get("big").status is ServiceStatus.SERVING
    assert deployments(clusters["b"]) == ["big-model"] and "big-model" not in deployments(clusters["a"])


def test_the_reconcile_function_reports_the_unreachable_cluster(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    clusters["b"].outage(until=world.clock.now() + timedelta(minutes=10))
    assert world.reconciler().run().as_dict()["unreachableClusters"] == ["b"]


# ---- objects in the wrong cluster, and unserve ---------------------------------------------------


def test_a_deployment_in_a_cluster_its_record_does_not_name_is_an_orphan_there(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    # given a service recorded in b whose objects were also left in a (served there before)
    service = record(world, "big", replicas=3, cpu="2")
    assert service.cluster == "b"
    a_copy = replace(service, cluster="a", replicas=1, cpu="1")
    world.serving.create_objects(a_copy)
    assert deployments(clusters["a"]) == ["big-model"]
    # when reconcile runs
    report = world.reconciler().run()
    # then a's copy goes; b's stays
    assert report.cleaned == ["big"]
    assert deployments(clusters["a"]) == [] and deployments(clusters["b"]) == ["big-model"]


def test_unserve_deletes_in_the_services_cluster_only(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    record(world, "small")
    record(world, "big", replicas=3, cpu="2")
    result = world.intake().unserve(name="big", reason="done")
    assert result.outcome is IntakeOutcome.STOPPED
    assert deployments(clusters["b"]) == [] and deployments(clusters["a"]) == ["small-model"]


# ---- the record keeps its cluster -------------------------------------------------------------


def test_the_store_keeps_the_cluster_and_reads_an_old_item_as_none(world: ServingWorld) -> None:
    service = record(world, "big", replicas=3, cpu="2")
    assert world.services.get("big") == service and service.cluster == "b"
    old = to_item(service_values(replace(service, cluster=None)))
    assert "cluster" not in old and service_from_item(old).cluster is None


# ---- the choice itself (pure) ----------------------------------------------------------------


def _replica(cpu: str = "4") -> Pod:
    return parse_pod(
        {
            "metadata": {"name": "r", "namespace": "team-research"},
            "spec": {"containers": [{"name": "s", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        }
    )


def _node(name: str, cpu: str, **extra: Any) -> Node:
    return parse_node(
        {
            "metadata": {"name": name},
            "spec": extra.get("spec", {}),
            "status": {
                "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "58"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def test_the_choice_prefers_ready_room_then_room_to_grow_then_the_first() -> None:
    busy = _node("n", "8")
    running = replace(_replica("6"), node_name="n", phase="Running")
    roomy = _node("n", "16")
    growing = replace(GROUP_B, desired=0, max_size=2)
    # ready room anywhere wins over the order
    assert (
        choose_serving_cluster(
            _replica(),
            replicas=2,
            clusters=[
                ClusterRoom(name="a", nodes=[busy], pods=[running]),
                ClusterRoom(name="b", nodes=[roomy]),
            ],
        )
        == "b"
    )
    # no ready room: where a group can grow
    assert (
        choose_serving_cluster(
            _replica(),
            replicas=2,
            clusters=[
                ClusterRoom(name="a", nodes=[busy], pods=[running]),
                ClusterRoom(name="b", groups=[growing]),
            ],
        )
        == "b"
    )
    # neither: the first; a cordoned node is no room
    cordoned = _node("n", "16", spec={"unschedulable": True})
    assert (
        choose_serving_cluster(
            _replica(),
            replicas=2,
            clusters=[ClusterRoom(name="a"), ClusterRoom(name="b", nodes=[cordoned])],
        )
        == "a"
    )
    # an unreachable cluster is chosen only when none can be read
    assert (
        choose_serving_cluster(
            _replica(),
            replicas=1,
            clusters=[ClusterRoom(name="a", nodes=[roomy], reachable=False), ClusterRoom(name="b")],
        )
        == "b"
    )
    assert (
        choose_serving_cluster(
            _replica(),
            replicas=1,
            clusters=[ClusterRoom(name="a", reachable=False), ClusterRoom(name="b", reachable=False)],
        )
        == "a"
    )


def test_a_service_in_a_cluster_no_longer_configured_is_reported_not_failed(
    world: ServingWorld, clusters: dict[str, SimulatedCluster]
) -> None:
    service, event = a_service("gone", at=world.clock.now())
    world.services.create(replace(service, cluster="c"), event)
    report = world.reconciler().run()
    assert report.left == ["gone"] and any("'c' is not configured" in e for e in report.errors)
    assert world.services.get("gone").status is ServiceStatus.DEPLOYING
    assert all(deployments(cluster) == [] for cluster in clusters.values())
