"""TF_CONFIG parsing: the roles it yields, and errors that name what is wrong."""

from __future__ import annotations

import json

import pytest
from trainer.tf_config import Mode, TFConfigError, parse_tf_config, read_tf_config

# The example in README.md, "Distributed TensorFlow", verbatim.
DESIGN_EXAMPLE = (
    '{"cluster":{"chief":["mnist-chief-0.team-a.svc:2222"],"ps":["mnist-ps-0.team-a.svc:2222",'
    '"mnist-ps-1.team-a.svc:2222"],"worker":["mnist-worker-0.team-a.svc:2222",'
    '"mnist-worker-1.team-a.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
)
WORKERS = {"worker": ["a-worker-0.ns.svc:2222", "a-worker-1.ns.svc:2222"]}


def config(cluster: object, task: object, **extra: object) -> str:
    return json.dumps({"cluster": cluster, "task": task, **extra})


def test_design_example_is_a_parameter_server_worker() -> None:
    parsed = parse_tf_config(DESIGN_EXAMPLE)

    assert parsed.task_type == "worker" and parsed.task_index == 1
    assert parsed.mode is Mode.SERVER
    assert parsed.num_workers == 3
    assert not parsed.is_chief


@pytest.mark.parametrize(
    ("cluster", "task", "mode", "is_chief"),
    [
        (WORKERS, {"type": "worker", "index": 0}, Mode.COLLECTIVE, True),
        (WORKERS, {"type": "worker", "index": 1}, Mode.COLLECTIVE, False),
        ({"chief": ["c:1"], **WORKERS}, {"type": "chief", "index": 0}, Mode.COLLECTIVE, True),
        # With a chief, worker 0 is an ordinary worker.
        ({"chief": ["c:1"], **WORKERS}, {"type": "worker", "index": 0}, Mode.COLLECTIVE, False),
        ({"chief": ["c:1"], "ps": ["p:1"], **WORKERS}, {"type": "chief", "index": 0}, Mode.COORDINATOR, True),
        ({"chief": ["c:1"], "ps": ["p:1"], **WORKERS}, {"type": "ps", "index": 0}, Mode.SERVER, False),
        ({"evaluator": ["e:1"], **WORKERS}, {"type": "evaluator", "index": 0}, Mode.EVALUATOR, False),
    ],
)
def test_roles(cluster: dict[str, list[str]], task: dict[str, object], mode: Mode, is_chief: bool) -> None:
    parsed = parse_tf_config(config(cluster, task))

    assert parsed.mode is mode
    assert parsed.is_chief is is_chief


def test_evaluator_is_left_out_of_the_cluster_tensorflow_connects() -> None:
    parsed = parse_tf_config(config({"evaluator": ["e:1"], **WORKERS}, {"type": "worker", "index": 0}))

    assert parsed.training_cluster == WORKERS
    assert parsed.num_workers == 2


@pytest.mark.parametrize("raw", [None, "", "  "])
def test_unset_or_blank_means_a_local_run(raw: str | None) -> None:
    environ = {} if raw is None else {"TF_CONFIG": raw}

    assert read_tf_config(environ) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"cluster": ', "not valid JSON"),
        ("[]", "must be a JSON object, got array"),
        (config(WORKERS, None), "task is missing"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "cluster is missing"),
        (config({}, {"type": "worker", "index": 0}), "cluster must be a non-empty object"),
        (config({"worker": "a:1"}, {"type": "worker", "index": 0}), "cluster.worker must be a non-empty list"),
        (config({"master": ["m:1"]}, {"type": "master", "index": 0}), "cluster.master: unknown task type"),
        (config({"worker": ["a-worker-0.ns.svc"]}, {"type": "worker", "index": 0}), "cluster.worker[0] 'a-worker-0.ns.svc' is not 'host:port'"),
        (config({"worker": ["a:99999"]}, {"type": "worker", "index": 0}), "port outside 1-65535"),
        (config({"worker": ["a:1", "a:1"]}, {"type": "worker", "index": 0}), "used by more than one task: ['a:1']"),
        (config(WORKERS, {"type": "worker", "index": 2}), "task.index 2 is out of range: cluster.worker has 2 task(s)"),
        (config(WORKERS, {"type": "worker", "index": "1"}), 'task.index must be a non-negative integer, got "1"'),
        (config(WORKERS, {"type": "worker", "index": True}), "task.index must be a non-negative integer, got true"),
        (config(WORKERS, {"type": "chief", "index": 0}), "task.type 'chief' is not in cluster (has worker)"),
        (config({"ps": ["p:1"], **WORKERS}, {"type": "worker", "index": 0}), "needs a chief to coordinate"),
        (config({"chief": ["c:1"], "ps": ["p:1"]}, {"type": "chief", "index": 0}), "needs at least one worker"),
        (config({"chief": ["c:1", "d:1"]}, {"type": "chief", "index": 0}), "cluster.chief has 2 tasks"),
        (config(WORKERS, {"type": "worker", "index": 0}, extra=1), "unknown keys ['extra']"),
    ],
)  # fmt: skip
def test_malformed_config_names_the_problem(raw: str, expected: str) -> None:
    with pytest.raises(TFConfigError) as error:
        parse_tf_config(raw)

    assert expected in str(error.value)
    assert str(error.value).startswith("invalid TF_CONFIG: ")


def test_every_problem_is_reported_at_once() -> None:
    raw = config({"worker": ["ok:1", "bad"], "master": ["m:1"]}, {"type": "worker", "index": 5})

    with pytest.raises(TFConfigError) as error:
        parse_tf_config(raw)

    assert len(error.value.problems) == 3
    assert any("cluster.worker[1]" in p for p in error.value.problems)
    assert any("cluster.master" in p for p in error.value.problems)
    assert any("task.index 5" in p for p in error.value.problems)
