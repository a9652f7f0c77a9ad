"""The planner over many clusters: sites (a cluster's region) are the gang scope. Pure.

With more than one cluster, each cluster's objects are read qualified by its name
(planner/kube.py): nodes "<cluster>/<node>" labelled with CLUSTER_LABEL, pods asking
for it. A gang never spans two clusters, even two in one region; a queued job (not in
any cluster yet) goes where the whole gang fits on ready room, else where capacity can
be bought. With one cluster nothing is qualified and every output reads as before.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from squall.conventions import ADMITTED_REGION_ANNOTATION, CLUSTER_LABEL, REGION_LABEL
from squall.core.manifests import render
from squall.core.spec import JobSpec
from squall.planner import GroupHealth, Node, NodeGroup, Pod
from squall.planner.admission import AdmissionPlan, admit
from squall.planner.inputs import GroupsError, read_node_groups
from squall.planner.kube import (
    busy_stand_in,
    node_cache,
    parse_node,
    parse_nodes,
    parse_pod,
    parse_pods,
    parse_replica_job,
    parse_replica_jobs,
    pod_cache,
    replica_job_cache,
)
from squall.planner.offline import ClusterSnapshot, PlanInputError, plan_offline
from squall.planner.queue_types import ReplicaJob
from squall.planner.sites import site, split_site

from .builders import NOW, POLICY, ago, group, instance, node_of, pending_pods, pod, resources, run_plan

# ---- sites ----------------------------------------------------------------------------------


def test_a_site_is_the_region_alone_without_a_cluster_and_splits_back() -> None:
    assert site("us-west-2", "") == "us-west-2"
    assert site("us-west-2", "west") == "west/us-west-2"
    assert split_site("west/us-west-2") == ("west", "us-west-2")
    assert split_site("us-west-2") == ("", "us-west-2")
    assert split_site("") == ("", "")


# ---- reading objects for a cluster ------------------------------------------------------------


def node_object(name: str = "ip-10-0-1-5", *, region: str = "us-west-2") -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"u-{name}",
            "resourceVersion": "1",
            "labels": {REGION_LABEL: region},
        },
        "spec": {"providerID": "aws:///us-west-2a/i-0abc"},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_object(name: str = "train-0", *, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        "nodeSelector": {"squall.io/accelerator": "v100"},
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"u-{name}", "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_a_node_read_for_a_cluster_is_qualified_by_name_and_label() -> None:
    # when
    plain = parse_node(node_object())
    east = parse_node(node_object(), cluster="east")
    # then
    assert plain.name == "ip-10-0-1-5" and CLUSTER_LABEL not in plain.labels
    assert east.name == "east/ip-10-0-1-5"
    assert east.labels == {REGION_LABEL: "us-west-2", CLUSTER_LABEL: "east"}
    assert dataclasses.replace(east, name=plain.name, labels=plain.labels) == plain


def test_a_pod_read_for_a_cluster_asks_for_it_and_names_its_node_qualified() -> None:
    # when
    running = parse_pod(pod_object(node="ip-10-0-1-5"), cluster="east")
    pending = parse_pod(pod_object("train-1"), cluster="east")
    # then
    assert running.node_name == "east/ip-10-0-1-5"
    assert pending.node_name is None
    assert pending.node_selector == {"squall.io/accelerator": "v100", CLUSTER_LABEL: "east"}
    assert parse_pod(pod_object("train-1")).node_selector == {"squall.io/accelerator": "v100"}


def test_lists_and_caches_read_for_a_cluster_and_without_one_as_before() -> None:
    nodes = {"kind": "NodeList", "items": [node_object("a"), node_object("b")]}
    pods = {"kind": "PodList", "items": [pod_object(node="a")]}
    assert [n.name for n in parse_nodes(nodes, cluster="west")] == ["west/a", "west/b"]
    assert [n.name for n in node_cache("west").parse_all(nodes)] == ["west/a", "west/b"]
    assert [p.node_name for p in parse_pods(pods, cluster="west")] == ["west/a"]
    assert [p.node_name for p in pod_cache("west").parse_all(pods)] == ["west/a"]
    # no cluster: exactly today's parse
    assert parse_nodes(nodes, cluster=None) == parse_nodes(nodes) == node_cache().parse_all(nodes)
    assert parse_pods(pods) == pod_cache(None).parse_all(pods)


def test_an_unreadable_bound_pod_stands_in_on_its_qualified_node() -> None:
    broken = pod_object(node="ip-1")
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    # when
    [stand_in] = pod_cache("east").parse_all(
        [broken], unreadable=lambda item, why: busy_stand_in(item, why, cluster="east")
    )
    # then: its node is never taken for empty
    assert stand_in.node_name == "east/ip-1" and stand_in.is_active


def job_objects(
    job_id: str, *, gpus: int = 8, replicas: int = 1, minute: int = 0, priority: int = 50
) -> list[dict[str, Any]]:
    body: dict[str, Any] = {
        "name": "train",
        "team": "research",
        "image": "reg.example.com/tf:1",
        "priority": priority,
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": gpus},
    }
    if replicas > 1:
        body["replicas"] = {"worker": replicas}
    objects = render(
        JobSpec.model_validate(body),
        job_id=job_id,
        namespace="team-research",
        submitted_at=NOW - timedelta(hours=1) + timedelta(minutes=minute),
    )
    return [o for o in objects if o["kind"] == "Job"]


def test_a_replica_job_read_for_a_cluster_is_admitted_to_its_site_and_asks_for_the_cluster() -> None:
    [obj] = job_objects("a")
    obj["metadata"].setdefault("annotations", {})[ADMITTED_REGION_ANNOTATION] = "us-east-1"
    # when
    plain = parse_replica_job(obj)
    east = parse_replica_job(obj, cluster="east")
    # then
    assert plain is not None and east is not None
    assert plain.admitted_region == "us-east-1"
    assert east.admitted_region == "east/us-east-1"
    assert east.pod.node_selector[CLUSTER_LABEL] == "east"
    assert CLUSTER_LABEL not in plain.pod.node_selector
    assert [j.admitted_region for j in parse_replica_jobs([obj], cluster="east")] == ["east/us-east-1"]
    assert [j.admitted_region for j in replica_job_cache("east").parse_all([obj]) if j] == ["east/us-east-1"]


# ---- node groups name their cluster -------------------------------------------------------


GROUP = {
    "name": "p3-usw2",
    "region": "us-west-2",
    "instanceType": "p3.2xlarge",
    "allocatable": {"cpu": "7800m", "memory": "55Gi", "nvidia.com/gpu": 1},
    "maxSize": 4,
}


def test_a_node_group_may_name_its_cluster_and_its_nodes_carry_it() -> None:
    [[named, unnamed], _] = read_node_groups([GROUP | {"cluster": "west_1"}, GROUP | {"name": "other"}])
    assert named.cluster == "west_1" and named.site == "west_1/us-west-2"
    assert named.template_labels()[CLUSTER_LABEL] == "west_1"
    assert unnamed.cluster == "" and unnamed.site == "us-west-2"
    assert CLUSTER_LABEL not in unnamed.template_labels()


@pytest.mark.parametrize("name", ["GpuTraining", "gpu-training", "a", "x" * 100, "7_west"])
def test_every_name_eks_allows_is_a_cluster_name(name: str) -> None:
    # the CDK app writes each group's cluster into the functions' settings: any EKS name
    [[group], _] = read_node_groups([GROUP | {"cluster": name}])
    assert group.cluster == name


@pytest.mark.parametrize("bad", ["", "-west", "a/b", "x" * 101, "gpu west", "gpu.west", 7])
def test_a_cluster_name_that_is_no_name_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(GroupsError) as raised:
        read_node_groups([GROUP | {"cluster": bad}])
    [error] = raised.value.errors
    assert error.startswith("nodeGroups[0].cluster: expected ")


# ---- planning: a gang lives in one site ---------------------------------------------------------


def in_cluster(members: NodeGroup, cluster: str) -> NodeGroup:
    return dataclasses.replace(members, cluster=cluster)


def nodes_of(members: NodeGroup, **kwargs: Any) -> list[Node]:
    """The group's nodes as kube.py reads them for the group's cluster."""
    prefix = f"{members.cluster}/" if members.cluster else ""
    return [
        node_of(members, i.instance_id, name=f"{prefix}node-{i.instance_id}", **kwargs)
        for i in members.instances
    ]


def cluster_pods(cluster: str, count: int, **kwargs: Any) -> list[Pod]:
    """Pending pods as kube.py reads them from that cluster: they ask for it."""
    return [
        dataclasses.replace(p, node_selector={**p.node_selector, CLUSTER_LABEL: cluster})
        for p in pending_pods(count, prefix=f"{cluster}-p", **kwargs)
    ]


def eight_gpus(
    name: str, *, region: str = "us-west-2", nodes: int = 0, max_size: int = 8, **kwargs: Any
) -> NodeGroup:
    return group(
        name,
        region=region,
        allocatable=resources("95", "1100Gi", 8, 110),
        instances=[instance(f"i-{name}-{i}") for i in range(nodes)],
        max_size=max_size,
        **kwargs,
    )


def test_pods_of_one_cluster_are_never_placed_on_anothers_nodes_or_groups() -> None:
    # given: cluster a has no room and its group is at max size; b has a free node and headroom
    a = in_cluster(group("gpu-a", max_size=0, priority=1), "a")
    b = in_cluster(group("gpu-b", instances=[instance("i-b1")], max_size=8, priority=20), "b")
    # when
    result = run_plan(groups=[a, b], nodes=nodes_of(b), pods=cluster_pods("a", 2, gpu=1))
    # then: nothing of b is used or bought for them
    assert result.scale_ups == () and result.uncordons == ()
    assert [u.pod for u in result.unschedulable] == ["team-a/a-p-0", "team-a/a-p-1"]
    assert result.unschedulable[0].reason == "every node group it fits is unavailable: gpu-a at max size 0"


def test_pods_of_a_cluster_buy_capacity_in_that_clusters_group() -> None:
    a = in_cluster(group("gpu-a", priority=20), "a")
    b = in_cluster(group("gpu-b", priority=1), "b")  # preferred, but not theirs
    result = run_plan(groups=[a, b], pods=cluster_pods("a", 2, gpu=1))
    assert [(s.group, s.to_desired) for s in result.scale_ups] == [("gpu-a", 2)]


def test_two_clusters_in_one_region_never_split_a_gang() -> None:
    # given: one free 8-GPU node in each of two clusters, both in us-west-2
    a = in_cluster(eight_gpus("p4d-a", nodes=1, max_size=2), "a")
    b = in_cluster(eight_gpus("p4d-b", nodes=1, max_size=2), "b")
    queued = parse_replica_jobs(job_objects("pair", replicas=2))
    # when
    admission = admit_on([a, b], queued)
    demand_plan = run_plan(groups=[a, b], nodes=nodes_of(a) + nodes_of(b), pods=list(admission.demand))
    # then: not admitted on a node of each; a second node is bought beside one of them
    assert admission.admitted == ()
    assert admission.waiting[0].message.endswith("needs 16 GPUs over 2 replicas in one cluster and region")
    assert [(s.group, s.from_desired, s.to_desired) for s in demand_plan.scale_ups] == [("p4d-a", 1, 2)]
    assert demand_plan.unschedulable == ()
    # the same nodes in one cluster (no cluster named) take the pair whole
    one = [dataclasses.replace(g, cluster="") for g in (a, b)]
    assert {x.job_id: x.region for x in admit_on(one, queued).admitted} == {"pair": "us-west-2"}


def test_a_gang_no_cluster_can_hold_alone_never_fits_though_their_region_could() -> None:
    # given: neither cluster can grow past its one node; the region has two
    a = in_cluster(eight_gpus("p4d-a", nodes=1, max_size=1), "a")
    b = in_cluster(eight_gpus("p4d-b", nodes=1, max_size=1), "b")
    pending = [dataclasses.replace(p, namespace="team-research") for p in pending_pods(2, gpu=8, job="pair")]
    # when
    admission = admit_on([a, b], parse_replica_jobs(job_objects("pair", replicas=2)))
    result = run_plan(groups=[a, b], nodes=nodes_of(a) + nodes_of(b), pods=pending)
    # then
    assert admission.admitted == () and admission.demand == ()
    assert admission.waiting[0].message.endswith(
        "over 2 replicas in one cluster and region; no region can ever hold it:"
        " it is larger than the node groups at max size"
    )
    assert result.scale_ups == ()
    reason = result.unschedulable[0].reason
    assert reason.startswith("job pair needs all 2 pods in one cluster and region: a/us-west-2: ")
    assert "; b/us-west-2: " in reason


def admit_on(
    groups: list[NodeGroup], jobs: list[ReplicaJob], *, pods: list[Pod] | None = None
) -> AdmissionPlan:
    return admit(
        jobs=jobs,
        nodes=[n for g in groups for n in nodes_of(g)],
        pods=pods or [],
        groups=groups,
        teams={},
        policy=POLICY,
        now=NOW,
    )


def test_a_queued_gang_goes_to_the_cluster_with_ready_room_and_is_pinned_to_it() -> None:
    # given: the preferred cluster a has no node up; b, in another region, has two free ones
    a = in_cluster(eight_gpus("p4d-a", priority=1), "a")
    b = in_cluster(eight_gpus("p4d-b", region="us-east-1", nodes=2, priority=20), "b")
    queued = parse_replica_jobs(job_objects("pair", replicas=2))
    # when
    admission = admit_on([a, b], queued)
    # then
    assert {x.job_id: x.region for x in admission.admitted} == {"pair": "b/us-east-1"}
    # its pods (not created yet) are pinned to b's region and cluster, and wait only for b's nodes
    for demand in admission.demand:
        [term] = demand.required_affinity
        asked = {(r.key, r.values) for r in term.match_expressions}
        assert asked == {(REGION_LABEL, ("us-east-1",)), (CLUSTER_LABEL, ("b",))}
    result = run_plan(groups=[a, b], nodes=nodes_of(b), pods=list(admission.demand))
    assert result.scale_ups == () and result.unschedulable == ()


def test_a_queued_gang_with_no_ready_room_is_bought_for_in_the_preferred_cluster() -> None:
    a = in_cluster(eight_gpus("p4d-a", priority=1), "a")
    b = in_cluster(eight_gpus("p4d-b", region="us-east-1", priority=20), "b")
    admission = admit_on([a, b], parse_replica_jobs(job_objects("pair", replicas=2)))
    result = run_plan(groups=[a, b], pods=list(admission.demand))
    assert admission.admitted == ()
    assert [(s.group, s.to_desired) for s in result.scale_ups] == [("p4d-a", 2)]
    assert "keeps job(s) pair together in a/us-west-2" in result.scale_ups[0].reasons


@pytest.mark.parametrize("why", ["max size", "backoff"])
def test_a_queued_gang_falls_back_to_another_cluster_when_its_preferred_one_cannot_grow(why: str) -> None:
    # given: a is preferred, but at max size or in backoff; b shares its region
    a = in_cluster(eight_gpus("p4d-a", priority=1, max_size=0 if why == "max size" else 8), "a")
    b = in_cluster(eight_gpus("p4d-b", priority=20), "b")
    health = {"p4d-a": GroupHealth(backoff_until=NOW + timedelta(minutes=5), reason="InsufficientCapacity")}
    admission = admit_on([a, b], parse_replica_jobs(job_objects("pair", replicas=2)))
    # when
    result = run_plan(groups=[a, b], pods=list(admission.demand), health=health if why == "backoff" else {})
    # then: b buys the whole gang
    assert [(s.group, s.to_desired) for s in result.scale_ups] == [("p4d-b", 2)]
    assert result.unschedulable == ()


def test_a_running_gang_stays_in_its_cluster_though_another_has_room() -> None:
    # given: one replica of "pair" runs on a's only node; b (same region) has a free node
    a = in_cluster(eight_gpus("p4d-a", nodes=1, max_size=1), "a")
    b = in_cluster(eight_gpus("p4d-b", nodes=1, max_size=8), "b")
    [a_node] = nodes_of(a)
    running = dataclasses.replace(
        pod("pair-0", gpu=8, job="pair", node=a_node.name), namespace="team-research"
    )
    waiting = dataclasses.replace(pod("pair-1", gpu=8, job="pair"), namespace="team-research")
    # when: the pending replica is read without a cluster (as a placed queue entry's would be)
    result = run_plan(groups=[a, b], nodes=[a_node, *nodes_of(b)], pods=[running, waiting])
    # then: it waits in a (full, at max size) and is stranded, since b could take the gang
    assert result.scale_ups == ()
    assert [u.pod for u in result.unschedulable] == ["team-research/pair-1"]
    assert "needs all 1 pods in one cluster and region: a/us-west-2:" in result.unschedulable[0].reason
    assert result.stranded == ("pair",)


def test_a_waiting_gang_reserves_room_in_one_site_and_the_jobs_behind_it_backfill_another() -> None:
    # given: a free 8-GPU node in each of two clusters (one region); the head needs two in one
    a = in_cluster(eight_gpus("p4d-a", nodes=1, max_size=4), "a")
    b = in_cluster(eight_gpus("p4d-b", nodes=1, max_size=4), "b")
    queue = parse_replica_jobs(
        job_objects("head", replicas=2) + job_objects("next", minute=1) + job_objects("last", minute=2)
    )
    # when
    admission = admit_on([a, b], queue)
    # then: the head keeps a's node; the next job takes b's; the last waits for a node to boot
    assert {x.job_id: x.region for x in admission.admitted} == {"next": "b/us-west-2"}
    assert [(w.job_id, w.reserved_region) for w in admission.waiting] == [
        ("head", "a/us-west-2"),
        ("last", "a/us-west-2"),
    ]
    assert {w.starts_by for w in admission.waiting} == {NOW + timedelta(minutes=5)}


def test_an_admission_placed_in_a_site_is_finished_there() -> None:
    # given: a job placed in b's us-east-1 whose objects are not created yet (a PLACED queue entry)
    a = in_cluster(eight_gpus("p4d-a", nodes=2, priority=1), "a")
    b = in_cluster(eight_gpus("p4d-b", region="us-east-1", priority=20), "b")
    placed = [
        dataclasses.replace(job, suspended=False, admitted_region="b/us-east-1")
        for job in parse_replica_jobs(job_objects("pair", replicas=2))
    ]
    # when
    admission = admit_on([a, b], placed)
    result = run_plan(groups=[a, b], nodes=nodes_of(a), pods=list(admission.demand))
    # then: its pods wait for b, though a has free nodes
    assert len(admission.demand) == 2 and admission.admitted == ()
    assert [(s.group, s.to_desired) for s in result.scale_ups] == [("p4d-b", 2)]


def test_scale_down_and_uncordon_name_the_node_qualified() -> None:
    # given: an idle node in a; a node Squall cordoned in b, with a pending pod of b
    a = in_cluster(group("gpu-a", instances=[instance("i-1", launched=ago(hours=3))]), "a")
    b = in_cluster(group("gpu-b", instances=[instance("i-2", launched=ago(hours=3))]), "b")
    idle = nodes_of(a, ready_since=ago(hours=2))
    cordoned = nodes_of(b, cordoned_by_squall=True)
    # when
    result = run_plan(groups=[a, b], nodes=idle + cordoned, pods=cluster_pods("b", 1, gpu=1))
    # then
    assert [(d.node, d.group) for d in result.scale_downs] == [("a/node-i-1", "gpu-a")]
    assert [u.node for u in result.uncordons] == ["b/node-i-2"]


def test_with_one_cluster_nothing_is_qualified_and_reasons_read_as_before() -> None:
    # given: the case above in two regions of one cluster (none named)
    west = eight_gpus("p4d-usw2", nodes=1, max_size=1)
    east = eight_gpus("p4d-use1", region="us-east-1", nodes=1, max_size=1)
    pending = [dataclasses.replace(p, namespace="team-research") for p in pending_pods(2, gpu=8, job="gang")]
    # when
    admission = admit_on([west, east], parse_replica_jobs(job_objects("gang", replicas=2)))
    result = run_plan(groups=[west, east], nodes=nodes_of(west) + nodes_of(east), pods=pending)
    # then
    assert "over 2 replicas in one region; no region can ever hold it" in admission.waiting[0].message
    assert result.unschedulable[0].reason.startswith("job gang needs all 2 pods in one region: us-east-1: ")
    assert all(CLUSTER_LABEL not in n.labels and "/" not in n.name for n in nodes_of(west))


# ---- `squall plan` over many clusters -------------------------------------------------------


def group_doc(name: str, *, region: str, cluster: str | None, instances: int = 1) -> dict[str, Any]:
    doc: dict[str, Any] = GROUP | {
        "name": name,
        "region": region,
        "allocatable": {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": 8, "pods": 110},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "maxSize": 8,
        "desired": instances,
        "instances": [
            {"id": f"i-{name}{i}", "lifecycleState": "InService", "launchTime": "2024-05-01T09:00:00Z"}
            for i in range(instances)
        ],
    }
    if cluster is not None:
        doc["cluster"] = cluster
    return doc


def node_doc(group_name: str, index: int = 0, *, region: str) -> dict[str, Any]:
    """A ready 8-GPU node; every cluster names its first node alike."""
    obj = node_object(f"ip-10-0-0-{index}", region=region)
    obj["metadata"]["creationTimestamp"] = "2024-05-01T09:01:00Z"
    obj["spec"] = {
        "providerID": f"aws:///{region}a/i-{group_name}{index}",
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    }
    obj["status"]["allocatable"] = {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": "8", "pods": "110"}
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T09:02:00Z"}
    ]
    return obj


def busy_pod(node: str) -> dict[str, Any]:
    obj = pod_object(f"busy-{node}", node=node)
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    obj["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    del obj["spec"]["nodeSelector"]
    return obj


def two_clusters(*, west_busy: bool) -> list[ClusterSnapshot]:
    west_pods = [busy_pod("ip-10-0-0-0")] if west_busy else []
    return [
        ClusterSnapshot(name="west", nodes_doc=[node_doc("w", region="us-west-2")], pods_doc=west_pods),
        ClusterSnapshot(name="east", nodes_doc=[node_doc("e", region="us-east-1")], pods_doc=[]),
    ]


GROUPS = [
    group_doc("w", region="us-west-2", cluster="west") | {"priority": 1},
    group_doc("e", region="us-east-1", cluster="east") | {"priority": 2},
]


def test_squall_plan_admits_the_queue_to_the_cluster_with_room_and_names_nodes_qualified() -> None:
    # given: west's node is busy, east's is free and has been idle for hours
    queued = parse_replica_jobs(job_objects("q1"))
    # when
    result = plan_offline(
        groups_doc=GROUPS, clusters=two_clusters(west_busy=True), queued=queued, now=NOW, policy=POLICY
    )
    # then: q1 goes to east (it takes the idle node, which is then not removed)
    assert result["admission"]["admitted"] == [
        {"job": "q1", "team": "research", "region": "east/us-east-1", "gpus": 8}
    ]
    assert result["scaleDown"] == [] and result["scaleUp"] == []
    # without the queue, east's idle node is removed, named in its cluster
    idle = plan_offline(groups_doc=GROUPS, clusters=two_clusters(west_busy=True), now=NOW, policy=POLICY)
    assert [d["node"] for d in idle["scaleDown"]] == ["east/ip-10-0-0-0"]
    assert "admission" not in idle


def test_squall_plan_with_one_cluster_reads_as_before() -> None:
    # given: one cluster's snapshot, named, and the same as today's flags
    groups = [group_doc("w", region="us-west-2", cluster="west")]
    nodes, pods = [node_doc("w", region="us-west-2")], [busy_pod("ip-10-0-0-0")]
    queued = parse_replica_jobs(job_objects("q1", gpus=1))
    # when
    named = plan_offline(
        groups_doc=groups,
        clusters=[ClusterSnapshot(name="west", nodes_doc=nodes, pods_doc=pods)],
        queued=queued,
        now=NOW,
        policy=POLICY,
    )
    today = plan_offline(
        groups_doc=[group_doc("w", region="us-west-2", cluster=None)],
        nodes_doc=nodes,
        pods_doc=pods,
        queued=queued,
        now=NOW,
        policy=POLICY,
    )
    # then
    assert named == today
    assert today["scaleUp"][0]["group"] == "w"
    assert "/" not in str(today["admission"]) and "one cluster" not in str(today)


def test_squall_plan_over_many_clusters_refuses_a_group_of_no_given_cluster() -> None:
    for groups, words in (
        (
            [GROUPS[0], group_doc("x", region="us-east-1", cluster=None)],
            "nodeGroups[1].cluster: required with",
        ),
        (
            [GROUPS[0], group_doc("x", region="us-east-1", cluster="north")],
            "nodeGroups[1].cluster: north is none",
        ),
    ):
        with pytest.raises(PlanInputError) as raised:
            plan_offline(groups_doc=groups, clusters=two_clusters(west_busy=False), now=NOW)
        assert raised.value.document == "groups" and words in str(raised.value)


def test_squall_plan_names_the_cluster_whose_snapshot_is_wrong() -> None:
    west, east = two_clusters(west_busy=False)
    broken = dataclasses.replace(east, nodes_doc=[{"kind": "Node", "metadata": {"name": "n"}, "spec": []}])
    with pytest.raises(PlanInputError) as raised:
        plan_offline(groups_doc=GROUPS, clusters=[west, broken], now=NOW)
    assert (raised.value.document, raised.value.cluster) == ("nodes", "east")
    assert str(raised.value).startswith("items[0]: node east/n: spec: expected an object")
