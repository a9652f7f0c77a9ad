"""`squall plan` on a snapshot mutated field by field: a refusal naming the field, never a traceback.

Every value in a kubectl snapshot and a GROUPS document is replaced in turn by values
of other types (a list, an object, a string, a number, a boolean, null) and by huge
ones. The command must exit 0 or 2; never raise. A value of the wrong shape (a list or
an object where a scalar was, a scalar where a list or an object was) must be either
refused with exit 2 and a message naming the file and the field, or have no effect on
the plan at all (the planner does not read that field). The fields the planner does
read are listed below, and each of them must have been refused.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.cli import main

DATA = Path(__file__).parent / "data"
NOW = "2024-05-01T12:00:00Z"
HUGE_INT = 10**4000  # within Python's digit limit, beyond every bound
GROUPS: dict[str, Any] = {
    "nodeGroups": [
        {
            "name": "p3-usw2",
            "region": "us-west-2",
            "asgName": "squall-p3-usw2",
            "instanceType": "p3.2xlarge",
            "allocatable": {"cpu": "7800m", "memory": "55Gi", "nvidia.com/gpu": 1, "pods": 58},
            "labels": {"squall.io/accelerator": "v100"},
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
            "priority": 10,
            "minSize": 0,
            "maxSize": 16,
            "desired": 3,
            "spot": False,
            "pricePerHour": 3.06,
            "instances": [
                {
                    "id": f"i-0a1b2c3d4e5f6000{n}",
                    "lifecycleState": "InService",
                    "launchTime": "2024-05-01T09:00:00Z",
                }
                for n in (1, 2, 3)
            ],
            "failures": [
                {"time": "2024-05-01T08:00:00Z", "reason": "We currently do not have sufficient capacity"}
            ],
        },
        {
            "name": "p4d-use1",
            "region": "us-east-1",
            "instanceType": "p4d.24xlarge",
            "allocatable": {"cpu": "95", "memory": "1100Gi", "gpu": 8, "pods": 110},
            "maxSize": 4,
            "backoffUntil": "2024-05-01T12:10:00Z",
            "consecutiveFailures": 2,
            "lastFailureAt": "2024-05-01T11:50:00Z",
        },
    ]
}

# Fields the planner reads: a value of the wrong shape in any of them must be refused.
READ = {
    "nodes": [
        "items",
        "items[*].metadata",
        "items[*].metadata.name",
        "items[*].metadata.labels",
        "items[*].metadata.labels.*",
        "items[*].metadata.annotations",
        "items[*].metadata.annotations.*",
        "items[*].metadata.creationTimestamp",
        "items[*].spec",
        "items[*].spec.providerID",
        "items[*].spec.unschedulable",
        "items[*].spec.taints",
        "items[*].spec.taints[*]",
        "items[*].spec.taints[*].key",
        "items[*].spec.taints[*].value",
        "items[*].spec.taints[*].effect",
        "items[*].status",
        "items[*].status.allocatable",
        "items[*].status.allocatable.cpu",
        "items[*].status.allocatable.memory",
        "items[*].status.allocatable.nvidia.com/gpu",
        "items[*].status.allocatable.pods",
        "items[*].status.conditions",
        "items[*].status.conditions[*]",
        "items[*].status.conditions[*].type",
        "items[*].status.conditions[*].status",
        "items[*].status.conditions[*].lastTransitionTime",
    ],
    "pods": [
        "items",
        "items[*].metadata",
        "items[*].metadata.name",
        "items[*].metadata.namespace",
        "items[*].metadata.labels",
        "items[*].metadata.labels.*",
        "items[*].metadata.annotations",
        "items[*].metadata.annotations.*",
        "items[*].metadata.ownerReferences",
        "items[*].metadata.ownerReferences[*]",
        "items[*].metadata.ownerReferences[*].kind",
        "items[*].metadata.deletionTimestamp",
        "items[*].spec",
        "items[*].spec.nodeName",
        "items[*].spec.priority",
        "items[*].spec.nodeSelector",
        "items[*].spec.nodeSelector.*",
        "items[*].spec.affinity",
        "items[*].spec.affinity.nodeAffinity",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*]",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*]"
        ".matchExpressions",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*]"
        ".matchExpressions[*].key",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*]"
        ".matchExpressions[*].operator",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*]"
        ".matchExpressions[*].values",
        "items[*].spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*]"
        ".matchExpressions[*].values[*]",
        "items[*].spec.tolerations",
        "items[*].spec.tolerations[*]",
        "items[*].spec.tolerations[*].key",
        "items[*].spec.tolerations[*].operator",
        "items[*].spec.tolerations[*].effect",
        "items[*].spec.containers",
        "items[*].spec.containers[*]",
        "items[*].spec.containers[*].resources",
        "items[*].spec.containers[*].resources.requests",
        "items[*].spec.containers[*].resources.requests.cpu",
        "items[*].spec.containers[*].resources.requests.memory",
        "items[*].spec.containers[*].resources.limits",
        "items[*].spec.containers[*].resources.limits.nvidia.com/gpu",
        "items[*].spec.initContainers",
        "items[*].spec.initContainers[*]",
        "items[*].spec.initContainers[*].restartPolicy",
        "items[*].spec.initContainers[*].resources.requests.cpu",
        "items[*].spec.overhead",
        "items[*].spec.overhead.cpu",
        "items[*].status",
        "items[*].status.phase",
        "items[*].status.containerStatuses",
        "items[*].status.containerStatuses[*]",
        "items[*].status.containerStatuses[*].state",
        "items[*].status.containerStatuses[*].state.terminated",
        "items[*].status.containerStatuses[*].state.terminated.finishedAt",
    ],
    "groups": [
        "nodeGroups",
        "nodeGroups[*]",
        "nodeGroups[*].name",
        "nodeGroups[*].region",
        "nodeGroups[*].asgName",
        "nodeGroups[*].instanceType",
        "nodeGroups[*].allocatable",
        "nodeGroups[*].allocatable.cpu",
        "nodeGroups[*].allocatable.memory",
        "nodeGroups[*].allocatable.nvidia.com/gpu",
        "nodeGroups[*].allocatable.gpu",
        "nodeGroups[*].allocatable.pods",
        "nodeGroups[*].labels",
        "nodeGroups[*].labels.*",
        "nodeGroups[*].taints",
        "nodeGroups[*].taints[*]",
        "nodeGroups[*].taints[*].key",
        "nodeGroups[*].taints[*].value",
        "nodeGroups[*].taints[*].effect",
        "nodeGroups[*].priority",
        "nodeGroups[*].minSize",
        "nodeGroups[*].maxSize",
        "nodeGroups[*].desired",
        "nodeGroups[*].spot",
        "nodeGroups[*].pricePerHour",
        "nodeGroups[*].instances",
        "nodeGroups[*].instances[*]",
        "nodeGroups[*].instances[*].id",
        "nodeGroups[*].instances[*].lifecycleState",
        "nodeGroups[*].instances[*].launchTime",
        "nodeGroups[*].failures",
        "nodeGroups[*].failures[*]",
        "nodeGroups[*].failures[*].time",
        "nodeGroups[*].failures[*].reason",
        "nodeGroups[*].backoffUntil",
        "nodeGroups[*].consecutiveFailures",
        "nodeGroups[*].lastFailureAt",
    ],
}


def leaves(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every value in a document with its path (the root excluded)."""
    if path:
        yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))


