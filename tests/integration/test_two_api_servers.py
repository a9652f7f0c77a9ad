"""The real adapters over HTTP, two API servers: each job's objects in the one admission chose.

Two Kubernetes API stand-ins (kmock), each behind the production adapter
(KubernetesCluster), handed to the real admission, scale check and reconcile as
``clusters={"west": ..., "east": ...}`` (two_kube_apis.py). What the simulated
clusters of test_admission_clusters.py and test_reconcile_clusters.py show, here
over the wire: creation in the chosen server only, a storm of failures on one server
that the other goes on through, and nothing made twice when it answers again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import kmock
import pytest

from squall.conventions import EMPTY_SINCE_ANNOTATION, REGION_LABEL
from squall.core.errors import RetryableError
from squall.core.jobs import JobStatus, Reason
from squall.local.memory import InMemoryScaleState
from squall.planner import Policy
from squall.planner.offline import parse_groups
from squall.ports import GroupRef
from squall.services.scale import ScaleConfig, Scaler, ScaleResult
from tests.fakes.fleet import FakeFleet

from .two_kube_apis import GPU_TAINT, NAMESPACE, REGIONS, Storm, TwoApis, rfc3339, two_kube_apis

pytestmark = pytest.mark.timeout(60)

# A storm: 5xx, credentials the server no longer takes, a server that does not answer in time.
FAILURES = ["503", "401", "hung"]


@pytest.fixture
def two() -> Iterator[TwoApis]:
    with two_kube_apis() as world:
        yield world


def objects_of(two: TwoApis, *job_ids: str) -> dict[str, dict[str, list[str]]]:
    """job -> server -> the names of its objects there (servers holding none left out)."""
    return {
        job_id: {name: found for name, api in two.apis.items() if (found := api.objects(job_id))}
        for job_id in job_ids
    }


def gang(job_id: str, server: str) -> dict[str, list[str]]:
    """Where a gang of two workers' objects are when all of them are in `server`."""
    return {
        server: [
            f"Job/{job_id}-worker-0",
            f"Job/{job_id}-worker-1",
            f"Service/{job_id}-worker-0",
            f"Service/{job_id}-worker-1",
        ]
    }


# ==== admission: creation in the chosen server ========================================


def test_admission_creates_a_jobs_objects_in_the_chosen_server_only(two: TwoApis) -> None:
    # given a ready GPU node in east alone, and a gang of two workers in the queue
    two.node("east", "gpu-0")
    two.submit("g", gpus=2, workers=2)
    assert objects_of(two, "g") == {"g": {}}, "a queued job has no objects in any server"
    # when admission runs
    report = two.admit()
    # then its Jobs and Services are in east's API server; west was sent no create at all
    assert report.errors == []
    assert objects_of(two, "g") == {"g": gang("g", "east")}
    assert two.west.posted() == []
    job = two.job("g")
    assert (job.cluster, job.region, job.objects_created) == ("east", "us-east-1", True)
    # and what east stores runs at once, pinned to east's region
    for name in ("g-worker-0", "g-worker-1"):
        stored = two.east.kube.get("batch/v1/jobs", NAMESPACE, name)
        assert stored is not None and stored["spec"]["suspend"] is False
        terms = stored["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert {"key": REGION_LABEL, "operator": "In", "values": ["us-east-1"]} in terms[0][
            "matchExpressions"
        ]
    # when admission runs again (a retried check)
    posted = two.east.posted()
    two.admit()
    # then nothing is sent again
    assert two.east.posted() == posted and two.west.posted() == []


def test_gangs_that_each_fill_a_server_go_one_to_each_whole(two: TwoApis) -> None:
    two.node("west", "gpu-0")
    two.node("east", "gpu-0")  # the same node name in both servers
    two.submit("g-1", gpus=2, workers=2)
    two.submit("g-2", gpus=2, workers=2)
    two.admit()
    placed = {job_id: str(two.job(job_id).cluster) for job_id in ("g-1", "g-2")}
    assert sorted(placed.values()) == ["east", "west"]
    assert objects_of(two, "g-1", "g-2") == {job_id: gang(job_id, where) for job_id, where in placed.items()}
    for name, api in two.apis.items():
        mine = [job_id for job_id, where in placed.items() if where == name]
        assert sorted(api.posted()) == sorted(o for j in mine for o in gang(j, name)[name]), (
            "each object once"
        )


