"""The serving reconciler: records follow the Deployments, pods and Services; orphans go.

Mostly on the simulated cluster (its Deployment controller makes and re-makes the
pods; a LoadBalancer Service gets 127.0.0.1 as its ingress); the stand-in cluster
where a test needs a cluster that misbehaves for one service only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from squall.core.errors import RetryableError
from squall.core.jobs import JobStatus
from squall.core.serving import ServiceReason, ServiceStatus, object_name
from squall.core.serving_manifests import render_model_service
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.services import serving as serving_module
from squall.services.reconcile import Reconciler
from tests.integration.serving_world import (
    SETTINGS,
    ServingWorld,
    StandInCluster,
    a_service,
    serve,
    serving_world,
)

pytestmark = pytest.mark.timeout(120)

CPU_NODE = {"cpu": "16", "memory": "64Gi", "pods": "58"}


@pytest.fixture
def world(aws_credentials: None) -> Iterator[ServingWorld]:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock)
    cluster.add_node(name="cpu-0", allocatable=CPU_NODE)
    yield from serving_world(cluster, clock=clock)


@pytest.fixture
def stand_in(aws_credentials: None) -> Iterator[ServingWorld]:
    yield from serving_world()


def served(world: ServingWorld, name: str = "mnist", *, job: str = "train-1", **fields: Any) -> None:
    world.finished_job(job)
    result = world.handle(serve(job, name=name, **fields), message_id=f"m-{name}")
    assert result.outcome.value == "created"


def settle(world: ServingWorld, runs: int = 3) -> None:
    """Let the cluster run and the reconciler follow, a minute at a time."""
    for _ in range(runs):
        world.advance(1)
        world.reconciler().run()


def test_a_service_is_serving_with_its_endpoints_once_every_replica_is_ready(world: ServingWorld) -> None:
    served(world, replicas=2)
    settle(world)
    service = world.services.get("mnist")
    assert (service.status, service.reason, service.ready_replicas) == (ServiceStatus.SERVING, "Ready:2/2", 2)
    assert (service.rest_url, service.grpc_target) == ("http://127.0.0.1:8501", "127.0.0.1:8500")
    # a quiet run writes nothing
    version = service.version
    report = world.reconciler().run()
    assert world.services.get("mnist").version == version and not report.transitions


def test_a_clusterip_service_is_served_at_its_in_cluster_name(aws_credentials: None) -> None:
    for world in serving_world():
        world.serving = replace(
            world.serving, settings=SETTINGS.model_copy(update={"service_type": "ClusterIP"})
        )
        served(world)
        world.cluster.pods[("team-research", "mnist")] = [_ready_pod()]
        world.reconciler().run()
        service = world.services.get("mnist")
        assert service.status is ServiceStatus.SERVING
        assert service.rest_url == "http://mnist-model.team-research.svc:8501"


def test_nothing_is_serving_while_a_load_balancer_has_no_address(stand_in: ServingWorld) -> None:
    served(stand_in, replicas=1)
    stand_in.cluster.pods[("team-research", "mnist")] = [_ready_pod()]
    stand_in.reconciler().run()
    service = stand_in.services.get("mnist")
    assert (service.status, service.ready_replicas, service.rest_url) == (ServiceStatus.DEPLOYING, 1, None)
    # once the load balancer has its address
    kube_service = stand_in.cluster.objects[("Service", "team-research", "mnist-model")]
    kube_service["status"] = {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}
    stand_in.reconciler().run()
    service = stand_in.services.get("mnist")
    assert (service.status, service.rest_url, service.grpc_target) == (
        ServiceStatus.SERVING,
        "http://lb.example.com:8501",
        "lb.example.com:8500",
    )


def test_reconcile_re_creates_a_deleted_deployment(world: ServingWorld) -> None:
    served(world)
    settle(world)
    assert world.services.get("mnist").status is ServiceStatus.SERVING
    # when someone deletes the objects
    world.cluster.delete_model_service_objects(namespace="team-research", model_service="mnist")
    assert world.cluster.list_deployments() == []
    report = world.reconciler().run()
    # then they are made again, and the service is followed to SERVING again
    assert report.recreated == ["mnist"]
    assert world.services.get("mnist").reason == ServiceReason.OBJECTS_RECREATED
    assert [d["metadata"]["name"] for d in world.cluster.list_deployments()] == ["mnist-model"]
    assert world.cluster.get_service(namespace="team-research", name="mnist-model") is not None
    settle(world)
    assert world.services.get("mnist").status is ServiceStatus.SERVING
    reasons = [e.reason for e in world.services.events("mnist")]
    assert reasons[-2:] == [ServiceReason.OBJECTS_RECREATED, "Ready:1/1"]


def test_a_service_just_recorded_is_given_time_to_get_its_objects(stand_in: ServingWorld) -> None:
    # a record intake wrote a moment ago, its objects not created yet
    stand_in.services.create(*a_service("mnist", at=stand_in.clock.now()))
    stand_in.advance(0.5)
    assert stand_in.reconciler().run().recreated == []
    assert stand_in.cluster.objects == {}
    stand_in.advance(1)
    assert stand_in.reconciler().run().recreated == ["mnist"]
    assert stand_in.cluster.of("mnist") == ["Deployment", "PodDisruptionBudget", "Service"]


def test_a_deleted_service_object_is_made_again(stand_in: ServingWorld) -> None:
    served(stand_in)
    del stand_in.cluster.objects[("Service", "team-research", "mnist-model")]
    report = stand_in.reconciler().run()
    assert report.recreated == ["mnist"]
    assert stand_in.cluster.of("mnist") == ["Deployment", "PodDisruptionBudget", "Service"]


def test_a_fetch_container_that_exits_2_fails_the_service_as_model_not_found(stand_in: ServingWorld) -> None:
    # given the SavedModel is gone by the time the pod fetches it: fetch-model exits 2, the
    # kubelet restarts it (restartPolicy Always) and waits between
    served(stand_in)
    stand_in.cluster.pods[("team-research", "mnist")] = [_fetch_failed_pod()]
    report = stand_in.reconciler().run()
    service = stand_in.services.get("mnist")
    assert (service.status, service.reason) == (ServiceStatus.FAILED, ServiceReason.MODEL_NOT_FOUND)
    assert "fetch-model" in stand_in.services.events("mnist")[-1].message
    assert report.cleaned == ["mnist"]
    # its objects are gone, and stay gone
    assert stand_in.cluster.objects == {}
    stand_in.advance(5)
    stand_in.reconciler().run()
    assert stand_in.cluster.objects == {} and stand_in.services.get("mnist").status is ServiceStatus.FAILED


def test_a_server_that_exits_2_on_the_simulated_cluster_fails_the_service_and_its_pods_go(
    world: ServingWorld,
) -> None:
    world.cluster.set_model_service_behaviour("mnist", run_for=timedelta(seconds=5), exit_code=2)
    served(world)
    settle(world)
    service = world.services.get("mnist")
    assert (service.status, service.reason) == (ServiceStatus.FAILED, ServiceReason.MODEL_NOT_FOUND)
    assert "exited 2" in world.services.events("mnist")[-1].message
    assert world.cluster.list_deployments() == []
    assert world.cluster.get_service(namespace="team-research", name=object_name("mnist")) is None
    settle(world)
    assert world.cluster.list_deployments() == []
    live = [
        p
        for p in world.cluster.list_model_service_pods(namespace="team-research", model_service="mnist")
        if p["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    assert live == []


def test_a_serving_service_that_loses_a_replica_is_deploying_until_it_is_back(stand_in: ServingWorld) -> None:
    served(stand_in, replicas=2)
    _serve_with_address(stand_in)
    stand_in.cluster.pods[("team-research", "mnist")] = [_ready_pod(), _ready_pod()]
    stand_in.reconciler().run()
    assert stand_in.services.get("mnist").status is ServiceStatus.SERVING
    # when one replica is not ready
    stand_in.cluster.pods[("team-research", "mnist")] = [_ready_pod(), _ready_pod(ready=False)]
    stand_in.reconciler().run()
    service = stand_in.services.get("mnist")
    assert (service.status, service.reason, service.ready_replicas) == (
        ServiceStatus.DEPLOYING,
        "Unready:1/2",
        1,
    )
    assert service.rest_url == "http://lb.example.com:8501"  # the Service still answers
    stand_in.cluster.pods[("team-research", "mnist")] = [_ready_pod(), _ready_pod()]
    stand_in.reconciler().run()
    assert stand_in.services.get("mnist").status is ServiceStatus.SERVING


def test_orphaned_objects_are_deleted_and_live_ones_kept(world: ServingWorld) -> None:
    served(world, "kept")
    served(world, "stopped", job="train-2")
    world.handle({"action": "unserve", "name": "stopped"}, message_id="m-u")
    # objects with no record at all, objects left behind by the unserve, and objects of a
    # live name in a namespace its record does not name
    ghost, _ = a_service("ghost", team="vision", job_id="train-9", at=world.clock.now())
    stopped = world.services.get("stopped")
    for service in (
        ghost,
        stopped,
        replace(
            world.services.get("kept"),
            namespace="team-vision",
            team="vision",
            model_uri="s3://models/teams/vision/out/train-1",
        ),
    ):
        for manifest in render_model_service(service, settings=SETTINGS):
            world.cluster.create(manifest)
    report = world.reconciler().run()
    assert sorted(report.cleaned) == ["ghost", "kept", "stopped"]
    assert [
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in world.cluster.list_deployments()
    ] == [("team-research", "kept-model")]
    assert world.cluster.get_service(namespace="team-vision", name="ghost-model") is None
    assert world.services.get("kept").status is ServiceStatus.DEPLOYING


def test_a_deployment_whose_record_is_past_the_live_list_is_not_taken_for_an_orphan(
    stand_in: ServingWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    served(stand_in, "a")
    served(stand_in, "b", job="train-2")
    monkeypatch.setattr(serving_module, "MAX_LIVE_SERVICES", 1)
    report = stand_in.reconciler().run()
    assert report.cleaned == []
    assert stand_in.cluster.of("b") == ["Deployment", "PodDisruptionBudget", "Service"]


def test_one_bad_service_never_stops_the_others(stand_in: ServingWorld) -> None:
    class Troubled(StandInCluster):
        def list_model_service_pods(self, *, namespace: str, model_service: str) -> list[dict[str, Any]]:
            if model_service == "broken":
                raise KeyError("status")  # a defect met on this service's objects
            if model_service == "busy":
                raise RetryableError("the API server is busy (429)")
            return super().list_model_service_pods(namespace=namespace, model_service=model_service)

    troubled = Troubled()
    stand_in.cluster = troubled
    stand_in.serving = replace(stand_in.serving, clusters={"local": troubled})
    for number, name in enumerate(["broken", "busy", "fine"]):
        served(stand_in, name, job=f"train-{number}")
    _serve_with_address(stand_in, "fine")
    troubled.pods[("team-research", "fine")] = [_ready_pod()]
    report = stand_in.reconciler().run()
    # the defect fails its service (and removes its objects), the platform's trouble waits
    broken = stand_in.services.get("broken")
    assert (broken.status, broken.reason) == (ServiceStatus.FAILED, "ReconcileError:KeyError")
    assert troubled.of("broken") == []
    assert stand_in.services.get("busy").status is ServiceStatus.DEPLOYING
    assert troubled.of("busy") == ["Deployment", "PodDisruptionBudget", "Service"]
    assert stand_in.services.get("fine").status is ServiceStatus.SERVING
    assert len(report.errors) == 2 and any("busy" in e and "429" in e for e in report.errors)


def test_a_cluster_refusing_the_objects_again_fails_the_service(stand_in: ServingWorld) -> None:
    served(stand_in)
    stand_in.cluster.delete_model_service_objects(namespace="team-research", model_service="mnist")
    stand_in.cluster.refuse = {"Deployment"}
    stand_in.advance(2)
    stand_in.reconciler().run()
    service = stand_in.services.get("mnist")
    assert (service.status, service.reason) == (ServiceStatus.FAILED, ServiceReason.CLUSTER_REFUSED)
    assert stand_in.cluster.objects == {}


def test_a_run_looks_at_a_bounded_number_of_services_and_every_one_in_turn(
    stand_in: ServingWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"svc-{n}" for n in range(5)]
    for number, name in enumerate(names):
        served(stand_in, name, job=f"train-{number}")
    monkeypatch.setattr(serving_module, "MAX_SERVICES_PER_RUN", 2)
    looked_at: list[list[str]] = []
    reconciler = stand_in.reconciler()  # one per process: it remembers where it stopped
    original = stand_in.cluster.list_model_service_pods
    for _ in range(3):
        seen: list[str] = []

        def counting(*, namespace: str, model_service: str, seen: list[str] = seen) -> list[dict[str, Any]]:
            seen.append(model_service)
            return original(namespace=namespace, model_service=model_service)

        stand_in.cluster.list_model_service_pods = counting
        reconciler.run()
        looked_at.append(seen)
    assert all(len(seen) == 2 for seen in looked_at)
    assert {name for seen in looked_at for name in seen} == set(names)


def test_the_reconcile_function_runs_the_serving_reconciler_every_time(world: ServingWorld) -> None:
    reconciler = _reconcile_function(world)
    served(world)
    for _ in range(3):  # the jobs' side is quiet after the first run; the services' is not
        world.advance(1)
        report = reconciler.run()
    assert report.serving is not None and report.serving.errors == []
    assert world.services.get("mnist").status is ServiceStatus.SERVING
    assert world.jobs.get("train-1").status is JobStatus.SUCCEEDED


def test_the_reconcile_function_counts_model_services_by_state_and_their_failures(
    world: ServingWorld,
) -> None:
    reconciler = _reconcile_function(world)
    served(world, "mnist")
    world.cluster.set_model_service_behaviour("broken", run_for=timedelta(seconds=5), exit_code=2)
    served(world, "broken", job="train-2")
    # when the first run finds both deploying, and the later ones one serving, one failed
    world.advance(1)
    reconciler.run()
    first = _gauges(world)
    for _ in range(3):
        world.advance(1)
        reconciler.run()

    def last(state: str) -> float:
        (*_, value) = (p.value for p in world.metrics.points if p.dimensions == {"State": state})
        return value

    assert first == {"DEPLOYING": 2, "SERVING": 0}
    assert (last("DEPLOYING"), last("SERVING")) == (0, 1)
    assert world.metrics.total("ModelServicesFailed") == 1
    assert world.metrics.total("ModelServiceObjectsRecreated") == 0


def _gauges(world: ServingWorld) -> dict[str, float]:
    return {p.dimensions["State"]: p.value for p in world.metrics.points if p.name == "ModelServicesInState"}


def test_the_serving_side_failing_to_list_is_reported_and_the_jobs_side_stands(world: ServingWorld) -> None:
    world.cluster.fail_calls("list_deployments", RetryableError("the API server is busy (429)"))
    reconciler = _reconcile_function(world)
    report = reconciler.run()
    assert report.serving is not None and "429" in report.serving.errors[0]
    assert report.errors == []


# ---- helpers ----------------------------------------------------------------------


def _ready_pod(*, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": "model-mnist-abc"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {"name": "serving", "ready": ready, "restartCount": 0, "state": {"running": {}}}
            ],
        },
    }


def _reconcile_function(world: ServingWorld) -> Reconciler:
    """The reconcile function's service: the jobs' reconciler, with the model services' one."""
    return Reconciler(
        store=world.jobs,
        clusters={"local": world.cluster},
        clock=world.clock,
        metrics=world.metrics,
        intake=world.intake(),
        serving=world.reconciler(),
    )


def _fetch_failed_pod() -> dict[str, Any]:
    terminated = {
        "exitCode": 2,
        "reason": "Error",
        "message": "no SavedModel at s3://models/teams/research/out/train-1",
    }
    return {
        "metadata": {"name": "model-mnist-abc"},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [
                {
                    "name": "fetch-model",
                    "ready": False,
                    "restartCount": 1,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": terminated},
                }
            ],
            "containerStatuses": [
                {
                    "name": "serving",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
            ],
        },
    }


def _serve_with_address(world: ServingWorld, name: str = "mnist") -> None:
    service = world.cluster.objects[("Service", "team-research", object_name(name))]
    service["status"] = {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}
