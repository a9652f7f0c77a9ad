"""`squall plan`'s readers: an empty List is no objects, a wrong kind is named, a YAML date is shown as written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from squall.planner.kube import node_cache, parse_nodes, parse_pods, parse_replica_jobs
from tests.unit.test_cli_errors import DATA, here, plan_args, run

__all__ = ["here"]  # the fixture, used by name


@pytest.mark.parametrize(
    "doc",
    [{"kind": "List"}, {"apiVersion": "v1", "kind": "List", "items": None}, {"kind": "NodeList"}],
)
@pytest.mark.parametrize("which", ["nodes", "pods"])
def test_a_list_without_items_is_no_objects(
    here: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, Any], which: str
) -> None:
    # given a List with no items (kubectl prints [], a client may drop null items)
    if which == "pods":
        doc = {**doc, "kind": doc["kind"].replace("Node", "Pod")}
    (here / f"{which}.json").write_text(json.dumps(doc))
    # when
    code, err = run(plan_args(), capsys)
    # then
    assert (code, err) == (0, "")


def test_the_readers_read_a_list_without_items_as_empty() -> None:
    assert parse_nodes({"kind": "List"}) == []
    assert parse_pods({"kind": "PodList"}) == []
    assert parse_replica_jobs({"apiVersion": "v1", "kind": "List"}) == []
    assert node_cache().parse_all({"kind": "List"}) == []


def test_one_object_is_not_named_as_an_item() -> None:
    with pytest.raises(ValueError) as caught:
        parse_nodes({"kind": "Node", "metadata": {}})
    assert str(caught.value) == "node without metadata.name"
    with pytest.raises(ValueError) as caught:
        node_cache().parse_all({"kind": "Node", "metadata": {}})
    assert str(caught.value) == "node without metadata.name"


def _pods() -> dict[str, Any]:
    return json.loads((DATA / "pods.json").read_text())


def _nodes() -> dict[str, Any]:
    return json.loads((DATA / "nodes.json").read_text())


@pytest.mark.parametrize(
    ("flag", "doc", "words"),
    [
        ("--jobs", _pods(), "is a Pod (v1) where Jobs (batch/v1) were expected"),
        ("--pods", _nodes(), "is a Node (v1) where Pods (v1) were expected"),
        ("--nodes", _pods(), "is a Pod (v1) where Nodes (v1) were expected"),
    ],
)
def test_a_file_of_another_kind_is_refused_by_name(
    here: Path, capsys: pytest.CaptureFixture[str], flag: str, doc: dict[str, Any], words: str
) -> None:
    # given the wrong kubectl dump for one flag
    (here / "wrong.json").write_text(json.dumps(doc))
    args = plan_args()
    if flag == "--jobs":
        args += ["--jobs", "wrong.json"]
    else:
        args[args.index(flag) + 1] = "wrong.json"
    # when
    code, err = run(args, capsys)
    # then
    assert code == 2
    assert err.startswith(f"squall: wrong.json: items[0]: {words}"), err


def test_a_list_of_another_kind_is_refused_by_its_kind(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given the kubernetes client's PodList (its items carry no kind) given as jobs
    pods = _pods()
    pods["kind"] = "PodList"
    for item in pods["items"]:
        item.pop("kind", None)
    (here / "jobs.json").write_text(json.dumps(pods))
    # when
    code, err = run([*plan_args(), "--jobs", "jobs.json"], capsys)
    # then
    assert code == 2
    assert err.startswith(
        "squall: jobs.json: kind: a PodList where a JobList or List (batch/v1) was expected"
    ), err


_GROUP_YAML = """nodeGroups:
- name: p3-usw2
  region: us-west-2
  instanceType: p3.2xlarge
  allocatable: {cpu: 7800m, memory: 55Gi, nvidia.com/gpu: 1, pods: 58}
  maxSize: 16
"""


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("desired: 2024-01-01", "nodeGroups[0].desired: expected a whole number, got 2024-01-01\n"),
        (
            "consecutiveFailures: 2024-01-01 12:00:00",
            "nodeGroups[0].consecutiveFailures: expected a whole number, got 2024-01-01 12:00:00\n",
        ),
        ("asgName: 2024-01-01", "nodeGroups[0].asgName: expected a non-empty string, got 2024-01-01\n"),
        (
            "labels: {zone: 2024-01-01}",
            "nodeGroups[0].labels.zone: expected a string (quote it), got 2024-01-01\n",
        ),
        (
            "backoffUntil: 2024-01-01",
            "nodeGroups[0].backoffUntil: invalid time 2024-01-01 (a date without a time of day): expected ISO 8601",
        ),
        (
            "backoffUntil: 1960-01-01 00:00:00",
            "nodeGroups[0].backoffUntil: invalid time 1960-01-01 00:00:00: must be between 1970 and 9000\n",
        ),
        (
            "instances: [{id: i-1, lifecycleState: InService, launchTime: 2024-01-01}]",
            "nodeGroups[0].instances[0].launchTime: invalid time 2024-01-01 (a date without a time of day)",
        ),
    ],
)
def test_a_yaml_date_in_the_groups_is_shown_as_written(
    here: Path, capsys: pytest.CaptureFixture[str], line: str, words: str
) -> None:
    # given a groups file where YAML reads an unquoted date or timestamp as one
    (here / "groups.yaml").write_text(f"{_GROUP_YAML}  {line}\n")
    args = plan_args()
    args[args.index("groups.json")] = "groups.yaml"
    # when
    code, err = run(args, capsys)
    # then
    assert code == 2
    assert words in err, err
    assert "datetime" not in err


def test_a_yaml_date_as_a_quantity_is_shown_as_written(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "groups.yaml").write_text(_GROUP_YAML.replace("cpu: 7800m", "cpu: 2024-01-01"))
    args = plan_args()
    args[args.index("groups.json")] = "groups.yaml"
    code, err = run(args, capsys)
    assert code == 2
    assert "nodeGroups[0].allocatable.cpu: invalid quantity '2024-01-01': expected a number" in err, err
    assert "datetime" not in err


@pytest.mark.parametrize("value", ["2024-01-01", "2024-01-01 12:00:00"])
@pytest.mark.parametrize("key", ["provisionTimeout", "maxScaleDownFraction"])
def test_a_yaml_date_in_the_policy_is_shown_as_written(
    here: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    (here / "policy.yaml").write_text(f"policy:\n  {key}: {value}\n")
    code, err = run([*plan_args(), "--policy", "policy.yaml"], capsys)
    assert code == 2
    assert err.startswith(f"squall: policy.yaml: policy.{key}: "), err
    assert err.endswith(f", got {value}\n"), err


def test_every_reader_shows_a_yaml_date_as_written() -> None:
    from datetime import date, datetime

    from squall.planner.text import shown

    assert shown(date(2024, 1, 1)) == "2024-01-01"
    assert shown(datetime(2024, 1, 1, 12, 0)) == "2024-01-01 12:00:00"
