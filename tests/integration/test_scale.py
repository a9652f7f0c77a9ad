"""The scale check against the simulated fleet and cluster: act safely, record why, never twice."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from squall.adapters.aws.scale_state import DynamoScaleState
from squall.core.errors import NotFoundError, RetryableError
from squall.core.jobs import JobStatus, transition
from squall.core.manifests import render
from squall.core.spec import load_spec
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.fleet import LocalFleet, RegionCapacity
from squall.local.memory import InMemoryAutoScaling, InMemoryJobStore, InMemoryScaleState
from squall.planner import GroupHealth, Policy
from squall.planner.offline import parse_groups
from squall.ports import GroupRef
from squall.services import scale as scale_service
from squall.services.intake import Intake, IntakeConfig
from squall.services.scale import ScaleConfig, Scaler
from tests.integration.conftest import GPU_NODE

P3 = {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58}
GROUPS = [
    {
        "name": "p3-usw2",
        "region": "us-west-2",
        "instanceType": "p3.8xlarge",
        "allocatable": P3,
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "priority": 10,
        "maxSize": 4,
    },
    {
        "name": "p3-use1",
        "region": "us-east-1",
        "instanceType": "p3.8xlarge",
        "allocatable": P3,
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "priority": 20,
        "maxSize": 8,
    },
]
USW2 = GroupRef(name="p3-usw2", region="us-west-2")
USE1 = GroupRef(name="p3-use1", region="us-east-1")


@dataclass
class Rig:
    clock: VirtualClock
    cluster: SimulatedCluster
    fleet: LocalFleet
    state: InMemoryScaleState
    store: InMemoryJobStore
    metrics: RecordingMetrics
    intake: Intake

    def scaler(self, *, dry_run: bool = False, holder: str = "a") -> Scaler:
        groups, _ = parse_groups(GROUPS)
        return Scaler(
            state=self.state,
            clusters={"local": self.cluster},
            fleet=self.fleet,
            clock=self.clock,
            metrics=self.metrics,
            config=ScaleConfig(
                groups=groups,
                policy=Policy(idle_threshold=timedelta(minutes=5), boot_grace=timedelta(minutes=2)),
                dry_run=dry_run,
            ),
            store=self.store,
            holder=holder,
        )

    def gpu_node(self, name: str) -> None:
        """A p3 node with the GPU taint."""
        self.cluster.add_node(
            name=name,
            allocatable=P3,
            taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        )

    def idle_node(self) -> None:
        """A node whose one-minute job is done, stamped empty and idle past the threshold."""
        self.submit("short")
        self.cluster.set_behaviour("short", run_for=timedelta(minutes=1))
        self.scaler().check(trigger="schedule")
        self.run_checked(minutes=6)  # booted, admitted, ran its minute, done
        self.scaler().check(trigger="schedule")  # stamps the empty node
        self.run(minutes=6)

    def submit(self, job_id: str, gpus: int = 1, **extra: Any) -> None:
        body = {
            "name": "t",
            "id": job_id,
            "team": "research",
            "image": "registry.example.com/squall/t:1",
            "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
        } | extra
        self.intake.handle(body=json.dumps(body), message_id=f"m-{job_id}")

    def run(self, minutes: int) -> None:
        for _ in range(minutes * 6):
            self.clock.advance(timedelta(seconds=10))
            self.fleet.advance()
            self.cluster.advance()

    def run_checked(self, minutes: int) -> None:
        """Run with a scheduled scale check every minute, which admits what fits."""
        for _ in range(minutes):
            self.run(minutes=1)
            self.scaler().check(trigger="schedule")


@pytest.fixture
def rig() -> Rig:
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=5))
    autoscaling = InMemoryAutoScaling()
    groups, _ = parse_groups(GROUPS)
    for g in groups:
        autoscaling.create_group(name=g.name, region=g.region, min_size=0, max_size=g.max_size)
    fleet = LocalFleet(
        adapter=autoscaling,
        clock=clock,
        cluster=cluster,
        groups=groups,
        capacity={"us-west-2": RegionCapacity(instances={"p3.8xlarge": 1})},
    )
    store = InMemoryJobStore()
    metrics = RecordingMetrics(clock)
    intake = Intake(
        store=store,
        clusters={"local": cluster},
        clock=clock,
        metrics=metrics,
        config=IntakeConfig(teams={"research": "team-research"}, registries=["registry.example.com/squall"]),
    )
    return Rig(clock, cluster, fleet, InMemoryScaleState(), store, metrics, intake)


def test_a_pending_gpu_pod_scales_the_preferred_group_once(rig: Rig) -> None:
    rig.submit("j-1")
    first = rig.scaler().check(trigger="requested:jobs submitted")
    assert first.done["scaledUp"] == [{"group": "p3-usw2", "to": 1}]
    # the instance is booting: the next check counts it and asks for nothing more
    second = rig.scaler().check(trigger="schedule")
    assert "scaledUp" not in second.done
    assert rig.fleet.describe_groups([USW2])[0].desired == 1
    assert rig.state.decisions[0]["trigger"] == "requested:jobs submitted"


def test_a_request_whose_pods_are_all_bound_ends_after_one_pod_list(rig: Rig) -> None:
    rig.gpu_node("gpu-1")
    rig.submit("j-1")
    rig.scaler().check(trigger="requested:jobs submitted")  # admits it
    rig.cluster.advance()
    rig.state.decisions.clear()
    rig.metrics = RecordingMetrics(rig.clock)
    calls = len(rig.cluster.calls)

    result = rig.scaler().check(trigger="requested:jobs submitted", asked_for=["j-1"])

    assert result.acted is False and result.skipped == ["no pod of the jobs asked for waits for room"]
    assert [c.method for c in rig.cluster.calls[calls:]] == ["list_pods"]
    assert rig.state.decisions == []
    assert rig.metrics.total("PendingPods") == 0


def test_a_request_is_answered_by_the_pods_of_the_jobs_it_names(rig: Rig) -> None:
    # given j-1 waits for room (an earlier check saw it), and j-2 was placed at once
    rig.gpu_node("gpu-1")
    rig.submit("j-1", gpus=8)
    rig.submit("j-2", gpus=4)
    rig.scaler().check(trigger="requested:jobs submitted")  # admits j-2; j-1 fits no node
    rig.cluster.advance()
    rig.state.decisions.clear()
    # when a request names only j-2
    result = rig.scaler().check(trigger="requested:jobs submitted", asked_for=["j-2"])
    # then j-1 is left to the scheduled check (queued: it has no pods, its Jobs wait suspended)
    assert result.skipped == ["no pod of the jobs asked for waits for room"] and rig.state.decisions == []
    assert rig.metrics.total("PendingPods") == 0
    assert rig.scaler().check(trigger="requested:jobs submitted", asked_for=["j-1"]).skipped == []


def test_a_request_with_a_pod_waiting_is_a_whole_check(rig: Rig) -> None:
    rig.submit("j-1")

    result = rig.scaler().check(trigger="requested:jobs submitted", asked_for=["j-1"])

    assert result.done["scaledUp"] == [{"group": "p3-usw2", "to": 1}]
    assert rig.state.decisions[0]["trigger"] == "requested:jobs submitted"


def test_a_request_for_a_job_without_pods_yet_is_a_whole_check(rig: Rig) -> None:
    # the Job controller has not created the pod of j-2 yet: it may need room
    rig.gpu_node("gpu-1")
    rig.submit("j-1")
    rig.cluster.advance()

    result = rig.scaler().check(trigger="requested:jobs submitted", asked_for=["j-1", "j-2"])

    assert result.skipped == [] and len(rig.state.decisions) == 1


def test_a_plan_with_nothing_to_do_is_made_again_only_when_what_it_was_made_of_changes(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []
    real_plan = scale_service.plan

    def counted(**inputs: Any) -> Any:
        made.append(inputs["now"])
        return real_plan(**inputs)

    monkeypatch.setattr(scale_service, "plan", counted)
    rig.gpu_node("gpu-1")  # a node of no group: nothing to scale
    rig.submit("j-1", gpus=4)
    scaler = rig.scaler()
    scaler.check(trigger="schedule")  # admits j-1 (and stamps the node empty)
    rig.cluster.advance()
    scaler.check(trigger="schedule")  # j-1 runs (the node's stamp is cleared)
    scaler.check(trigger="schedule")  # the node as patched: a plan with nothing to do
    plans = len(made)
    # A job no group can ever hold joins the queue: admission runs, the plan stands.
    rig.submit("j-2", gpus=8)
    result = scaler.check(trigger="requested:jobs submitted", asked_for=["j-2"])
    assert result.skipped == [] and len(made) == plans
    before, after = rig.state.decisions[-2]["plan"], rig.state.decisions[-1]["plan"]
    assert {k: v for k, v in after.items() if k != "admission"} == {
        k: v for k, v in before.items() if k != "admission"
    }
    assert [w["job"] for w in after["admission"]["waiting"]] == ["j-2"]
    # j-1 finishes: its pod changed, so the plan is made again.
    rig.run(minutes=6)
    scaler.check(trigger="schedule")
    assert len(made) == plans + 1


def test_dry_run_records_the_plan_and_changes_nothing(rig: Rig) -> None:
    rig.submit("j-1")
    result = rig.scaler(dry_run=True).check(trigger="schedule")
    assert result.plan["scaleUp"][0]["group"] == "p3-usw2" and result.done == {}
    assert rig.fleet.describe_groups([USW2])[0].desired == 0
    assert rig.state.decisions[0]["dryRun"] is True


def test_a_check_that_finds_the_lease_taken_does_nothing(rig: Rig) -> None:
    rig.submit("j-1")
    assert rig.state.acquire_lease(
        name="scale", holder="other", now=rig.clock.now(), duration=timedelta(minutes=2)
    )
    result = rig.scaler(holder="me").check(trigger="schedule")
    assert result.acted is False and result.skipped == ["lease held by another check"]
    assert rig.fleet.describe_groups([USW2])[0].desired == 0


def test_insufficient_capacity_backs_off_and_falls_back_to_the_other_region(rig: Rig) -> None:
    for i in range(8):  # 8 GPUs: two p3.8xlarge, but us-west-2 has room for one
        rig.submit(f"j-{i}")
    rig.scaler().check(trigger="schedule")
    result = rig.scaler().check(trigger="schedule")
    assert {"group": "p3-usw2", "to": 1} in result.done["givenBack"]
    assert result.done["scaledUp"] == [{"group": "p3-use1", "to": 1}]
    assert result.fallbacks == ["RegionFallback:us-west-2->us-east-1"]
    assert rig.state.load_health()["p3-usw2"].in_backoff(rig.clock.now())
    rig.run_checked(minutes=4)
    rig.run(minutes=1)
    assert sum(1 for p in rig.cluster.list_pods() if p["status"]["phase"] == "Running") == 8


def test_idle_nodes_go_one_check_at_a_time_and_busy_ones_never(rig: Rig) -> None:
    rig.submit("short")
    rig.cluster.set_behaviour("short", run_for=timedelta(minutes=1))
    rig.scaler().check(trigger="schedule")
    rig.run_checked(minutes=4)
    assert len(rig.cluster.list_nodes()) == 1
    rig.run(minutes=2)  # the job is done; this check finds the node empty and stamps it
    assert "terminated" not in rig.scaler().check(trigger="schedule").done
    node = rig.cluster.list_nodes()[0]
    assert "squall.io/empty-since" in node["metadata"]["annotations"]
    rig.run(minutes=6)  # idle past the threshold, counted from the stamp
    result = rig.scaler().check(trigger="schedule")
    assert len(result.done["terminated"]) == 1
    rig.run(minutes=1)
    assert rig.cluster.list_nodes() == [] and rig.fleet.describe_groups([USW2])[0].desired == 0


def test_an_old_node_emptied_just_now_is_kept_for_the_idle_threshold(rig: Rig) -> None:
    # given a node that has been Ready for an hour, whose job just finished and was cleaned up
    rig.submit("long")
    rig.cluster.set_behaviour("long", run_for=timedelta(minutes=60))
    rig.scaler().check(trigger="schedule")
    rig.run_checked(minutes=8)  # booted and admitted
    assert rig.store.get("long").objects_created  # type: ignore[union-attr]
    rig.run(minutes=54)
    rig.cluster.delete_job_objects(namespace="team-research", job_id="long")  # as reconcile does
    # when the next check finds it empty, it keeps it; after the threshold it goes
    assert "terminated" not in rig.scaler().check(trigger="schedule").done
    rig.run(minutes=4)
    assert "terminated" not in rig.scaler().check(trigger="schedule").done
    rig.run(minutes=2)
    assert len(rig.scaler().check(trigger="schedule").done["terminated"]) == 1


def test_a_busy_node_loses_its_empty_stamp(rig: Rig) -> None:
    rig.submit("first")
    rig.cluster.set_behaviour("first", run_for=timedelta(minutes=1))
    rig.scaler().check(trigger="schedule")
    rig.run(minutes=5)
    rig.scaler().check(trigger="schedule")
    assert "squall.io/empty-since" in rig.cluster.list_nodes()[0]["metadata"]["annotations"]
    rig.submit("second")
    rig.cluster.set_behaviour("second", run_for=timedelta(minutes=30))
    rig.run(minutes=1)
    rig.scaler().check(trigger="schedule")
    assert "squall.io/empty-since" not in (rig.cluster.list_nodes()[0]["metadata"].get("annotations") or {})


def test_a_node_that_became_busy_before_termination_is_kept(rig: Rig) -> None:
    rig.idle_node()
    scaler = rig.scaler()
    real_list = rig.cluster.list_pods

    def pod_arrives(**kwargs: Any) -> list[dict[str, Any]]:
        # a pod bound between observing and cordoning
        if kwargs.get("node_name"):
            return [
                {
                    "metadata": {"name": "late", "namespace": "x"},
                    "spec": {"nodeName": kwargs["node_name"], "containers": []},
                    "status": {"phase": "Running"},
                }
            ]
        return real_list(**kwargs)

    rig.cluster.list_pods = pod_arrives  # type: ignore[method-assign]
    result = scaler.check(trigger="schedule")
    assert "terminated" not in result.done and "became busy" in result.skipped[0]
    node = rig.cluster.list_nodes()[0]
    assert not node["spec"].get("unschedulable"), "uncordoned again"


def test_a_node_that_vanished_before_the_cordon_still_lets_the_instance_go(rig: Rig) -> None:
    rig.idle_node()
    rig.cluster.fail_calls("patch_node", NotFoundError("node gone"), times=1)
    result = rig.scaler().check(trigger="schedule")
    assert result.done["terminated"][0]["node"] is None


def test_aws_throttling_is_recorded_and_nothing_crashes(rig: Rig) -> None:
    rig.submit("j-1")
    rig.fleet.throttle(1)
    with pytest.raises(RetryableError):
        rig.scaler().check(trigger="schedule")  # observing failed: the invocation is retried
    assert rig.state.acquire_lease(
        name="scale", holder="z", now=rig.clock.now(), duration=timedelta(seconds=1)
    ), "the lease was released"
    rig.state.release_lease(name="scale", holder="z")
    rig.fleet._throttled_calls = 0
    scaler = rig.scaler()
    original = rig.fleet.set_desired_capacity

    def throttled(**kwargs: Any) -> None:
        raise RetryableError("SetDesiredCapacity: Throttling: Rate exceeded")

    rig.fleet.set_desired_capacity = throttled  # type: ignore[method-assign]
    result = scaler.check(trigger="schedule")
    assert "Rate exceeded" in result.errors[0] and "scaledUp" not in result.done
    rig.fleet.set_desired_capacity = original  # type: ignore[method-assign]
    assert rig.scaler().check(trigger="schedule").done["scaledUp"] == [{"group": "p3-usw2", "to": 1}]


def bind_one_replica_in_us_west_2(rig: Rig, *, workers: int) -> None:
    """A gang of 4-GPU workers with one of them bound to an unmanaged node in us-west-2."""
    rig.cluster.add_node(
        name="usw2-unmanaged",
        allocatable=GPU_NODE,
        labels={"topology.kubernetes.io/region": "us-west-2"},
        taints=[],
        provider_id="aws:///us-west-2a/i-unmanaged",
    )
    rig.submit("gang", gpus=4, replicas={"worker": {"count": workers}})
    # Let go without admission's region (by hand): the release is the safety net for a
    # gang bound in part. Its record says it is placed, as admission would have left it.
    job = rig.store.get("gang")
    assert job is not None
    for manifest in render(load_spec(job.spec), job_id="gang", namespace=job.namespace):
        if manifest["kind"] == "Job":
            manifest["spec"]["suspend"] = False
        rig.cluster.create(manifest)
    placed, event = transition(
        job,
        to=JobStatus.QUEUED,
        reason="Admitted:us-west-2",
        at=rig.clock.now(),
        cluster="local",
        region="us-west-2",
        objects_created=True,
    )
    rig.store.save(placed, event)
    rig.cluster.advance()


def back_off(rig: Rig, *groups: str) -> None:
    for group in groups:
        rig.state.save_health(
            group, GroupHealth(backoff_until=rig.clock.now() + timedelta(hours=1), consecutive_failures=3)
        )


def test_a_stranded_gang_is_released_and_says_why(rig: Rig) -> None:
    # given a gang with one pod bound in us-west-2, which cannot take the rest (backed off),
    # while us-east-1 could take all of it
    bind_one_replica_in_us_west_2(rig, workers=6)
    back_off(rig, "p3-usw2")
    # when
    result = rig.scaler().check(trigger="schedule")
    # then
    assert result.done["released"] == [{"job": "gang", "region": "us-west-2"}]
    assert result.plan["stranded"] == ["gang"]
    assert rig.cluster.list_jobs(job_id="gang") == []
    assert rig.store.events("gang")[-1].reason == "GangReleased:us-west-2"
    released = rig.store.get("gang")
    assert released is not None and released.status is JobStatus.QUEUED
    assert released.cluster is None and [e.job_id for e in rig.store.queue()] == ["gang"], "back in the queue"


def test_a_gang_no_region_can_take_waits_where_it_is(rig: Rig) -> None:
    # given the same gang, but us-east-1 is backed off too: starting over would not help
    bind_one_replica_in_us_west_2(rig, workers=6)
    back_off(rig, "p3-usw2", "p3-use1")
    # when
    result = rig.scaler().check(trigger="schedule")
    # then it keeps its bound replica and waits for room
    assert "released" not in result.done and result.plan["stranded"] == []
    assert len(rig.cluster.list_jobs(job_id="gang")) == 6
    assert any(u["pod"].startswith("team-research/gang") for u in result.plan["unschedulable"])


def test_a_release_stands_when_the_job_note_cannot_be_written(rig: Rig) -> None:
    bind_one_replica_in_us_west_2(rig, workers=6)
    back_off(rig, "p3-usw2")

    def throttled(job_id: str) -> None:
        raise RetryableError("GetItem: ThrottlingException")

    rig.store.get = throttled  # type: ignore[method-assign]
    result = rig.scaler().check(trigger="schedule")
    assert result.done["released"] == [{"job": "gang", "region": "us-west-2"}]
    assert rig.state.decisions, "the decision is still recorded"


@pytest.fixture
def dynamo_state(jobs_table: Any) -> DynamoScaleState:
    return DynamoScaleState(jobs_table, "jobs")


def test_the_dynamodb_lease_admits_one_holder_until_it_expires(dynamo_state: DynamoScaleState) -> None:
    now = VirtualClock().now()
    assert dynamo_state.acquire_lease(name="scale", holder="a", now=now, duration=timedelta(minutes=2))
    assert not dynamo_state.acquire_lease(name="scale", holder="b", now=now, duration=timedelta(minutes=2))
    assert dynamo_state.acquire_lease(
        name="scale", holder="b", now=now + timedelta(minutes=3), duration=timedelta(minutes=2)
    )
    dynamo_state.release_lease(name="scale", holder="a")  # a lost it: releasing must not free b's lease
    assert not dynamo_state.acquire_lease(
        name="scale", holder="c", now=now + timedelta(minutes=3), duration=timedelta(minutes=2)
    )


def test_group_health_and_decisions_round_trip(dynamo_state: DynamoScaleState) -> None:
    now = VirtualClock().now()
    health = GroupHealth(
        backoff_until=now + timedelta(minutes=5), consecutive_failures=2, last_failure_at=now, reason="ICE"
    )
    dynamo_state.save_health("p3-usw2", health)
    assert dynamo_state.load_health() == {"p3-usw2": health}
    dynamo_state.record_decision(
        at=now, trigger="schedule", dry_run=False, plan={"scaleUp": []}, acted={"x": [1]}
    )
    (decision,) = dynamo_state.decisions(day=now)
    assert decision["trigger"] == "schedule" and decision["acted"] == {"x": [1]}


def test_a_gang_whose_release_raises_is_reported_on_the_job_and_the_check_goes_on(rig: Rig) -> None:
    # given a stranded gang whose objects cannot be deleted: an unexpected error, not AWS or Kubernetes
    bind_one_replica_in_us_west_2(rig, workers=6)
    back_off(rig, "p3-usw2")

    def broken(*, namespace: str, job_id: str) -> int:
        raise RuntimeError("a bug in the adapter")

    rig.cluster.delete_job_objects = broken  # type: ignore[method-assign]
    # when
    result = rig.scaler().check(trigger="schedule")
    # then the check finishes, records its decision, and says what went wrong where
    assert "released" not in result.done
    assert any("release gang" in e and "RuntimeError" in e for e in result.errors)
    assert rig.state.decisions, "the decision is still recorded"
    assert rig.metrics.total("JobErrors") == 1
    assert rig.store.events("gang")[-1].reason == "ScaleCheckError:RuntimeError"


def test_a_note_that_raises_unexpectedly_does_not_undo_the_release(rig: Rig) -> None:
    bind_one_replica_in_us_west_2(rig, workers=6)
    back_off(rig, "p3-usw2")

    def corrupt(job_id: str) -> None:
        raise KeyError("status")  # e.g. an item the store cannot read

    rig.store.get = corrupt  # type: ignore[method-assign]
    result = rig.scaler().check(trigger="schedule")
    assert result.done["released"] == [{"job": "gang", "region": "us-west-2"}]
    assert any("note gang" in e for e in result.errors)
    assert rig.state.decisions


def unreadable_pod(name: str, *, node: str | None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "other-team", "name": name, "uid": f"u-{name}", "resourceVersion": "1"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_objects_the_planner_cannot_read_never_stop_the_check_nor_free_a_busy_node(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a node idle past the threshold, as a check would scale it down ...
    rig.idle_node()
    (node,) = rig.cluster.list_nodes()
    # ... but also running a pod whose requests cannot be read (say, written by a newer
    # API), beside an unbound one, and a node object that cannot be read either
    extra_pods = [unreadable_pod("busy", node=node["metadata"]["name"]), unreadable_pod("waiting", node=None)]
    extra_nodes = [{"metadata": {"name": "odd", "uid": "u-odd", "resourceVersion": "1"},
                    "status": {"allocatable": {"cpu": []}}}]  # fmt: skip
    list_pods, list_nodes = rig.cluster.list_pods, rig.cluster.list_nodes
    monkeypatch.setattr(rig.cluster, "list_pods", lambda **kw: [*list_pods(**kw), *extra_pods])
    monkeypatch.setattr(rig.cluster, "list_nodes", lambda: [*list_nodes(), *extra_nodes])

    # when the scheduled check runs
    result = rig.scaler().check(trigger="schedule")

    # then it plans as before, keeps the node the unreadable pod runs on, and counts what it left out
    assert "terminated" not in result.done
    assert [n["metadata"]["name"] for n in rig.cluster.list_nodes()] == [node["metadata"]["name"], "odd"]
    assert rig.metrics.total("UnreadableObjects") == 3
    # and once that pod is gone the node goes as any idle node does: stamped empty, then idle past the threshold
    extra_pods.clear()
    assert "terminated" not in rig.scaler().check(trigger="schedule").done
    rig.run(minutes=6)
    assert len(rig.scaler().check(trigger="schedule").done["terminated"]) == 1


def test_a_decision_too_large_for_one_item_records_the_first_part_of_its_lists(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import squall.services.scale as scale

    monkeypatch.setattr(scale, "MAX_DECISION_BYTES", 6_000)
    for i in range(40):
        rig.submit(f"j-{i}")
    result = rig.scaler().check(trigger="schedule")
    (decision,) = rig.state.decisions
    assert len(json.dumps(decision["plan"], separators=(",", ":"))) <= 3_000
    assert decision["plan"]["truncated"]["admission.waiting"] == 40
    assert 1 <= len(decision["plan"]["admission"]["waiting"]) < 40
    assert len(result.plan["admission"]["waiting"]) == 40, "the check's own answer is whole"


def test_shrunk_to_fit_cuts_the_longest_list_first_and_keeps_small_documents_as_they_are() -> None:
    from squall.services.decision_record import shrunk_to_fit

    small = {"scaleUp": [1, 2], "admission": {"waiting": [3]}}
    assert shrunk_to_fit(small, 1_000) == small
    doc = {"short": list(range(5)), "nested": {"long": ["x" * 10] * 1_000}}
    fitted = shrunk_to_fit(doc, 800)
    assert len(json.dumps(fitted, separators=(",", ":"))) <= 800
    assert fitted["short"] == list(range(5)) and fitted["truncated"] == {"nested.long": 1_000}


def test_a_check_that_sees_nothing_changed_and_no_timer_due_ends_after_its_reads(rig: Rig) -> None:
    # given a busy node (a long job runs on it) and nothing else to do
    rig.submit("long")
    rig.cluster.set_behaviour("long", run_for=timedelta(hours=5))
    scaler = rig.scaler()
    scaler.check(trigger="schedule")
    for _ in range(6):
        rig.run(minutes=1)
        scaler.check(trigger="schedule")
    decisions = len(rig.state.decisions)
    # when nothing changes, the next check plans nothing and records nothing
    rig.run(minutes=1)
    quiet = scaler.check(trigger="schedule")
    assert quiet.skipped == ["nothing changed since the last check, no timer due"]
    assert len(rig.state.decisions) == decisions
    # and a change (a new job) makes the next check whole again
    rig.submit("next")
    assert scaler.check(trigger="schedule").skipped == []
    assert len(rig.state.decisions) == decisions + 1


def test_a_quiet_check_still_plans_when_a_timer_comes_due(rig: Rig) -> None:
    # given an empty node: its idle threshold is a timer the quiet check waits for
    rig.submit("short")
    rig.cluster.set_behaviour("short", run_for=timedelta(minutes=1))
    scaler = rig.scaler()
    scaler.check(trigger="schedule")
    rig.run_checked(minutes=8)  # booted, admitted, ran its minute, done
    scaler.check(trigger="schedule")
    quiet = scaler.check(trigger="schedule")
    assert quiet.skipped == ["nothing changed since the last check, no timer due"]
    assert scaler.parsed.quiet is not None and scaler.parsed.quiet.until is not None
    # when the timer comes due with nothing else changed, the check is whole again
    rig.clock.advance(scaler.parsed.quiet.until - rig.clock.now())
    assert scaler.check(trigger="schedule").skipped == []
