"""Admission end to end: scenarios through the real functions on the simulated cluster and fleet.

Each shows one promise of the queue (README "The queue"): priority overtakes a waiting
burst, a gang runs whole in one region, and time spent queued is not run time.
(A team held at its quota while another uses the rest: test_team_quotas.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from squall.core.jobs import Job, JobStatus
from squall.local.runtime import LocalRuntime
from squall.local.scenario import Simulation, SimulationResult, compile_scenario

P4D = {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": 8, "pods": 58}
GPU_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
# A scenario's result, its job records by id and each job's event reasons in order.
Outcome = tuple[SimulationResult, dict[str, Job], dict[str, list[str]]]


def p4d(region: str, *, max_size: int, priority: int) -> dict[str, Any]:
    short = region.replace("-", "")[:4] + region[-1]
    return {
        "name": f"p4d-{short}",
        "region": region,
        "asgName": f"squall-p4d-{short}",
        "instanceType": "p4d.24xlarge",
        "allocatable": P4D,
        "taints": GPU_TAINTS,
        "maxSize": max_size,
        "priority": priority,
    }


def spec(
    job_id: str, *, gpus: int = 8, priority: int = 50, workers: int = 0, max_runtime: str = "6h"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": job_id,
        "id": job_id,
        "team": "research",
        "image": "registry.example.com/squall/tf-trainer:1.0",
        "resources": {"cpu": "8", "memory": "64Gi", "gpu": gpus},
        "priority": priority,
        "maxRuntime": max_runtime,
    }
    if workers:
        body["replicas"] = {"worker": workers}
    return body


def run(doc: dict[str, Any]) -> Outcome:
    seen: dict[str, Any] = {}

    def after(local: LocalRuntime, _: SimulationResult) -> None:
        seen["jobs"] = {job.id: job for job in local.jobs()}
        seen["reasons"] = {job.id: [e.reason for e in local.store.events(job.id)] for job in local.jobs()}

    result = Simulation(compile_scenario(doc), backend="memory", pace=False).run(after=after)
    return result, seen["jobs"], seen["reasons"]


def assert_every_job_succeeded(result: SimulationResult, jobs: dict[str, Job]) -> None:
    assert result.ok, (result.summary, result.notes)
    assert all(job.status is JobStatus.SUCCEEDED for job in jobs.values()), {
        j.id: j.status for j in jobs.values()
    }


def scenario(
    name: str, *, groups: list[dict[str, Any]], capacity: dict[str, int], arrivals: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": name,
        "policy": {"idleThreshold": "PT5M", "bootGrace": "PT2M"},
        "regions": {
            region: {"capacity": {"p4d.24xlarge": count}, "bootTime": "3m"}
            for region, count in capacity.items()
        },
        "nodeGroups": groups,
        "teams": {"research": "team-research"},
        "arrivals": arrivals,
        "end": {"when": "scaledDown", "limit": "24h"},
    }


def one_node_scenario(name: str, *, arrivals: list[dict[str, Any]]) -> dict[str, Any]:
    """A scenario in which one node, in us-west-2, is all that can ever be bought."""
    return scenario(
        name,
        groups=[p4d("us-west-2", max_size=1, priority=10)],
        capacity={"us-west-2": 1},
        arrivals=arrivals,
    )


@pytest.fixture(scope="module")
def overtaking() -> Iterator[Outcome]:
    # A burst of five low-priority jobs arrives first; a priority-90 job ten minutes
    # later must run next on the one node, before the rest of the burst.
    doc = one_node_scenario(
        "priority-overtakes",
        arrivals=[
            *({"at": "0s", "spec": spec(f"low-{i}", priority=10), "runTime": "30m"} for i in range(5)),
            {"at": "10m", "spec": spec("urgent", priority=90), "runTime": "30m"},
        ],
    )
    yield run(doc)


@pytest.mark.timeout(300)
def test_a_priority_90_job_overtakes_a_waiting_low_priority_burst(overtaking: Outcome) -> None:
    result, jobs, reasons = overtaking
    assert_every_job_succeeded(result, jobs)
    started = {job_id: job.started_at for job_id, job in jobs.items()}
    assert all(started.values())
    first = min(started, key=lambda job_id: started[job_id])  # type: ignore[arg-type,return-value]
    assert first.startswith("low-")
    # urgent is the second to run: after the job already running, before every other one of the burst
    later = [job_id for job_id in started if job_id.startswith("low-") and job_id != first]
    assert all(started["urgent"] < started[job_id] for job_id in later)  # type: ignore[operator]
    # while it waited, the burst's records said where they stood
    assert any(r == "Queued" for r in reasons[later[0]])


@pytest.fixture(scope="module")
def gangs() -> Iterator[Outcome]:
    # us-west-2 can buy two p4d nodes, us-east-1 six: a 3-replica gang of 8 GPUs fits
    # only in us-east-1, next to single-node jobs competing for both regions.
    doc = scenario(
        "gangs-whole",
        groups=[p4d("us-west-2", max_size=4, priority=10), p4d("us-east-1", max_size=6, priority=20)],
        capacity={"us-west-2": 2, "us-east-1": 6},
        arrivals=[
            *({"at": f"{i}m", "spec": spec(f"gang-{i}", workers=3), "runTime": "40m"} for i in range(3)),
            *({"at": f"{i}m", "spec": spec(f"single-{i}"), "runTime": "25m"} for i in range(6)),
        ],
    )
    yield run(doc)


@pytest.mark.timeout(300)
def test_a_distributed_job_is_admitted_whole_in_one_region_and_no_gang_is_released(gangs: Outcome) -> None:
    result, jobs, reasons = gangs
    assert_every_job_succeeded(result, jobs)
    assert result.summary["gangsReleased"] == 0
    for i in range(3):
        admitted = [r for r in reasons[f"gang-{i}"] if r.startswith("Admitted:")]
        # admitted once, whole, in the one region that can hold three nodes
        assert admitted == ["Admitted:us-east-1"], reasons[f"gang-{i}"]


@pytest.fixture(scope="module")
def long_wait() -> Iterator[Outcome]:
    # The first job holds the one node for three hours. The second, whose maxRuntime is
    # one hour, waits three hours and must still run its whole 50 minutes.
    doc = one_node_scenario(
        "queued-time-is-not-run-time",
        arrivals=[
            {"at": "0s", "spec": spec("holder", max_runtime="4h"), "runTime": "3h"},
            {"at": "1m", "spec": spec("patient", max_runtime="1h"), "runTime": "50m"},
        ],
    )
    yield run(doc)


@pytest.mark.timeout(300)
def test_a_job_that_waited_longer_than_its_max_runtime_still_runs_its_full_time(long_wait: Outcome) -> None:
    result, jobs, _ = long_wait
    assert result.ok, (result.summary, result.notes)
    patient = jobs["patient"]
    assert patient.status is JobStatus.SUCCEEDED, patient.reason
    assert patient.started_at is not None and patient.finished_at is not None
    assert patient.started_at - patient.submitted_at > timedelta(hours=1)  # it waited past its maxRuntime
    # and ran its full 50 minutes (the record's times are reconcile's, once a minute:
    # a DeadlineExceeded would have stopped it at 60 minutes of waiting, before it began)
    assert patient.finished_at - patient.started_at >= timedelta(minutes=48)