# ==== the scale check through a storm on one server ===================================

GROUPS = [
    {
        "name": f"p3-{cluster}",
        "cluster": cluster,
        "region": region,
        "instanceType": "p3.8xlarge",
        "allocatable": {"cpu": "32", "memory": "244Gi", "nvidia.com/gpu": 4, "pods": 58},
        "taints": [GPU_TAINT],
        "maxSize": 4,
    }
    for cluster, region in REGIONS.items()
]
POLICY = Policy(idle_threshold=timedelta(minutes=5), boot_grace=timedelta(minutes=2))


class Checks:
    """The scale check over both servers and a fleet stand-in, once a minute."""

    def __init__(self, two: TwoApis) -> None:
        self.two = two
        self.fleet = FakeFleet()
        self.state = InMemoryScaleState()
        self.refs = {name: self.fleet.add_group(f"p3-{name}", region) for name, region in REGIONS.items()}
        self.groups, _ = parse_groups(GROUPS)

    def boot(self, cluster: str, number: int, *, empty_for: timedelta | None = None) -> str:
        """A node of `cluster`'s group, booted an hour ago and ready (empty since `empty_for` ago)."""
        ref = self.refs[cluster]
        instance = f"i-{cluster}{number:04d}"
        self.fleet.add_instance(ref, instance, launch_time=self.two.clock.now() - timedelta(hours=1))
        self.fleet.set_desired_capacity(ref=ref, desired=self.fleet.group(ref).desired + 1)
        annotations = {}
        if empty_for is not None:
            annotations[EMPTY_SINCE_ANNOTATION] = rfc3339(self.two.clock.now() - empty_for)
        return self.two.node(cluster, f"gpu-{number}", instance_id=instance, annotations=annotations)

    def check(self) -> ScaleResult:
        two = self.two
        result = Scaler(
            state=self.state,
            clusters=two.clusters,
            fleet=self.fleet,
            clock=two.clock,
            metrics=two.metrics,
            config=ScaleConfig(groups=self.groups, policy=POLICY),
            store=two.store,
            holder="check",
        ).check(trigger="schedule")
        two.clock.advance(timedelta(minutes=1))
        return result

    def acted_on(self, cluster: str, since: int) -> list[str]:
        """The fleet calls that changed `cluster`'s group since call number `since`."""
        ref: GroupRef = self.refs[cluster]
        return [
            call.method
            for call in self.fleet.calls[since:]
            if call.method not in ("describe_groups", "recent_activities")
            and (call.args.get("ref") == ref or call.args.get("region") == ref.region)
        ]


def unreachable_points(two: TwoApis, cluster: str) -> list[float]:
    return [
        p.value
        for p in two.metrics.points
        if p.name == "ClusterUnreachable" and p.dimensions == {"Cluster": cluster}
    ]


