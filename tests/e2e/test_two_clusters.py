"""Many clusters, one queue, end to end: the two-cluster scenarios on the memory backend.

`scenarios/two-clusters.yaml`: the preferred cluster's region runs out and the burst
spills into the other cluster. `scenarios/cluster-outage.yaml`: one cluster's API
cannot be reached mid-burst; the other takes the new work. Each runs the real
handlers against one simulated cluster per configured cluster, as
`squall local run --scenario FILE` does.
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.cli import main
from squall.core.jobs import Job
from squall.core.telemetry import Metric
from squall.local.runtime import LocalRuntime
from squall.local.scenario import Simulation, SimulationResult, compile_scenario, load_document, load_scenario
from squall.local.summary import Recorder
from tests.groups import gpu_group

SCENARIOS = Path(__file__).parents[2] / "scenarios"
INVARIANTS_HOLD = {
    "lostJobs": 0,
    "duplicateKubernetesJobs": 0,
    "busyNodesTerminated": 0,
    "hooksLeftOpen": 0,
    "jobsInTwoClusters": 0,
}


@dataclass
class PlacementView:
    """A live view that checks, after every step, that no pod is bound to another cluster's node."""

    simulation: Simulation | None = None
    # cluster -> every node it has had; cluster -> the nodes its pods were bound to
    nodes: dict[str, set[str]] = field(default_factory=dict)
    bound: dict[str, set[str]] = field(default_factory=dict)

    def update(self, local: LocalRuntime, recorder: Recorder) -> None:
        for name, cluster in local.clusters.items():
            if cluster.unreachable:
                continue  # nothing can be read from it now; its pods are checked when it answers
            self.nodes.setdefault(name, set()).update(n["metadata"]["name"] for n in cluster.list_nodes())
            self.bound.setdefault(name, set()).update(
                node for p in cluster.list_pods() if (node := p["spec"].get("nodeName"))
            )

    def note(self, at: timedelta, text: str) -> None:
        pass

    def close(self, local: LocalRuntime, recorder: Recorder) -> None:
        pass


@dataclass
class Run:
    result: SimulationResult
    jobs: dict[str, Job]
    history: dict[str, list[tuple[timedelta, str]]]  # job id -> (when, reason) of its events
    created_in: dict[str, set[str]]  # job id -> the clusters its Kubernetes Jobs were created in
    unreachable: dict[str, float]  # cluster -> its ClusterUnreachable points, summed
    view: PlacementView

    @property
    def summary(self) -> dict[str, Any]:
        return self.result.summary


def run(name: str) -> Run:
    plan = load_scenario(SCENARIOS / f"{name}.yaml")
    view = PlacementView()
    simulation = Simulation(plan, backend="memory", pace=False, lists="checked", view=view)
    seen: dict[str, Any] = {}

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        jobs = local.jobs()
        seen["jobs"] = {job.id: job for job in jobs}
        seen["history"] = {
            job.id: [(e.at - plan.start, str(e.reason)) for e in local.events(job.id)] for job in jobs
        }
        unreachable: dict[str, float] = {}
        for point in local.metrics.points:
            if point.name == Metric.CLUSTER_UNREACHABLE:
                cluster = point.dimensions["Cluster"]
                unreachable[cluster] = unreachable.get(cluster, 0) + point.value
        seen["unreachable"] = unreachable

    result = simulation.run(after=after)
    created_in: dict[str, set[str]] = {}
    for cluster_name, cluster in simulation.clusters.items():
        for change in cluster.changes:
            if change.kind == "created" and change.job_id is not None:
                created_in.setdefault(change.job_id, set()).add(cluster_name)
    return Run(
        result=result,
        jobs=seen["jobs"],
        history=seen["history"],
        created_in=created_in,
        unreachable=seen["unreachable"],
        view=view,
    )


@pytest.fixture(scope="module")
def scenario() -> Callable[[str], Run]:
    """run(name), each scenario run at most once in this module."""
    return functools.cache(run)


def assert_each_pod_on_its_own_clusters_nodes(view: PlacementView) -> None:
    for name, bound in view.bound.items():
        others = set().union(*(nodes for other, nodes in view.nodes.items() if other != name))
        assert bound <= view.nodes[name], f"{name}'s pods were bound to nodes it never had"
        assert not bound & others, f"{name}'s pods were bound to another cluster's nodes"


def test_the_burst_spills_into_the_second_cluster_and_each_job_lives_in_one(
    scenario: Callable[[str], Run],
) -> None:
    two = scenario("two-clusters")
    summary = two.summary
    assert summary["functionErrors"] == {}
    assert summary["invariants"] == INVARIANTS_HOLD
    assert summary["finished"]
    assert summary["jobs"] == {"SUCCEEDED": 8}
    # jobs landed in both clusters, each job's objects in exactly the cluster its record names
    placed = {job.id: job.cluster for job in two.jobs.values()}
    assert set(placed.values()) == {"gpu-west", "gpu-east"}
    assert two.created_in == {job_id: {cluster} for job_id, cluster in placed.items()}
    regions = {job.cluster: job.region for job in two.jobs.values()}
    assert regions == {"gpu-west": "us-west-2", "gpu-east": "us-east-1"}
    # us-west-2 runs four p3.8xlarge at most: the rest of the burst ran in the us-east-1 cluster
    clusters = summary["clusters"]
    assert list(clusters) == ["gpu-west", "gpu-east"]
    assert 0 < clusters["gpu-west"]["peakNodes"] <= 4 < clusters["gpu-east"]["peakNodes"]
    assert clusters["gpu-east"]["peakGpusBusy"] > 0 and clusters["gpu-west"]["peakGpusBusy"] > 0
    assert summary["peakNodes"] == {
        "us-east-1": clusters["gpu-east"]["peakNodes"],
        "us-west-2": clusters["gpu-west"]["peakNodes"],
    }
    assert_each_pod_on_its_own_clusters_nodes(two.view)
    assert two.unreachable.get("gpu-west", 0) == two.unreachable.get("gpu-east", 0) == 0


