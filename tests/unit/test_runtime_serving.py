"""Model services as the composition root wires them: the store, SavedModels, the namespaced cluster."""

from __future__ import annotations

from typing import Any

from squall.core.serving_manifests import render_model_service
from squall.core.settings import ServingSettings, Settings
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.model_service_store import InMemoryModelServiceStore
from squall.runtime import NamespacedCluster, Services
from tests.integration.serving_world import a_service
from tests.unit.runtime_stand_ins import services_on_a_simulated_cluster

SERVING = ServingSettings(
    image="registry.example.com/squall/tensorflow-serving:2.16.1",
    fetch_image="registry.example.com/squall/tf-trainer:1.0",
)


def services(*, model_services: Any = None, saved_models: Any = None) -> Services:
    settings = Settings(
        table_name="t",
        teams={"research": "team-research"},
        allowed_registries=["registry.example.com/squall"],
        serving=SERVING,
    )
    return services_on_a_simulated_cluster(settings, model_services=model_services, saved_models=saved_models)


def test_intake_and_reconcile_get_the_model_services_with_the_settings() -> None:
    store = InMemoryModelServiceStore()
    saved: Any = object()
    wired = services(model_services=store, saved_models=saved)
    serving = wired.intake.serving
    assert serving is not None
    assert (serving.store, serving.saved_models, serving.settings) == (store, saved, SERVING)
    reconciler = wired.reconciler
    assert reconciler.serving is not None and reconciler.serving.serving.store is store
    # one memory per process: a run goes on where the last one stopped
    assert wired.reconciler.serving.memory is reconciler.serving.memory  # type: ignore[union-attr]


def test_without_a_model_service_store_nothing_serves() -> None:
    wired = services()
    assert wired.intake.serving is None and wired.reconciler.serving is None


def test_the_functions_see_model_services_in_the_team_namespaces_only() -> None:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock)
    for name, team in (("mine", "research"), ("theirs", "vision")):
        service, _ = a_service(name, team=team, at=clock.now())
        for manifest in render_model_service(service, settings=SERVING):
            cluster.create(manifest)
    assert len(cluster.list_deployments()) == 2
    view = NamespacedCluster(cluster, ["team-research"])
    assert [d["metadata"]["name"] for d in view.list_deployments()] == ["mine-model"]
    assert view.list_deployments(namespace="team-vision") == []
    assert view.list_deployments(model_service="theirs") == []
    assert view.get_service(namespace="team-research", name="mine-model") is not None
    assert view.get_service(namespace="team-vision", name="theirs-model") is None
    assert view.list_model_service_pods(namespace="team-vision", model_service="theirs") == []
    assert view.delete_model_service_objects(namespace="team-research", model_service="mine") == 3
    assert view.list_deployments() == []