@pytest.mark.parametrize("failure", FAILURES)
def test_a_storm_on_one_server_the_other_takes_the_queue_and_nothing_is_made_twice(
    two: TwoApis, failure: str
) -> None:
    checks = Checks(two)
    # given a gang running in west, on one of west's two nodes
    checks.boot("west", 0)
    checks.boot("west", 1)
    two.submit("before", gpus=2, workers=2)
    checks.check()
    assert two.job("before").cluster == "west"
    two.run("west", "before", node="gpu-0")
    # and a gang placed on west's other node whose objects could not all be made (creates failed)
    creates = Storm(two.west.kube, kmock.method.POST)
    creates.on = True
    two.submit("mid", gpus=2, workers=2)
    placing = checks.check()
    creates.on = False
    assert any(e.startswith("create mid in west: ") for e in placing.errors), placing.errors
    mid = two.job("mid")
    assert (mid.cluster, mid.objects_created) == ("west", False)
    # when west fails every request, east has booted two nodes, and two gangs are queued
    storm = Storm(two.west.kube, failure=failure)
    storm.on = True
    checks.boot("east", 0)
    checks.boot("east", 1)
    checks.boot("west", 2, empty_for=timedelta(hours=1))  # idle long past the threshold
    fleet_calls, west_requests = len(checks.fleet.calls), len(two.west.kube.requests())
    two.submit("a", gpus=2, workers=2)
    two.submit("b", gpus=2, workers=2)
    during = checks.check()
    # then east takes them, and the check says west could not be reached
    assert during.errors == []
    assert {j: two.job(j).cluster for j in ("a", "b")} == {"a": "east", "b": "east"}
    assert objects_of(two, "a", "b") == {"a": gang("a", "east"), "b": gang("b", "east")}
    assert during.plan["unreachableClusters"] == ["west"]
    recorded = checks.state.decisions[-1]
    assert recorded["plan"]["unreachableClusters"] == ["west"]
    assert unreachable_points(two, "west")[-1] == 1 and unreachable_points(two, "east")[-1] == 0
    # and the gang placed in west stays west's (its objects wait: never made in east)
    assert two.job("mid").cluster == "west" and two.east.objects("mid") == []
    two.run("east", "a", node="gpu-0")
    two.run("east", "b", node="gpu-1")
    # when the storm goes on for another check
    again = checks.check()
    # then nothing is made again, and nothing is asked of west or its group but a read
    assert again.plan["unreachableClusters"] == ["west"] and "admitted" not in again.done
    assert sorted(two.east.posted()) == sorted(gang("a", "east")["east"] + gang("b", "east")["east"])
    assert checks.acted_on("west", fleet_calls) == [], "its idle node is not scaled down unseen"
    assert {r.method for r in two.west.kube.requests()[west_requests:]} == {kmock.method.GET}
    # when west answers again
    storm.on = False
    west_posted = len(two.west.posted())
    after = checks.check()
    # then the placed gang's objects are made in west, and every job is in exactly one server
    assert "unreachableClusters" not in after.plan and unreachable_points(two, "west")[-1] == 0
    assert two.job("mid").objects_created
    assert objects_of(two, "before", "mid", "a", "b") == {
        "before": gang("before", "west"),
        "mid": gang("mid", "west"),
        "a": gang("a", "east"),
        "b": gang("b", "east"),
    }
    assert sorted(two.west.posted()[west_posted:]) == gang("mid", "west")["west"], "mid's, once each"
    assert sorted(two.east.posted()) == sorted(gang("a", "east")["east"] + gang("b", "east")["east"])
    # and west's idle node goes now that it can be seen
    assert after.done.get("terminated") == [
        {"instance": "i-west0002", "node": "west/gpu-2", "group": "p3-west"}
    ]
    # when the checks go on, nothing more is made anywhere
    checks.check()
    assert len(two.west.posted()) == west_posted + 4 and len(two.east.posted()) == 8


# ==== reconcile over two servers ======================================================


