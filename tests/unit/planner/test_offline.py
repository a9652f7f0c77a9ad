"""`squall plan` offline: kubectl JSON + the GROUPS document -> the plan as JSON."""

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.planner.offline import GroupsError, parse_groups, plan_offline

DATA = Path(__file__).parent / "data"
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

GROUPS_YAML = """
nodeGroups:
  - name: p3-usw2
    region: us-west-2
    asgName: squall-p3-usw2
    instanceType: p3.2xlarge
    allocatable: {cpu: 7800m, memory: 55Gi, nvidia.com/gpu: 1, pods: 58}
    labels: {squall.io/accelerator: v100}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
    priority: 10
    minSize: 0
    maxSize: 16
    spot: false
    pricePerHour: 3.06
    desired: 3
    instances:
      - {id: i-0a1b2c3d4e5f60001, lifecycleState: InService, launchTime: "2024-05-01T09:00:00Z"}
      - {id: i-0a1b2c3d4e5f60002, lifecycleState: InService, launchTime: "2024-05-01T08:09:00Z"}
      - {id: i-0a1b2c3d4e5f60003, lifecycleState: Pending, launchTime: "2024-05-01T11:54:00Z"}
  - name: p3-use1
    region: us-east-1
    instanceType: p3.2xlarge
    allocatable: {cpu: 7800m, memory: 55Gi, nvidia.com/gpu: 1, pods: 58}
    labels: {squall.io/accelerator: v100}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
    priority: 20
    maxSize: 8
    failures:
      - {time: "2024-05-01T11:58:00Z", reason: "Could not launch Spot Instances. UnfulfillableCapacity - Unable to fulfill capacity due to your request configuration."}
  - name: cpu-usw2
    region: us-west-2
    instanceType: x9.mystery
    allocatable: {cpu: "16", memory: 64Gi, pods: 110}
    maxSize: 10
"""


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def groups() -> dict[str, Any]:
    return yaml.safe_load(GROUPS_YAML)


def with_more_workers(pods: dict[str, Any], count: int) -> dict[str, Any]:
    worker = pods["items"][0]
    extra = []
    for index in range(1, count + 1):
        replica = copy.deepcopy(worker)
        replica["metadata"]["name"] = f"mnist-worker-{index}-abcde"
        extra.append(replica)
    return {**pods, "items": [*pods["items"], *extra]}


def test_plans_from_kubectl_output_and_a_groups_document() -> None:
    # when
    result = plan_offline(
        nodes_doc=load("nodes.json"), pods_doc=load("pods.json"), groups_doc=groups(), now=NOW
    )
    # then: the pending replica goes onto the node Squall cordoned, the CPU pod onto system-1
    assert {"scaleUp", "uncordon", "scaleDown", "unschedulable"} <= result.keys()
    assert result["scaleUp"] == []
    assert result["uncordon"] == ["ip-10-0-1-77.us-west-2.compute.internal"]
    assert result["scaleDown"] == []
    assert result["unschedulable"] == []
    [backoff] = result["backoff"]
    assert backoff["group"] == "p3-use1"
    assert backoff["until"] == "2024-05-01T12:05:00+00:00"
    assert backoff["reasons"][0].startswith("spot capacity: Could not launch Spot Instances")
    assert json.loads(json.dumps(result)) == result


def test_a_gang_that_outgrows_existing_room_scales_its_region() -> None:
    # given: three replicas of one job; one fits the cordoned node, one the booting node
    pods = with_more_workers(load("pods.json"), 2)
    # when
    result = plan_offline(nodes_doc=load("nodes.json"), pods_doc=pods, groups_doc=groups(), now=NOW)
    # then
    [scale_up] = result["scaleUp"]
    assert (scale_up["group"], scale_up["from"], scale_up["to"]) == ("p3-usw2", 3, 4)
    assert "keeps job(s) mnist-7f3a together in us-west-2" in scale_up["reasons"]
    assert result["uncordon"] == ["ip-10-0-1-77.us-west-2.compute.internal"]


def test_a_group_in_backoff_per_the_document_is_skipped() -> None:
    # given: us-west-2 backed off until after now; us-east-1 failed just now
    doc = groups()
    doc["nodeGroups"][0]["backoffUntil"] = "2024-05-01T12:10:00Z"
    pods = with_more_workers(load("pods.json"), 2)
    # when
    result = plan_offline(nodes_doc=load("nodes.json"), pods_doc=pods, groups_doc=doc, now=NOW)
    # then: nothing can be launched for the gang, and nothing is
    assert result["scaleUp"] == []
    assert len(result["unschedulable"]) == 3
    assert "needs all 3 pods in one region" in result["unschedulable"][0]["reason"]
    assert [g["group"] for g in result["giveBack"]] == []


