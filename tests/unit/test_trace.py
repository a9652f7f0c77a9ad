"""TRACE.csv: rows with clear errors (line and column), job specs from rows, the groups to replay against."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from squall.core.spec import parse_spec
from squall.local.scenario import ScenarioError
from squall.local.trace import Configuration, TraceRow, job_spec, load_configuration, parse_trace, trace_plan

GROUPS = """
nodeGroups:
  - name: p4d-usw2
    region: us-west-2
    instanceType: p4d.24xlarge
    allocatable: {cpu: "95", memory: 1100Gi, nvidia.com/gpu: 8, pods: 110}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
    maxSize: 4
    pricePerHour: 32.77
policy: {idleThreshold: PT2M}
regions:
  us-west-2: {capacity: {p4d.24xlarge: 3}, bootTime: 4m}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_trace(text, source="t.csv")
    return caught.value.errors


def configuration_errors(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_configuration(path)
    return caught.value.errors


def plan_errors(rows: list[TraceRow], config: Configuration) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        trace_plan(rows, config)
    return caught.value.errors


def test_rows_in_submit_order_with_extra_columns_ignored() -> None:
    rows = parse_trace(
        "team,submit_s,gpus,replicas,run_s,user\nvision,60,8,4,3600,ann\nresearch,0.5,1,1,90,bob\n"
    )
    assert [(r.line, r.submit_s, r.team, r.gpus, r.replicas, r.run_s) for r in rows] == [
        (3, 0.5, "research", 1, 1, 90.0),
        (2, 60.0, "vision", 8, 4, 3600.0),
    ]


def test_blank_lines_are_skipped_and_line_numbers_stay_true() -> None:
    rows = parse_trace("submit_s,team,gpus,replicas,run_s\n\n10,research,1,1,60\n\n")
    assert [r.line for r in rows] == [3]


def test_a_missing_column_is_named_on_line_one() -> None:
    assert errors_of("submit_s,team,gpus,run_s\n0,a,1,60\n") == [
        "line 1: the header lacks replicas (expected submit_s,team,gpus,replicas,run_s, further columns allowed)"
    ]
    assert errors_of("") == ["line 1: empty file; expected the header submit_s,team,gpus,replicas,run_s"]


def test_every_bad_cell_is_named_by_line_and_column() -> None:
    errors = errors_of(
        "submit_s,team,gpus,replicas,run_s\n"
        "soon,research,1,1,60\n"
        "0,Research!,1,1,60\n"
        "0,research,17,1,60\n"
        "0,research,1,0,60\n"
        "0,research,1,1,0\n"
        "0,research,1.5,1,60\n"
        "-1,research,1,1,60\n"
        "0,research\n"
    )
    assert errors == [
        "line 2, column submit_s: expected a number of seconds such as 30, 2.5 or 1e3, got 'soon'",
        "line 3, column team: 'Research!' is not a team name (lowercase letters, digits and '-', at most 32, starting with a letter)",
        "line 4, column gpus: expected a whole number 0..16, got 17",
        "line 5, column replicas: expected a whole number 1..65, got 0",
        "line 6, column run_s: expected a positive number and at most 2592000 (the policy's maxRuntimeLimit, 30d), got '0'",
        "line 7, column gpus: expected a whole number 0..16, got '1.5'",
        "line 8, column submit_s: expected a number at least 0, got '-1'",
        "line 9: 2 columns, the header has 5",
    ]


def test_a_long_list_of_errors_is_cut_short() -> None:
    text = "submit_s,team,gpus,replicas,run_s\n" + "x,research,1,1,60\n" * 30
    errors = errors_of(text)
    assert len(errors) == 21 and errors[-1] == "... and 10 more"


def test_a_single_pod_row_makes_a_valid_single_pod_spec() -> None:
    (row,) = parse_trace("submit_s,team,gpus,replicas,run_s\n5,research,2,1,5400\n")
    spec = job_spec(row, registry="registry.example.com/squall")
    parsed = parse_spec(spec, teams=["research"], registries=["registry.example.com/squall"])
    assert parsed.id == "research-000002" and parsed.replicas is None
    assert parsed.total_gpus() == 2
    assert spec["resources"] == {"cpu": "6", "memory": "24Gi", "gpu": 2}
    # the deadline never cuts a replayed job short: twice its run time
    assert spec["maxRuntime"] == "10800s"


def test_a_distributed_row_makes_a_chief_and_workers() -> None:
    (row,) = parse_trace("submit_s,team,gpus,replicas,run_s\n0,vision,8,4,60\n")
    parsed = parse_spec(
        job_spec(row, registry="r.example.com/x"), teams=["vision"], registries=["r.example.com/x"]
    )
    assert [(r.type, r.index) for r in parsed.replica_list()] == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    ]
    assert parsed.total_gpus() == 32