@pytest.mark.parametrize("failure", FAILURES)
def test_reconcile_observes_each_job_in_its_server_and_a_storm_loses_none(two: TwoApis, failure: str) -> None:
    # given a job running in each server (west full before east has a node)
    two.node("west", "gpu-0")
    two.submit("w")
    two.admit()
    two.run("west", "w", node="gpu-0")
    two.node("east", "gpu-0")
    two.submit("e")
    two.admit()
    two.run("east", "e", node="gpu-0")
    assert (two.job("w").cluster, two.job("e").cluster) == ("west", "east")
    # when reconcile runs
    two.clock.advance(timedelta(minutes=1))
    report = two.reconciler.run()
    # then each is observed running in its own server
    assert report.unreachable_clusters == [] and report.errors == []
    assert two.job("w").status is JobStatus.RUNNING and two.job("e").status is JobStatus.RUNNING
    # when west fails every request, and east's job completes meanwhile
    storm = Storm(two.west.kube, failure=failure)
    storm.on = True
    west_requests = len(two.west.kube.requests())
    two.complete("east", "e")
    reports = []
    for _ in range(3):  # past the grace after which a job without objects is missing
        two.clock.advance(timedelta(minutes=1))
        reports.append(two.reconciler.run())
    # then east's job ends and its objects go from east; west's runs on as far as Squall knows
    assert [r.unreachable_clusters for r in reports] == [["west"]] * 3
    assert two.job("e").status is JobStatus.SUCCEEDED and two.east.objects("e") == []
    w = two.job("w")
    assert (w.status, w.cluster, w.retries_used) == (JobStatus.RUNNING, "west", 0), "not lost"
    assert unreachable_points(two, "west") == [1, 1, 1]
    assert {r.method for r in two.west.kube.requests()[west_requests:]} == {kmock.method.GET}
    # when west answers again, and its job completes
    storm.on = False
    two.clock.advance(timedelta(minutes=1))
    assert two.reconciler.run().unreachable_clusters == []
    assert two.job("w").status is JobStatus.RUNNING
    two.complete("west", "w")
    two.clock.advance(timedelta(minutes=1))
    two.reconciler.run()
    # then its end is recorded once, it never lost its objects, and they go from west
    reasons = [event.reason for event in two.store.events("w")]
    assert two.job("w").status is JobStatus.SUCCEEDED
    assert reasons.count(Reason.STARTED) == 1 and reasons.count(Reason.COMPLETED) == 1
    assert Reason.OBJECTS_MISSING not in reasons
    assert two.west.objects("w") == []
    deleted = {(r.resource, r.name) for r in two.west.kube.requests(kmock.method.DELETE)}
    assert {name for _, name in deleted} == {"w-worker-0"}, deleted
    assert not [r for r in two.east.kube.requests(kmock.method.DELETE) if r.name == "w-worker-0"]


def test_a_gang_placed_in_a_server_that_cannot_be_read_is_not_told_it_can_never_run(two: TwoApis) -> None:
    # given a gang placed in west whose objects could not be made, and west then failing everything
    checks = Checks(two)
    checks.boot("west", 0)
    creates = Storm(two.west.kube, kmock.method.POST)
    creates.on = True
    two.submit("mid", gpus=2, workers=2)
    checks.check()
    creates.on = False
    assert (two.job("mid").cluster, two.job("mid").objects_created) == ("west", False)
    Storm(two.west.kube).on = True
    # when the scale check runs
    checks.check()
    # then its record still says it waits for west, not that it can never run anywhere
    messages = [event.message for event in two.store.events("mid")]
    assert not any("can ever hold it" in message for message in messages), messages


# ==== cancel: wherever the job is =====================================================


def test_a_cancel_deletes_in_the_jobs_server_only_and_waits_out_a_storm_there(two: TwoApis) -> None:
    # given a gang running in each server
    for name in ("west", "east"):
        two.node(name, "gpu-0")
    two.submit("g-1", gpus=2, workers=2)
    two.submit("g-2", gpus=2, workers=2)
    two.admit()
    where = {job_id: str(two.job(job_id).cluster) for job_id in ("g-1", "g-2")}
    in_east = next(job_id for job_id, name in where.items() if name == "east")
    in_west = next(job_id for job_id, name in where.items() if name == "west")
    west_requests = len(two.west.kube.requests())
    # when east's is cancelled
    two.intake.handle(body=json.dumps({"action": "cancel", "id": in_east}), message_id="m-cancel-1")
    # then its objects go from east, and west is sent nothing
    assert two.job(in_east).status is JobStatus.CANCELLED
    assert objects_of(two, in_east, in_west) == {in_east: {}, in_west: gang(in_west, "west")}
    assert len(two.west.kube.requests()) == west_requests
    # when west's is cancelled while west answers 503 to everything
    storm = Storm(two.west.kube)
    storm.on = True
    cancel = json.dumps({"action": "cancel", "id": in_west})
    with pytest.raises(RetryableError):
        two.intake.handle(body=cancel, message_id="m-cancel-2")
    # then it is not recorded cancelled while its objects are there (the message comes back)
    assert two.job(in_west).status is not JobStatus.CANCELLED
    # and once west answers, the redelivered cancel deletes them there
    storm.on = False
    two.intake.handle(body=cancel, message_id="m-cancel-2")
    assert two.job(in_west).status is JobStatus.CANCELLED
    assert objects_of(two, in_west) == {in_west: {}}
