"""The queue page: the latest scale check's queue in admission order, as `squall queue` shows it.

Read from the latest decision record (Client.queue, cli/queue.py read_queue and queue_row):
each waiting job's position, team, priority, GPUs, reason and message, and its start
estimates once admission makes them. The record lists the first waiting jobs only
(`waitingTotal` says how many wait in all), so the page says "first N of M"; it shows them
context.page_size at a time. Above the table, each team's GPUs in use against its quota
(the decision's `inUse`, the configured `gpuQuota`) and its spend this month against its
budget (what admission reads: the ledger's finished jobs and the running jobs' cost so far),
read only when some team has a budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint, render_template, request

from squall.cli.errors import CommandError
from squall.cli.human import moment_text
from squall.console.context import current
from squall.core.errors import SquallError

blueprint = Blueprint("queue", __name__, url_prefix="/queue")

MAX_TEAM_CHARS = 100


@dataclass(frozen=True)
class TeamUse:
    """One team's bars: GPUs admitted against its quota, dollars this month against its budget."""

    team: str
    gpus: int
    quota: int | None
    spent: float | None
    budget: float | None
    waiting: int  # of the jobs the record lists


def offset_argument(text: str | None, *, listed: int) -> int:
    """`after`: how many rows of the record's list come before this page (a whole number)."""
    if text is None or text == "":
        return 0
    if not text.isdigit() or len(text) > 6 or int(text) > listed:
        raise CommandError(f"after: expected a row number from 0 to {listed}, got {text[:40]!r}")
    return int(text)


def team_argument(text: str | None, teams: dict[str, Any]) -> str | None:
    if not text:
        return None
    if len(text) > MAX_TEAM_CHARS or (teams and text not in teams):
        allowed = ", ".join(sorted(teams)) or "none configured"
        raise CommandError(f"team: expected one of the configured teams ({allowed}), got {text[:40]!r}")
    return text


def team_uses(
    in_use: Any, rows: list[dict[str, Any]], teams: dict[str, Any], spend: dict[str, float] | None
) -> list[TeamUse]:
    """Each configured team, and any other the record names, with what is known of its use."""
    gpus = {str(k): v for k, v in in_use.items()} if isinstance(in_use, dict) else {}
    waiting: dict[str, int] = {}
    for row in rows:
        waiting[str(row.get("team"))] = waiting.get(str(row.get("team")), 0) + 1
    names = sorted(set(teams) | set(gpus) | set(waiting))
    uses = []
    for name in names:
        entry = teams.get(name)
        used = gpus.get(name, 0)
        uses.append(
            TeamUse(
                team=name,
                gpus=used if isinstance(used, int) and not isinstance(used, bool) else 0,
                quota=getattr(entry, "gpu_quota", None),
                spent=None if spend is None else spend.get(name, 0.0),
                budget=getattr(entry, "monthly_budget", None),
                waiting=waiting.get(name, 0),
            )
        )
    return uses


def site_of(value: Any) -> str:
    from squall.cli.queue import site_words

    return site_words(value) if isinstance(value, str) and value else "-"


@blueprint.get("")
def page() -> str:
    from squall.cli.config import configured_team_entries

    context = current()
    teams: dict[str, Any] = dict(configured_team_entries())
    team = team_argument(request.args.get("team"), teams)
    try:
        queue = context.client.queue(team=team)
    except CommandError as exc:  # no decision yet, or one without a queue: said plainly
        return render_template(
            "queue.html", queue=None, absent=str(exc), team=team, teams=sorted(teams), moment=moment_text
        )
    start = offset_argument(request.args.get("after"), listed=len(queue.waiting))
    shown = queue.waiting[start : start + context.page_size]
    following = start + len(shown)
    spend, spend_error = None, ""
    if any(getattr(entry, "monthly_budget", None) for entry in teams.values()):
        try:
            spend = month_spend(context)
        except SquallError as exc:
            spend_error = str(exc)
    return render_template(
        "queue.html",
        queue=queue,
        absent="",
        team=team,
        teams=sorted(teams),
        rows=shown,
        first=start + 1,
        cursor=str(following) if following < len(queue.waiting) else None,
        uses=team_uses(queue.in_use, queue.waiting, teams, spend),
        estimates=any(row.get("startsBy") or row.get("likelyStart") for row in queue.waiting),
        spend_error=spend_error,
        site_of=site_of,
        moment=moment_text,
    )


def month_spend(context: Any) -> dict[str, float]:
    """Team -> dollars this month, as admission reads it for budgets (services/costs.py TeamSpend)."""
    from squall.cli.costs import cost_ledger
    from squall.services.costs import TeamSpend

    return TeamSpend(ledger=cost_ledger(), store=context.client.store).month_to_date(now=context.now())