def test_groups_file_with_policy_and_region_capacity(tmp_path: Path) -> None:
    (tmp_path / "groups.yaml").write_text(GROUPS)
    config = load_configuration(tmp_path / "groups.yaml")
    assert [g.name for g in config.groups] == ["p4d-usw2"]
    assert config.policy.idle_threshold == timedelta(minutes=2)
    assert config.capacity["us-west-2"].instances == {"p4d.24xlarge": 3}
    assert config.capacity["us-west-2"].boot_time == timedelta(minutes=4)


def test_without_groups_the_cdk_json_here_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScenarioError, match=r"cdk.json does not exist \(give --groups GROUPS.yaml\)"):
        load_configuration(None)
    cdk = json.loads((Path(__file__).parents[2] / "cdk.json").read_text())
    (tmp_path / "cdk.json").write_text(json.dumps(cdk))
    config = load_configuration(None)
    assert [g.name for g in config.groups] == [g["name"] for g in cdk["context"]["nodeGroups"]]
    assert config.policy.idle_threshold == timedelta(minutes=10)


def test_a_groups_file_with_errors_names_them(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(
        "nodeGroups: [{name: x, region: us-west-2}]\npolicy: {idle: 1}\nextra: 1\n"
    )
    assert configuration_errors(tmp_path / "g.yaml") == ["extra: unknown field"]


def test_rows_that_fit_no_group_are_refused_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "groups.yaml").write_text(GROUPS)
    config = load_configuration(tmp_path / "groups.yaml")
    rows = parse_trace(
        "submit_s,team,gpus,replicas,run_s\n0,research,16,1,60\n0,research,0,1,60\n0,research,8,2,60\n"
    )
    assert plan_errors(rows, config) == [
        "line 2, column gpus: a replica of 16 GPUs, 48 CPUs and 192Gi fits no node group (the largest has 8 GPUs per node)",
        "line 3, column gpus: a replica of 0 GPUs, 2 CPUs and 8Gi fits no node group (the largest has 8 GPUs per node)",
    ]


def test_a_plan_sends_each_row_at_its_time_with_its_run_time(tmp_path: Path) -> None:
    (tmp_path / "groups.yaml").write_text(GROUPS)
    rows = parse_trace("submit_s,team,gpus,replicas,run_s\n30,research,8,1,600\n0,vision,1,1,60\n")
    plan = trace_plan(rows, load_configuration(tmp_path / "groups.yaml"))
    assert [(s.at, s.job_id, s.run_for) for s in plan.submissions] == [
        (timedelta(0), "vision-000003", timedelta(seconds=60)),
        (timedelta(seconds=30), "research-000002", timedelta(seconds=600)),
    ]
    assert plan.teams == {"research": "team-research", "vision": "team-vision"}
    assert plan.end.when == "scaledDown"
    # long enough to run everything one job at a time on the largest fleet, and more
    assert plan.end.limit > timedelta(seconds=30 + 600)


def test_a_gang_that_no_region_can_hold_is_refused(tmp_path: Path) -> None:
    # one region, at most four p4d nodes of 8 GPUs: a job of 5 replicas x 8 GPUs can never start
    (tmp_path / "groups.yaml").write_text(GROUPS)
    rows = parse_trace(
        "submit_s,team,gpus,replicas,run_s\n0,research,8,4,60\n0,research,8,5,60\n0,research,4,8,60\n"
    )
    assert plan_errors(rows, load_configuration(tmp_path / "groups.yaml")) == [
        "line 3, column replicas: 5 replicas of 8 GPUs must run in one region, and the most any region's "
        "groups can hold at their max sizes is 4"
    ]


