"""The simulator's clusters: scenario and groups files name them, the fleet joins each group's
nodes to its own cluster, a clusterOutage makes one API unreachable, and the summary watches
for a job whose objects two clusters hold at once."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.core.errors import RetryableError
from squall.local.clock import VirtualClock
from squall.local.cluster import DEFAULT_CLUSTER_NAME, SimulatedCluster
from squall.local.fleet import LocalFleet, RegionCapacity
from squall.local.memory import InMemoryAutoScaling
from squall.local.runtime import ClusterEntry, LocalRuntime
from squall.local.scenario import ClusterOutage, ScenarioError, compile_scenario
from squall.local.summary import ObservedCluster, PlacementWatch, Recorder, invariants
from squall.local.trace import load_configuration, parse_trace, trace_plan
from squall.planner import NodeGroup, Resources
from squall.ports import GroupRef
from tests.groups import gpu_group
from tests.unit.local.sim import CPU_NODE, job_manifest, only_pod

SPEC = {"name": "t", "team": "research", "image": "registry.example.com/squall/t:1", "resources": {"gpu": 1}}
WEST = gpu_group("p3-usw2", "g5.12xlarge", region="us-west-2", max_size=4, cluster="gpu-west")
EAST = gpu_group("p3-use1", "g5.12xlarge", region="us-east-1", max_size=4, cluster="gpu-east")
CLUSTERS = [{"name": "gpu-west", "region": "us-west-2"}, {"name": "gpu-east", "region": "us-east-1"}]


def scenario(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": "two",
        "clusters": copy.deepcopy(CLUSTERS),
        "nodeGroups": [dict(WEST), dict(EAST)],
        "arrivals": [{"at": 0, "spec": SPEC}],
    }
    return document | changes


def errors_of(document: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as raised:
        compile_scenario(document)
    return raised.value.errors


# ---- scenario files --------------------------------------------------------------------------


def test_a_scenario_names_its_clusters_in_order_and_its_groups_name_theirs() -> None:
    plan = compile_scenario(scenario())
    assert plan.clusters == [ClusterEntry("gpu-west", "us-west-2"), ClusterEntry("gpu-east", "us-east-1")]
    assert [(g.name, g.cluster) for g in plan.groups] == [("p3-usw2", "gpu-west"), ("p3-use1", "gpu-east")]


def test_without_clusters_there_is_one_named_local_in_the_first_groups_region() -> None:
    east, west = dict(EAST), dict(WEST)
    del east["cluster"], west["cluster"]
    document = scenario(nodeGroups=[east, west])
    del document["clusters"]
    plan = compile_scenario(document)
    assert plan.clusters == [ClusterEntry(DEFAULT_CLUSTER_NAME, "us-east-1")]
    assert DEFAULT_CLUSTER_NAME == "local"


def test_with_two_clusters_a_group_must_name_one_of_them() -> None:
    unnamed, unknown = dict(WEST), dict(EAST) | {"cluster": "gpu-north"}
    del unnamed["cluster"]
    assert errors_of(scenario(nodeGroups=[unnamed, unknown])) == [
        "nodeGroups[0].cluster: required when there is more than one cluster (one of gpu-west, gpu-east)",
        "nodeGroups[1].cluster: 'gpu-north' is not one of the clusters (gpu-west, gpu-east)",
    ]


def test_a_group_naming_a_cluster_of_a_scenario_without_clusters_is_told_to_list_them() -> None:
    document = scenario(nodeGroups=[dict(WEST)])
    del document["clusters"]
    (error,) = errors_of(document)
    assert error.startswith("nodeGroups[0].cluster: 'gpu-west' is not one of the clusters (local)")
    assert "clusters: [{name, region}]" in error


def test_cluster_entries_are_checked_field_by_field() -> None:
    twice = [*CLUSTERS, {"name": "gpu-west", "region": "eu-west-1"}]
    assert "clusters[2].name: gpu-west is named twice" in errors_of(scenario(clusters=twice))
    bad = errors_of(scenario(clusters=[{"name": "Gpu West!", "region": "us-west"}, CLUSTERS[1]]))
    assert bad == [
        "clusters[0].name: expected a cluster's name (a letter or digit, then letters, digits, '-' and '_', 1 to 100 of them), "
        "got 'Gpu West!'",
        "clusters[0].region: expected an AWS region name such as us-west-2, got 'us-west'",
    ]
    assert errors_of(scenario(clusters=[])) == [
        "clusters: give at least one cluster, or leave clusters out for one",
        "nodeGroups[0].cluster: 'gpu-west' is not one of the clusters (local) "
        "(list the clusters under clusters: [{name, region}])",
        "nodeGroups[1].cluster: 'gpu-east' is not one of the clusters (local) "
        "(list the clusters under clusters: [{name, region}])",
    ]


def test_a_cluster_outage_names_a_cluster_of_the_scenario_and_lasts() -> None:
    plan = compile_scenario(
        scenario(faults=[{"at": "10m", "type": "clusterOutage", "cluster": "gpu-west", "duration": "30m"}])
    )
    (fault,) = plan.faults
    assert isinstance(fault, ClusterOutage)
    assert (fault.cluster, fault.at, fault.duration) == (
        "gpu-west",
        timedelta(minutes=10),
        timedelta(minutes=30),
    )
    unknown = {"at": 0, "type": "clusterOutage", "cluster": "gpu-south", "duration": "5m"}
    assert errors_of(scenario(faults=[unknown])) == [
        "faults[0].cluster: 'gpu-south' is not one of the clusters (gpu-west, gpu-east)"
    ]
    never = {"at": 0, "type": "clusterOutage", "cluster": "gpu-west", "duration": 0}
    assert errors_of(scenario(faults=[never])) == ["faults[0].duration: must be positive"]
    no_duration = {"at": 0, "type": "clusterOutage", "cluster": "gpu-west"}
    assert errors_of(scenario(faults=[no_duration])) == ["faults[0].duration: Field required"]


def test_node_faults_may_pick_a_cluster_and_it_must_be_one_of_the_scenarios() -> None:
    reclaim = {"at": 0, "type": "spotReclaim", "cluster": "gpu-nowhere"}
    assert errors_of(scenario(faults=[reclaim])) == [
        "faults[0].cluster: 'gpu-nowhere' is not one of the clusters (gpu-west, gpu-east)"
    ]


# ---- groups files (squall simulate --groups) ------------------------------------------------------


def test_a_groups_file_takes_clusters_and_checks_its_groups_against_them(tmp_path: Path) -> None:
    groups = tmp_path / "groups.json"
    groups.write_text(
        f'{{"clusters": {json.dumps(CLUSTERS)}, "nodeGroups": [{json.dumps(WEST)}, {json.dumps(EAST)}]}}'
    )
    config = load_configuration(groups)
    assert [c.name for c in config.clusters] == ["gpu-west", "gpu-east"]
    rows = parse_trace("submit_s,team,gpus,replicas,run_s\n0,research,4,2,60\n")
    assert trace_plan(rows, config).clusters == config.clusters
    unnamed = dict(EAST)
    del unnamed["cluster"]
    groups.write_text(
        f'{{"clusters": {json.dumps(CLUSTERS)}, "nodeGroups": [{json.dumps(WEST)}, {json.dumps(unnamed)}]}}'
    )
    with pytest.raises(ScenarioError) as raised:
        load_configuration(groups)
    assert raised.value.errors == [
        "nodeGroups[1].cluster: required when there is more than one cluster (one of gpu-west, gpu-east)"
    ]


def test_a_cdk_json_gives_its_clusters_name_and_region(tmp_path: Path) -> None:
    cdk = tmp_path / "cdk.json"
    cluster = {
        "name": "gpu-west",
        "region": "us-west-2",
        "endpoint": "https://x",
        "serviceCidr": "10.100.0.0/16",
    }
    cdk.write_text(
        f'{{"context": {{"clusters": [{json.dumps(cluster)}], "nodeGroups": [{json.dumps(WEST)}]}}}}'
    )
    assert load_configuration(cdk).clusters == [ClusterEntry("gpu-west", "us-west-2")]


def test_a_gang_must_fit_one_cluster_and_region_not_two_clusters_sharing_it(tmp_path: Path) -> None:
    # two clusters in one region, each with room for one 4-GPU node: 2 replicas of 4 GPUs fit neither
    one = gpu_group("p3-a", "g5.12xlarge", region="us-west-2", max_size=1, cluster="gpu-a")
    two = gpu_group("p3-b", "g5.12xlarge", region="us-west-2", max_size=1, cluster="gpu-b")
    clusters = [{"name": "gpu-a", "region": "us-west-2"}, {"name": "gpu-b", "region": "us-west-2"}]
    groups = tmp_path / "groups.json"
    groups.write_text(
        f'{{"clusters": {json.dumps(clusters)}, "nodeGroups": [{json.dumps(one)}, {json.dumps(two)}]}}'
    )
    rows = parse_trace("submit_s,team,gpus,replicas,run_s\n0,research,4,2,60\n")
    with pytest.raises(ScenarioError) as raised:
        trace_plan(rows, load_configuration(groups))
    assert raised.value.errors == [
        "line 2, column replicas: 2 replicas of 4 GPUs must run in one cluster and region, and the most "
        "any cluster and region's groups can hold at their max sizes is 1"
    ]


# ---- the runtime: one simulated cluster per entry ---------------------------------------------------


def test_the_runtime_simulates_each_cluster_and_gives_the_functions_all_of_them() -> None:
    entries = [ClusterEntry("gpu-west", "us-west-2"), ClusterEntry("gpu-east", "us-east-1")]
    with LocalRuntime.start(
        backend="memory", clusters=entries, node_groups=[dict(WEST), dict(EAST)]
    ) as local:
        assert list(local.clusters) == ["gpu-west", "gpu-east"]
        assert [(c.name, c.region) for c in local.clusters.values()] == [
            ("gpu-west", "us-west-2"),
            ("gpu-east", "us-east-1"),
        ]
        assert local.cluster is local.clusters["gpu-west"], "the first cluster, for one-cluster callers"
        assert local.clusters["gpu-west"] is not local.clusters["gpu-east"]
        assert dict(local.services.clusters) == local.clusters
        assert [(c.name, c.region) for c in local.settings.clusters] == [
            ("gpu-west", "us-west-2"),
            ("gpu-east", "us-east-1"),
        ]
        assert [g["cluster"] for g in local.settings.node_groups] == ["gpu-west", "gpu-east"]


def test_a_runtime_of_one_cluster_names_it_local() -> None:
    with LocalRuntime.start(backend="memory") as local:
        assert list(local.clusters) == [DEFAULT_CLUSTER_NAME]
        assert [c.name for c in local.settings.clusters] == [DEFAULT_CLUSTER_NAME]


def test_a_runtime_given_only_groups_serves_the_clusters_they_name() -> None:
    # as `squall local up` starts from a groups file that names two clusters
    with LocalRuntime.start(backend="memory", node_groups=[dict(EAST), dict(WEST)]) as local:
        assert [(c.name, c.region) for c in local.clusters.values()] == [
            ("gpu-east", "us-east-1"),
            ("gpu-west", "us-west-2"),
        ]
        assert local.cluster_stats()["nodes"] == 0


# ---- a cluster outage ------------------------------------------------------------------------------


def test_an_outage_refuses_every_call_while_pods_run_on_and_ends_on_time() -> None:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock, name="gpu-west", region="us-west-2")
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.set_behaviour("train", run_for=timedelta(minutes=10))
    assert cluster.create(job_manifest("train"))
    cluster.advance()
    assert only_pod(cluster, "train")["status"]["phase"] == "Running"
    # when the API cannot be reached for 30 minutes
    cluster.outage(until=clock.now() + timedelta(minutes=30))
    assert cluster.unreachable
    calls: list[Any] = [
        cluster.list_jobs,
        cluster.list_pods,
        cluster.list_nodes,
        lambda: cluster.create(job_manifest("other")),
        lambda: cluster.delete_job_objects(namespace="team-a", job_id="train"),
        lambda: cluster.get_node("n1"),
    ]
    for call in calls:
        with pytest.raises(RetryableError, match="cluster gpu-west cannot be reached"):
            call()
    assert [c.method for c in cluster.calls[-6:]] == [
        "list_jobs", "list_pods", "list_nodes", "create", "delete_job_objects", "get_node",
    ]  # fmt: skip
    # then the pod runs to its end all the same (only the API is down)
    clock.advance(timedelta(minutes=15))
    cluster.advance()
    assert cluster.stats()["pods_succeeded"] == 1
    with pytest.raises(RetryableError):
        cluster.list_jobs()
    # and once the outage is over the API answers, with what happened meanwhile
    clock.advance(timedelta(minutes=15))
    cluster.advance()
    assert not cluster.unreachable
    (job,) = cluster.list_jobs()
    assert job["status"]["succeeded"] == 1
    assert cluster.list_jobs(job_id="other") == [], "nothing was created while it was unreachable"


# ---- the fleet: each group's nodes join its own cluster --------------------------------------------


def _group(name: str, region: str, cluster: str) -> NodeGroup:
    return NodeGroup(
        name=name,
        region=region,
        instance_type="p3.8xlarge",
        allocatable=Resources(cpu=31_850, memory=228 * 2**30, gpu=4, pods=58),
        max_size=4,
        asg_name=f"squall-{name}",
        cluster=cluster,
    )


def two_cluster_fleet() -> tuple[LocalFleet, VirtualClock, dict[str, SimulatedCluster]]:
    clock = VirtualClock()
    clusters = {
        "gpu-west": SimulatedCluster(clock=clock, name="gpu-west", region="us-west-2"),
        "gpu-east": SimulatedCluster(clock=clock, name="gpu-east", region="us-east-1"),
    }
    groups = [_group("p3-usw2", "us-west-2", "gpu-west"), _group("p3-use1", "us-east-1", "gpu-east")]
    autoscaling = InMemoryAutoScaling()
    for group in groups:
        autoscaling.create_group(name=group.asg_name, region=group.region, min_size=0, max_size=4)
    fleet = LocalFleet(
        adapter=autoscaling,
        clock=clock,
        cluster=clusters["gpu-west"],
        clusters=clusters,
        groups=groups,
        capacity={
            r: RegionCapacity(instances={}, gpu_plugin_delay=timedelta(0)) for r in ("us-west-2", "us-east-1")
        },
    )
    return fleet, clock, clusters


def test_a_groups_instances_join_its_own_cluster_and_no_other() -> None:
    fleet, clock, clusters = two_cluster_fleet()
    fleet.set_desired_capacity(ref=GroupRef(name="squall-p3-usw2", region="us-west-2"), desired=2)
    fleet.set_desired_capacity(ref=GroupRef(name="squall-p3-use1", region="us-east-1"), desired=1)
    fleet.advance()
    clock.advance(timedelta(minutes=3))
    fleet.advance()
    west = {n["metadata"]["name"] for n in clusters["gpu-west"].list_nodes()}
    east = {n["metadata"]["name"] for n in clusters["gpu-east"].list_nodes()}
    assert len(west) == 2 and all(n.startswith("p3-usw2-") for n in west)
    assert len(east) == 1 and all(n.startswith("p3-use1-") for n in east)
    assert fleet.node_clusters() == dict.fromkeys(west, "gpu-west") | dict.fromkeys(east, "gpu-east")
    # an instance lost takes its node out of its own cluster only
    (east_node,) = east
    instance = fleet.instance_of(east_node)
    assert instance is not None
    fleet.lose(instance)
    assert clusters["gpu-east"].list_nodes() == []
    assert len(clusters["gpu-west"].list_nodes()) == 2


def test_the_recorder_keeps_each_clusters_peaks() -> None:
    fleet, clock, clusters = two_cluster_fleet()
    recorder = Recorder(
        clock=clock, cluster=clusters["gpu-west"], clusters=clusters, fleet=fleet, groups=fleet.groups
    )
    fleet.set_desired_capacity(ref=GroupRef(name="squall-p3-use1", region="us-east-1"), desired=3)
    fleet.advance()
    clock.advance(timedelta(minutes=3))
    fleet.advance()
    clusters["gpu-east"].set_behaviour("train", run_for=timedelta(minutes=5))
    clusters["gpu-east"].create(job_manifest("train", gpu=4, tolerations=[{"operator": "Exists"}]))
    clusters["gpu-east"].advance()
    recorder.observe()
    assert recorder.cluster_peaks() == {
        "gpu-west": {"peakNodes": 0, "peakGpusBusy": 0},
        "gpu-east": {"peakNodes": 3, "peakGpusBusy": 4},
    }


# ---- jobsInTwoClusters ---------------------------------------------------------------------------


def test_a_job_created_in_a_second_cluster_while_the_first_holds_it_is_counted_once() -> None:
    clock = VirtualClock()
    watch = PlacementWatch()
    west = ObservedCluster(clock=clock, watch=watch, name="gpu-west")
    east = ObservedCluster(clock=clock, watch=watch, name="gpu-east")
    # moved properly: deleted in one cluster, then created in the other
    west.create(job_manifest("moved-worker-0", job_id="moved"))
    west.delete_job_objects(namespace="team-a", job_id="moved")
    east.create(job_manifest("moved-worker-0", job_id="moved"))
    # twice at once: created in the second while the first still holds it (two replicas)
    west.create(job_manifest("twice-worker-0", job_id="twice"))
    east.create(job_manifest("twice-worker-0", job_id="twice"))
    east.create(job_manifest("twice-worker-1", job_id="twice"))
    checks = invariants(jobs=[], expected_ids=[], cluster=[west, east], fleet=None, recorder=_recorder(west))
    assert checks.jobs_in_two_clusters == ["twice"]
    assert checks.as_dict()["jobsInTwoClusters"] == 1
    assert not checks.hold


def _recorder(cluster: SimulatedCluster) -> Recorder:
    return Recorder(clock=VirtualClock(), cluster=cluster, fleet=None, groups=[])
