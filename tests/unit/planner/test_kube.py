"""kubectl JSON (and the kubernetes client's sanitized dicts) into Node and Pod."""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from squall.planner import NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration
from squall.planner.kube import (
    instance_id_from_provider_id,
    node_cache,
    parse_nodes,
    parse_pods,
    parse_time,
    pod_cache,
)

DATA = Path(__file__).parent / "data"
GI, MI, KI = 2**30, 2**20, 2**10


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def test_parses_kubectl_nodes() -> None:
    # when
    gpu_node, cordoned, booting, system = parse_nodes(load("nodes.json"))
    # then
    assert gpu_node.name == "ip-10-0-1-23.us-west-2.compute.internal"
    assert gpu_node.instance_id == "i-0a1b2c3d4e5f60001"
    assert (gpu_node.allocatable.cpu, gpu_node.allocatable.memory) == (7910, 59763108 * KI)
    assert (gpu_node.allocatable.gpu, gpu_node.allocatable.pods) == (1, 58)
    assert gpu_node.taints == (Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule"),)
    assert gpu_node.labels["squall.io/accelerator"] == "v100"
    assert gpu_node.ready and not gpu_node.unschedulable and not gpu_node.cordoned_by_squall
    assert gpu_node.ready_since == datetime(2024, 5, 1, 9, 1, 10, tzinfo=UTC)
    assert gpu_node.created_at == datetime(2024, 5, 1, 9, 0, 5, tzinfo=UTC)
    assert cordoned.unschedulable and cordoned.cordoned_by_squall
    assert not booting.ready and booting.allocatable.gpu == 0
    assert system.instance_id == "i-0fffffffffffffff9" and system.allocatable.memory == 15 * GI


def test_a_node_cordoned_by_someone_else_is_not_squalls_to_uncordon() -> None:
    # given
    node = load("nodes.json")["items"][0]
    node["spec"]["unschedulable"] = True
    # when
    [parsed] = parse_nodes(node)
    # then
    assert parsed.unschedulable and not parsed.cordoned_by_squall


def test_parses_kubectl_pods() -> None:
    # when
    worker, chief, plugin, proxy, finished, prep, going = parse_pods(load("pods.json"))
    # then: a pending squall replica, GPU request defaulted from its limit
    assert worker.key == "team-a/mnist-worker-0-x7k2p"
    assert worker.is_pending and worker.job_id == "mnist-7f3a"
    assert (worker.requests.cpu, worker.requests.memory, worker.requests.gpu) == (4000, 16 * GI, 1)
    assert worker.node_selector == {"squall.io/accelerator": "v100"}
    assert worker.required_affinity == (
        NodeSelectorTerm(
            match_expressions=(
                NodeSelectorRequirement(
                    key="topology.kubernetes.io/region", operator="In", values=("us-west-2", "us-east-1")
                ),
            )
        ),
    )
    assert Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule") in worker.tolerations
    # and: bound pods, DaemonSet and mirror pods, a finished one
    assert (
        chief.node_name == "ip-10-0-1-23.us-west-2.compute.internal" and chief.is_active and chief.is_workload
    )
    assert plugin.daemonset and not plugin.is_workload
    assert proxy.mirror and not proxy.is_workload and proxy.requests.cpu == 100
    assert finished.phase == "Succeeded" and not finished.is_active
    assert finished.finished_at == datetime(2024, 5, 1, 11, 20, 12, tzinfo=UTC)
    # and: init containers and sidecars and overhead, as the scheduler counts them
    assert (prep.requests.cpu, prep.requests.memory) == (2250, 1248 * MI)
    assert prep.priority == 1000
    # and: a pod being deleted is not waiting for capacity
    assert not going.is_pending


def test_parses_single_objects_and_empty_lists() -> None:
    # given
    node = load("nodes.json")["items"][0]
    # when / then
    assert [n.name for n in parse_nodes(node)] == [node["metadata"]["name"]]
    assert parse_pods({"kind": "PodList", "items": None}) == []
    assert parse_pods([]) == []


@pytest.mark.parametrize(
    ("provider_id", "instance_id"),
    [
        ("aws:///us-west-2a/i-0abc123", "i-0abc123"),
        ("aws:///us-west-2a/i-0abc123/", "i-0abc123"),
        ("aws://us-west-2a/i-0abc123", "i-0abc123"),
        ("kind://docker/kind/kind-worker", None),
        ("aws:///us-west-2a/fargate-ip-10-0-0-1", None),
        ("", None),
    ],
)
def test_instance_id_comes_from_the_provider_id(provider_id: str, instance_id: str | None) -> None:
    assert instance_id_from_provider_id(provider_id) == instance_id


def test_bad_quantities_name_the_object_and_the_field() -> None:
    # given
    pod = load("pods.json")["items"][0]
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    node = load("nodes.json")["items"][0]
    node["status"]["allocatable"]["nvidia.com/gpu"] = "0.5"
    # when / then
    with pytest.raises(
        ValueError,
        match=r"pod team-a/mnist-worker-0-x7k2p: spec\.containers\[0\]\.resources\.requests\.cpu: invalid quantity 'lots'",
    ):
        parse_pods([pod])
    with pytest.raises(
        ValueError, match=r"node ip-10-0-1-23\S*: status\.allocatable\.nvidia\.com/gpu: .*whole number"
    ):
        parse_nodes([node])


@pytest.mark.parametrize(
    "doc",
    [
        42,
        "nodes",
        {"items": "x"},
        {"items": [42]},
        [{"metadata": {}}],
        [{"metadata": {"name": "n"}, "spec": []}],
    ],
)
def test_malformed_documents_raise_clear_value_errors(doc: Any) -> None:
    with pytest.raises(ValueError):
        parse_nodes(doc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00.123456789Z", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T14:00:00+02:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        (datetime(2024, 5, 1, 12), datetime(2024, 5, 1, 12, tzinfo=UTC)),
        (None, None),
    ],
)
def test_parses_times_as_kubernetes_and_aws_write_them(text: object, expected: datetime | None) -> None:
    assert parse_time(text) == expected


