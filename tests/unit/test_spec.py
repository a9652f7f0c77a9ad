"""The job spec: strict, bounded, and every error names its field."""

from __future__ import annotations

from typing import Any

import pytest

from squall.core.spec import (
    CancelCommand,
    Issue,
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
    assert "must be from 0 to 16" in found["resources.gpu"]
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
        ({"resources": {"cpu": "\u0663"}}, "resources.cpu"),  # Kubernetes reads ASCII digits only
        ({"resources": {"memory": "\uff12Gi"}}, "resources.memory"),
        ({"priority": 101}, "priority"),
        ({"retries": 1e9}, "retries"),
        ({"maxRuntime": "31d"}, "maxRuntime"),
        ({"maxRuntime": "soon"}, "maxRuntime"),
        ({"env": {"TF_CONFIG": "{}"}}, "env"),
        ({"env": {"bad-name": "x"}}, "env"),
        ({"checkpointUri": "file:///etc/passwd"}, "checkpointUri"),
        ({"image": "registry.example.com/squall/x:1 && curl"}, "image"),
        ({"placement": {"spot": "maybe"}}, "placement.spot"),
        ({"sweep": {"parameters": {"lr": [1]}, "maxTrials": 1000}}, "sweep.maxTrials"),
        ({"sweep": {"parameters": {"lr": [1]}, "maxTrials": 2, "parallelism": 3}}, "sweep"),
        ({"replicas": {"ps": 2}}, "replicas"),
        ({"replicas": {"launcher": 1}}, "replicas.launcher"),
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


# ---- accepted, but wrong: every pattern is a full match ------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "train\n"}, "name"),
        ({"id": "train-1\n"}, "id"),
        ({"image": "registry.example.com/squall/tf-trainer:1.0\n"}, "image"),
        ({"checkpointUri": "s3://bucket/ckpt\n"}, "checkpointUri"),
        ({"outputUri": "s3://bucket\n"}, "outputUri"),
        ({"placement": {"regions": ["us-west-2\n"]}}, "placement.regions[0]"),
        ({"placement": {"nodeGroups": ["p3-usw2\n"]}}, "placement.nodeGroups[0]"),
        ({"placement": {"nodeGroups": ["no spaces"]}}, "placement.nodeGroups[0]"),
        ({"env": {"KEY\n": "x"}}, "env"),
        ({"maxRuntime": "6h\n"}, "maxRuntime"),
        ({"maxRuntime": " 6h"}, "maxRuntime"),
        ({"sweep": {"parameters": {"lr\n": [1]}}}, "sweep.parameters"),
        ({"resources": {"cpu": "1 "}}, "resources.cpu"),
        ({"resources": {"cpu": " 1"}}, "resources.cpu"),
        ({"resources": {"memory": "4Gi\n"}}, "resources.memory"),
        ({"replicas": {"ps": {"count": 1, "resources": {"cpu": "1\t"}}, "worker": 1}}, "replicas.ps.resources.cpu"),
    ],
)
def test_trailing_whitespace_never_passes(overrides: dict[str, Any], field: str) -> None:
    assert field in errors(spec(**overrides))


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/squall/tf-trainer:1.0",
        "registry.example.com/squall/tf_trainer:v1.0-rc.1",
        "registry.example.com/squall/team/tf-trainer",
        "registry.example.com/squall/tf__trainer:latest",
        "registry.example.com/squall/tf-trainer@sha256:" + "a" * 64,
        "registry.example.com/squall/tf-trainer:1.0@sha256:" + "0" * 64,
    ],
)
def test_image_references_of_the_oci_grammar_pass(image: str) -> None:
    assert parse_spec(spec(image=image), teams=TEAMS, registries=REGISTRIES).image == image


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/squall/../../x:1",
        "registry.example.com/squall/./x:1",
        "registry.example.com/squall//x:1",
        "registry.example.com/squall/x:",
        "registry.example.com/squall/x:a:b:c",
        "registry.example.com/squall/X:1",
        "registry.example.com/squall/x:-bad",
        "registry.example.com/squall/x@sha256:abc",
        "registry.example.com/squall/x:" + "t" * 129,
        "registry.example.com/squall/-x:1",
        "registry.example.com/squall/x_:1",
        "registry.example.com/squall/ü:1",
        "x:",
        "x:a:b:c",
    ],
)
def test_image_references_outside_the_grammar_are_refused(image: str) -> None:
    assert "container image reference" in errors(spec(image=image))["image"]


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/squall-evil/x:1",  # the prefix check is on a path-component boundary
        "registry.example.com/squall:1",  # the registry path itself is no repository under it
        "registry.example.com:5000/squall/x:1",
        "evil.example.com/registry.example.com/squall/x:1",
    ],
)
def test_images_must_lie_under_an_allowed_registry_path(image: str) -> None:
    assert "allowed registry" in errors(spec(image=image))["image"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_sweep_values_are_refused(value: float) -> None:
    found = errors(spec(sweep={"parameters": {"lr": [0.1, value]}}))
    assert "finite" in found["sweep.parameters.lr[1]"]


def test_nan_from_a_json_body_is_refused_where_a_quantity_is_asked_for() -> None:
    assert "resources.cpu" in errors(spec(resources={"cpu": float("nan")}))


@pytest.mark.parametrize(
    ("replicas", "words"),
    [
        ({"evaluator": 1}, "at least one chief or worker"),
        ({"evaluator": 1, "ps": 1}, "chief or workers"),
        ({"chief": 0, "worker": 0}, "at least one replica"),
    ],
)
def test_a_job_that_could_never_succeed_is_refused(replicas: dict[str, Any], words: str) -> None:
    assert words in errors(spec(replicas=replicas))["replicas"]


def test_an_evaluator_with_a_chief_is_fine() -> None:
    parsed = parse_spec(spec(replicas={"chief": 1, "evaluator": 1}), teams=TEAMS, registries=REGISTRIES)
    assert [r.type for r in parsed.replica_list()] == ["chief", "evaluator"]


@pytest.mark.parametrize("client_id", ["exp-t001", "exp-t0", "a-t12345"])
def test_a_client_id_shaped_like_a_trial_id_is_refused(client_id: str) -> None:
    assert "trial" in errors(spec(id=client_id))["id"]


def test_ids_that_only_look_close_to_a_trial_id_are_fine() -> None:
    for client_id in ("exp-t", "exp-tx1", "exp-t1a", "test-1"):
        assert parse_spec(spec(id=client_id), teams=TEAMS, registries=REGISTRIES).id == client_id


def test_a_client_id_in_the_rejected_records_namespace_is_refused() -> None:
    assert "rejected-" in errors(spec(id="rejected-0123456789ab"))["id"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"replicas": {"worker": [1, 2]}}, "replicas.worker"),
        ({"replicas": {"worker": "four"}}, "replicas.worker"),
        ({"replicas": {"worker": {"count": "4"}}}, "replicas.worker.count"),
        ({"replicas": {"worker": {"count": 1, "cpu": "1"}}}, "replicas.worker.cpu"),
        ({"sweep": {"parameters": {"lr": [[0.1], {"x": 1}, None]}}}, "sweep.parameters.lr[0]"),
        ({"sweep": {"parameters": {"lr": [0.1, None]}}}, "sweep.parameters.lr[1]"),
        ({"args": ["ok", 3]}, "args[1]"),
        ({"resources": {"gpu": 1.0}}, "resources.gpu"),
        ({"resources": "big"}, "resources"),
        ({"placement": {"regions": "us-west-2"}}, "placement.regions"),
    ],
)
def test_error_paths_are_the_users_own(overrides: dict[str, Any], field: str) -> None:
    found = errors(spec(**overrides))
    assert field in found, found
    internals = (".int", ".float", ".str", ".bool", "ReplicaGroup", "function-", "[key]", "constrained-")
    assert not any(word in path or word in message for path, message in found.items() for word in internals), found


