"""`squall queue`, `describe` and `watch` say when a queued job will start and what a job cost:
in the CLI's one time format for people, ISO 8601 in --json, dollars with cents."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from squall.cli.commands import _job_dict, describe_lines
from squall.cli.follow.watch import PlainView
from squall.cli.human import dollars, estimate, job_cost
from squall.cli.queue import queue_row, queue_table
from squall.core.jobs import Job, JobStatus, new_job

NOW = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
STARTS_BY = datetime(2026, 12, 2, 16, 20, tzinfo=UTC)
LIKELY = datetime(2026, 12, 2, 14, 5, tzinfo=UTC)


def queued(**fields: Any) -> Job:
    job, _ = new_job(job_id="gan-1", name="gan", team="research", namespace="team-research", at=NOW)
    return replace(job, **fields)


def entry(**fields: Any) -> dict[str, Any]:
    """A waiting entry of a scale-check decision, as admission records it."""
    return {
        "job": "gan-1",
        "team": "research",
        "priority": 50,
        "gpus": 8,
        "position": 7,
        "teamPosition": 3,
        "reason": "Queued",
        "message": "3rd in research, 7th overall; needs 8 GPUs",
    } | fields


def test_an_estimate_says_the_latest_start_then_the_likely_one_in_the_time_format_for_people() -> None:
    assert estimate(STARTS_BY, LIKELY) == "starts by 2026-12-02 16:20:00 UTC, likely 2026-12-02 14:05:00 UTC"
    # a decision record holds them as ISO 8601 text
    assert estimate(STARTS_BY.isoformat(), LIKELY.isoformat()) == estimate(STARTS_BY, LIKELY)
    # a likely start no earlier than the latest says nothing more
    assert estimate(STARTS_BY, STARTS_BY) == "starts by 2026-12-02 16:20:00 UTC"
    assert estimate(None, LIKELY) == "likely 2026-12-02 14:05:00 UTC"
    assert estimate(None, None) == ""
    # text that is no time is shown as it is, escaped
    assert estimate("soon\x1b[2J", None) == "starts by soon\\x1b[2J"


def test_money_is_dollars_with_cents_and_a_running_jobs_cost_is_so_far() -> None:
    assert [dollars(x) for x in (0.42, 1234.5, 19850, -3)] == ["$0.42", "$1,234.50", "$19,850.00", "-$3.00"]
    running = queued(status=JobStatus.RUNNING, cost=12.345, cost_rate=3.06, spot_savings=4.0)
    assert job_cost(running) == "cost $12.35 so far ($3.06 an hour), spot savings $4.00"
    done = replace(running, status=JobStatus.SUCCEEDED, cost=20.0, cost_rate=None, spot_savings=0.0)
    assert job_cost(done) == "cost $20.00"
    assert job_cost(queued()) == ""


def test_the_queue_table_gains_start_estimate_columns_and_json_keeps_iso_8601() -> None:
    rows = [
        queue_row(entry(startsBy=STARTS_BY.isoformat(), likelyStart=LIKELY.isoformat()), scaling=""),
        queue_row(entry(job="big-1", position=8, teamPosition=4), scaling=""),
    ]
    assert (rows[0]["startsBy"], rows[0]["likelyStart"]) == (STARTS_BY.isoformat(), LIKELY.isoformat())
    header, cells = queue_table(rows)
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
    assert cells[0][:8] == [
        "7",
        "3",
        "gan-1",
        "research",
        "50",
        "8",
        "2026-12-02 16:20:00 UTC",
        "2026-12-02 14:05:00 UTC",
    ]
    assert cells[1][6:8] == ["-", "-"]
    # a queue without estimates (an older Squall's decision) keeps today's columns
    header, _ = queue_table([queue_row(entry(), scaling="")])
    assert "STARTS-BY" not in header


def test_describe_says_when_a_queued_job_starts_and_its_place_in_its_team() -> None:
    place = {
        "position": 7,
        "teamPosition": 3,
        "reason": "Queued",
        "message": "3rd in research, 7th overall; needs 8 GPUs",
        "startsBy": STARTS_BY.isoformat(),
        "likelyStart": LIKELY.isoformat(),
        "decidedAt": NOW.isoformat(),
    }
    lines = describe_lines(queued(), [], place=place, unread="")
    assert lines[-1] == (
        "  starts by 2026-12-02 16:20:00 UTC, likely 2026-12-02 14:05:00 UTC; 3rd in research"
    )
    # without the latest decision's entry, the estimate on the job's record
    lines = describe_lines(queued(starts_by=STARTS_BY), [], place=None, unread="no decision")
    assert lines[-1] == "  starts by 2026-12-02 16:20:00 UTC"
    # no estimate, no line
    assert not any("starts by" in line for line in describe_lines(queued(), [], place=None, unread=""))


def test_describe_shows_a_jobs_cost_and_json_carries_it_with_the_estimates() -> None:
    running = queued(status=JobStatus.RUNNING, cost=7.5, cost_rate=3.06, starts_by=STARTS_BY)
    lines = describe_lines(running, [], place=None, unread="")
    assert "  cost $7.50 so far ($3.06 an hour)" in lines
    # a running job is past its estimate: no start line
    assert not any("starts by" in line for line in lines)
    body = _job_dict(replace(running, likely_start=LIKELY, first_starts_by=STARTS_BY, spot_savings=1.25))
    assert {key: body[key] for key in ("startsBy", "likelyStart", "firstStartsBy", "firstLikelyStart")} == {
        "startsBy": "2026-12-02T16:20:00+00:00",
        "likelyStart": "2026-12-02T14:05:00+00:00",
        "firstStartsBy": "2026-12-02T16:20:00+00:00",
        "firstLikelyStart": None,
    }
    assert (body["cost"], body["costRate"], body["spotSavings"]) == (7.5, 3.06, 1.25)


def test_watch_says_the_estimate_when_it_moves_and_the_cost_at_the_end() -> None:
    out = io.StringIO()
    view = PlainView(out)
    job = queued(starts_by=STARTS_BY, likely_start=LIKELY)
    view.show(job, [], now=NOW)
    view.show(replace(job, likely_start=LIKELY + timedelta(minutes=1)), [], now=NOW)  # same latest start
    later = STARTS_BY + timedelta(minutes=30)
    view.show(replace(job, starts_by=later), [], now=NOW)
    view.show(replace(job, status=JobStatus.SUCCEEDED, reason="Completed", cost=20.0), [], now=NOW)
    lines = out.getvalue().splitlines()
    assert [line for line in lines if "starts by" in line] == [
        "  starts by 2026-12-02 16:20:00 UTC, likely 2026-12-02 14:05:00 UTC",
        "  starts by 2026-12-02 16:50:00 UTC, likely 2026-12-02 14:05:00 UTC",
    ]
    assert lines[-1] == "gan-1 SUCCEEDED (Completed), cost $20.00"


def test_squall_costs_is_a_command_of_the_cli() -> None:
    from squall.cli.commands import parser
    from squall.cli.costs import cmd_costs

    args = parser().parse_args(["costs", "--team", "research", "--json"])
    assert (args.run, args.team, args.json) == (cmd_costs, "research", True)


def test_a_job_held_by_its_teams_budget_is_bought_nothing_and_described_as_held_by_it() -> None:
    message = "BudgetExceeded: $19,850 of $20,000 this month; needs 8 GPUs"
    held = entry(position=0, reason="BudgetExceeded", message=message)
    # the scale-ups of the check are not written on a job nothing is bought for
    assert queue_row(held, scaling="p3-usw2 scaling 0->2")["message"] == message
    place = {"position": 0, "teamPosition": 3, "reason": "BudgetExceeded", "message": message}
    lines = describe_lines(queued(), [], place=place | {"decidedAt": NOW.isoformat()}, unread="")
    assert lines[-1] == (
        "  queue (held by its team's budget, scale check at 2026-12-02 13:00:00 UTC): BudgetExceeded: "
        + message
    )
