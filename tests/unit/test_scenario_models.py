"""Scenario files: strict models whose errors name the field, compiled into a plan."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.local.demo import demo_scenario
from squall.local.scenario import (
    FunctionDies,
    InstanceLost,
    RegionOutage,
    ScenarioError,
    SpotReclaim,
    compile_scenario,
    load_scenario,
    parse_span,
)
from tests.groups import gpu_group

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPU_GROUP = gpu_group("p3-usw2", "p3.2xlarge", max_size=4, pricePerHour=3.06)
SPEC = {
    "name": "resnet",
    "id": "resnet",
    "team": "research",
    "image": "registry.example.com/squall/tf-trainer:1.0",
    "resources": {"gpu": 1},
}


def scenario(**changes: Any) -> dict[str, Any]:
    return {"name": "t", "nodeGroups": [GPU_GROUP], "arrivals": [{"at": 0, "spec": SPEC}]} | changes


def errors_of(document: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        compile_scenario(document)
    return caught.value.errors


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90),
        (1.5, 1.5),
        ("90s", 90),
        ("4m", 240),
        ("1h30m", 5400),
        ("2d", 172800),
        ("PT5M", 300),
        ("0s", 0),
    ],
)
def test_durations_in_every_form_the_docs_show(text: Any, seconds: float) -> None:
    assert parse_span(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["soon", "-5", -5, "5 minutes", True, ""])
def test_durations_that_are_not(text: Any) -> None:
    with pytest.raises(ValueError, match=r"duration|negative"):
        parse_span(text)


def test_copies_get_numbered_ids_spaced_by_every() -> None:
    # given three copies of a spec with an id, two minutes apart, from minute 5
    plan = compile_scenario(
        scenario(arrivals=[{"at": "5m", "count": 3, "every": "2m", "spec": SPEC, "runTime": "7m"}])
    )
    # then each is its own job, at its own time, running seven minutes
    assert [s.job_id for s in plan.submissions] == ["resnet-1", "resnet-2", "resnet-3"]
    assert [s.at for s in plan.submissions] == [timedelta(minutes=m) for m in (5, 7, 9)]
    assert {s.run_for for s in plan.submissions} == {timedelta(minutes=7)}
    assert json.loads(plan.submissions[1].body)["id"] == "resnet-2"


def test_failure_probability_is_drawn_from_the_seed() -> None:
    arrivals = [{"at": 0, "count": 200, "spec": SPEC, "failureProbability": 0.25}]
    first = compile_scenario(scenario(arrivals=arrivals, seed=3))
    again = compile_scenario(scenario(arrivals=arrivals, seed=3))
    other = compile_scenario(scenario(arrivals=arrivals, seed=4))
    codes = [s.exit_code for s in first.submissions]
    assert codes == [s.exit_code for s in again.submissions], "the same seed fails the same jobs"
    assert codes != [s.exit_code for s in other.submissions]
    assert 25 <= codes.count(1) <= 75, "about a quarter of 200"


def test_a_spec_without_id_leaves_the_id_to_squall() -> None:
    plan = compile_scenario(scenario(arrivals=[{"at": 0, "count": 2, "spec": SPEC | {"id": None}}]))
    assert [s.job_id for s in plan.submissions] == [None, None]
    assert all(s.spec is not None and s.spec.id is None for s in plan.submissions)


def test_unknown_and_wrong_fields_are_named_with_their_path() -> None:
    errors = errors_of(
        scenario(
            arrivals=[{"at": "soon", "spec": SPEC, "colour": "blue"}],
            end={"when": "eventually"},
            clock={"speed": 0},
        )
    )
    text = "\n".join(errors)
    assert "arrivals[0].at: must be a duration" in text
    assert "arrivals[0].colour: unknown field" in text
    assert "end.when: Input should be 'allFinished', 'scaledDown' or 'time'" in text
    assert "clock.speed" in text


def test_fault_errors_name_the_fault_not_the_union_member() -> None:
    errors = errors_of(
        scenario(faults=[{"at": "1m", "type": "spotReclaim", "count": 0}, {"at": "1m", "type": "meteor"}])
    )
    assert any(e.startswith("faults[0].count: Input should be greater than or equal to 1") for e in errors), (
        errors
    )
    assert any(
        e.startswith("faults[1]: Input tag 'meteor' found using 'type' does not match") for e in errors
    ), errors


def test_an_arrival_needs_exactly_one_source() -> None:
    (error,) = errors_of(scenario(arrivals=[{"at": 0, "spec": SPEC, "body": "{}"}]))
    assert error == "arrivals[0]: give exactly one of spec, specFile and body (got spec, body)"


def test_an_invalid_spec_is_an_error_unless_expected_rejected() -> None:
    bad = SPEC | {"team": "marketing", "resources": {"gpu": -1}}
    errors = errors_of(scenario(arrivals=[{"at": 0, "spec": bad}]))
    assert "arrivals[0].spec.team: team 'marketing' is not configured; allowed: research, vision" in errors
    assert any(e.startswith("arrivals[0].spec.resources.gpu:") for e in errors)
    plan = compile_scenario(scenario(arrivals=[{"at": 0, "spec": bad, "expect": "rejected"}]))
    assert plan.submissions[0].expect == "rejected"
    assert errors_of(scenario(arrivals=[{"at": 0, "spec": SPEC, "expect": "rejected"}])) == [
        "arrivals[0].expect: the spec is valid, Squall will not reject it"
    ]


def test_ids_are_unique_and_duplicates_point_at_an_earlier_job() -> None:
    twice = [{"at": 0, "spec": SPEC}, {"at": "1m", "spec": SPEC}]
    assert errors_of(scenario(arrivals=twice)) == [
        "arrivals[1].spec.id: resnet is used by an earlier arrival (expect: duplicate?)"
    ]
    compile_scenario(scenario(arrivals=[twice[0], twice[1] | {"expect": "duplicate"}]))
    assert errors_of(scenario(arrivals=[{"at": 0, "spec": SPEC, "expect": "duplicate"}])) == [
        "arrivals[0].spec.id: a duplicate must reuse the id of an earlier accepted arrival"
    ]


def test_faults_and_regions_must_name_what_the_scenario_has() -> None:
    errors = errors_of(
        scenario(
            regions={"eu-west-1": {"capacity": {"p3.2xlarge": 2}}},
            faults=[
                {"at": "1m", "type": "regionOutage", "region": "ap-south-1"},
                {"at": "1m", "type": "terminateNode", "group": "nope"},
            ],
        )
    )
    assert errors == [
        "regions.eu-west-1: no node group is in this region",
        "faults[0].region: no node group is in ap-south-1",
        "faults[1].group: no node group nope",
    ]


def test_node_group_and_policy_errors_come_from_their_parsers() -> None:
    errors = errors_of(scenario(nodeGroups=[GPU_GROUP | {"maxSize": -1}], policy={"idleThreshold": "soon"}))
    assert any(e.startswith("policy.idleThreshold:") for e in errors), errors
    assert any(e.startswith("nodeGroups[0].maxSize") for e in errors), errors


def test_node_groups_from_a_cdk_json_beside_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"nodeGroups": [GPU_GROUP]}}))
    (tmp_path / "job.yaml").write_text(json.dumps(SPEC))
    (tmp_path / "s.yaml").write_text(
        "name: s\nnodeGroups: cdk.json\narrivals: [{at: 0, specFile: job.yaml}]\n"
        "faults: [{at: 2m, type: spotReclaim, group: p3-usw2}, {at: 1m, type: functionDies}]\n"
    )
    plan = load_scenario(tmp_path / "s.yaml")
    assert [g.name for g in plan.groups] == ["p3-usw2"]
    assert plan.submissions[0].job_id == "resnet"
    # faults come in time order, with their defaults
    assert isinstance(plan.faults[0], FunctionDies) and plan.faults[0].call == "create"
    assert isinstance(plan.faults[1], SpotReclaim) and plan.faults[1].count == 1


def test_a_missing_spec_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        f"name: s\nnodeGroups: {json.dumps([GPU_GROUP])}\narrivals: [{{at: 0, specFile: gone.yaml}}]\n"
    )
    with pytest.raises(ScenarioError, match=r"arrivals\[0\]\.specFile: .*gone.yaml does not exist"):
        load_scenario(tmp_path / "s.yaml")


def test_time_end_needs_its_time() -> None:
    assert errors_of(scenario(end={"when": "time"})) == ["end: at is required with when: time, and only then"]
    plan = compile_scenario(scenario(end={"when": "time", "at": "2h"}))
    assert plan.end.at == timedelta(hours=2) and plan.end.limit == timedelta(hours=6)


def test_an_instance_lost_selects_nodes_as_terminate_node_does() -> None:
    plan = compile_scenario(
        scenario(faults=[{"at": "20m", "type": "instanceLost", "group": "p3-usw2", "count": 2}])
    )
    (fault,) = plan.faults
    assert isinstance(fault, InstanceLost)
    assert (fault.at, fault.group, fault.count, fault.node, fault.region) == (
        timedelta(minutes=20),
        "p3-usw2",
        2,
        None,
        None,
    )
    assert errors_of(scenario(faults=[{"at": "1m", "type": "instanceLost", "group": "nope"}])) == [
        "faults[0].group: no node group nope"
    ]
    assert errors_of(scenario(faults=[{"at": "1m", "type": "instanceLost", "count": 0}]))[0].startswith(
        "faults[0].count: Input should be greater than or equal to 1"
    )


@pytest.mark.parametrize("name", sorted(path.stem for path in SCENARIOS.glob("*.yaml")))
def test_every_shipped_scenario_loads(name: str) -> None:
    plan = load_scenario(SCENARIOS / f"{name}.yaml")
    assert plan.name == name and plan.submissions and plan.speed is not None


def test_the_region_outage_scenario_takes_every_instance_type_of_the_region() -> None:
    plan = load_scenario(SCENARIOS / "region-outage.yaml")
    outage = next(f for f in plan.faults if isinstance(f, RegionOutage))
    assert outage.region == "us-west-2" and outage.reclaim_running and outage.instance_types is None


def test_the_demo_tells_the_burst_scenario() -> None:
    # squall demo carries the story as data so that it runs from any directory;
    # it must stay the story scenarios/burst.yaml tells.
    demo = compile_scenario(demo_scenario())
    shipped = load_scenario(SCENARIOS / "burst.yaml")

    def shape(plan: Any) -> Any:
        return [
            (s.at, json.loads(s.body) if s.body.startswith("{") and s.expect != "deadLetter" else s.body, s.expect,
             s.job_id, s.run_for, s.exit_code, s.deliver_twice)
            for s in plan.submissions
        ]  # fmt: skip

    assert shape(demo) == shape(shipped)
    assert (
        demo.groups == shipped.groups and demo.capacity == shipped.capacity and demo.policy == shipped.policy
    )
    assert (demo.end, demo.speed, demo.faults) == (shipped.end, shipped.speed, shipped.faults)


def test_only_a_raw_body_can_be_expected_to_dead_letter() -> None:
    assert errors_of(scenario(arrivals=[{"at": 0, "spec": SPEC, "expect": "deadLetter"}])) == [
        "arrivals[0].expect: only a raw body can end in the dead-letter queue"
    ]
    assert errors_of(scenario(arrivals=[{"at": 0, "body": "{}"}])) == [
        "arrivals[0].expect: a raw body cannot be expected to make a job"
    ]


# ---- the policy's maxRuntimeLimit -------------------------------------------------------------


def test_specs_are_checked_against_the_scenarios_max_runtime_limit() -> None:
    long = SPEC | {"maxRuntime": "40d"}
    # the default limit is 30 days
    assert errors_of(scenario(arrivals=[{"at": 0, "spec": long}])) == [
        "arrivals[0].spec.maxRuntime: must be at most 30d (the configured maxRuntimeLimit)"
    ]
    # the scenario's policy raises it
    plan = compile_scenario(scenario(policy={"maxRuntimeLimit": "P60D"}, arrivals=[{"at": 0, "spec": long}]))
    assert plan.policy.max_runtime_limit == timedelta(days=60)
    assert plan.submissions[0].spec is not None and plan.submissions[0].spec.max_runtime == "40d"
    # or lowers it, and the error names the limit
    assert errors_of(
        scenario(policy={"maxRuntimeLimit": "P1D"}, arrivals=[{"at": 0, "spec": SPEC | {"maxRuntime": "2d"}}])
    ) == ["arrivals[0].spec.maxRuntime: must be at most 1d (the configured maxRuntimeLimit)"]


# ---- teams with submitters, and who sends each arrival ------------------------------------------

TEAMS = {
    "research": {"namespace": "team-research", "submitters": ["AROAEXAMPLERESEARCH"]},
    "vision": "team-vision",
}


def test_teams_may_name_their_submitters_and_arrivals_their_sender() -> None:
    plan = compile_scenario(
        scenario(
            teams=TEAMS,
            arrivals=[
                {"at": 0, "spec": SPEC, "sender": "AROAEXAMPLERESEARCH:alice"},
                {
                    "at": 0,
                    "spec": SPEC | {"id": "stranger"},
                    "sender": "AROAEXAMPLESTRANGER",
                    "expect": "rejected",
                },
                # vision names no submitters while research does: it takes nobody's jobs
                {"at": 0, "spec": SPEC | {"id": "seen", "team": "vision"}, "expect": "rejected"},
            ],
        )
    )
    assert plan.teams == {"research": "team-research", "vision": "team-vision"}
    assert plan.submitters == {"research": ("AROAEXAMPLERESEARCH",)}
    assert [s.sender for s in plan.submissions] == ["AROAEXAMPLERESEARCH:alice", "AROAEXAMPLESTRANGER", None]
    assert [s.job_id for s in plan.submissions] == ["resnet", None, None]


def test_an_arrival_squall_will_refuse_for_its_sender_must_be_expected_rejected() -> None:
    assert errors_of(
        scenario(teams=TEAMS, arrivals=[{"at": 0, "spec": SPEC, "sender": "AROAEXAMPLESTRANGER"}])
    ) == [
        "arrivals[0].sender: AROAEXAMPLESTRANGER may not submit for team research (its submitters: "
        "AROAEXAMPLERESEARCH); Squall will reject it (expect: rejected?)"
    ]
    assert errors_of(scenario(teams=TEAMS, arrivals=[{"at": 0, "spec": SPEC}]))[0].startswith(
        "arrivals[0].sender: an arrival without a sender (the runtime's default principal) may not submit for team"
    )


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (
            {"teams": {"research": {"namespace": "team-research", "quota": 4}}},
            "teams.research.quota: unknown field",
        ),
        (
            {
                "teams": {
                    "research": {
                        "namespace": "team-research",
                        "submitters": ["arn:aws:iam::123456789012:role/r"],
                    }
                }
            },
            "teams.research.submitters[0]: 'arn:aws:iam::123456789012:role/r' is not a unique id",
        ),
        ({"teams": {"research": 7}}, "teams.research: expected a namespace or an object"),
        (
            {"arrivals": [{"at": 0, "spec": SPEC, "sender": "has space"}]},
            "arrivals[0].sender: String should match",
        ),
    ],
)
def test_team_and_sender_errors_name_their_field(changes: dict[str, Any], problem: str) -> None:
    assert any(problem in error for error in errors_of(scenario(**changes))), errors_of(scenario(**changes))


# ---- files that are no documents -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"name: caf\xe9\n", "line 1, column 10: not UTF-8 text"),
        (b"name: t\nseed: !!int x\n", "line 2, column 7: 'x' is not an integer"),
        (b"name: t\nseed: " + b"9" * 5000 + b"\n", "an integer of more than"),
        (b"name: !!python/object/apply:os.system [ls]\n", "the YAML tag !!python/object/apply:os.system"),
        (b"name: t\narrivals: " + b"[" * 2000 + b"]" * 2000 + b"\n", "nested more than 100 levels deep"),
    ],
)
def test_a_scenario_file_that_is_no_document_is_named(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.source == str(path)
    assert any(problem in error for error in caught.value.errors), caught.value.errors


def test_a_scenario_in_json_reads_1e3_as_a_number(tmp_path: Path) -> None:
    # YAML 1.1 reads 1e3 as a string, which is no duration; JSON reads the number it is
    path = tmp_path / "s.json"
    document = json.dumps(scenario(arrivals=[{"at": 0, "spec": SPEC, "runTime": "PLACEHOLDER"}]))
    path.write_text(document.replace('"PLACEHOLDER"', "1e3"))
    assert load_scenario(path).submissions[0].run_for == timedelta(seconds=1000)