def dotted(path: tuple[str | int, ...], *, wildcards: bool = False) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += "[*]" if wildcards else f"[{part}]"
        else:
            text += ("." if text else "") + part
    return text


def replaced(document: Any, path: tuple[str | int, ...], value: Any) -> Any:
    mutated = copy.deepcopy(document)
    holder = mutated
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return mutated


def mutations(value: Any) -> list[tuple[Any, bool]]:
    """(replacement, whether its shape is wrong for a field that held `value`)."""
    if isinstance(value, dict | list):
        other: Any = [] if isinstance(value, dict) else {}
        return [("text", True), (7, True), (True, True), (other, True), (None, False)]
    shaped = [([value], True), ({"x": value}, True)]
    scalars: list[Any] = [None, "", "x" * 5_000, 7, -1, 1.5, 1e308, HUGE_INT, True, "2024-05-01T12:00:00Z"]
    return shaped + [(s, False) for s in scalars if type(s) is not type(value) or s != value]


class Plan:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.base = {
            "nodes": json.loads((DATA / "nodes.json").read_text()),
            "pods": json.loads((DATA / "pods.json").read_text()),
            "groups": GROUPS,
        }
        for name, document in self.base.items():
            self.write(name, document)
        code, self.baseline, err = self.run()
        assert code == 0, err

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def write(self, name: str, document: Any) -> None:
        self.path(name).write_text(json.dumps(document))

    def run(self) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        argv = ["plan", "--now", NOW, "--json"]
        for name in ("nodes", "pods", "groups"):
            argv += [f"--{name}", str(self.path(name))]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        return code, out.getvalue(), err.getvalue()


def named(message: str, path: tuple[str | int, ...]) -> bool:
    """Does the message name the field (its last key, or the list holding it)?"""
    keys = [part for part in path if isinstance(part, str)]
    return bool(keys) and (keys[-1] in message or (len(keys) > 1 and keys[-2] in message))


@pytest.mark.slow  # every field of every document, each mutated several ways: minutes, like a property run
@pytest.mark.timeout(600)
@pytest.mark.parametrize("document", ["nodes", "pods", "groups"])
def test_every_field_of_the_wrong_type_is_refused_by_name_or_ignored(tmp_path: Path, document: str) -> None:
    plan = Plan(tmp_path)
    base = plan.base[document]
    problems: list[str] = []
    refused: set[str] = set()
    for path, value in list(leaves(base)):
        for replacement, wrong_shape in mutations(value):
            plan.write(document, replaced(base, path, replacement))
            code, out, err = plan.run()
            what = f"{dotted(path)} = {str(replacement)[:30]!r}: exit {code}"
            if code == 2:
                if not err.startswith(f"squall: {plan.path(document)}: ") or not named(err, path):
                    problems.append(f"{what}, the message names neither the file nor the field: {err[:300]}")
                if wrong_shape:
                    refused.add(dotted(path, wildcards=True))
            elif code != 0:
                problems.append(f"{what}: {err[:300]}")
            elif wrong_shape and out != plan.baseline:
                problems.append(f"{what}: accepted, and the plan changed (a field read with the wrong type)")
    plan.write(document, base)
    missing = [field for field in READ[document] if not any(_matches(field, r) for r in refused)]
    assert not problems, "\n".join(problems[:40])
    assert not missing, f"never refused: {missing}"


def _matches(pattern: str, path: str) -> bool:
    """`[*]` stands for any index (as `dotted` writes it), a trailing `*` for any key, dots and all."""
    parts = [re.escape(part) for part in pattern.split("[*]")]
    regex = r"\[\*\]".join(parts).replace(r"\*", r".+")
    return re.fullmatch(regex, path) is not None