def test_an_unknown_replica_type_names_the_key() -> None:
    found = errors(spec(replicas={"launcher": 1}))
    assert "not an allowed key" in found["replicas.launcher"] and "worker" in found["replicas.launcher"]


@pytest.mark.parametrize("value", ["99999999999d", "999999999d", "99999999d99999999h", "1" * 5000 + "s"])
def test_an_enormous_max_runtime_is_a_field_error(value: str) -> None:
    assert "maxRuntime" in errors(spec(maxRuntime=value))


def test_max_runtime_up_to_the_default_limit_is_fine() -> None:
    assert parse_spec(spec(maxRuntime="30d"), teams=TEAMS, registries=REGISTRIES).runtime_limit.days == 30


def test_a_configured_max_runtime_limit_is_named_in_the_error() -> None:
    from datetime import timedelta

    limit = timedelta(days=60)
    assert parse_spec(spec(maxRuntime="45d"), teams=TEAMS, registries=REGISTRIES, max_runtime_limit=limit)
    with pytest.raises(SpecError) as caught:
        parse_spec(spec(maxRuntime="61d"), teams=TEAMS, registries=REGISTRIES, max_runtime_limit=limit)
    (issue,) = caught.value.issues
    assert issue.field == "maxRuntime" and "60d" in issue.message and "maxRuntimeLimit" in issue.message


