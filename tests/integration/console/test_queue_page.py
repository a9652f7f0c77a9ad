"""The queue page over the local runtime: the latest scale check's waiting jobs in admission order,
the teams' use as bars, and what it says before any check has decided."""

from __future__ import annotations

import re
from html import escape
from typing import Any

import pytest

from squall.cli.errors import CommandError
from tests.e2e.helpers_runtime import IMAGE
from tests.integration.console.conftest import Console

pytestmark = pytest.mark.timeout(240)


def big_job(index: int, *, team: str = "research", priority: int = 50) -> dict[str, Any]:
    """Four GPUs each: the two groups hold eight such jobs at most."""
    return {
        "name": f"big-{index}",
        "id": f"big-{index:02d}",
        "team": team,
        "image": IMAGE,
        "resources": {"cpu": "8", "memory": "32Gi", "gpu": 4},
        "priority": priority,
        "maxRuntime": "6h",
    }


def waiting_decided(console: Console, count: int) -> list[dict[str, Any]]:
    """Steps the runtime until a scale check's record lists `count` waiting jobs; their entries."""
    for _ in range(60):
        console.step(10)
        try:
            waiting = console.sdk.queue().waiting
        except CommandError:  # no decision yet
            continue
        if len(waiting) >= count:
            return waiting
    raise AssertionError("no scale check listed the waiting jobs")


def positions(page: str) -> list[str]:
    return re.findall(r'href="/jobs/(big-\d\d)"', page.split("<h2>Waiting", 1)[1])


def test_before_any_check_the_page_says_there_is_no_queue_yet(console: Console) -> None:
    page = console.browser.text("/queue")
    assert "No queue to show yet" in page and "no scale-check decision recorded yet" in page


def test_the_waiting_jobs_show_in_admission_order_with_their_teams_use(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: more four-GPU jobs than the groups can ever hold at once, the later ones more urgent
    monkeypatch.setenv(
        "SQUALL_TEAMS",
        '{"research": {"namespace": "team-research", "gpuQuota": 64},'
        ' "vision": {"namespace": "team-vision", "budget": {"monthly": 500}}}',
    )
    for i in range(12):
        console.sdk.submit(big_job(i, team="vision" if i % 4 == 3 else "research", priority=40 + i))
    waiting = waiting_decided(console, 4)
    # when
    page = console.browser.text("/queue")
    # then: the record's order, each linking to its job's page, with its reason and message
    order = [row["job"] for row in console.sdk.queue().waiting]
    assert positions(page) == order and len(order) >= 4
    assert [row["position"] for row in waiting] == sorted(row["position"] for row in waiting)
    first = waiting[0]
    assert f"<td>{escape(first['message'])}</td>" in page
    # the teams' bars: research's GPUs against its quota, vision's spend against its budget
    assert re.search(r'<meter min="0" max="64" value="\d+"', page)
    assert re.search(r'<meter min="0" max="500\.0" value="[0-9.]+"', page)
    # one team's rows only, and a team that is not configured is refused
    vision = console.browser.text("/queue?team=vision")
    assert set(positions(vision)) == {row["job"] for row in waiting if row["team"] == "vision"}
    refused = console.browser.get("/queue?team=nobody")
    assert refused.status_code == 400 and "team: expected one of the configured teams" in refused.get_data(
        as_text=True
    )


def test_the_listed_rows_page_by_the_consoles_page_size(console: Console) -> None:
    from dataclasses import replace

    from squall.console.context import EXTENSION

    app = console.browser.http.application
    app.extensions[EXTENSION] = replace(app.extensions[EXTENSION], page_size=3)
    for i in range(12):
        console.sdk.submit(big_job(i, priority=40 + i))
    waiting_decided(console, 4)
    order = [row["job"] for row in console.sdk.queue().waiting]
    first = console.browser.text("/queue")
    assert positions(first) == order[:3] and 'rel="next" href="/queue?after=3"' in first
    second = console.browser.text("/queue?after=3")
    assert positions(second) == order[3:6]
    assert console.browser.get("/queue?after=-1").status_code == 400
    assert "after: expected a row number" in console.browser.get("/queue?after=x").get_data(as_text=True)
