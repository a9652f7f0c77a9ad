"""The job spec: strict, bounded, and every error names its field."""

from __future__ import annotations

from typing import Any

import pytest

from squall.spec import (
    CancelCommand,
    SpecError,
    derive_job_id,
    expand_sweep,
    parse_message,
    parse_spec,
)

TEAMS = ["research", "vision"]
REGISTRIES = ["registry.example.com/squall"]


def spec(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "gan-cifar10",
        "team": "research",
        "image": "registry.example.com/squall/tf-trainer:1.0",
    }
    return base | overrides


def errors(data: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, teams=TEAMS, registries=REGISTRIES)
    return {issue.field: issue.message for issue in caught.value.issues}


def test_full_spec_from_design_parses() -> None:
    parsed = parse_spec(
        spec(
            id="gan-1",
            command=["python", "-m", "trainer"],
            args=["--epochs", "10"],
            env={"KEY": "value"},
            resources={"cpu": "8", "memory": "60Gi", "gpu": 1},
            replicas={"chief": 1, "worker": {"count": 4}, "ps": {"count": 2, "resources": {"cpu": "4", "memory": "16Gi", "gpu": 0}}},
            placement={"regions": ["us-west-2", "us-east-1"], "nodeGroups": [], "spot": "allowed"},
            priority=50,
            maxRuntime="6h",
            retries=2,
            checkpointUri="s3://bucket/ckpt",
            outputUri="s3://bucket/out",
            sweep={"parameters": {"lr": [0.001, 0.0001]}, "strategy": "grid", "maxTrials": 8, "parallelism": 4},
        ),
        teams=TEAMS,
        registries=REGISTRIES,
    )
    assert parsed.resources.cpu_millis == 8000
    assert parsed.resources.memory_bytes == 60 * 1024**3
    assert parsed.runtime_limit.total_seconds() == 6 * 3600
    assert [(r.type, r.index) for r in parsed.replica_list()] == [
        ("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("worker", 2), ("worker", 3)
    ]
    assert parsed.total_gpus() == 5  # chief + 4 workers; ps override has none


def test_single_pod_job_is_one_worker() -> None:
    parsed = parse_spec(spec(resources={"gpu": 1}), teams=TEAMS, registries=REGISTRIES)
    assert [(r.type, r.index) for r in parsed.replica_list()] == [("worker", 0)]
    assert not parsed.is_distributed


def test_every_error_is_reported_with_its_field_path() -> None:
    found = errors(
        {
            "name": "Bad_Name",
            "team": "marketing",
            "image": "docker.io/evil/miner:latest",
            "resources": {"gpu": -1, "memory": "lots"},
            "replicas": {"worker": {"count": 1000}},
            "privileged": True,
        }
    )
    assert "DNS-1123" in found["name"]
    assert "marketing" in found["team"] and "research" in found["team"]
    assert "allowed registry" in found["image"]
    assert "greater than or equal to 0" in found["resources.gpu"]
    assert "resources.memory" in found
    assert "between 0 and 64" in found["replicas"]
    assert "unknown field" in found["privileged"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "x" * 37}, "name"),
        ({"name": "ünïcode"}, "name"),
        ({"name": "a; rm -rf /"}, "name"),
        ({"name": "$(whoami)"}, "name"),
        ({"id": "../../etc"}, "id"),
        ({"id": "a" * 46}, "id"),
        ({"resources": {"gpu": "1"}}, "resources.gpu"),
        ({"resources": {"gpu": 17}}, "resources.gpu"),
        ({"resources": {"cpu": "10000"}}, "resources.cpu"),
        ({"resources": {"memory": "9Ei"}}, "resources.memory"),
        ({"priority": 101}, "priority"),
        ({"retries": 1e9}, "retries"),
        ({"maxRuntime": "8d"}, "maxRuntime"),
        ({"maxRuntime": "soon"}, "maxRuntime"),
        ({"env": {"TF_CONFIG": "{}"}}, "env"),
        ({"env": {"bad-name": "x"}}, "env"),
        ({"checkpointUri": "file:///etc/passwd"}, "checkpointUri"),
        ({"image": "registry.example.com/squall/x:1 && curl"}, "image"),
        ({"placement": {"spot": "maybe"}}, "placement.spot"),
        ({"sweep": {"parameters": {"lr": [1]}, "maxTrials": 1000}}, "sweep.maxTrials"),
        ({"sweep": {"parameters": {"lr": [1]}, "maxTrials": 2, "parallelism": 3}}, "sweep"),
        ({"replicas": {"ps": 2}}, "replicas"),
        ({"replicas": {"launcher": 1}}, "replicas.launcher.[key]"),
        ({"command": "python train.py"}, "command"),
    ],
)
def test_bad_values_name_their_field(overrides: dict[str, Any], field: str) -> None:
    assert field in errors(spec(**overrides))


def test_a_body_that_is_not_an_object_is_rejected_as_a_whole() -> None:
    assert "(body)" in errors(["not", "an", "object"])


def test_users_cannot_set_trial_fields() -> None:
    assert "parentId" in errors(spec(parentId="someone-else"))


def test_cancel_command_is_recognised() -> None:
    message = parse_message({"action": "cancel", "id": "gan-1"}, teams=TEAMS, registries=REGISTRIES)
    assert isinstance(message, CancelCommand) and message.id == "gan-1"
    with pytest.raises(SpecError) as caught:
        parse_message({"action": "explode", "id": "x"}, teams=TEAMS, registries=REGISTRIES)
    assert caught.value.issues[0].field == "action"


def test_job_id_is_stable_per_message_and_prefers_the_client_id() -> None:
    parsed = parse_spec(spec(), teams=TEAMS, registries=REGISTRIES)
    assert derive_job_id(parsed, message_id="m-1") == derive_job_id(parsed, message_id="m-1")
    assert derive_job_id(parsed, message_id="m-1") != derive_job_id(parsed, message_id="m-2")
    assert derive_job_id(parsed, message_id="m-1").startswith("gan-cifar10-")
    with_id = parse_spec(spec(id="mine"), teams=TEAMS, registries=REGISTRIES)
    assert derive_job_id(with_id, message_id="m-1") == "mine"


def test_grid_sweep_expands_into_trials_with_parameters() -> None:
    parsed = parse_spec(
        spec(sweep={"parameters": {"lr": [0.1, 0.01], "batch": [32, 64]}, "maxTrials": 3}),
        teams=TEAMS,
        registries=REGISTRIES,
    )
    trials = expand_sweep(parsed, job_id="gan-1")
    assert [t for t, _ in trials] == ["gan-1-t000", "gan-1-t001", "gan-1-t002"]
    first = trials[0][1]
    assert first.parent_id == "gan-1" and first.sweep is None
    assert first.trial_parameters == {"lr": 0.1, "batch": 32}
    assert first.args[-2:] == ["--lr=0.1", "--batch=32"]


def test_random_sweep_is_deterministic_for_a_seed() -> None:
    sweep = {"parameters": {"lr": [1, 2, 3, 4, 5, 6]}, "strategy": "random", "maxTrials": 3, "parallelism": 1, "seed": 7}
    parsed = parse_spec(spec(sweep=sweep), teams=TEAMS, registries=REGISTRIES)
    once = [s.trial_parameters for _, s in expand_sweep(parsed, job_id="j")]
    again = [s.trial_parameters for _, s in expand_sweep(parsed, job_id="j")]
    assert once == again and len(once) == 3 and len({str(p) for p in once}) == 3