@pytest.mark.parametrize(
    "wrap",
    [lambda gs: gs["nodeGroups"], lambda gs: gs, lambda gs: {"context": {"nodeGroups": gs["nodeGroups"]}}],
    ids=["list", "nodeGroups", "cdk.json"],
)
def test_accepts_a_list_a_node_groups_object_or_cdk_json(wrap: Any) -> None:
    # when
    parsed, health = parse_groups(wrap(groups()))
    # then
    assert [g.name for g in parsed] == ["p3-usw2", "p3-use1", "cpu-usw2"]
    assert parsed[2].instance_type == "x9.mystery"  # unknown to AWS pricing tables: fine
    assert parsed[0].allocatable.cpu == 7800 and parsed[0].asg_name == "squall-p3-usw2"
    assert parsed[2].allocatable.gpu == 0 and parsed[2].desired == 0
    assert health["p3-usw2"].backoff_until is None


def test_naive_now_means_utc() -> None:
    result = plan_offline(
        nodes_doc=load("nodes.json"),
        pods_doc=load("pods.json"),
        groups_doc=groups(),
        now=NOW.replace(tzinfo=None),
    )
    assert result["uncordon"] == ["ip-10-0-1-77.us-west-2.compute.internal"]


def test_every_problem_is_reported_with_the_field_it_is_in() -> None:
    # given
    doc = groups()
    doc["nodeGroups"][0]["instances"][1]["launchTime"] = "last tuesday"
    doc["nodeGroups"][1]["allocatable"]["cpu"] = "lots"
    doc["nodeGroups"][1]["taints"][0]["effect"] = "NoWay"
    del doc["nodeGroups"][2]["maxSize"]
    doc["nodeGroups"].append(
        {"name": "gpu-x", "region": "us-west-2", "instanceType": "p9.huge", "maxSize": 1}
    )
    # when
    with pytest.raises(GroupsError) as raised:
        parse_groups(doc)
    # then
    errors = raised.value.errors
    assert (
        "nodeGroups[0].instances[1].launchTime: invalid time 'last tuesday': expected ISO 8601, e.g. 2024-05-01T12:00:00Z"
        in errors
    )
    assert any(e.startswith("nodeGroups[1].allocatable.cpu: invalid quantity 'lots'") for e in errors)
    assert any(e.startswith("nodeGroups[1].taints[0].effect: must be one of") for e in errors)
    assert "nodeGroups[2].maxSize: required" in errors
    assert any(
        e.startswith("nodeGroups[3].allocatable: group gpu-x must declare its per-node allocatable")
        for e in errors
    )
    assert isinstance(raised.value, ValueError)
    assert "nodeGroups[1].allocatable.cpu" in str(raised.value)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"minSize": 5, "maxSize": 2}, "nodeGroups[0].maxSize: must be at least minSize (5), got 2"),
        ({"desired": 20}, "nodeGroups[0].desired: must be at most maxSize (16), got 20"),
        ({"priority": "high"}, "nodeGroups[0].priority: expected a whole number, got 'high'"),
        ({"region": None}, "nodeGroups[0].region: required"),
        ({"spot": "yes"}, "nodeGroups[0].spot: expected true or false, got 'yes'"),
        ({"pricePerHour": -1}, "nodeGroups[0].pricePerHour: expected a non-negative number, got -1"),
        ({"labels": ["a"]}, "nodeGroups[0].labels: expected an object of strings, got list"),
    ],
)
def test_field_errors(change: dict[str, Any], error: str) -> None:
    # given
    doc = groups()
    doc["nodeGroups"][0].update(change)
    # when
    with pytest.raises(GroupsError) as raised:
        parse_groups(doc)
    # then
    assert error in raised.value.errors


def test_duplicate_groups_and_instances_are_errors() -> None:
    # given
    doc = groups()
    same_name = {**copy.deepcopy(doc["nodeGroups"][0]), "instances": []}
    same_instances = {**copy.deepcopy(doc["nodeGroups"][0]), "name": "p3-usw2-b"}
    doc["nodeGroups"] += [same_name, same_instances]
    # when
    with pytest.raises(GroupsError) as raised:
        parse_groups(doc)
    # then
    assert "nodeGroups: group name 'p3-usw2' appears twice" in raised.value.errors
    assert "nodeGroups: instance i-0a1b2c3d4e5f60001 is in both p3-usw2 and p3-usw2-b" in raised.value.errors


@pytest.mark.parametrize("doc", [{"groups": []}, {"nodeGroups": "p3"}, "p3", [42]])
def test_documents_of_the_wrong_shape_are_errors(doc: Any) -> None:
    with pytest.raises(GroupsError):
        parse_groups(doc)