def test_rejects_what_is_not_a_time() -> None:
    with pytest.raises(ValueError, match="invalid time 'yesterday'"):
        parse_time("yesterday")


def test_the_empty_since_stamp_is_read_from_its_annotation() -> None:
    from squall.planner.kube import parse_node

    node = parse_node(
        {
            "metadata": {"name": "n", "annotations": {"squall.io/empty-since": "2026-01-05T09:00:00+00:00"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
        }
    )
    assert node.empty_since is not None and node.empty_since.isoformat() == "2026-01-05T09:00:00+00:00"


def as_listed(fixture: str, *, first_version: int) -> list[dict[str, Any]]:
    """A fixture's items as the API server lists them: each with a uid and its own resourceVersion."""
    items: list[dict[str, Any]] = load(fixture)["items"]
    for number, item in enumerate(items):
        item["metadata"] |= {"uid": f"uid-{number}", "resourceVersion": str(first_version + number)}
    return items


def test_the_parse_cache_reuses_an_object_until_its_resource_version_changes() -> None:
    # given two nodes as the API server lists them, and the same list again
    cache = node_cache()
    items = as_listed("nodes.json", first_version=100)
    first = cache.parse_all(items)
    again = cache.parse_all(json.loads(json.dumps(items)))
    # then each unchanged node is the very same parsed value
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert (cache.hits, cache.misses) == (len(items), len(items))

    # when one node is cordoned (a new resourceVersion) and another leaves the list
    changed = json.loads(json.dumps(items[:2]))
    changed[0]["spec"]["unschedulable"] = True
    changed[0]["metadata"]["resourceVersion"] += "-2"
    cordoned, same = cache.parse_all(changed)
    # then the changed one is parsed again, the other is kept
    assert cordoned.unschedulable and cordoned is not first[0]
    assert same is first[1]
    # and only what the latest list held is remembered
    cache.parse_all(items[2:3])
    assert cache.parse_all(items[1:2])[0] is not first[1]


def test_the_parse_cache_knows_a_dict_handed_out_again_by_identity_and_sees_what_came_and_went() -> None:
    # given pods as a lister hands them out that shares unchanged dicts (an informer, shared lists)
    cache = pod_cache()
    items = as_listed("pods.json", first_version=10)
    first = cache.parse_all(items)
    # when the very same dicts come again, reordered: nothing is parsed, nothing changed
    again = cache.parse_all(list(reversed(items)))
    assert list(reversed(again)) == first and all(a is b for a, b in zip(reversed(again), first, strict=True))
    assert cache.misses == len(items) and not cache.changed
    # when fresh copies come (as the API server answers): the same parses, by uid and version
    copies = cache.parse_all(json.loads(json.dumps(items)))
    assert all(a is b for a, b in zip(copies, first, strict=True)) and not cache.changed
    # when one goes: changed; when a new version of one comes: parsed again, changed
    cache.parse_all(items[1:])
    assert cache.changed
    newer = json.loads(json.dumps(items[0]))
    newer["metadata"]["resourceVersion"] = "99"
    misses = cache.misses
    assert cache.parse_all([newer, *items[1:]])[0] is not first[0]
    assert cache.misses == misses + 1 and cache.changed


def test_the_parse_cache_answers_every_changed_list_as_a_fresh_cache_does() -> None:
    # given pods listed by a lister that shares unchanged dicts, and a history of lists that change
    from squall.planner.kube import busy_stand_in

    items = as_listed("pods.json", first_version=10)
    replaced = json.loads(json.dumps(items[2]))
    replaced["metadata"]["resourceVersion"] = "77"
    replaced["spec"]["nodeName"] = "moved-here"
    added = json.loads(json.dumps(items[0]))
    added["metadata"] |= {"name": "added", "uid": "uid-added", "resourceVersion": "78"}
    unversioned = json.loads(json.dumps(items[1]))
    del unversioned["metadata"]["uid"]
    unreadable = {"metadata": {"namespace": "x", "name": "b", "uid": "uid-b", "resourceVersion": "1"}}
    unreadable["spec"] = {"nodeName": "n1", "priority": "high"}
    history = [
        items,
        [*items[:2], replaced, *items[3:]],  # one replaced by its next version
        [*items[:2], replaced, *items[4:]],  # one removed
        [*items[:2], replaced, *items[4:], added],  # one added
        [added, *reversed(items[4:]), replaced, *items[:2]],  # reordered
        [added, items[0], items[0], *items[4:]],  # a dict listed twice, others gone
        [items[0], unversioned, added, unreadable, *items[4:]],  # one without a uid, one unreadable
        [items[0], unversioned, added, unreadable, *items[4:]],  # the same again
        json.loads(json.dumps([items[0], added, *items[4:]])),  # copies, as the API server answers
        [*items[:2], replaced, *items[3:]],  # back to the second list
    ]
    cache = pod_cache()
    parses_made, previous = [], {}
    for listed in history:
        misses = cache.misses
        # when the list is parsed by the warm cache
        parsed = cache.parse_all(listed, unreadable=busy_stand_in)
        # then it is what a cache that saw nothing before makes of it
        fresh = pod_cache()
        assert parsed == fresh.parse_all(listed, unreadable=busy_stand_in)
        assert cache.unreadable == fresh.unreadable
        # and a dict of the last list with a uid and version is not read again: the same value
        by_dict = dict(zip(map(id, listed), parsed, strict=True))  # the one unreadable is bound: a stand-in
        assert all(by_dict[i] is previous[i] for i in by_dict.keys() & previous.keys())
        previous = {i: value for i, value in by_dict.items() if i not in (id(unversioned), id(unreadable))}
        parses_made.append(cache.misses - misses)
    # and only what is new to it is parsed: by identity, else by uid and version (one without
    # them, and one it cannot read, every time)
    assert parses_made == [7, 1, 0, 1, 0, 0, 2, 2, 0, 3]
    # and the object replaced is read as its new version
    assert [p.node_name for p in cache.parse_all(history[1]) if p.name == replaced["metadata"]["name"]] == [
        "moved-here"
    ]


def test_the_parse_cache_parses_objects_without_uid_or_version_every_time() -> None:
    cache = pod_cache()
    pod = load("pods.json")["items"][0]
    pod["metadata"]["resourceVersion"] = "7"  # a version, but no uid
    one, two = cache.parse_all([pod]), cache.parse_all([pod])
    assert one == two and one[0] is not two[0] and cache.hits == 0


def test_the_parse_cache_refuses_what_parse_pods_refuses() -> None:
    with pytest.raises(ValueError, match=r"items\[0\]: expected a pod object"):
        pod_cache().parse_all({"items": ["not a pod"]})


def test_an_unreadable_pod_stands_in_as_busy_on_its_node_and_is_left_out_unbound() -> None:
    from squall.planner.kube import busy_stand_in

    good = load("pods.json")["items"][0]
    bound = {"metadata": {"namespace": "x", "name": "b"}, "spec": {"nodeName": "n1", "priority": "high"}}
    unbound = {"metadata": {"namespace": "x", "name": "u"}, "spec": {"priority": "high"}}
    cache = pod_cache()

    pods = cache.parse_all([good, bound, unbound], unreadable=busy_stand_in)

    assert [p.key for p in pods] == [f"{good['metadata']['namespace']}/{good['metadata']['name']}", "x/b"]
    stand_in = pods[1]
    assert stand_in.node_name == "n1" and stand_in.is_active and stand_in.is_workload
    assert len(cache.unreadable) == 2 and all("spec.priority" in why for why in cache.unreadable)
    # without the callback the list is refused, naming the item and field
    with pytest.raises(ValueError, match=r"items\[1\].*spec.priority"):
        pod_cache().parse_all([good, bound])