# ---- runs longer than a week, up to the configured maxRuntimeLimit -----------------------------

DAY = 86_400


def test_runs_longer_than_a_week_are_replayed_up_to_the_default_limit() -> None:
    (row,) = parse_trace(f"submit_s,team,gpus,replicas,run_s\n0,research,8,1,{20 * DAY}\n")
    assert row.run_s == 20 * DAY
    spec = job_spec(row, registry="registry.example.com/squall")
    # twice the run would pass the limit: the limit it is, and the spec is one Squall accepts
    assert spec["maxRuntime"] == f"{30 * DAY}s"
    parse_spec(spec, teams=["research"], registries=["registry.example.com/squall"])
    assert errors_of(f"submit_s,team,gpus,replicas,run_s\n0,research,8,1,{31 * DAY}\n") == [
        f"line 2, column run_s: expected a positive number and at most {30 * DAY} "
        f"(the policy's maxRuntimeLimit, 30d), got '{31 * DAY}'"
    ]


def test_the_limit_is_the_one_the_replay_is_given(tmp_path: Path) -> None:
    trace = f"submit_s,team,gpus,replicas,run_s\n0,research,8,1,{45 * DAY}\n"
    (row,) = parse_trace(trace, max_run=timedelta(days=60))
    spec = job_spec(row, registry="registry.example.com/squall", max_run=timedelta(days=60))
    assert spec["maxRuntime"] == f"{60 * DAY}s"
    parse_spec(
        spec,
        teams=["research"],
        registries=["registry.example.com/squall"],
        max_runtime_limit=timedelta(days=60),
    )
    with pytest.raises(ScenarioError) as caught:
        parse_trace(trace, max_run=timedelta(days=1))
    assert caught.value.errors == [
        f"line 2, column run_s: expected a positive number and at most {DAY} (the policy's maxRuntimeLimit, 1d), "
        f"got '{45 * DAY}'"
    ]


def test_a_groups_file_sets_the_limit_of_its_replay(tmp_path: Path) -> None:
    (tmp_path / "groups.yaml").write_text(
        GROUPS.replace("policy: {idleThreshold: PT2M}", "policy: {maxRuntimeLimit: P60D}")
    )
    config = load_configuration(tmp_path / "groups.yaml")
    assert config.policy.max_runtime_limit == timedelta(days=60)
    rows = parse_trace(
        f"submit_s,team,gpus,replicas,run_s\n0,research,8,1,{45 * DAY}\n", max_run=timedelta(days=60)
    )
    plan = trace_plan(rows, config)
    (submission,) = plan.submissions
    assert json.loads(submission.body)["maxRuntime"] == f"{60 * DAY}s"
    assert submission.run_for == timedelta(days=45)


# ---- files and cells that are no trace ----------------------------------------------------------


def test_a_trace_that_is_not_utf8_is_named_with_line_and_column(tmp_path: Path) -> None:
    from squall.local.trace import read_trace

    path = tmp_path / "t.csv"
    path.write_bytes(b"submit_s,team,gpus,replicas,run_s\n0,caf\xe9,1,1,60\n")
    with pytest.raises(ScenarioError) as caught:
        read_trace(path)
    assert caught.value.errors == ["line 2, column 6: not UTF-8 text: byte 0xe9 cannot be decoded"]


def test_cells_the_csv_module_refuses_are_errors_not_tracebacks() -> None:
    huge = "x" * 200_000  # beyond the csv module's field limit
    errors = errors_of(f'submit_s,team,gpus,replicas,run_s\n0,research,1,1,60\n0,"{huge}",1,1,60\n')
    assert len(errors) == 1 and errors[0].startswith("line 3: field larger than field limit")


def test_times_too_far_out_are_refused() -> None:
    assert errors_of("submit_s,team,gpus,replicas,run_s\n1e300,research,1,1,60\n") == [
        "line 2, column submit_s: expected a number at least 0 and at most 316224000 (ten years), got '1e300'"
    ]


# ---- optional columns: priority, cpu, memory ----------------------------------------------------------

