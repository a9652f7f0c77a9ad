"""Model services and capacity in the local runtime: their pods are demand, their nodes stay, drains wait for their budget."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from squall.conventions import NODE_GROUP_LABEL
from squall.core.serving import ModelService, ServiceReason, ServiceStatus, transition_service
from squall.core.serving_manifests import render_model_service
from squall.core.settings import PolicySettings
from squall.local.runtime import LOCAL_SERVING, LocalRuntime
from squall.ports import KubeObject
from tests.e2e.helpers_runtime import GROUPS
from tests.serving_records import first_record

pytestmark = pytest.mark.timeout(300)

NS = "team-research"
CPU_GROUP = {"name": "cpu-usw2", "region": "us-west-2", "asgName": "squall-cpu-usw2", "instanceType": "m5.2xlarge",
             "allocatable": {"cpu": "7800m", "memory": "30Gi", "pods": 58}, "priority": 5, "maxSize": 4}  # fmt: skip
GPU_GROUPS = {g["name"] for g in GROUPS}


def start(*, cpu_min_size: int = 0) -> Any:
    return LocalRuntime.start(
        node_groups=[*GROUPS, {**CPU_GROUP, "minSize": cpu_min_size}],
        policy=PolicySettings.model_validate({"idleThreshold": "PT5M", "bootGrace": "PT2M"}),
        backend="memory",
    )


@pytest.fixture
def local() -> Iterator[LocalRuntime]:
    with start() as runtime:
        yield runtime


def serve(local: LocalRuntime, name: str = "mnist", *, replicas: int = 1, gpus: int = 0) -> ModelService:
    """A model service as intake leaves it: its record (DEPLOYING) and its three objects in the cluster."""
    service, event = first_record(
        name, at=local.clock.now(), job_id="job-1", replicas=replicas, gpus=gpus, cpu="2", memory="4Gi"
    )
    local.backend.model_services.create(service, event)
    for obj in render_model_service(service, settings=LOCAL_SERVING):
        assert local.cluster.create(obj) is True
    return service


def serving_pods(local: LocalRuntime, name: str = "mnist") -> list[KubeObject]:
    return local.cluster.list_model_service_pods(namespace=NS, model_service=name)


def ready_pods(local: LocalRuntime, name: str = "mnist") -> list[KubeObject]:
    return [
        p
        for p in serving_pods(local, name)
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]


def group_of(local: LocalRuntime, node_name: str) -> str:
    node = local.cluster.get_node(node_name)
    assert node is not None
    return str(node["metadata"]["labels"][NODE_GROUP_LABEL])


def run_until_ready(local: LocalRuntime, replicas: int, name: str = "mnist") -> None:
    assert local.run(
        until=lambda rt: len(ready_pods(rt, name)) == replicas,
        step=timedelta(seconds=10),
        limit=timedelta(minutes=20),
    ), [p["status"] for p in serving_pods(local, name)]


def test_a_pending_cpu_serving_pod_grows_the_cpu_group(local: LocalRuntime) -> None:
    # given no node at all, and a model service of 2 CPU-only replicas
    assert local.cluster.list_nodes() == []
    serve(local, replicas=2)

    # when the scale checks run
    run_until_ready(local, 2)

    # then its pods run on a node the scale check bought from the CPU group, and no GPU was bought
    nodes = {p["spec"]["nodeName"] for p in serving_pods(local)}
    assert {group_of(local, n) for n in nodes} == {"cpu-usw2"}
    assert not [
        n for n in local.cluster.list_nodes() if n["metadata"]["labels"][NODE_GROUP_LABEL] in GPU_GROUPS
    ]
    assert local.metrics.total("ScaleUps") >= 1


def test_a_gpu_serving_pod_grows_a_gpu_group(local: LocalRuntime) -> None:
    serve(local, replicas=1, gpus=1)

    run_until_ready(local, 1)

    (pod,) = serving_pods(local)
    assert group_of(local, pod["spec"]["nodeName"]) in GPU_GROUPS
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert requests["nvidia.com/gpu"] in (1, "1")


def test_a_node_with_a_serving_pod_is_never_scaled_down(local: LocalRuntime) -> None:
    # given a served model on a node of its own
    service = serve(local, replicas=1)
    run_until_ready(local, 1)
    (node,) = {p["spec"]["nodeName"] for p in serving_pods(local)}

    # when hours pass without any job (idle threshold 5 minutes)
    local.run(until=lambda rt: False, step=timedelta(minutes=1), limit=timedelta(hours=3))

    # then the node is still there, serving, and nothing was scaled down
    assert node in [n["metadata"]["name"] for n in local.cluster.list_nodes()]
    assert len(ready_pods(local)) == 1
    assert local.metrics.total("ScaleDowns") == 0

    # and once the service is stopped (as unserve does: the record STOPPED, then its objects
    # deleted), the node goes as an idle one does
    stored = local.backend.model_services.get(service.name)
    stopped, event = transition_service(
        stored, to=ServiceStatus.STOPPED, reason=ServiceReason.UNSERVE_REQUESTED, at=local.clock.now()
    )
    local.backend.model_services.save(stopped, event)
    assert local.cluster.delete_model_service_objects(namespace=NS, model_service=service.name) == 3
    assert local.run(
        until=lambda rt: not rt.cluster.list_nodes(), step=timedelta(minutes=1), limit=timedelta(hours=1)
    )
    assert serving_pods(local) == []
    assert local.metrics.total("ScaleDowns") >= 1


def test_a_terminate_drain_of_a_serving_node_waits_for_the_disruption_budget() -> None:
    # given both replicas of a model service on one node, a second node of the group empty
    with start(cpu_min_size=2) as local:
        drain_waits_for_the_budget(local, decrement=True)


def test_a_drain_of_the_only_serving_node_buys_a_node_for_the_replacement() -> None:
    with start() as local:
        drain_waits_for_the_budget(local, decrement=False)


def drain_waits_for_the_budget(local: LocalRuntime, *, decrement: bool) -> None:
    serve(local, replicas=2)
    run_until_ready(local, 2)
    (node,) = {p["spec"]["nodeName"] for p in serving_pods(local)}
    assert local.fleet is not None
    instance = local.fleet.instance_of(node)
    assert instance is not None
    first_pods = {p["metadata"]["name"] for p in serving_pods(local)}

    # when the instance is terminated through its group (the terminate hook drains it)
    local.fleet.terminate_instance(region="us-west-2", instance_id=instance, decrement=decrement)
    seen: dict[str, Any] = {"min_ready": 2, "drained_while_unready": False}

    def node_gone(rt: LocalRuntime) -> bool:
        return node not in [n["metadata"]["name"] for n in rt.cluster.list_nodes()]

    def watch(rt: LocalRuntime) -> None:
        ready = ready_pods(rt)
        seen["min_ready"] = min(seen["min_ready"], len(ready))
        if node_gone(rt) and not [p for p in ready if p["metadata"]["name"] not in first_pods]:
            seen["drained_while_unready"] = True

    assert local.run(
        until=lambda rt: node_gone(rt) and len(ready_pods(rt)) == 2,
        step=timedelta(seconds=10),
        limit=timedelta(hours=1),
        on_step=watch,
    )

    # then the budget held: one replica served all along, the node went (its drain done)
    # only once a replacement was ready elsewhere, and both replicas now run on other nodes
    assert seen["min_ready"] >= 1
    assert seen["drained_while_unready"] is False
    assert not first_pods & {p["metadata"]["name"] for p in serving_pods(local)}
    evictions = [c for c in local.cluster.calls if c.method == "evict"]
    assert len(evictions) >= 3  # the second replica was asked for again after a refusal
    assert local.fleet.hook_stats()["hooksLeftOpen"] == 0
    assert local.fleet.terminated_busy == []