def test_a_cluster_outage_sends_new_work_elsewhere_and_loses_or_repeats_nothing(
    scenario: Callable[[str], Run],
) -> None:
    outage = scenario("cluster-outage")
    summary = outage.summary
    assert summary["invariants"] == INVARIANTS_HOLD
    assert summary["finished"], "every job final and both clusters back at zero"
    assert summary["jobs"] == {"SUCCEEDED": 6}
    assert any("cluster gpu-west's API cannot be reached" in note for note in outage.result.notes)
    # the first wave ran in the preferred cluster, through the outage, exactly once
    starts, ends = timedelta(minutes=10), timedelta(minutes=40)
    for number in (1, 2, 3):
        job_id = f"vit-{number}"
        assert outage.jobs[job_id].cluster == "gpu-west"
        assert outage.created_in[job_id] == {"gpu-west"}
        reasons = [reason for _, reason in outage.history[job_id]]
        assert not [r for r in reasons if r.startswith(("NodeLost", "ObjectsMissing", "RetriesExhausted"))]
        assert reasons.count("Started") == 1 and reasons[-1] == "Completed"
        # its pods kept running while the API could not be reached, and finished then
        (finished_at,) = [at for at, reason in outage.history[job_id] if reason == "Completed"]
        assert starts < finished_at < ends
    # what arrived during the outage went to the cluster that could be reached
    for number in (1, 2, 3):
        job_id = f"vit-during-{number}"
        assert outage.jobs[job_id].cluster == "gpu-east"
        assert outage.created_in[job_id] == {"gpu-east"}
        (admitted_at,) = [at for at, reason in outage.history[job_id] if reason.startswith("Admitted")]
        assert starts < admitted_at < ends
    # Squall's functions saw gpu-west unreachable (and only it), and survived it
    assert outage.unreachable.get("gpu-west", 0) > 0
    assert outage.unreachable.get("gpu-east", 0) == 0
    assert summary["functionErrors"] == {}
    assert_each_pod_on_its_own_clusters_nodes(outage.view)


def test_faults_aimed_at_one_cluster_hit_only_that_cluster() -> None:
    document = load_document(SCENARIOS / "two-clusters.yaml")
    document["faults"] = [
        {"at": "5m", "type": "functionDies", "cluster": "gpu-east", "call": "create"},
        {"at": "15m", "type": "spotReclaim", "cluster": "gpu-east", "count": 2},
    ]
    plan = compile_scenario(document, base=SCENARIOS)
    simulation = Simulation(plan, backend="memory", pace=False, lists="checked")
    result = simulation.run()
    summary = result.summary
    assert summary["invariants"] == INVARIANTS_HOLD
    assert summary["jobs"] == {"SUCCEEDED": 8}
    # the first create in gpu-east killed its caller, a scale check: the next one finished its work
    assert summary["functionErrors"] == {"scale": 1}
    assert any("create #1 to cluster gpu-east will be killed" in note for note in result.notes)
    assert any("the scale function was killed half way (killed at create)" in note for note in result.notes)
    # the reclaimed nodes were gpu-east's, the busiest first
    (reclaimed,) = [note for note in result.notes if "spot reclaim:" in note]
    names = reclaimed.split("spot reclaim: ", 1)[1].split(", ")
    assert len(names) == 2 and all(name.startswith("p3-use1-") for name in names)


@pytest.mark.timeout(120)
def test_simulate_replays_against_two_clusters_and_says_where_each_job_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a groups file of two clusters, the preferred one able to run one node
    west = gpu_group("g5-usw2", "g5.12xlarge", max_size=1, priority=10, cluster="gpu-west")
    east = gpu_group(
        "g5-use1", "g5.12xlarge", region="us-east-1", max_size=4, priority=20, cluster="gpu-east"
    )
    groups = tmp_path / "groups.yaml"
    groups.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {"name": "gpu-west", "region": "us-west-2"},
                    {"name": "gpu-east", "region": "us-east-1"},
                ],
                "nodeGroups": [west, east],
                "policy": {"idleThreshold": "PT5M"},
            }
        )
    )
    (tmp_path / "trace.csv").write_text(
        "submit_s,team,gpus,replicas,run_s\n0,research,4,1,600\n0,research,4,2,600\n"
    )
    out = tmp_path / "jobs.csv"
    # when it is replayed with --jobs-out
    code = main(
        ["simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups), "--json",
         "--jobs-out", str(out)]
    )  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, summary
    assert summary["invariants"] == INVARIANTS_HOLD
    assert list(summary["clusters"]) == ["gpu-west", "gpu-east"]
    # then the cluster column says where each ran, and that cluster had the nodes for it
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and all(row["state"] == "SUCCEEDED" for row in rows)
    assert {row["cluster"] for row in rows} <= {"gpu-west", "gpu-east"}
    for row in rows:
        assert summary["clusters"][row["cluster"]]["peakGpusBusy"] >= 4 * int(row["replicas"])
    # the gang of two 4-GPU replicas can only have run where two nodes fit: gpu-east
    (gang,) = [row for row in rows if row["replicas"] == "2"]
    assert gang["cluster"] == "gpu-east"
