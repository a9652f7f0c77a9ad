"""TF_CONFIG, parsed and checked before TensorFlow ever sees it.

TensorFlow's own resolver accepts almost anything and fails much later, often as
a hang while workers wait for a peer that was never going to exist. Checking the
document here turns a rendering bug into one clear line at start-up. Pure Python:
no TensorFlow import, so a bad TF_CONFIG fails in milliseconds.

The format is Kubeflow's TFJob one, as Squall renders it::

    {"cluster": {"chief": ["job-chief-0.ns.svc:2222"],
                 "ps": ["job-ps-0.ns.svc:2222"],
                 "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"]},
     "task": {"type": "worker", "index": 1},
     "environment": "cloud"}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

ENV_VAR = "TF_CONFIG"
TASK_TYPES = ("chief", "worker", "ps", "evaluator")
# host:port, where host is a DNS name or IPv4 address (Squall renders Service names).
ADDRESS = re.compile(r"^(?P<host>[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?):(?P<port>\d{1,5})$")


class TFConfigError(ValueError):
    """TF_CONFIG cannot be used; the message names every problem found."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid TF_CONFIG: " + "; ".join(problems))


class Mode(Enum):
    """How this process takes part in training."""

    # No TF_CONFIG: the devices of this machine only.
    LOCAL = "local"
    # chief and workers, no ps: synchronous all-reduce (MultiWorkerMirroredStrategy).
    COLLECTIVE = "collective"
    # The chief of a job with ps: it coordinates ParameterServerStrategy training.
    COORDINATOR = "coordinator"
    # A ps or worker of a job with ps: it serves tf.distribute.Server until killed.
    SERVER = "server"
    # The evaluator: it reads checkpoints as they appear, it does not train.
    EVALUATOR = "evaluator"


@dataclass(frozen=True)
class TFConfig:
    cluster: Mapping[str, tuple[str, ...]]
    task_type: str
    task_index: int

    @property
    def mode(self) -> Mode:
        if self.task_type == "evaluator":
            return Mode.EVALUATOR
        if "ps" not in self.cluster:
            return Mode.COLLECTIVE
        return Mode.COORDINATOR if self.task_type == "chief" else Mode.SERVER

    @property
    def training_cluster(self) -> dict[str, list[str]]:
        """The cluster TensorFlow should connect: everything but the evaluator.

        The evaluator is a side-car that reads checkpoints; if it appeared in the
        cluster spec, the strategies would wait for it to join their collectives.
        """
        return {kind: list(hosts) for kind, hosts in self.cluster.items() if kind != "evaluator"}

    @property
    def is_chief(self) -> bool:
        """The one task that writes checkpoints, summaries and the export.

        The chief when there is one, else worker 0: the same rule as
        MultiWorkerMirroredStrategy's, and as Squall's "the job succeeds when the
        chief (else worker 0) completes".
        """
        if self.task_type == "chief":
            return True
        return "chief" not in self.cluster and self.task_type == "worker" and self.task_index == 0

    @property
    def num_workers(self) -> int:
        """Tasks that run training steps: chief and workers (ps only hold variables)."""
        return len(self.cluster.get("chief", ())) + len(self.cluster.get("worker", ()))


def read_tf_config(environ: Mapping[str, str]) -> TFConfig | None:
    """The parsed TF_CONFIG, or None when it is unset or blank (a one-pod job)."""
    raw = environ.get(ENV_VAR, "")
    if not raw.strip():
        return None
    return parse_tf_config(raw)


def parse_tf_config(raw: str) -> TFConfig:
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TFConfigError([f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]) from exc
    if not isinstance(document, dict):
        raise TFConfigError([f"must be a JSON object, got {_json_type(document)}"])

    problems: list[str] = []
    cluster = _parse_cluster(document.get("cluster"), problems)
    task_type, task_index = _parse_task(document.get("task"), cluster, problems)
    environment = document.get("environment")
    if environment is not None and not isinstance(environment, str):
        problems.append(f"environment must be a string, got {_json_type(environment)}")
    unknown = sorted(set(document) - {"cluster", "task", "environment", "rpc_layer"})
    if unknown:
        problems.append(f"unknown keys {unknown}; expected cluster, task, environment")
    if cluster is not None:
        _check_topology(cluster, problems)
    if problems or cluster is None or task_type is None or task_index is None:
        raise TFConfigError(problems)
    return TFConfig(cluster=cluster, task_type=task_type, task_index=task_index)


