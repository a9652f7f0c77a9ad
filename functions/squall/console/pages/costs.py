"""The costs page: what `squall costs` prints, as tables and bars.

The same two ledger reads as the command (cli/costs.py: the teams' months, and the overhead,
each one Query of the jobs table's small ledger partition from `since`'s month on) and the
same rows: each team's months with the overhead it caused, the unattributed overhead of each
month, the totals. `?team=` keeps that team's months and the overhead it caused; `?since=`
is the command's --since (30d, 12h, 2w or a date; 30d when absent).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from flask import Blueprint, render_template, request

from squall.cli.costs import (
    UNATTRIBUTED_ROW,
    caused_by_team,
    cost_ledger,
    cost_rows,
    since_argument,
    team_rows,
)
from squall.cli.errors import CommandError
from squall.cli.human import dollars
from squall.console.context import current
from squall.console.plots import BarRow, bars
from squall.core.costs import GroupOverhead, TeamMonth, month_key

blueprint = Blueprint("costs", __name__, url_prefix="/costs")

DEFAULT_SINCE = "30d"
# The bars' parts: what a team's finished jobs cost, the overhead it caused, the overhead no team caused.
COLOURS = {"jobs": "#0969da", "overhead caused": "#bf8700", "overhead unattributed": "#8c959f"}
SAVINGS_COLOURS = {"spot savings": "#1a7f37"}


@dataclass(frozen=True)
class CostBar:
    team: str
    month: str
    bar: BarRow
    amount: str


@blueprint.get("")
def page() -> str:
    team = request.args.get("team") or None
    since_text = request.args.get("since") or DEFAULT_SINCE
    since = _since(since_text)
    ledger = cost_ledger()
    months = ledger.team_months(since=since, team=team)
    overhead = ledger.overhead(since=since)
    if team is not None:  # the overhead that team caused; the unattributed is nobody's
        overhead = [part for part in overhead if part.team == team]
    jobs, extra = sum(r.dollars for r in months), sum(part.dollars for part in overhead)
    return render_template(
        "costs.html",
        team=team or "",
        since=since_text,
        from_month=month_key(since),
        empty=not months and not overhead,
        rows=cost_rows(months, overhead) if months or overhead else [],
        unattributed=UNATTRIBUTED_ROW,
        bars=cost_bars(months, overhead),
        colours=COLOURS,
        savings=savings_bars(months),
        savings_colours=SAVINGS_COLOURS,
        jobs=dollars(jobs),
        overhead=dollars(extra),
        total=dollars(jobs + extra),
        spot_savings=dollars(sum(r.spot_savings for r in months)),
    )


def cost_bars(months: Sequence[TeamMonth], overhead: Sequence[GroupOverhead]) -> list[CostBar]:
    """A bar per row of the table: a team's month (its jobs, then the overhead it caused) and each
    month's unattributed overhead, all on one scale."""
    caused = caused_by_team(overhead)
    keyed: list[tuple[str, str, list[tuple[str, float]]]] = [
        (
            row.team,
            row.month,
            [("jobs", row.dollars), ("overhead caused", caused.get((row.team, row.month), 0.0))],
        )
        for row in team_rows(months, caused)
    ]
    unattributed: dict[str, float] = {}
    for part in overhead:
        if part.team is None:
            unattributed[part.month] = unattributed.get(part.month, 0.0) + part.dollars
    keyed += [
        (UNATTRIBUTED_ROW, month, [("overhead unattributed", amount)])
        for month, amount in sorted(unattributed.items())
    ]
    drawn = bars([(f"{team} {month}", parts) for team, month, parts in keyed], colours=COLOURS)
    return [
        CostBar(team=team, month=month, bar=bar, amount=dollars(bar.total))
        for (team, month, _), bar in zip(keyed, drawn, strict=True)
    ]


def savings_bars(months: Sequence[TeamMonth]) -> list[CostBar]:
    """A bar per team's month that spot capacity saved money in (against on-demand prices)."""
    saved = [row for row in months if row.spot_savings > 0]
    drawn = bars(
        [(f"{row.team} {row.month}", [("spot savings", row.spot_savings)]) for row in saved],
        colours=SAVINGS_COLOURS,
    )
    return [
        CostBar(team=row.team, month=row.month, bar=bar, amount=dollars(bar.total))
        for row, bar in zip(saved, drawn, strict=True)
    ]


def _since(text: str) -> datetime:
    try:
        return since_argument(current().now)(text)
    except argparse.ArgumentTypeError as exc:
        raise CommandError(f"since: {exc}") from None
