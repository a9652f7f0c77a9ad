"""The dashboard and alarms say which cluster the functions could not reach (ClusterUnreachable)."""

from __future__ import annotations

from squall.core import dashboard
from squall.core.telemetry import Metric


def deployment(*clusters: str) -> dashboard.Deployment:
    return dashboard.Deployment(
        prefix="squall",
        functions={h: f"squall-{h}" for h in ("submit", "scale", "lifecycle", "reconcile", "drain")},
        jobs_queue="squall-jobs",
        drain_queue="squall-drain",
        dead_letter_queues=("squall-jobs-dlq",),
        clusters=clusters,
    )


def unreachable_series(monitoring: dashboard.MonitoringDescription) -> list[dict[str, str]]:
    return [
        metric.dimension_map
        for section in monitoring.dashboard.sections
        for widget in section.widgets
        for metric in widget.metrics
        if metric.name == Metric.CLUSTER_UNREACHABLE
    ]


def test_two_clusters_get_a_series_and_an_alarm_each() -> None:
    monitoring = dashboard.describe(deployment("gpu-west", "gpu-east"))
    assert [series["Cluster"] for series in unreachable_series(monitoring)] == ["gpu-west", "gpu-east"]
    alarms = {a.name: a for a in monitoring.alarms if a.metric.name == Metric.CLUSTER_UNREACHABLE}
    assert set(alarms) == {"squall-cluster-unreachable-gpu-west", "squall-cluster-unreachable-gpu-east"}
    assert alarms["squall-cluster-unreachable-gpu-east"].metric.dimension_map["Cluster"] == "gpu-east"
    assert dashboard.validate(monitoring) == []


def test_one_cluster_has_neither_the_graph_nor_the_alarms() -> None:
    monitoring = dashboard.describe(deployment("gpu-training"))
    assert unreachable_series(monitoring) == []
    assert not [a for a in monitoring.alarms if a.metric.name == Metric.CLUSTER_UNREACHABLE]