def test_a_recorded_spec_loads_back_whatever_the_policy_is_now() -> None:
    from datetime import timedelta

    from squall.core.spec import load_spec, recorded

    # accepted under a 60-day limit; reconcile reads it after the limit went back to 30 days
    parsed = parse_spec(
        spec(maxRuntime="45d", replicas={"chief": 1, "worker": {"count": 2, "resources": {"gpu": 1}}}),
        teams=TEAMS,
        registries=REGISTRIES,
        max_runtime_limit=timedelta(days=60),
    )
    assert load_spec(recorded(parsed)) == parsed
    assert recorded(parsed)["replicas"]["chief"] == 1, "a bare count stays a bare count"


# ---- one accepted spec must never wedge reconcile -------------------------------


def test_a_sweep_whose_trials_would_have_too_many_args_is_refused() -> None:
    found = errors(spec(args=["--x"] * 255, sweep={"parameters": {"lr": [1], "bs": [2]}}))
    assert "at most 254" in found["args"]


def test_a_sweep_value_over_the_argument_limit_is_refused() -> None:
    found = errors(spec(sweep={"parameters": {"lr": ["x" * 5000]}}))
    assert "at most 1024" in found["sweep.parameters.lr[0]"]


def test_a_huge_integer_sweep_value_is_refused() -> None:
    assert "sweep.parameters.lr[0]" in errors(spec(sweep={"parameters": {"lr": [10**2000]}}))


@pytest.mark.parametrize(
    "overrides",
    [
        {"sweep": {"parameters": {"lr": ["\ud800"]}}},
        {"args": ["--name=\udfff"]},
        {"env": {"\ud800": "x"}},
        {"env": {"KEY": "\ud800"}},
        {"command": ["python", "\ud83d"]},
    ],
)
def test_lone_surrogates_are_refused(overrides: dict[str, Any]) -> None:
    found = errors(spec(**overrides))
    assert any("Unicode" in message for message in found.values()), found


def test_parameter_names_that_collide_as_env_names_are_refused() -> None:
    assert "SQUALL_PARAM_LR" in errors(spec(sweep={"parameters": {"lr": [1], "LR": [2]}}))["sweep.parameters"]


def test_every_trial_of_an_accepted_sweep_loads_back() -> None:
    from squall.core.spec import load_spec, recorded

    parsed = parse_spec(
        spec(args=["--x"] * 254, sweep={"parameters": {"lr": ["v" * 1024], "bs": [1, 2]}, "maxTrials": 2}),
        teams=TEAMS,
        registries=REGISTRIES,
    )
    for _, trial in expand_sweep(parsed, job_id="a" * 45):
        assert load_spec(recorded(trial)) == trial


def test_a_spec_too_large_to_record_is_refused() -> None:
    found = errors(spec(env={f"K{i}": "x" * 1000 for i in range(80)}))
    assert "bytes as recorded" in found["(body)"]


def test_the_largest_message_is_bounded_in_the_objects_it_creates() -> None:
    everything = {"chief": 1, "worker": 64, "ps": 16, "evaluator": 1}
    found = errors(spec(replicas=everything, sweep={"parameters": {"lr": [1, 2]}, "maxTrials": 100, "parallelism": 100}))
    assert "16400 Kubernetes objects" in found["sweep.parallelism"] and "at most 200" in found["sweep.parallelism"]
    # the same job alone, one trial at a time, is fine: 82 Jobs and 82 Services
    assert parse_spec(
        spec(replicas=everything, sweep={"parameters": {"lr": [1, 2]}, "maxTrials": 100, "parallelism": 1}),
        teams=TEAMS,
        registries=REGISTRIES,
    )
    assert "sweep.parallelism" in errors(spec(replicas={"worker": 2}, sweep={"parameters": {"lr": [1]}, "maxTrials": 51, "parallelism": 51}))


# ---- error amplification ---------------------------------------------------------


