"""`squall queue`, `squall describe` of a queued job and `squall plan --jobs`, on the local endpoint."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.cli import main
from squall.cli.human import moment
from squall.core import manifests
from squall.core.spec import parse_spec
from squall.local.runtime import LocalRuntime
from squall.planner.admission import TeamShare
from tests.groups import gpu_group
from tests.job_bodies import REGISTRY, job_body


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def waiting_total(local: LocalRuntime) -> int | None:
    decision = local.backend.scale_state.latest_decision(now=local.clock.now())
    if decision is None:
        return None
    total: int | None = decision["plan"].get("admission", {}).get("waitingTotal")
    return total


@pytest.fixture
def queued(here: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    """Six 1-GPU jobs on a cluster with no nodes yet: research's burst, vision's two (quota 1), a priority-90 one."""
    with LocalRuntime.start(
        node_groups=[gpu_group("p3-usw2", "p3.2xlarge", max_size=2)], quotas={"vision": TeamShare(quota=1)}
    ) as local:
        monkeypatch.setenv("SQUALL_TABLE_NAME", local.resources.table_name)
        for body in (
            job_body("r0", "research"),
            job_body("r1", "research"),
            job_body("v0", "vision"),
            job_body("v1", "vision"),
            job_body("r2", "research"),
            job_body("urgent", "research", priority=90),
        ):
            local.send(body)
        assert local.run(
            until=lambda rt: waiting_total(rt) == 6, step=timedelta(seconds=5), limit=timedelta(minutes=2)
        )
        yield local


@pytest.mark.timeout(120)
def test_queue_lists_the_latest_check_in_admission_order_with_reasons(
    queued: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    # when
    assert main(["queue", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    # then: priority first, teams interleaved by fair share, vision's second held by its quota
    order = [(w["job"], w["position"], w["teamPosition"], w["reason"]) for w in shown["waiting"]]
    assert order == [
        ("urgent", 1, 1, "Queued"),
        ("v0", 2, 1, "Queued"),
        ("r0", 3, 2, "Queued"),
        ("r1", 4, 3, "Queued"),
        ("r2", 5, 4, "Queued"),
        ("v1", 0, 2, "QuotaExceeded:1/1 GPUs"),
    ]
    first = shown["waiting"][0]
    assert (first["team"], first["priority"], first["gpus"]) == ("research", 90, 1)
    # the message as the scale check writes it on the job's record
    assert first["message"].startswith("1st in research, 1st overall; needs 1 GPU; p3-usw2 scaling 0->2")
    assert shown["waiting"][2]["message"].startswith("2nd in research, 3rd overall")
    assert shown["waiting"][5]["message"] == "1/1 GPUs of vision in use or ahead of it; needs 1 GPU"
    assert shown["waitingTotal"] == 6 and shown["notListed"] == 0
    assert queued.clock.start < datetime.fromisoformat(shown["decidedAt"]) <= queued.clock.now()
    record = queued.store.events("r0")[-1]
    assert record.message == shown["waiting"][2]["message"]

    # and as a table, one row per job in the same order
    assert main(["queue"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": 6 waiting")
    # columns are two spaces or more apart (a time has single spaces in it)
    header = re.split(r"\s{2,}", lines[1])
    assert header == [
        "POS",
        "TEAM-POS",
        "JOB",
        "TEAM",
        "PRIORITY",
        "GPUS",
        "STARTS-BY",
        "LIKELY",
        "REASON",
        "MESSAGE",
    ]
    rows = [re.split(r"\s{2,}", line) for line in lines[2:8]]
    assert rows[0][:6] == ["1", "1", "urgent", "research", "90", "1"] and rows[0][8] == "Queued"
    assert rows[5][:6] == ["-", "2", "v1", "vision", "50", "1"] and rows[5][8] == "QuotaExceeded:1/1 GPUs"
    # the start estimates, as the latest check made them (ISO 8601 in --json)
    starts_by = shown["waiting"][0]["startsBy"]
    assert rows[0][6] == moment(datetime.fromisoformat(starts_by))
    assert "1st in research, 1st overall; needs 1 GPU" in lines[2]


@pytest.mark.timeout(120)
def test_queue_of_one_team(queued: LocalRuntime, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "--team", "vision", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [w["job"] for w in shown["waiting"]] == ["v0", "v1"]
    assert shown["team"] == "vision" and shown["waitingTotal"] == 6

    assert main(["queue", "--team", "nobody"]) == 0
    assert "no job of team nobody is waiting" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_describe_shows_a_queued_jobs_place_in_the_queue(
    queued: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    # when
    assert main(["describe", "r1"]) == 0
    text = capsys.readouterr().out
    assert main(["describe", "v1", "--json"]) == 0
    held = json.loads(capsys.readouterr().out)
    # then
    assert "queue (position 4, scale check at " in text
    assert "Queued: 3rd in research, 4th overall; needs 1 GPU; p3-usw2 scaling 0->2" in text
    # and when it will start, in the time format for people, with its place in its team
    assert re.search(r"\n  starts by \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC.*; 3rd in research\n", text), text
    assert held["queue"]["position"] == 0 and held["queue"]["teamPosition"] == 2
    assert held["queue"]["reason"] == "QuotaExceeded:1/1 GPUs"
    assert held["queue"]["message"] == "1/1 GPUs of vision in use or ahead of it; needs 1 GPU"


@pytest.mark.timeout(300)
def test_once_jobs_ran_the_queue_is_empty_and_describe_shows_no_place(
    queued: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    # given every job ran to its end
    assert queued.run(
        until=lambda rt: all(j.status.value == "SUCCEEDED" for j in rt.jobs()), limit=timedelta(hours=1)
    )
    queued.run(until=lambda rt: waiting_total(rt) == 0, limit=timedelta(minutes=2))
    # when / then
    assert main(["queue"]) == 0
    out = capsys.readouterr().out
    assert ": 0 waiting" in out and "no job is waiting" in out
    assert main(["describe", "r0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queue"] is None
    assert main(["describe", "r0"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("  queue")]


@pytest.fixture
def bare(here: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    """The local endpoint with no node groups: no scale check ever runs."""
    with LocalRuntime.start() as local:
        monkeypatch.setenv("SQUALL_TABLE_NAME", local.resources.table_name)
        yield local


def test_no_decision_yet_is_said_plainly(bare: LocalRuntime, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue"]) == 1
    assert "no scale-check decision recorded yet" in capsys.readouterr().err
    assert main(["queue", "--json"]) == 1
    assert "no scale-check decision recorded yet" in capsys.readouterr().err


def test_a_decision_without_a_queue_is_said_plainly(
    bare: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    bare.backend.scale_state.record_decision(
        at=bare.clock.now(), trigger="schedule", dry_run=False, plan={"scaleUp": []}, acted={}
    )
    assert main(["queue"]) == 1
    assert "recorded no queue" in capsys.readouterr().err


def test_more_waiting_than_the_record_lists_is_counted(
    bare: LocalRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a decision that lists the first 2 of 250 waiting jobs
    waiting = [
        {
            "job": f"j{i}",
            "team": "research",
            "priority": 50,
            "gpus": 8,
            "position": i,
            "teamPosition": i,
            "reason": "Queued",
            "message": f"{place} in research, {place} overall; needs 8 GPUs",
        }
        for i, place in ((1, "1st"), (2, "2nd"))
    ]
    admission = {
        "admitted": [{"job": "a", "team": "vision", "region": "us-east-1", "gpus": 4}],
        "waiting": waiting,
        "waitingTotal": 250,
        "inUse": {"vision": 4},
    }
    bare.backend.scale_state.record_decision(
        at=bare.clock.now(), trigger="schedule", dry_run=True, plan={"admission": admission}, acted={}
    )
    # when
    assert main(["queue"]) == 0
    text = capsys.readouterr().out
    assert main(["queue", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    # then
    assert "248 more not listed" in text
    assert "dry run" in text and "GPUs admitted: vision 4" in text
    assert "admitted in that check: a (vision, 4 GPUs) in us-east-1" in text
    assert "2nd in research, 2nd overall; needs 8 GPUs" in text
    assert shown["notListed"] == 248 and len(shown["waiting"]) == 2
    assert shown["dryRun"] is True and shown["inUse"] == {"vision": 4}


def test_queue_without_a_table_says_what_is_missing(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SQUALL_TABLE_NAME", raising=False)
    assert main(["queue"]) == 2
    assert "SQUALL_TABLE_NAME is not set" in capsys.readouterr().err


# ---- squall plan --jobs ---------------------------------------------------------------------

GROUPS = {"nodeGroups": [gpu_group("p3-usw2", "p3.2xlarge", max_size=4) | {"desired": 0, "instances": []}]}


def rendered_jobs(*bodies: dict[str, Any]) -> dict[str, Any]:
    """The suspended Jobs Squall creates, as `kubectl get jobs -A -o json` lists them."""
    teams = {"research": "team-research", "vision": "team-vision"}
    items = []
    for index, body in enumerate(bodies):
        parsed = parse_spec(body, teams=teams, registries=[REGISTRY], max_runtime_limit=timedelta(days=30))
        at = queued_at(index)
        items += [
            o
            for o in manifests.render(
                parsed, job_id=body["id"], namespace=teams[body["team"]], submitted_at=at
            )
            if o["kind"] == "Job"
        ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def queued_at(index: int) -> datetime:
    return datetime(2026, 1, 5, 8, 0, tzinfo=UTC) + timedelta(minutes=index)


def plan_files(here: Path, jobs: Any) -> list[str]:
    (here / "nodes.json").write_text(json.dumps({"items": []}))
    (here / "pods.json").write_text(json.dumps({"items": []}))
    (here / "groups.json").write_text(json.dumps(GROUPS))
    (here / "jobs.json").write_text(json.dumps(jobs))
    return [
        "plan",
        "--nodes",
        "nodes.json",
        "--pods",
        "pods.json",
        "--groups",
        "groups.json",
        "--jobs",
        "jobs.json",
        "--now",
        "2026-01-05T09:00:00Z",
    ]


def test_plan_with_jobs_admits_then_plans_with_cdk_json_teams(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given cdk.json's teams: vision may hold 1 GPU
    (here / "cdk.json").write_text(
        json.dumps(
            {
                "context": {
                    "teams": {
                        "research": "team-research",
                        "vision": {"namespace": "team-vision", "gpuQuota": 1},
                    }
                }
            }
        )
    )
    jobs = rendered_jobs(
        job_body("r0", "research"),
        job_body("v0", "vision"),
        job_body("v1", "vision"),
        job_body("r1", "research"),
    )
    # when
    assert main([*plan_files(here, jobs), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # then: nothing is ready, so nothing is admitted; the plan buys for all but vision's held job
    admission = result["admission"]
    assert admission["admitted"] == []
    assert [(w["job"], w["reason"]) for w in admission["waiting"]] == [
        ("r0", "Queued"),
        ("v0", "Queued"),
        ("r1", "Queued"),
        ("v1", "QuotaExceeded:1/1 GPUs"),
    ]
    [scale_up] = result["scaleUp"]
    assert (scale_up["group"], scale_up["from"], scale_up["to"]) == ("p3-usw2", 0, 3)

    # the text form is the same document, indented
    assert main(plan_files(here, jobs)) == 0
    assert json.loads(capsys.readouterr().out) == result


def test_plan_names_the_job_and_field_it_refuses(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = rendered_jobs(job_body("r0", "research"), job_body("r1", "research"))
    jobs["items"][1]["metadata"]["annotations"]["squall.io/replicas"] = "many"
    assert main(plan_files(here, jobs)) == 2
    err = capsys.readouterr().err
    assert err.startswith("squall: jobs.json: items[1]: job team-research/r1-worker-0: ")
    assert "metadata.annotations.squall.io/replicas" in err


def test_plan_refuses_a_bad_team_quota_in_cdk_json(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "cdk.json").write_text(
        json.dumps({"context": {"teams": {"research": {"namespace": "team-research", "gpuQuota": -1}}}})
    )
    assert main(plan_files(here, rendered_jobs(job_body("r0", "research")))) == 2
    assert "teams.research.gpuQuota" in capsys.readouterr().err
