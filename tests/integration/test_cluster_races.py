"""Races and leftovers between admission, reconcile and many clusters (from a review of issue 26).

Each test is a way a job could end up in two clusters, stuck in the queue forever, counted
twice against its quota, or placed on a half view of a cluster; each says what holds instead.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from squall.core.errors import RetryableError
from squall.core.jobs import JobStatus, transition
from squall.core.manifests import render
from squall.core.queue import queue_entry, queue_key
from squall.core.spec import load_spec
from squall.local.memory import InMemoryScaleState
from squall.planner import Policy
from squall.planner.offline import parse_groups
from squall.planner.queue_types import TeamShare
from squall.ports import FleetGroup
from squall.services import scale as scale_module
from squall.services.admission import Admitter
from squall.services.intake import update_job
from squall.services.scale import ScaleConfig, Scaler
from tests.integration.test_reconcile_clusters import world_of
from tests.job_records import StepReport as Report


def placed_by_hand(w: Any, job: Any, *, cluster: str, region: str) -> None:
    """The record as admission leaves it placed, before its objects are made (`Placed:<region>`)."""
    update_job(
        w.store,
        job,
        lambda c: transition(
            c,
            to=JobStatus.QUEUED,
            reason=f"Placed:{region}",
            at=w.clock.now(),
            message="",
            cluster=cluster,
            region=region,
            objects_created=False,
        ),
    )


class LaggingIndex:
    def __init__(self, store, stale):
        self._store, self._stale = store, stale

    def queue(self, *, placed=False, limit=200_000):
        live = self._store.queue(placed=placed, limit=limit)
        return live if placed else [*self._stale, *live]

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_just_admitted_job_still_in_the_index_is_counted_once_against_its_quota() -> None:
    w = world_of("west", "east")
    w.node("west")
    w.node("east")
    w.submit("a")
    stale = [queue_entry(w.job("a"))]  # as the index shows it a moment after it was admitted
    w.admit()
    assert w.job("a").objects_created
    w.submit("b")
    report = Report()
    plan = Admitter(
        clusters=w.clusters,
        metrics=w.metrics,
        teams={"research": TeamShare(quota=8)},
        policy=Policy(),
        store=LaggingIndex(w.store, stale),
    ).run(now=w.clock.now(), outcome=report)
    # a is counted once (by its stale entry), so b fits the quota beside it; a is not made twice
    assert plan.in_use["research"] == 8 and "b" in [x.job_id for x in plan.admitted]
    assert (
        w.where("a") == {w.job("a").cluster}
        and len(w.clusters[w.job("a").cluster].list_jobs(job_id="a")) == 1
    )


class NoFleet:
    def describe_groups(self, refs):
        return []

    def recent_activities(self, refs, *, since):
        return []


def test_a_cluster_whose_pods_cannot_be_listed_is_left_out_whole() -> None:
    w = world_of("west", "east")
    w.node("west")
    w.submit("first")
    w.admit()
    assert w.where("first") == {"west"}
    for c in w.clusters.values():
        c.advance()  # first's pod runs on west's only node
    # east: no free node (its group would be bought for the queue)
    w.submit("second")
    state = InMemoryScaleState()
    scaler = Scaler(
        state=state,
        clusters=w.clusters,
        fleet=NoFleet(),
        clock=w.clock,
        metrics=w.metrics,
        config=ScaleConfig(groups=[], policy=Policy()),
        store=w.store,
    )
    w.clusters["west"].fail_calls("list_pods", RetryableError("west: 503"))
    result = scaler.check(trigger="schedule")
    w.job("second")
    assert result.plan["unreachableClusters"] == ["west"]
    assert not any(a["region"].startswith("west/") for a in result.plan["admission"]["admitted"]), (
        "nothing to west"
    )


def test_a_half_read_cluster_s_busy_node_is_not_stamped_empty() -> None:
    from squall.conventions import EMPTY_SINCE_ANNOTATION

    w = world_of("west", "east")
    w.node("west")
    w.submit("first")
    w.admit()
    for c in w.clusters.values():
        c.advance()
    scaler = Scaler(
        state=InMemoryScaleState(),
        clusters=w.clusters,
        fleet=NoFleet(),
        clock=w.clock,
        metrics=w.metrics,
        config=ScaleConfig(groups=[], policy=Policy()),
        store=w.store,
    )
    w.clusters["west"].fail_calls("list_pods", RetryableError("west: 503"))
    scaler.check(trigger="schedule")
    (node,) = w.clusters["west"].list_nodes()
    assert EMPTY_SINCE_ANNOTATION not in node["metadata"].get("annotations", {}), (
        "a node it cannot see whole is left alone"
    )


P3 = {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": 4, "pods": 58}
GROUPS = [
    {
        "name": "p3-west",
        "region": "us-west-2",
        "instanceType": "p3.8xlarge",
        "allocatable": P3,
        "maxSize": 4,
        "cluster": "west",
    },
    {
        "name": "p3-east",
        "region": "us-east-1",
        "instanceType": "p3.8xlarge",
        "allocatable": P3,
        "maxSize": 4,
        "cluster": "east",
    },
]


class Fleet:
    def describe_groups(self, refs):
        return [FleetGroup(name=r.name, region=r.region, desired=0, min_size=0, max_size=4) for r in refs]

    def recent_activities(self, refs, *, since):
        return []


def test_a_cluster_whose_jobs_cannot_be_listed_has_no_group_planned(monkeypatch) -> None:
    w = world_of("west", "east")
    groups, _ = parse_groups(GROUPS)
    seen = []
    real_plan = scale_module.plan

    def spy(**kw):
        seen.append([g.name for g in kw["groups"]])
        return real_plan(**kw)

    monkeypatch.setattr(scale_module, "plan", spy)
    scaler = Scaler(
        state=InMemoryScaleState(),
        clusters=w.clusters,
        fleet=Fleet(),
        clock=w.clock,
        metrics=w.metrics,
        config=ScaleConfig(groups=groups, policy=Policy()),
        store=w.store,
    )
    w.clusters["west"].fail_calls("list_jobs", RetryableError("west: 503"))
    result = scaler.check(trigger="schedule")
    assert result.plan["unreachableClusters"] == ["west"]
    assert "p3-west" not in seen[0], "an unreachable cluster's groups are not planned"


def test_a_placed_job_is_not_recorded_running_before_its_objects_are_all_made() -> None:
    w = world_of("west", "east")
    w.node("west", "gpu-0")
    w.node("west", "gpu-1")
    w.node("west", "gpu-2")
    w.submit("d", replicas={"chief": 1, "worker": 2})
    job = w.job("d")
    # What Admitter._admit did before its create loop failed at the first Service:
    placed_by_hand(w, job, cluster="west", region="us-west-2")
    objects = render(
        load_spec(job.spec),
        job_id="d",
        namespace=job.namespace,
        submitted_at=job.submitted_at,
        region="us-west-2",
    )
    for m in objects:
        if m["kind"] == "Job":
            w.clusters["west"].create(m)
    assert queue_key(w.job("d"))[0] == "PLACED"
    w.minute()  # pods start; reconcile runs
    w.clock.advance(timedelta(seconds=5))
    job = w.job("d")
    assert job.status is JobStatus.QUEUED and queue_key(job) is not None, (
        "reconcile leaves a placed job to the scale check until its objects are made"
    )
    for _ in range(3):
        w.admit()
        w.minute()
    job = w.job("d")
    assert job.objects_created
    services = [
        s
        for s in w.clusters["west"].list_services()
        if s["metadata"]["labels"].get("squall.io/job-id") == "d"
    ]
    assert len(services) == 3, "the scale check made its Services"


class StaleReads:
    """The store as reconcile saw it when its run began (its list_by_status read)."""

    def __init__(self, store, snapshot):
        self._store, self._snapshot = store, snapshot

    def list_by_status(self, status, **kw):
        return [j for j in self._snapshot if j.status is status]

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_requeue_on_a_stale_record_is_not_made() -> None:
    w = world_of("west", "east")
    w.node("west")
    w.submit("j")
    w.admit()
    assert w.where("j") == {"west"} and w.job("j").objects_created
    w.clock.advance(timedelta(minutes=5))

    # Reconcile's run begins: it reads the active records (j: west, objects created).
    snapshot = w.store.list_by_status(JobStatus.QUEUED) + w.store.list_by_status(JobStatus.RUNNING)

    # Meanwhile the scale check releases j's gang in west (what Scaler._release does) ...
    w.clusters["west"].delete_job_objects(namespace="team-research", job_id="j")
    update_job(
        w.store,
        w.job("j"),
        lambda c: transition(
            c,
            to=JobStatus.QUEUED,
            reason="GangReleased:us-west-2",
            at=w.clock.now(),
            message="x",
            cluster=None,
            region=None,
            objects_created=False,
        ),
    )
    # ... and the next check admits it to east (west is briefly out).
    w.node("east")
    w.clusters["west"].outage(until=w.clock.now() + timedelta(seconds=1))
    w.admit()
    w.clock.advance(timedelta(seconds=2))
    assert w.where("j") == {"east"} and w.job("j").cluster == "east" and w.job("j").objects_created

    # Reconcile now lists the clusters and acts on the record it read.
    w.reconciler.store = StaleReads(w.store, snapshot)
    report = w.reconciler.run()
    job = w.job("j")
    assert "j" not in report.recreated and job.cluster == "east", "a stale view changes nothing"

    for c in w.clusters.values():
        c.advance()  # j's pod runs on east's one node
    # (had east answered, admission would merge east's running Job of j with j's queue entry
    # and "resume" it there as 8 GPUs: a job counted twice.) East is slow for this one check:
    w.clusters["east"].outage(until=w.clock.now() + timedelta(seconds=1))
    w.admit()
    w.clock.advance(timedelta(seconds=2))
    assert w.where("j") == {"east"}, "never in two clusters"


def admit(w, quota=None):
    report = Report()
    Admitter(
        clusters=w.clusters,
        metrics=w.metrics,
        teams={"research": TeamShare(quota=quota)} if quota is not None else {},
        policy=Policy(),
        store=w.store,
    ).run(now=w.clock.now(), outcome=report)
    return report


def hours(w, n, quota=None):
    reports = []
    for _ in range(n):
        reports.append((admit(w, quota), w.minute()))
        w.clock.advance(timedelta(minutes=10))
    return reports


def test_a_job_placed_in_a_cluster_no_longer_configured_is_placed_afresh() -> None:
    w = world_of("west", "east")
    w.node("west")
    w.node("east")
    w.submit("old")
    # Placed by an earlier deployment in a cluster since removed from the configuration
    # (the check was killed between placing and creating, or the objects were made there).
    placed_by_hand(w, w.job("old"), cluster="gone", region="eu-west-1")
    w.submit("new")  # 4 GPUs, the team's quota is 4
    hours(w, 12, quota=4)
    old, _new = w.job("old"), w.job("new")
    assert old.cluster != "gone", "placed afresh"
    assert any(e.reason == "ClusterNotConfigured:gone" for e in w.store.events("old"))


def test_a_placed_job_whose_spec_no_longer_loads_fails_saying_why() -> None:
    w = world_of("west", "east")
    w.node("west")
    w.node("east")
    w.submit("bad")
    job = w.job("bad")
    w.store.save(
        job.__class__(**{**job.__dict__, "spec": {"apiVersion": "nonsense"}}), expected_version=job.version
    ) if False else None
    update_job(
        w.store,
        job,
        lambda c: transition(
            c, to=JobStatus.QUEUED, reason="Submitted", at=w.clock.now(), message="", spec={"nonsense": True}
        ),
    )
    hours(w, 6)
    job = w.job("bad")
    assert job.status is JobStatus.FAILED and job.reason == "InvalidStoredSpec"


def test_a_queue_entry_whose_shape_does_not_read_fails_its_job() -> None:
    w = world_of("west", "east")
    w.node("west")
    w.node("east")
    w.submit("shape")
    update_job(
        w.store,
        w.job("shape"),
        lambda c: transition(
            c, to=JobStatus.QUEUED, reason="Submitted", at=w.clock.now(), message="", queue_shape="[]"
        ),
    )
    hours(w, 6)
    job = w.job("shape")
    assert job.status is JobStatus.FAILED and job.reason == "InvalidStoredSpec"
