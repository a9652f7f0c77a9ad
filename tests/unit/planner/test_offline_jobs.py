"""`squall plan --jobs`: the suspended jobs admitted offline as the scale check admits them, then planned.

The Job lists are what Squall itself renders (`core.manifests.render`, suspended), as
`kubectl get jobs -A -o json` prints them.
"""

from __future__ import annotations

import copy
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.core import manifests
from squall.core.spec import parse_spec
from squall.planner.admission import TeamShare
from squall.planner.offline import PlanInputError, plan_offline
from tests.job_bodies import REGISTRY, job_body

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TEAMS = {"research": "team-research", "vision": "team-vision"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def group(
    name: str = "p3-usw2", *, region: str = "us-west-2", instances: int = 2, max_size: int = 4
) -> dict[str, Any]:
    return {
        "name": name,
        "region": region,
        "instanceType": "p3.2xlarge",
        "allocatable": {"cpu": "7800m", "memory": "55Gi", "nvidia.com/gpu": 1, "pods": 58},
        "taints": [GPU_TAINT],
        "maxSize": max_size,
        "desired": instances,
        "instances": [
            {"id": instance_id(name, i), "lifecycleState": "InService", "launchTime": "2026-01-05T09:00:00Z"}
            for i in range(instances)
        ],
    }


def instance_id(group_name: str, index: int) -> str:
    return f"i-{zlib.crc32(group_name.encode()):08x}{index:09x}"


def node(group_name: str, index: int, *, region: str = "us-west-2") -> dict[str, Any]:
    """A ready GPU node of a group, as `kubectl get nodes -o json` prints one."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"{group_name}-node-{index}",
            "creationTimestamp": "2026-01-05T09:01:00Z",
            "labels": {
                "topology.kubernetes.io/region": region,
                "node.kubernetes.io/instance-type": "p3.2xlarge",
            },
        },
        "spec": {"providerID": f"aws:///{region}a/{instance_id(group_name, index)}", "taints": [GPU_TAINT]},
        "status": {
            "allocatable": {"cpu": "7800m", "memory": "55Gi", "nvidia.com/gpu": "1", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-05T09:02:00Z"}],
        },
    }


def jobs_of(
    name: str, team: str, *, at: datetime, priority: int = 50, gpu: int = 1, workers: int = 0
) -> list[dict[str, Any]]:
    """The suspended replica Jobs Squall creates for one job spec."""
    body = job_body(name, team, priority=priority, gpu=gpu, workers=workers)
    spec = parse_spec(body, teams=TEAMS, registries=[REGISTRY], max_runtime_limit=timedelta(days=30))
    objects = manifests.render(spec, job_id=name, namespace=TEAMS[team], submitted_at=at)
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert jobs and all(j["spec"]["suspend"] is True for j in jobs)
    return jobs


def job_list(*groups_of_jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": [j for jobs in groups_of_jobs for j in jobs]}


def minutes_ago(minutes: int) -> datetime:
    return NOW - timedelta(minutes=minutes)


def offline(
    jobs_doc: Any,
    *,
    teams: dict[str, TeamShare] | None = None,
    groups: list[dict[str, Any]] | None = None,
    nodes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return plan_offline(
        nodes_doc={"items": nodes if nodes is not None else [node("p3-usw2", 0), node("p3-usw2", 1)]},
        pods_doc={"items": []},
        groups_doc={"nodeGroups": groups if groups is not None else [group()]},
        jobs_doc=jobs_doc,
        teams=teams,
        now=NOW,
    )


def test_admits_by_priority_and_fair_share_then_plans_for_the_queue() -> None:
    # given: two ready 1-GPU nodes; research's burst first, a priority-90 job last, vision capped at 1 GPU
    doc = job_list(
        *(jobs_of(f"r{i}", "research", at=minutes_ago(30 - i)) for i in range(3)),
        jobs_of("v0", "vision", at=minutes_ago(20)),
        jobs_of("v1", "vision", at=minutes_ago(19)),
        jobs_of("urgent", "research", at=minutes_ago(1), priority=90),
    )
    # when
    result = offline(doc, teams={"vision": TeamShare(quota=1)})
    # then: the priority-90 job overtakes, vision gets its fair share, the rest wait in order
    admission = result["admission"]
    assert [(a["job"], a["region"]) for a in admission["admitted"]] == [
        ("urgent", "us-west-2"),
        ("v0", "us-west-2"),
    ]
    waiting = {w["job"]: w for w in admission["waiting"]}
    assert [w["job"] for w in admission["waiting"]] == ["r0", "r1", "r2", "v1"]
    assert [(waiting[j]["position"], waiting[j]["teamPosition"]) for j in ("r0", "r1", "r2")] == [
        (1, 1),
        (2, 2),
        (3, 3),
    ]
    assert (
        waiting["r0"]["reason"] == "Queued"
        and waiting["r0"]["message"] == "1st in research, 1st overall; needs 1 GPU"
    )
    assert waiting["v1"]["reason"] == "QuotaExceeded:1/1 GPUs" and waiting["v1"]["position"] == 0
    assert admission["waitingTotal"] == 4
    assert admission["inUse"] == {"research": 1, "vision": 1}
    # the plan buys for the three research jobs the queue will admit next, not for vision's held one
    [scale_up] = result["scaleUp"]
    assert (scale_up["group"], scale_up["from"], scale_up["to"]) == ("p3-usw2", 2, 4)  # max size 4
    assert result["scaleUp"][0]["reasons"]


def test_without_jobs_the_plan_has_no_admission_and_is_as_before() -> None:
    # given: the same inputs with and without an empty Job list
    without = offline(None)
    empty = offline({"items": []})
    # then
    assert "admission" not in without
    assert empty["admission"] == {"admitted": [], "waiting": [], "waitingTotal": 0, "inUse": {}}
    assert {k: v for k, v in empty.items() if k != "admission"} == without


def test_a_queued_gang_is_admitted_whole_in_the_one_region_that_holds_it() -> None:
    # given: one ready node in us-west-2, three in us-east-1; a 3-replica job
    groups = [group("p3-usw2", instances=1), group("p3-use1", region="us-east-1", instances=3)]
    nodes = [node("p3-usw2", 0), *(node("p3-use1", i, region="us-east-1") for i in range(3))]
    doc = job_list(jobs_of("gang", "research", at=minutes_ago(5), workers=3))
    # when
    result = offline(doc, groups=groups, nodes=nodes)
    # then: all of it in us-east-1, nothing bought
    assert [(a["job"], a["region"], a["gpus"]) for a in result["admission"]["admitted"]] == [
        ("gang", "us-east-1", 3)
    ]
    assert result["scaleUp"] == [] and result["admission"]["waiting"] == []


def test_a_gang_too_large_for_ready_room_waits_and_its_capacity_is_bought() -> None:
    # given: two ready nodes; a 3-GPU gang
    doc = job_list(jobs_of("gang", "research", at=minutes_ago(5), workers=3))
    # when
    result = offline(doc)
    # then: not admitted in part; the planner scales the region for the whole gang
    [waiting] = result["admission"]["waiting"]
    assert waiting["job"] == "gang" and waiting["reason"] == "Queued"
    assert waiting["message"] == "1st in research, 1st overall; needs 3 GPUs over 3 replicas in one region"
    assert result["admission"]["admitted"] == []
    [scale_up] = result["scaleUp"]
    assert (scale_up["from"], scale_up["to"]) == (2, 3)


def test_jobs_that_are_not_squalls_are_left_out() -> None:
    # given: a Job of someone else beside a Squall job
    foreign = copy.deepcopy(jobs_of("r0", "research", at=minutes_ago(5))[0])
    foreign["metadata"]["name"] = "nightly-backup"
    foreign["metadata"]["labels"] = {"app": "backup"}
    doc = job_list([foreign], jobs_of("r1", "research", at=minutes_ago(4)))
    # when
    result = offline(doc)
    # then
    assert [a["job"] for a in result["admission"]["admitted"]] == ["r1"]


def test_every_waiting_job_is_listed_offline() -> None:
    # given: 250 queued jobs and no room (the decision record keeps only the first 200)
    doc = job_list(*(jobs_of(f"j{i:03d}", "research", at=minutes_ago(300 - i)) for i in range(250)))
    # when
    result = offline(doc, nodes=[])
    # then
    admission = result["admission"]
    assert admission["waitingTotal"] == 250 and len(admission["waiting"]) == 250
    assert [w["position"] for w in admission["waiting"]] == list(range(1, 251))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda job: job["metadata"]["annotations"].update({"squall.io/priority": "urgent"}),
            "items[1]: job team-research/r1-worker-0: metadata.annotations.squall.io/priority: expected a whole number from 0 to 100",
        ),
        (
            lambda job: job["spec"].update(suspend="yes"),
            "items[1]: job team-research/r1-worker-0: spec.suspend",
        ),
        (
            lambda job: job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].update(
                cpu="lots"
            ),
            "items[1]: job team-research/r1-worker-0:",
        ),
    ],
)
def test_a_bad_job_is_refused_naming_the_item_and_field(change: Any, words: str) -> None:
    # given
    doc = job_list(jobs_of("r0", "research", at=minutes_ago(5)), jobs_of("r1", "research", at=minutes_ago(4)))
    change(doc["items"][1])
    # when
    with pytest.raises(PlanInputError) as raised:
        offline(doc)
    # then
    assert raised.value.document == "jobs"
    assert str(raised.value).startswith(words)


def test_a_jobs_document_that_is_no_list_is_refused() -> None:
    with pytest.raises(PlanInputError) as raised:
        offline("jobs")
    assert raised.value.document == "jobs" and "expected a job list" in str(raised.value)
