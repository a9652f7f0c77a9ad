"""The costs page over the local runtime: the rows of `squall costs` from the ledger in the jobs
table, as a table and bars; `?team=` and `?since=` as the command takes them; an empty ledger
said plainly; a hostile team name shown as text."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from squall.cli.costs import cost_ledger
from squall.core.costs import FleetAccrual, GroupOverhead, JobCharge, month_key
from tests.integration.console.conftest import Console

pytestmark = pytest.mark.timeout(120)

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


def months(console: Console) -> tuple[str, str]:
    """This month and the one before, on the runtime's clock."""
    now: datetime = console.runtime.clock.now()
    return month_key(now.replace(day=1) - timedelta(days=1)), month_key(now)


def counted(console: Console) -> tuple[str, str]:
    """The ledger as the reconciler and the scale checks leave it once jobs ran: jobs of two teams
    last month and this one, and this month's overhead (some research caused, some a team that
    finished no job caused, the rest unattributed)."""
    last, this = months(console)
    ledger = cost_ledger()
    for job_id, team, month, dollars in (
        ("r-1", "research", last, 100.0),
        ("r-2", "research", this, 1234.5),
        ("r-3", "research", this, 10.0),
        ("v-1", HOSTILE, this, 20.0),
    ):
        assert ledger.add_job(
            JobCharge(job_id=job_id, team=team, month=month, gpu_hours=4.0, dollars=dollars, spot_savings=1.0)
        )
    now = console.runtime.clock.now()
    first = FleetAccrual(at=now - timedelta(hours=1), rates={})
    ledger.accrue(previous=None, accrual=first, overhead=[])
    ledger.accrue(
        previous=first,
        accrual=FleetAccrual(at=now, rates={}),
        overhead=[
            GroupOverhead(group="p3", month=this, dollars=7.25),
            GroupOverhead(group="p3", month=this, dollars=3.0, team="research"),
            GroupOverhead(group="g5", month=this, dollars=2.0, team="speech"),
        ],
    )
    return last, this


def cells(page: str) -> list[list[str]]:
    body = page.split('<table class="costs">', 1)[1].split("</table>", 1)[0].split("<tbody>", 1)[1]
    return [
        [re.sub(r"\s+", " ", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)
    ]


def test_the_costs_page_shows_each_teams_months_overhead_and_totals_as_squall_costs_does(
    console: Console,
) -> None:
    last, this = counted(console)
    page = console.browser.text("/costs?since=60d")
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert cells(page) == [
        [escaped, this, "1", "4.0", "$20.00", "$1.00", "$0.00"],
        ["research", last, "1", "4.0", "$100.00", "$1.00", "$0.00"],
        ["research", this, "2", "8.0", "$1,244.50", "$2.00", "$3.00"],
        ["speech", this, "0", "0.0", "$0.00", "$0.00", "$2.00"],
        ["(unattributed)", this, "", "", "", "", "$7.25"],
        ["total", "", "4", "16.0", "$1,364.50", "$4.00", "$12.25"],
    ]
    assert "Jobs $1,364.50 + overhead $12.25 = <strong>$1,376.75</strong>" in page
    # a bar per row: research's month this month is the longest, stacked jobs then overhead caused
    bars = re.findall(r'<svg width="330"[^>]*aria-label="([^"]*)">(.*?)</svg>', page, flags=re.S)
    assert len(bars) == 5 + 3  # and spot savings: each team's month that saved some
    research = next(body for label, body in bars if label == f"research {this}: $1,247.50")
    widths = [float(w) for w in re.findall(r'width="([\d.]+)"', research)]
    assert widths[0] + widths[1] == pytest.approx(320, abs=0.2)
    assert f"(unattributed) {this}: $7.25" in [label for label, _ in bars]
    assert f"research {this}: $2.00" in [label for label, _ in bars[5:]]
    # the hostile team name: text everywhere, never markup
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page


def test_a_team_filter_shows_its_months_and_the_overhead_it_caused(console: Console) -> None:
    _, this = counted(console)
    page = console.browser.text("/costs?team=speech")
    assert cells(page) == [
        ["speech", this, "0", "0.0", "$0.00", "$0.00", "$2.00"],
        ["total", "", "0", "0.0", "$0.00", "$0.00", "$2.00"],
    ]
    assert "the overhead it caused $2.00" in page
    assert 'value="speech"' in page


def test_since_a_date_starts_at_its_month(console: Console) -> None:
    last, this = counted(console)
    page = console.browser.text(f"/costs?since={this}-01")
    assert f"From {this}" in page
    assert last not in [row[1] for row in cells(page)]


def test_an_empty_ledger_says_so(console: Console) -> None:
    page = console.browser.text("/costs")
    assert "Nothing counted yet" in page and '<table class="costs">' not in page


@pytest.mark.parametrize("since", ["last week", "0d", "30x"])
def test_a_bad_since_is_a_400_naming_it(console: Console, since: str) -> None:
    response = console.browser.get("/costs", query_string={"since": since})
    assert response.status_code == 400
    text = response.get_data(as_text=True)
    assert "since: expected a duration such as 30d" in text and "or a date such as 2026-04-01" in text