def test_the_issues_kept_are_bounded_with_a_last_and_n_more() -> None:
    from squall.core.spec import MAX_ISSUES

    # a 3.6 KB body that used to yield 2,000 issues
    body = spec(env={f"K{i}": i for i in range(600)})
    with pytest.raises(SpecError) as caught:
        parse_spec(body, teams=TEAMS, registries=REGISTRIES)
    issues = caught.value.issues
    assert caught.value.total >= 600
    assert len(issues) == MAX_ISSUES + 1
    assert issues[-1] == Issue(field="(body)", message=f"and {caught.value.total - MAX_ISSUES} more issues")


def test_issue_text_is_clipped_and_printable() -> None:
    from squall.core.spec import MAX_ISSUE_FIELD_LENGTH, MAX_ISSUE_MESSAGE_LENGTH

    with pytest.raises(SpecError) as caught:
        parse_spec(spec(**{"x\n" * 5000: 1}, team="t\x00" * 5000), teams=TEAMS, registries=REGISTRIES)
    for issue in caught.value.issues:
        assert len(issue.field) <= MAX_ISSUE_FIELD_LENGTH and len(issue.message) <= MAX_ISSUE_MESSAGE_LENGTH
        assert issue.field.isprintable() and issue.message.isprintable()


@pytest.mark.timeout(20)
def test_a_body_too_deep_or_too_large_is_refused_before_validation() -> None:
    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    assert "nested more than" in " ".join(errors(spec(env=deep)).values())
    assert "more than 10000 values" in errors(spec(args=[[0] * 100] * 200))["(body)"]


def test_an_unexpected_exception_in_a_check_is_a_field_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import squall.core.spec.model

    def broken(value: Any) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(squall.core.spec.model, "parse_cpu_millicores", broken)
    assert "could not be checked" in errors(spec(resources={"cpu": "1"}))["resources.cpu"]


def test_a_cancel_for_an_id_that_is_no_job_id_is_refused() -> None:
    for bad in ("x" * 100_000, "../etc", "ok\n"):
        with pytest.raises(SpecError) as caught:
            parse_message({"action": "cancel", "id": bad}, teams=TEAMS, registries=REGISTRIES)
        assert caught.value.issues[0].field == "id"


SHA = "3f" * 32


@pytest.mark.parametrize(
    "uri",
    [
        f"s3://squall-artifacts/code/research/{SHA}.tar.gz",
        f"s3://my.bucket-1/{SHA}.tar.gz",
        f"s3://bucket/deeper/still/{SHA}.tar.gz",
    ],
)
def test_code_uri_names_an_archive_by_its_hash(uri: str) -> None:
    parsed = parse_spec(spec(codeUri=uri), teams=TEAMS, registries=REGISTRIES)
    assert parsed.code_uri == uri
    assert parsed.model_dump(by_alias=True, exclude_none=True)["codeUri"] == uri


@pytest.mark.parametrize(
    "uri",
    [
        f"https://bucket/code/{SHA}.tar.gz",  # not S3
        f"file:///tmp/{SHA}.tar.gz",
        "s3://bucket/code/research/latest.tar.gz",  # not named by a hash: the entrypoint could not check it
        f"s3://bucket/code/{SHA[:-1]}.tar.gz",  # 63 digits
        f"s3://bucket/code/{SHA.upper()}.tar.gz",  # hexdigest is lowercase
        f"s3://bucket/code/{SHA}.zip",
        f"s3://bucket/code/{SHA}.tar.gz/",
        f"s3://bucket/code/{SHA}.tar.gz\n",
        f"s3://bucket/co de/{SHA}.tar.gz",
        f"s3://Bucket/{SHA}.tar.gz",
        f"s3://bucket//{SHA}.tar.gz",
        f"s3:///{SHA}.tar.gz",
        "s3://bucket/" + "p/" * 600 + f"{SHA}.tar.gz",  # longer than any URI Squall takes
        "",
    ],
)
def test_a_code_uri_that_is_not_a_hashed_archive_is_refused_naming_the_field(uri: str) -> None:
    found = errors(spec(codeUri=uri))
    assert list(found) == ["codeUri"]
    assert "sha256" in found["codeUri"] and "s3://" in found["codeUri"]


def test_a_code_uri_must_be_a_string() -> None:
    assert list(errors(spec(codeUri=["s3://b"]))) == ["codeUri"]


def test_sweep_trials_keep_the_code() -> None:
    uri = f"s3://bucket/code/research/{SHA}.tar.gz"
    parsed = parse_spec(spec(codeUri=uri, sweep={"parameters": {"lr": [0.1, 0.2]}}), teams=TEAMS, registries=REGISTRIES)
    assert {trial.code_uri for _, trial in expand_sweep(parsed, job_id="gan-1")} == {uri}
