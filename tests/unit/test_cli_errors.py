"""The `squall` command refuses bad input with exit 2 and a field-named message, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from squall.cli import commands as cli
from squall.cli import deployment as cli_deployment
from squall.cli import main
from squall.planner import NodeGroup, Policy, Resources, plan
from squall.planner.packing import GroupOption

DATA = Path(__file__).parent / "planner" / "data"
NOW = "2024-05-01T12:00:00Z"
SPEC = {
    "name": "gan-cifar10",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"cpu": "8", "memory": "60Gi", "gpu": 1},
}
GROUP: dict[str, Any] = {
    "name": "p3-usw2",
    "region": "us-west-2",
    "instanceType": "p3.2xlarge",
    "allocatable": {"cpu": "7800m", "memory": "55Gi", "nvidia.com/gpu": 1, "pods": 58},
    "maxSize": 16,
}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "nodes.json").write_text((DATA / "nodes.json").read_text())
    (tmp_path / "pods.json").write_text((DATA / "pods.json").read_text())
    (tmp_path / "groups.json").write_text(json.dumps({"nodeGroups": [GROUP]}))
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


def plan_args(now: str = NOW) -> list[str]:
    return ["plan", "--nodes", "nodes.json", "--pods", "pods.json", "--groups", "groups.json", "--now", now]


def mutate_pod(here: Path, change: Any) -> None:
    pods = json.loads((here / "pods.json").read_text())
    change(pods["items"][0])
    (here / "pods.json").write_text(json.dumps(pods))


# ---- squall plan --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda pod: pod["spec"].update(nodeName=["a", "b"]),
            "items[0]: pod team-a/mnist-worker-0-x7k2p: spec.nodeName",
        ),
        (
            lambda pod: pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchExpressions"][0].pop("key"),
            "nodeSelectorTerms[0].matchExpressions[0].key: required",
        ),
        (lambda pod: pod["spec"].update(priority=2**40), "spec.priority: expected a whole number"),
        (lambda pod: pod["spec"].update(priority="high"), "spec.priority: expected a whole number"),
        (lambda pod: pod["spec"].update(tolerations={"key": "x"}), "spec.tolerations: expected a list"),
        (lambda pod: pod["status"].update(phase=["Pending"]), "status.phase: expected a string"),
        (
            lambda pod: pod["metadata"].update(labels={"squall.io/job-id": 7}),
            "metadata.labels.squall.io/job-id",
        ),
    ],
)
def test_plan_names_the_pod_field_it_refuses(
    here: Path, capsys: pytest.CaptureFixture[str], change: Any, words: str
) -> None:
    mutate_pod(here, change)
    code, err = run(plan_args(), capsys)
    assert code == 2
    assert err.startswith("squall: pods.json: ") and words in err


def test_a_priority_past_every_float_is_refused_where_it_is_written(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (here / "pods.json").read_text().replace('"priority": 0', '"priority": 1.0e+400', 1)
    assert "1.0e+400" in text
    (here / "pods.json").write_text(text)
    code, err = run(plan_args(), capsys)
    assert code == 2 and "pods.json: line " in err and "'1.0e+400' is out of range" in err


@pytest.mark.parametrize(
    ("now", "words"),
    [
        ("yesterday", "--now: expected an ISO 8601 time with a timezone"),
        ("0001-01-01T00:00:00Z", "must be between 1970 and 9000"),
        ("9999-12-31T23:59:59+00:00", "must be between 1970 and 9000"),
        ("0001-01-01T00:30:00+01:00", "must be between 1970 and 9000"),
        ("2026-01-05T09:00:00", "--now needs a timezone"),
    ],
)
def test_plan_refuses_a_now_it_cannot_plan_at(
    here: Path, capsys: pytest.CaptureFixture[str], now: str, words: str
) -> None:
    code, err = run(plan_args(now), capsys)
    assert code == 2 and words in err


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"desired": 100_000_000, "maxSize": 100_000_000}, "nodeGroups[0].maxSize: must be from 0 to 10000"),
        ({"desired": 100_000_000}, "nodeGroups[0].desired: must be from 0 to 10000"),
        (
            {"priority": 10**4000},
            "nodeGroups[0].priority: must be from -1000000 to 1000000, got a number of about",
        ),
        (
            {
                "launchTime": "x",
                "instances": [{"id": "i-1", "lifecycleState": "InService", "launchTime": "0001-01-01"}],
            },
            "nodeGroups[0].instances[0].launchTime: invalid time",
        ),
        ({"backoffUntil": "9999-12-31T23:59:59Z"}, "nodeGroups[0].backoffUntil: invalid time"),
    ],
)
@pytest.mark.timeout(20)
def test_groups_of_absurd_sizes_are_refused_at_once(
    here: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], words: str
) -> None:
    (here / "groups.json").write_text(json.dumps({"nodeGroups": [GROUP | change]}))
    code, err = run(plan_args(), capsys)
    assert code == 2 and err.startswith("squall: groups.json: ") and words in err


def test_nodes_not_launched_yet_are_counted_not_enumerated(monkeypatch: pytest.MonkeyPatch) -> None:
    # given a group asked for a hundred million nodes (the planner itself takes any size)
    calls: list[int] = []
    add_booting = GroupOption.add_booting

    def counting(self: GroupOption, free: Any, count: int = 1) -> None:
        calls.append(count)
        add_booting(self, free, count)

    monkeypatch.setattr(GroupOption, "add_booting", counting)
    group = NodeGroup(
        name="g",
        region="us-west-2",
        instance_type="p3.2xlarge",
        allocatable=Resources(cpu=8000, memory=2**36, gpu=1, pods=58),
        max_size=100_000_000,
        desired=100_000_000,
    )
    # when the planner plans
    from datetime import UTC, datetime

    plan(nodes=[], pods=[], groups=[group], health={}, policy=Policy(), now=datetime(2024, 5, 1, tzinfo=UTC))
    # then they were added as one count, not one by one
    assert calls and max(calls) == 100_000_000 and len(calls) <= 2


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"items": [\n{"metadata": {"name": "caf\xe9"}}]}', "nodes.json: line 2, column 27: not UTF-8"),
        (b"items: !!python/object/apply:os.system [ls]\n", "nodes.json: line 1, column 8: the YAML tag"),
        (b'{"items": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "nodes.json: nested more than 100 levels deep"),
        (
            b'{"items": [], "n": ' + b"9" * 5_000 + b"}",
            "nodes.json: line 1, column 20: an integer of more than",
        ),
        (b"items: !!int x\n", "nodes.json: line 1, column 8: 'x' is not an integer"),
    ],
)
def test_plan_refuses_files_that_are_no_documents(
    here: Path, capsys: pytest.CaptureFixture[str], content: bytes, words: str
) -> None:
    (here / "nodes.json").write_bytes(content)
    code, err = run(plan_args(), capsys)
    assert code == 2 and words in err


def test_plan_reads_json_as_json_so_that_1e3_is_a_number(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # YAML 1.1 reads 3.06e0 as a string, which no price is; JSON reads the number it is
    (here / "groups.json").write_text(
        json.dumps({"nodeGroups": [GROUP | {"pricePerHour": "P"}]}).replace('"P"', "3.06e0")
    )
    code, err = run(plan_args(), capsys)
    assert code == 0, err


# ---- validate and render ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"name: caf\xe9\n", "spec.yaml: line 1, column 10: not UTF-8"),
        (b"name: x\nretries: !!int many\n", "spec.yaml: line 2, column 10: 'many' is not an integer"),
        (b"name: !!python/name:os.system x\n", "the YAML tag !!python/name:os.system is not accepted"),
        (b"retries: " + b"9" * 5_000 + b"\n", "an integer of more than"),
        (b"env: " + b"[" * 3_000 + b"]" * 3_000 + b"\n", "nested"),
        (b"name: a\nname: b\n", "spec.yaml: line 2, column 1: key 'name' appears twice"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "render"])
def test_validate_and_render_refuse_files_that_are_no_documents(
    here: Path, capsys: pytest.CaptureFixture[str], content: bytes, words: str, command: str
) -> None:
    (here / "spec.yaml").write_bytes(content)
    code, err = run([command, "spec.yaml"], capsys)
    assert code == 2 and words in err


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("SQUALL_TEAMS", "{research: team-research}", "SQUALL_TEAMS: line 1, column 2: not valid JSON"),
        ("SQUALL_TEAMS", '["research"]', "SQUALL_TEAMS: teams: expected an object"),
        (
            "SQUALL_TEAMS",
            '{"research": 5}',
            "SQUALL_TEAMS: teams.research: expected a namespace or an object",
        ),
        (
            "SQUALL_TEAMS",
            '{"research": {"namespace": "team-research", "boss": "x"}}',
            "teams.research.boss: unknown",
        ),
        ("SQUALL_ALLOWED_REGISTRIES", "registry.example.com", "SQUALL_ALLOWED_REGISTRIES: line 1, column 1"),
        (
            "SQUALL_ALLOWED_REGISTRIES",
            '"registry.example.com"',
            "SQUALL_ALLOWED_REGISTRIES: expected a non-empty list",
        ),
        ("SQUALL_ALLOWED_REGISTRIES", "[1, 2]", "SQUALL_ALLOWED_REGISTRIES: expected a non-empty list"),
        ("SQUALL_ALLOWED_REGISTRIES", "[]", "SQUALL_ALLOWED_REGISTRIES: expected a non-empty list"),
    ],
)
def test_a_malformed_environment_is_named(
    here: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    words: str,
) -> None:
    monkeypatch.setenv(variable, value)
    code, err = run(["validate", "spec.json"], capsys)
    assert code == 2 and words in err


def test_teams_may_be_objects_in_the_environment_and_in_cdk_json(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    teams = {
        "research": {"namespace": "team-research", "submitters": ["arn:aws:iam::123456789012:role/research"]},
        "vision": "team-vision",
    }
    (here / "cdk.json").write_text(json.dumps({"app": "python3 app.py", "context": {"teams": teams}}))
    assert cli.configured_teams() == {"research": "team-research", "vision": "team-vision"}
    code, _ = run(["render", "spec.json", "--json"], capsys)
    assert code == 0
    monkeypatch.setenv("SQUALL_TEAMS", json.dumps({"research": {"namespace": "ns-from-env"}}))
    assert cli.configured_teams() == {"research": "ns-from-env"}


def test_a_broken_cdk_json_is_named_rather_than_ignored(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "cdk.json").write_text('{"context": {"teams": {"research": "team-research",}}}')
    code, err = run(["validate", "spec.json"], capsys)
    assert code == 2 and "cdk.json: line 1, column 52: not valid JSON" in err
    (here / "cdk.json").write_text(
        json.dumps({"context": {"teams": {"research": {"namespace": "x", "quota": 1}}}})
    )
    code, err = run(["validate", "spec.json"], capsys)
    assert code == 2 and "cdk.json: context: teams.research.quota: unknown field" in err


@pytest.mark.parametrize("command", ["validate", "render"])
def test_validate_and_render_use_the_configured_max_runtime_limit(
    here: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    (here / "long.json").write_text(json.dumps(SPEC | {"maxRuntime": "45d"}))
    # the default limit is 30 days
    code, err = run([command, "long.json"], capsys)
    assert code == 2 and "maxRuntime: must be at most 30d" in err
    # cdk.json's policy raises it
    (here / "cdk.json").write_text(json.dumps({"context": {"policy": {"maxRuntimeLimit": "P60D"}}}))
    code, _ = run([command, "long.json"], capsys)
    assert code == 0
    # or lowers it, and the message names the configured limit
    (here / "cdk.json").write_text(json.dumps({"context": {"policy": {"maxRuntimeLimit": "P2D"}}}))
    code, err = run([command, "long.json"], capsys)
    assert code == 2 and "must be at most 2d" in err
    (here / "cdk.json").write_text(json.dumps({"context": {"policy": {"maxRuntimeLimit": "forever"}}}))
    code, err = run([command, "long.json"], capsys)
    assert code == 2 and "cdk.json: policy.maxRuntimeLimit:" in err


def test_render_checks_an_id_given_on_the_command_line(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(["render", "spec.json", "--id", "../../etc"], capsys)
    assert code == 2 and "id:" in err
    code, _ = run(["render", "spec.json", "--id", "gan-7", "--json"], capsys)
    assert code == 0


def test_a_failing_deployment_is_exit_1_with_its_reason(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from squall.core.errors import RetryableError

    class Store:
        def get(self, job_id: str) -> None:
            raise RetryableError(f"get job {job_id}: ThrottlingException: Rate exceeded")

    monkeypatch.setattr(cli_deployment, "job_store", Store)
    code, err = run(["status", "job-1"], capsys)
    assert code == 1 and "squall: get job job-1: ThrottlingException" in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["local", "run", "--scenario", "list.json"], "(scenario): expected an object with name, arrivals"),
        (
            ["simulate", "--trace", "trace.csv", "--groups", "list.json"],
            "(groups): expected an object with nodeGroups",
        ),
    ],
)
def test_local_commands_refuse_documents_of_the_wrong_shape(
    here: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    (here / "list.json").write_text("[1, 2]")
    (here / "trace.csv").write_text("submit_s,team,gpus,replicas,run_s\n0,research,1,1,60\n")
    code, err = run(argv, capsys)
    assert code == 2 and words in err


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--speed", "0"], "--speed must be a positive number or 'max', got '0'"),
        (["--speed", "nan"], "--speed must be a positive number or 'max'"),
        (["--speed", "-5"], "--speed must be a positive number or 'max'"),
        (["--dashboard", "/proc/no-such-place"], "--dashboard /proc/no-such-place: cannot write there"),
    ],
)
def test_simulate_refuses_options_it_cannot_run_with(
    here: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    (here / "trace.csv").write_text("submit_s,team,gpus,replicas,run_s\n0,research,1,1,60\n")
    (here / "groups.json").write_text(json.dumps({"nodeGroups": [GROUP | {"asgName": "squall-p3-usw2"}]}))
    code, err = run(["simulate", "--trace", "trace.csv", "--groups", "groups.json", "--json", *extra], capsys)
    assert code == 2 and words in err


@pytest.mark.parametrize("limit", ["-5", "0", "lots", "9" * 50])
def test_list_refuses_a_limit_out_of_range(capsys: pytest.CaptureFixture[str], limit: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["list", "--limit", limit])
    assert exited.value.code == 2
    assert "argument --limit:" in capsys.readouterr().err


# ---- squall plan plans with the deployment's policy ----------------------------------------------


def _plan_backoffs(capsys: pytest.CaptureFixture[str], *extra: str) -> list[str]:
    code = main([*plan_args(), "--json", *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return [b["group"] for b in json.loads(captured.out)["backoff"]]


def test_plan_uses_the_policy_of_the_cdk_json_here_or_of_policy(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given: an instance launched 12 minutes ago that never became a node
    slow = {"id": "i-0abcabcabcabcab01", "lifecycleState": "Pending", "launchTime": "2024-05-01T11:48:00Z"}
    (here / "groups.json").write_text(json.dumps({"nodeGroups": [GROUP | {"instances": [slow]}]}))
    # then: the deployment's default provision timeout (10 minutes) has passed
    assert _plan_backoffs(capsys) == ["p3-usw2"]
    # a cdk.json here that allows 15 minutes is the policy squall plan plans with
    (here / "cdk.json").write_text(json.dumps({"context": {"policy": {"provisionTimeout": "PT15M"}}}))
    assert _plan_backoffs(capsys) == []
    # and --policy names another: a policy object, {policy: ...}, or a cdk.json
    (here / "tight.json").write_text(json.dumps({"provisionTimeout": "11m"}))
    assert _plan_backoffs(capsys, "--policy", "tight.json") == ["p3-usw2"]
    (here / "loose.json").write_text(json.dumps({"policy": {"provisionTimeout": "1h"}}))
    assert _plan_backoffs(capsys, "--policy", "loose.json") == []


def test_plan_refuses_a_policy_it_cannot_read_by_field(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "cdk.json").write_text(json.dumps({"context": {"policy": {"provisionTimeout": "soon"}}}))
    code, err = run(plan_args(), capsys)
    assert code == 2 and "squall: cdk.json: policy.provisionTimeout: must be a duration" in err
    (here / "p.json").write_text(json.dumps({"policy": {"maxScaleDownFraction": 2}}))
    code, err = run([*plan_args(), "--policy", "p.json"], capsys)
    assert (
        code == 2 and "squall: p.json: policy.maxScaleDownFraction: expected a number greater than 0" in err
    )


# ---- squall plan --jobs -------------------------------------------------------------------


def _suspended_jobs(*names: str) -> dict[str, Any]:
    from datetime import UTC, datetime, timedelta

    from squall.core import manifests
    from squall.core.spec import parse_spec

    items: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        spec = parse_spec(
            SPEC | {"id": name},
            teams={"research": "team-research"},
            registries=["registry.example.com/squall"],
            max_runtime_limit=timedelta(days=30),
        )
        at = datetime(2024, 5, 1, 11, index, tzinfo=UTC)
        objects = manifests.render(spec, job_id=name, namespace="team-research", submitted_at=at)
        items += [o for o in objects if o["kind"] == "Job"]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def test_plan_names_the_jobs_file_item_and_field_it_refuses(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _suspended_jobs("a", "b")
    jobs["items"][1]["spec"]["suspend"] = "no"
    (here / "jobs.json").write_text(json.dumps(jobs))
    code, err = run([*plan_args(), "--jobs", "jobs.json"], capsys)
    assert code == 2
    assert err.startswith("squall: jobs.json: items[1]: job team-research/b-worker-0: spec.suspend")
    code, err = run([*plan_args(), "--jobs", "missing.json"], capsys)
    assert code == 2 and "missing.json" in err
    (here / "jobs.json").write_text("[1, 2")
    code, err = run([*plan_args(), "--jobs", "jobs.json"], capsys)
    assert code == 2 and "jobs.json" in err


def test_plan_with_jobs_holds_a_team_to_its_quota_from_the_environment(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / "jobs.json").write_text(json.dumps(_suspended_jobs("a", "b")))
    monkeypatch.setenv(
        "SQUALL_TEAMS", json.dumps({"research": {"namespace": "team-research", "gpuQuota": 1}})
    )
    assert main([*plan_args(), "--jobs", "jobs.json", "--json"]) == 0
    waiting = json.loads(capsys.readouterr().out)["admission"]["waiting"]
    assert [(w["job"], w["reason"]) for w in waiting] == [("a", "Queued"), ("b", "QuotaExceeded:1/1 GPUs")]
    monkeypatch.setenv("SQUALL_TEAMS", json.dumps({"research": {"namespace": "team-research", "weight": 0}}))
    code, err = run([*plan_args(), "--jobs", "jobs.json"], capsys)
    assert code == 2 and "SQUALL_TEAMS: teams.research.weight: expected a positive number" in err