OPTIONAL = "submit_s,team,gpus,replicas,run_s,priority,cpu,memory\n"


def test_optional_columns_flow_into_the_job_spec() -> None:
    rows = parse_trace(OPTIONAL + "0,research,2,4,60,90,10500m,100Gi\n1,research,0,1,60,0,500m,1Gi\n")
    spec = job_spec(rows[0], registry="registry.example.com/squall")
    assert spec["priority"] == 90
    assert spec["resources"] == {"cpu": "10500m", "memory": "100Gi", "gpu": 2}
    parsed = parse_spec(spec, teams=["research"], registries=["registry.example.com/squall"])
    assert parsed.priority == 90
    assert all(r.resources.cpu == "10500m" and r.resources.memory == "100Gi" for r in parsed.replica_list())
    cpu_only = parse_spec(
        job_spec(rows[1], registry="registry.example.com/squall"),
        teams=["research"],
        registries=["registry.example.com/squall"],
    )
    assert (cpu_only.priority, cpu_only.resources.cpu, cpu_only.resources.memory) == (0, "500m", "1Gi")


def test_empty_or_absent_optional_cells_take_the_defaults() -> None:
    # given a trace with the columns but empty cells, and one without them
    with_columns = parse_trace(OPTIONAL + "0,research,2,1,60,,,\n")
    without = parse_trace("submit_s,team,gpus,replicas,run_s\n0,research,2,1,60\n")
    for (row,) in (with_columns, without):
        spec = job_spec(row, registry="registry.example.com/squall")
        # then the spec's default priority, and 3 CPUs and 12 GiB per GPU
        assert "priority" not in spec
        assert spec["resources"] == {"cpu": "6", "memory": "24Gi", "gpu": 2}
        parsed = parse_spec(spec, teams=["research"], registries=["registry.example.com/squall"])
        assert parsed.priority == 50


def test_only_some_optional_columns_may_be_given() -> None:
    (row,) = parse_trace("submit_s,team,gpus,replicas,run_s,memory\n0,research,1,1,60,30Gi\n")
    spec = job_spec(row, registry="registry.example.com/squall")
    assert spec["resources"] == {"cpu": "3", "memory": "30Gi", "gpu": 1}
    assert "priority" not in spec


def test_bad_optional_cells_are_named_by_line_and_column() -> None:
    errors = errors_of(
        OPTIONAL
        + "0,research,1,1,60,101,1,1Gi\n"
        + "0,research,1,1,60,-1,1,1Gi\n"
        + "0,research,1,1,60,high,1,1Gi\n"
        + "0,research,1,1,60,5_0,1,1Gi\n"
        + "0,research,1,1,60,50.0,1,1Gi\n"
        + "0,research,1,1,60,50,lots,1Gi\n"
        + "0,research,1,1,60,50,0,1Gi\n"
        + "0,research,1,1,60,50,193,1Gi\n"
        + "0,research,1,1,60,50,1,plenty\n"
        + "0,research,1,1,60,50,1,1Ki\n"
        + "0,research,1,1,60,50,1,3Ti\n"
    )
    assert errors == [
        "line 2, column priority: expected a whole number 0..100, got 101",
        "line 3, column priority: expected a whole number 0..100, got -1",
        "line 4, column priority: expected a whole number 0..100, got 'high'",
        "line 5, column priority: expected a whole number 0..100, got '5_0'",
        "line 6, column priority: expected a whole number 0..100, got '50.0'",
        "line 7, column cpu: invalid quantity 'lots': expected a number with an optional suffix, e.g. 500m, 8, "
        "1.5, 60Gi, 129e6",
        "line 8, column cpu: must be between 1m and 192 cores, got '0'",
        "line 9, column cpu: must be between 1m and 192 cores, got '193'",
        "line 10, column memory: invalid quantity 'plenty': expected a number with an optional suffix, e.g. "
        "500m, 8, 1.5, 60Gi, 129e6",
        "line 11, column memory: must be between 1Mi and 2Ti, got '1Ki'",
        "line 12, column memory: must be between 1Mi and 2Ti, got '3Ti'",
    ]


