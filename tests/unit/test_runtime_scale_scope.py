"""The scale function as the composition root builds it: its teams' shares, and what it may list."""

from __future__ import annotations

from datetime import timedelta

from squall.core.settings import Settings
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.planner.admission import TeamShare
from squall.runtime import NamespacedCluster
from tests.unit.runtime_stand_ins import STAND_IN, services_on_a_simulated_cluster
from tests.unit.test_namespaced_cluster import job


def test_the_scale_check_gets_every_teams_quota_and_weight_from_the_settings() -> None:
    settings = Settings(
        table_name="t",
        teams={"research": "team-research", "vision": "team-vision"},
        quotas={"research": {"gpuQuota": 8, "weight": 2}},
    )
    services = services_on_a_simulated_cluster(settings, fleet=STAND_IN, scale_state=STAND_IN)
    assert services.scaler.config.teams == {"research": TeamShare(quota=8, weight=2.0), "vision": TeamShare()}


def test_the_scale_function_lists_jobs_per_team_namespace_and_pods_across_the_cluster() -> None:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=5))
    for namespace, job_id in (("team-a", "a1"), ("kube-system", "other")):
        cluster.create(job(namespace, job_id))
    cluster.advance()
    everywhere = {p["metadata"]["namespace"] for p in cluster.list_pods()}
    assert everywhere == {"team-a", "kube-system"}
    scale = NamespacedCluster(cluster, ["team-a"], cluster_wide_pods=True)
    # Jobs: the team namespaces only (squall-gang-release is bound there)
    assert [j["metadata"]["namespace"] for j in scale.list_jobs()] == ["team-a"]
    # Pods: every one, as squall-capacity allows (a pod on a node counts for its use)
    assert {p["metadata"]["namespace"] for p in scale.list_pods()} == everywhere
    assert {p["metadata"]["namespace"] for p in scale.list_pods(namespace="kube-system")} == {"kube-system"}
    # while the jobs functions' view stays in their namespaces
    jobs_view = NamespacedCluster(cluster, ["team-a"])
    assert {p["metadata"]["namespace"] for p in jobs_view.list_pods()} == {"team-a"}
