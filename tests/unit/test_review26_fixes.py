"""Issue 26 review fixes: the queue's bounds, squall plan --queue's checks, scenario spans, outages
that overlap, a cdk.json cluster's default region, and jobsInTwoClusters over Services too."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.cli import main, plan_inputs
from squall.cli.plan_inputs import PlanArgumentError, queued_replica_jobs, read_queue
from squall.conventions import JOB_ID_LABEL
from squall.core import queue as core_queue
from squall.core.queue import QueueShapeError, decode_shape
from squall.core.spec.limits import MAX_REPLICAS
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.local.scenario import ScenarioError, compile_scenario
from squall.local.summary import ObservedCluster, PlacementWatch, Recorder, invariants
from squall.local.trace import load_configuration
from tests.unit.local.sim import job_manifest
from tests.unit.test_cli_clusters import (  # noqa: F401  (fixtures)
    TWO_SNAPSHOTS,
    jobs,
    no_clusters_named,
    placed,
    plan,
    plan_files,
    queued_job,
)
from tests.unit.test_sim_clusters import WEST, scenario

GPU_POD = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}


def shape(*counts: int) -> str:
    return json.dumps([{"n": n, "pod": GPU_POD} for n in counts], separators=(",", ":"))


# ---- core/queue.py: a stored shape holds at most what a spec may ------------------------------


def test_a_stored_shape_holds_at_most_the_replicas_a_spec_may_have() -> None:
    assert sum(MAX_REPLICAS.values()) == core_queue.MAX_SHAPE_REPLICAS == 82
    assert sum(s.count for s in decode_shape(shape(1, 64, 16, 1), job_id="j-1")) == 82
    with pytest.raises(QueueShapeError) as one:
        decode_shape(shape(83), job_id="j-1")
    assert str(one.value) == "job j-1: stored queue shape: [0].n: expected a count from 1 to 82"
    with pytest.raises(QueueShapeError) as together:
        decode_shape(shape(41, 42), job_id="j-2")
    assert str(together.value) == "job j-2: stored queue shape: 83 replicas, more than a job may have (82)"


# ---- squall plan --queue: what a queue file may hold -------------------------------------------


def record(i: int, **changes: Any) -> dict[str, Any]:
    return {
        "id": f"j{i}",
        "status": "QUEUED",
        "team": "research",
        "namespace": "team-research",
        "submittedAt": "2026-01-05T11:00:00+00:00",
        "priority": 0,
        "version": 1,
        "queueShape": shape(1),
        "cluster": None,
        "region": None,
    } | changes


def refused(records: Any) -> str:
    with pytest.raises(PlanArgumentError) as caught:
        read_queue(records, source="q.json")
    return str(caught.value)


def test_a_queue_file_of_more_records_than_the_scale_check_reads_is_refused() -> None:
    assert plan_inputs.MAX_QUEUE_RECORDS == 200_000
    assert refused([{}] * 200_001) == (
        "q.json: 200,001 records, more than the 200,000 the scale check reads of its queue"
    )


def test_a_queue_file_standing_for_more_replicas_than_plan_reads_is_refused_at_the_record() -> None:
    many = shape(1, 64, 16, 1)  # 82 replicas each
    assert plan_inputs.MAX_QUEUE_REPLICAS == 1_000_000
    jobs_needed = 1_000_000 // 82 + 1
    records = [record(i, queueShape=many) for i in range(jobs_needed)]
    assert refused(records) == (
        f"q.json: [{jobs_needed - 1}] (job j{jobs_needed - 1}): the queue's jobs up to here have "
        f"{jobs_needed * 82:,} replicas, more than the 1,000,000 squall plan reads"
    )
    # one fewer job is read
    queue = read_queue(records[:-1], source="q.json")
    assert len(queue.entries) == jobs_needed - 1


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"cluster": "gpu/west", "region": "us-west-2"},
            "q.json: [0] (job j0).cluster: expected ",
        ),
        (
            {"cluster": "gpu-west", "region": "us-west-2/../x"},
            "q.json: [0] (job j0).region: expected an AWS region name such as us-west-2, got 'us-west-2/../x'",
        ),
        ({"priority": 101}, "q.json: [0] (job j0).priority: expected a whole number from 0 to 100, got 101"),
        ({"priority": -1}, "q.json: [0] (job j0).priority: expected a whole number from 0 to 100, got -1"),
    ],
)
def test_a_records_cluster_region_and_priority_are_checked(changes: dict[str, Any], words: str) -> None:
    assert refused([record(0, **changes)]).startswith(words)


def test_priorities_from_0_to_100_are_read() -> None:
    queue = read_queue([record(0, priority=0), record(1, priority=100)], source="q.json")
    assert [e.priority for e in queue.entries] == [0, 100]


def test_with_one_named_cluster_a_job_placed_in_another_is_named_with_file_record_and_field() -> None:
    queue = read_queue([record(0), record(1, cluster="gpu-west", region="us-west-2")], source="q.json")
    with pytest.raises(PlanArgumentError) as caught:
        queued_replica_jobs(queue, clusters=["gpu-east"], listed=set(), source="q.json")
    assert str(caught.value) == (
        "q.json: [1] (job j1).cluster: placed in cluster gpu-west, which no --cluster gives (gpu-east)"
    )
    # today's flags name no cluster: the one cluster is whichever the record names
    assert len(queued_replica_jobs(queue, clusters=[], listed=set(), source="q.json")) == 2


def test_squall_plan_with_one_cluster_refuses_a_job_placed_in_a_cluster_it_was_not_given(
    plan_files: Any,  # noqa: F811  (test_cli_clusters' fixture, imported above)
    jobs: InMemoryJobStore,  # noqa: F811  (test_cli_clusters' fixture, imported above)
    capsys: pytest.CaptureFixture[str],
) -> None:
    placed(jobs, queued_job(jobs, "early", minutes=0), "gpu-west", "us-west-2")
    assert main(["list", "--status", "QUEUED", "--json"]) == 0
    (plan_files / "queued.json").write_text(capsys.readouterr().out)
    groups = json.loads((plan_files / "groups.json").read_text())
    groups["nodeGroups"] = groups["nodeGroups"][1:]  # gpu-east's group only
    (plan_files / "groups.json").write_text(json.dumps(groups))

    code, _, err = plan(
        capsys, "--cluster", "gpu-east=east-nodes.json,east-pods.json", "--queue", "queued.json"
    )

    assert code == 2
    assert err == (
        "squall: queued.json: [0] (job early).cluster: placed in cluster gpu-west, which no --cluster gives "
        "(gpu-east)\n"
    )


# ---- scenario spans: bounded, so that no time overflows -----------------------------------------


def errors_of(document: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        compile_scenario(document)
    return caught.value.errors


def test_an_outage_that_lasts_for_ever_is_an_error_naming_its_duration() -> None:
    forever = {"at": "10m", "type": "clusterOutage", "cluster": "gpu-west", "duration": "P100000Y"}
    assert errors_of(scenario(faults=[forever])) == [
        "faults[0].duration: must be at most 10 years (3650 days), got 36500000 days"
    ]
    late = {"at": "P100000Y", "type": "clusterOutage", "cluster": "gpu-west", "duration": "30m"}
    assert errors_of(scenario(faults=[late])) == [
        "faults[0].at: must be at most 10 years (3650 days), got 36500000 days"
    ]
    ten_years = {"at": "P3650D", "type": "clusterOutage", "cluster": "gpu-west", "duration": "P3650D"}
    assert compile_scenario(scenario(faults=[ten_years])).faults[0].duration == timedelta(days=3650)


def test_every_span_of_a_scenario_is_bounded() -> None:
    assert errors_of(scenario(end={"limit": "P11Y"})) == [
        "end.limit: must be at most 10 years (3650 days), got 4015 days"
    ]
    assert errors_of(scenario(defaultRunTime="P11Y")) == [
        "defaultRunTime: must be at most 10 years (3650 days), got 4015 days"
    ]


def test_arrivals_whose_last_would_come_after_ten_years_are_refused() -> None:
    spec = scenario()["arrivals"][0]["spec"]
    many = {"at": 0, "spec": spec, "count": 100_000, "every": "P3650D"}
    (error,) = errors_of(scenario(arrivals=[many]))
    assert error.startswith("arrivals[0]: every: the last of 100000 arrivals ")
    assert error.endswith("later than at most 10 years (3650 days) after the start")


def test_a_clock_that_starts_near_the_end_of_time_is_refused() -> None:
    (error,) = errors_of(scenario(clock={"start": "9999-01-01T00:00:00+00:00"}))
    assert error.startswith("clock.start: must be before 9000-01-01")


# ---- a simulated cluster's outages that overlap --------------------------------------------------


def test_a_short_outage_inside_a_long_one_keeps_the_long_ones_end() -> None:
    clock = VirtualClock(datetime(2026, 1, 5, tzinfo=UTC))
    cluster = SimulatedCluster(clock=clock, name="gpu-west", region="us-west-2")
    cluster.outage(until=clock.now() + timedelta(hours=1))
    clock.advance(timedelta(minutes=10))
    cluster.outage(until=clock.now() + timedelta(minutes=5))
    clock.advance(timedelta(minutes=10))
    assert cluster.unreachable  # t+20m: the first outage lasts to t+60m
    cluster.outage(until=clock.now() + timedelta(hours=2))  # a longer one extends it
    clock.advance(timedelta(minutes=50))
    assert cluster.unreachable
    clock.advance(timedelta(minutes=71))
    assert not cluster.unreachable


# ---- a cdk.json cluster without a region -------------------------------------------------------------


def test_a_cdk_json_cluster_without_a_region_is_in_the_home_region(tmp_path: Path) -> None:
    east_first = dict(WEST, name="p3-use1", region="us-east-1", asgName="squall-p3-use1")
    context = {
        "homeRegion": "us-west-2",
        "clusters": [{"name": "gpu-west", "endpoint": "https://x"}],
        "nodeGroups": [east_first, dict(WEST)],
    }
    cdk = tmp_path / "cdk.json"
    cdk.write_text(json.dumps({"context": context}))
    assert [(c.name, c.region) for c in load_configuration(cdk).clusters] == [("gpu-west", "us-west-2")]
    # no homeRegion (cdk synth refuses it): the first group's region, as before
    del context["homeRegion"]
    cdk.write_text(json.dumps({"context": context}))
    assert [(c.name, c.region) for c in load_configuration(cdk).clusters] == [("gpu-west", "us-east-1")]


# ---- jobsInTwoClusters: a job's objects are its Jobs and its Services ---------------------------------


def service(job_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{job_id}-worker-0", "namespace": "team-a", "labels": {JOB_ID_LABEL: job_id}},
        "spec": {"clusterIP": "None", "selector": {JOB_ID_LABEL: job_id}},
    }


def two_observed() -> tuple[ObservedCluster, ObservedCluster, Recorder]:
    clock = VirtualClock()
    watch = PlacementWatch()
    west = ObservedCluster(clock=clock, watch=watch, name="gpu-west")
    east = ObservedCluster(clock=clock, watch=watch, name="gpu-east")
    return west, east, Recorder(clock=clock, cluster=west, fleet=None, groups=[])


def in_two(west: ObservedCluster, east: ObservedCluster, recorder: Recorder) -> list[str]:
    return invariants(
        jobs=[], expected_ids=[], cluster=[west, east], fleet=None, recorder=recorder
    ).jobs_in_two_clusters


def test_a_service_left_in_one_cluster_while_the_jobs_jobs_are_created_in_another_counts() -> None:
    west, east, recorder = two_observed()
    assert west.create(service("moved"))
    east.create(job_manifest("moved-worker-0", job_id="moved"))
    assert in_two(west, east, recorder) == ["moved"]


def test_a_service_created_where_another_cluster_holds_the_jobs_jobs_counts() -> None:
    west, east, recorder = two_observed()
    west.create(job_manifest("moved-worker-0", job_id="moved"))
    assert east.create(service("moved"))
    assert in_two(west, east, recorder) == ["moved"]


def test_objects_deleted_from_one_cluster_before_the_other_creates_its_own_do_not_count() -> None:
    west, east, recorder = two_observed()
    assert west.create(service("moved"))
    west.create(job_manifest("moved-worker-0", job_id="moved"))
    west.delete_job_objects(namespace="team-a", job_id="moved")
    east.create(job_manifest("moved-worker-0", job_id="moved"))
    assert east.create(service("moved"))
    assert in_two(west, east, recorder) == []


def test_squall_local_run_of_an_outage_for_ever_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (Path(__file__).parents[2] / "scenarios" / "cluster-outage.yaml").read_text()
    assert "duration: 30m}" in text
    path = tmp_path / "outage-forever.yaml"
    path.write_text(text.replace("duration: 30m}", "duration: P100000Y}"))

    code = main(["local", "run", "--scenario", str(path), "--json", "--speed", "max", "--backend", "memory"])

    err = capsys.readouterr().err
    assert code == 2
    assert "faults[0].duration: must be at most 10 years (3650 days), got 36500000 days" in err
    assert "Traceback" not in err and "OverflowError" not in err
