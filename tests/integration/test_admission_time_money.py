"""Admission with time and money: backfill by declared run time, estimates on records, budgets, run ratios.

One simulated cluster of two 4-GPU nodes, the in-memory job store (the same queue index as
DynamoDB) and the Admitter as the scale check runs it, without a fleet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from squall.core.jobs import JobStatus
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.memory import InMemoryJobStore
from squall.planner import NodeGroup, Policy
from squall.planner.model import Resources
from squall.planner.queue_types import TeamShare
from squall.services.admission import AdmissionMemory, Admitter
from squall.services.intake import Intake, IntakeConfig
from tests.job_records import StepReport

P3 = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": "4", "pods": "58"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


@dataclass
class FixedSpend:
    spent: dict[str, float]

    def month_to_date(self, *, now: datetime) -> dict[str, float]:
        return dict(self.spent)


@dataclass
class World:
    clock: VirtualClock
    cluster: SimulatedCluster
    store: InMemoryJobStore
    intake: Intake
    metrics: RecordingMetrics
    memory: AdmissionMemory = field(default_factory=AdmissionMemory)

    def submit(self, job_id: str, *, workers: int = 1, runtime: str = "4h", team: str = "research") -> None:
        body = {
            "name": "t",
            "id": job_id,
            "team": team,
            "image": "registry.example.com/squall/t:1",
            "resources": {"cpu": "4", "memory": "16Gi", "gpu": 4},
            "replicas": {"worker": workers},
            "maxRuntime": runtime,
        }
        self.intake.handle(body=json.dumps(body), message_id=f"m-{job_id}")

    def admitter(self, **more: object) -> Admitter:
        return Admitter(
            clusters={"local": self.cluster},
            metrics=self.metrics,
            teams={},
            policy=Policy(),
            store=self.store,
            parsed=self.memory,
            **more,  # type: ignore[arg-type]
        )

    def admit(self, **more: object) -> StepReport:
        report = StepReport()
        self.admitter(**more).run(now=self.clock.now(), outcome=report, groups=[p3_group()])
        return report


def p3_group() -> NodeGroup:
    return NodeGroup(
        name="p3",
        region="us-west-2",
        instance_type="p3.8xlarge",
        allocatable=Resources(cpu=32_000, memory=244 * 2**30, gpu=4, pods=58),
        max_size=2,
        desired=2,
        price_per_hour=12.0,
    )


@pytest.fixture
def world() -> World:
    clock = VirtualClock()
    store = InMemoryJobStore()
    metrics = RecordingMetrics(clock)
    cluster = SimulatedCluster(clock=clock, default_run_for=timedelta(hours=10))
    for i in range(2):
        cluster.add_node(
            name=f"node-{i}",
            allocatable=P3,
            labels={"topology.kubernetes.io/region": "us-west-2"},
            taints=GPU_TAINT,
        )
    intake = Intake(
        store=store,
        clusters={"local": cluster},
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(
            teams={"research": "team-research", "vision": "team-vision"},
            registries=["registry.example.com/squall"],
        ),
    )
    return World(clock, cluster, store, intake, metrics)


def test_a_short_job_backfills_and_the_head_has_its_start_estimate_on_its_record(world: World) -> None:
    # given: a 2-hour job runs on one node; the head needs both; a 1-hour job waits behind it
    world.submit("running", runtime="2h")
    world.admit()
    world.cluster.advance()
    world.clock.advance(timedelta(minutes=30))
    world.submit("head", workers=2)
    world.submit("short", runtime="1h")
    # when
    world.admit()
    # then: the short job is admitted into the free node; the head waits, knowing when it starts
    short, head = world.store.get("short"), world.store.get("head")
    assert short is not None and short.cluster is not None
    assert head is not None and head.status is JobStatus.QUEUED
    running = world.store.get("running")
    assert running is not None
    started = world.cluster.list_jobs(job_id="running")[0]["status"]["startTime"]
    expected = datetime.fromisoformat(started.replace("Z", "+00:00")) + 2 * HOUR
    assert head.starts_by == expected
    assert head.first_starts_by == expected
    assert head.likely_start == expected  # nothing learned yet: likely is as declared
    assert head.version == world.store.get("head").version  # estimates are no new version


def test_a_budget_holds_a_team_at_its_limit_while_another_team_runs(world: World) -> None:
    world.submit("v1", team="vision")
    world.submit("r1", team="research")
    # vision: $20,000 a month, $19,970 spent; a job of 4 GPUs for 4 h on a $12/h node ($48) would pass it
    world.admit(budgets={"vision": 20_000.0}, ledger=FixedSpend({"vision": 19_970.0}))
    v1, r1 = world.store.get("v1"), world.store.get("r1")
    assert v1 is not None and v1.status is JobStatus.QUEUED and v1.reason == "BudgetExceeded"
    assert [e.message for e in world.store.events("v1")][-1].startswith(
        "BudgetExceeded: $19,970 of $20,000 this month"
    )
    assert r1 is not None and r1.cluster is not None
    spend = [m for m in world.metrics.points if m.name == "TeamMonthSpend"]
    assert [(m.dimensions, m.value) for m in spend] == [({"Team": "vision"}, 19_970.0)]


def test_run_ratios_are_learned_from_finished_jobs_and_kept_in_the_decision(world: World) -> None:
    # given: a job declaring 4 hours that runs 1 (the cluster runs it for one hour)
    world.cluster.set_behaviour("quick", run_for=HOUR)
    world.submit("quick")
    world.admit()
    world.cluster.advance()
    world.clock.advance(90 * MINUTE)  # finished half an hour ago: listed until its TTL (an hour) ends
    world.cluster.advance()
    # when: admission reads the finished Job
    admitter = world.admitter()
    admitter.read_queue()
    # then: research's jobs run about a quarter of what they declare
    ratio = admitter.run_ratios["research"]
    assert 0.24 < ratio < 0.26
    # and a cold process goes on from what the decision record kept
    cold = world.admitter()
    cold.parsed = AdmissionMemory()
    cold.load_ratios({"plan": {"admission": {"runRatios": {"research": [ratio, 1], "bad": ["x", 1]}}}})
    assert cold.run_ratios == {"research": ratio}


@dataclass
class CountedSpend:
    spent: dict[str, float]
    reads: int = 0

    def month_to_date(self, *, now: datetime) -> dict[str, float]:
        self.reads += 1
        return dict(self.spent)


def test_teams_spend_is_read_at_most_every_few_minutes(world: World) -> None:
    # reading it reads every running job's record: a check a minute would be too much at size
    ledger = CountedSpend({"vision": 10.0})
    world.submit("v1", team="vision")
    for _ in range(3):
        world.admit(budgets={"vision": 20_000.0}, ledger=ledger)
        world.clock.advance(MINUTE)
    assert ledger.reads == 1
    world.clock.advance(5 * MINUTE)
    world.admit(budgets={"vision": 20_000.0}, ledger=ledger)
    assert ledger.reads == 2


def test_run_ratios_are_learned_only_for_configured_teams(world: World) -> None:
    # a finished Job labelled with a team nobody configured (anyone may label a Job) teaches nothing
    world.cluster.set_behaviour("quick", run_for=HOUR)
    world.submit("quick")
    world.admit()
    world.cluster.advance()
    for obj in world.cluster.list_jobs(job_id="quick"):
        world.cluster.patch_job(
            namespace=obj["metadata"]["namespace"],
            name=obj["metadata"]["name"],
            patch={"metadata": {"labels": {"squall.io/team": "nobody"}}},
        )
    world.clock.advance(90 * MINUTE)
    world.cluster.advance()
    admitter = world.admitter()
    admitter.teams = {"research": TeamShare(), "vision": TeamShare()}
    admitter.read_queue()
    assert admitter.run_ratios == {}