def _parse_cluster(value: Any, problems: list[str]) -> dict[str, tuple[str, ...]] | None:
    if value is None:
        problems.append("cluster is missing")
        return None
    if not isinstance(value, dict) or not value:
        problems.append(f"cluster must be a non-empty object of task lists, got {_json_type(value)}")
        return None
    cluster: dict[str, tuple[str, ...]] = {}
    for kind, hosts in value.items():
        if kind not in TASK_TYPES:
            problems.append(f"cluster.{kind}: unknown task type; expected one of {', '.join(TASK_TYPES)}")
            continue
        if not isinstance(hosts, list) or not hosts:
            problems.append(
                f"cluster.{kind} must be a non-empty list of 'host:port', got {_json_type(hosts)}"
            )
            continue
        for i, address in enumerate(hosts):
            problem = _address_problem(address)
            if problem:
                problems.append(f"cluster.{kind}[{i}] {problem}")
        cluster[kind] = tuple(str(h) for h in hosts)
    every = [h for hosts in cluster.values() for h in hosts]
    duplicates = sorted({h for h in every if every.count(h) > 1})
    if duplicates:
        problems.append(f"addresses used by more than one task: {duplicates}")
    return cluster


def _address_problem(address: Any) -> str | None:
    if not isinstance(address, str):
        return f"must be a 'host:port' string, got {_json_type(address)}"
    match = ADDRESS.match(address)
    if not match:
        return f"{address!r} is not 'host:port'"
    if not 1 <= int(match["port"]) <= 65535:
        return f"{address!r} has port outside 1-65535"
    return None


def _parse_task(
    value: Any, cluster: Mapping[str, tuple[str, ...]] | None, problems: list[str]
) -> tuple[str | None, int | None]:
    if value is None:
        problems.append("task is missing")
        return None, None
    if not isinstance(value, dict):
        problems.append(f"task must be an object with type and index, got {_json_type(value)}")
        return None, None
    task_type, index = value.get("type"), value.get("index", 0)
    if not isinstance(task_type, str):
        problems.append(f"task.type must be a string, got {_json_type(task_type)}")
        task_type = None
    # bool is an int in Python; an index of `true` is a rendering bug, not task 1.
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        problems.append(f"task.index must be a non-negative integer, got {json.dumps(index)}")
        index = None
    if task_type is not None and cluster is not None:
        if task_type not in cluster:
            problems.append(f"task.type {task_type!r} is not in cluster (has {', '.join(sorted(cluster))})")
        elif index is not None and index >= len(cluster[task_type]):
            problems.append(
                f"task.index {index} is out of range: cluster.{task_type} has "
                f"{len(cluster[task_type])} task(s)"
            )
    return task_type, index


def _check_topology(cluster: Mapping[str, tuple[str, ...]], problems: list[str]) -> None:
    for kind in ("chief", "evaluator"):
        if len(cluster.get(kind, ())) > 1:
            problems.append(f"cluster.{kind} has {len(cluster[kind])} tasks; at most one is allowed")
    if not cluster.get("chief") and not cluster.get("worker"):
        problems.append("cluster needs a chief or at least one worker to train")
    if cluster.get("ps"):
        # TF2's ParameterServerStrategy runs the training loop on a coordinator; a
        # job with ps but no chief would start servers that nobody ever drives.
        if not cluster.get("chief"):
            problems.append("a cluster with ps needs a chief to coordinate ParameterServerStrategy")
        if not cluster.get("worker"):
            problems.append("a cluster with ps needs at least one worker to run the steps")


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