def test_whole_numbers_are_plain_digits_in_every_column() -> None:
    # int() takes "1_6" and other scripts' digits; a trace cell must be plain ASCII digits
    errors = errors_of("submit_s,team,gpus,replicas,run_s\n0,research,1_6,1,60\n0,research,1,\u0663,60\n")
    assert errors == [
        "line 2, column gpus: expected a whole number 0..16, got '1_6'",
        "line 3, column replicas: expected a whole number 1..65, got '\u0663'",
    ]


def test_requests_of_a_row_decide_where_it_fits(tmp_path: Path) -> None:
    # the group's nodes have 95 CPUs and 1100Gi: a replica asking for more fits none
    (tmp_path / "groups.yaml").write_text(GROUPS)
    config = load_configuration(tmp_path / "groups.yaml")
    rows = parse_trace(
        OPTIONAL
        + "0,research,1,1,60,50,96,1Gi\n0,research,1,1,60,50,1,1200Gi\n0,research,8,4,60,50,90,1000Gi\n"
    )
    assert plan_errors(rows, config) == [
        "line 2, column cpu: a replica of 1 GPUs, 96 CPUs and 1Gi fits no node group (the largest has 8 GPUs per node)",
        "line 3, column memory: a replica of 1 GPUs, 1 CPUs and 1200Gi fits no node group (the largest has 8 GPUs per node)",
    ]


def test_small_requests_pack_more_replicas_on_a_node(tmp_path: Path) -> None:
    # a node of 8 GPUs and 95 CPUs holds eight 1-GPU replicas of 11 CPUs, but only seven of 12 CPUs:
    # the group's four nodes take 32 of the first and 28 of the second
    (tmp_path / "groups.yaml").write_text(GROUPS)
    config = load_configuration(tmp_path / "groups.yaml")
    fits = parse_trace(OPTIONAL + "0,research,1,32,60,50,11,1Gi\n")
    trace_plan(fits, config)  # 8 per node x 4 nodes
    too_big = parse_trace(OPTIONAL + "0,research,1,32,60,50,12,1Gi\n")
    assert plan_errors(too_big, config) == [
        "line 2, column replicas: 32 replicas of 1 GPUs must run in one region, and the most any region's "
        "groups can hold at their max sizes is 28"
    ]


def test_teams_of_a_groups_file_hold_a_replay_to_their_quotas(tmp_path: Path) -> None:
    from squall.planner.admission import TeamShare

    (tmp_path / "groups.yaml").write_text(
        GROUPS + "teams:\n  research: {namespace: ml-research, gpuQuota: 16, weight: 3}\n  ops: team-ops\n"
    )
    config = load_configuration(tmp_path / "groups.yaml")
    rows = parse_trace("submit_s,team,gpus,replicas,run_s\n0,research,8,2,600\n0,vision,1,1,60\n")
    plan = trace_plan(rows, config)
    # a configured team runs in its namespace, with its quota; another in team-<name>, with none
    assert plan.teams == {"ops": "team-ops", "research": "ml-research", "vision": "team-vision"}
    assert plan.quotas == {"research": TeamShare(quota=16, weight=3.0), "ops": TeamShare()}
    # a job larger than its team's quota would wait forever: refused with its line
    rows = parse_trace("submit_s,team,gpus,replicas,run_s\n0,research,8,3,600\n")
    assert plan_errors(rows, config) == [
        "line 2, column gpus: the job needs 24 GPUs (3 x 8), more than team research's gpuQuota of 16: "
        "it would wait forever"
    ]


def test_a_groups_files_teams_are_checked_and_cdk_json_teams_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "groups.yaml").write_text(GROUPS + "teams: {research: {namespace: team-research, gpuQuota: -1}}\n")
    assert configuration_errors(tmp_path / "groups.yaml") == ["teams.research.gpuQuota: expected a whole number of GPUs, at least 0, got -1"]
    cdk = json.loads((Path(__file__).parents[2] / "cdk.json").read_text())
    cdk["context"]["teams"] = {"research": {"namespace": "team-research", "gpuQuota": 32}}
    (tmp_path / "cdk.json").write_text(json.dumps(cdk))
    monkeypatch.chdir(tmp_path)
    assert load_configuration(None).teams["research"].gpu_quota == 32
