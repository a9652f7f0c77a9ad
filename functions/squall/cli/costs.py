"""`squall costs`: what each team's finished jobs cost per month, the overhead each team
caused, and the fleet's unattributed overhead.

Read from the cost ledger in the jobs table (SQUALL_TABLE_NAME, through boto3's default
chain as the other commands): one Query for the teams' months and one for the overhead.
The ledger counts whole UTC months, so `--since 30d` shows every month that period
touches. A job's cost is in the month it ended; running jobs are not in it yet
(`squall describe` shows one's cost so far). Overhead is counted as it accrues, in the
month it accrued (core/costs.py attribute_overhead says whose it is).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from squall.cli import deployment
from squall.cli.errors import EXIT_OK
from squall.cli.human import dollars
from squall.cli.text import printable
from squall.core.costs import GroupOverhead, TeamMonth, month_key, since_duration

HEADER = ("TEAM", "MONTH", "JOBS", "GPU-HOURS", "DOLLARS", "SPOT SAVINGS", "OVERHEAD")
UNATTRIBUTED_ROW = "(unattributed)"


def cost_ledger() -> Any:
    """The deployment's cost ledger (the jobs table)."""
    from squall.adapters.aws.cost_ledger import DynamoCostLedger

    return DynamoCostLedger(deployment.aws_client("dynamodb"), deployment.table_name())


def since_argument(now: Callable[[], datetime]) -> Callable[[str], datetime]:
    """An argparse type: `30d`, `12h`, `2w` before now, or a date (`2026-04-01`)."""

    def parse(text: str) -> datetime:
        try:
            return since_duration(now(), text)
        except ValueError as duration_error:
            try:
                at = datetime.fromisoformat(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{duration_error}, or a date such as 2026-04-01") from None
            return at if at.tzinfo is not None else at.replace(tzinfo=UTC)

    return parse


def caused_by_team(overhead: Sequence[GroupOverhead]) -> dict[tuple[str, str], float]:
    """(team, month) -> the overhead that team caused, over every group."""
    caused: dict[tuple[str, str], float] = {}
    for part in overhead:
        if part.team is not None:
            key = (part.team, part.month)
            caused[key] = caused.get(key, 0.0) + part.dollars
    return caused


def team_rows(months: Sequence[TeamMonth], caused: Mapping[tuple[str, str], float]) -> list[TeamMonth]:
    """The teams' months, and a month a team caused overhead in but finished no job in, by team."""
    by_key = {(row.team, row.month): row for row in months}
    for team, month in caused:
        by_key.setdefault((team, month), TeamMonth(team=team, month=month))
    return [row for _, row in sorted(by_key.items())]


def cost_rows(months: Sequence[TeamMonth], overhead: Sequence[GroupOverhead]) -> list[tuple[str, ...]]:
    """The table's rows: each team's months with the overhead it caused, then the unattributed
    overhead of each month, then the total of each column."""
    caused = caused_by_team(overhead)
    rows: list[tuple[str, ...]] = [
        (
            printable(row.team, newlines=False),
            row.month,
            str(row.jobs),
            f"{row.gpu_hours:,.1f}",
            dollars(row.dollars),
            dollars(row.spot_savings),
            dollars(caused.get((row.team, row.month), 0.0)),
        )
        for row in team_rows(months, caused)
    ]
    unattributed: dict[str, float] = {}
    for part in overhead:
        if part.team is None:
            unattributed[part.month] = unattributed.get(part.month, 0.0) + part.dollars
    rows += [
        (UNATTRIBUTED_ROW, month, "", "", "", "", dollars(amount))
        for month, amount in sorted(unattributed.items())
    ]
    rows.append(
        (
            "total",
            "",
            str(sum(r.jobs for r in months)),
            f"{sum(r.gpu_hours for r in months):,.1f}",
            dollars(sum(r.dollars for r in months)),
            dollars(sum(r.spot_savings for r in months)),
            dollars(sum(part.dollars for part in overhead)),
        )
    )
    return rows


def cmd_costs(args: argparse.Namespace) -> int:
    ledger = cost_ledger()
    since: datetime = args.since
    months = ledger.team_months(since=since, team=args.team)
    overhead = ledger.overhead(since=since)
    if args.team is not None:  # the overhead that team caused; the unattributed is nobody's
        overhead = [part for part in overhead if part.team == args.team]
    if args.json:
        caused = caused_by_team(overhead)
        print(
            json.dumps(
                {
                    "since": since.isoformat(),
                    "fromMonth": month_key(since),
                    "team": args.team,
                    "teams": [
                        {
                            "team": r.team,
                            "month": r.month,
                            "jobs": r.jobs,
                            "gpuHours": round(r.gpu_hours, 3),
                            "dollars": round(r.dollars, 2),
                            "spotSavings": round(r.spot_savings, 2),
                            "overhead": round(caused.get((r.team, r.month), 0.0), 2),
                        }
                        for r in team_rows(months, caused)
                    ],
                    "overhead": [
                        {"group": o.group, "month": o.month, "team": o.team, "dollars": round(o.dollars, 2)}
                        for o in overhead
                    ],
                }
            )
        )
        return EXIT_OK
    whose = f" of team {printable(args.team, newlines=False)}" if args.team is not None else ""
    print(f"costs{whose} from {month_key(since)} (whole UTC months; a job counts in the month it ended)")
    if not months and not overhead:
        print("nothing counted yet")
        return EXIT_OK
    table = [HEADER, *cost_rows(months, overhead)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    jobs, extra = sum(r.dollars for r in months), sum(part.dollars for part in overhead)
    what = "the overhead it caused" if args.team is not None else "overhead"
    print(f"jobs {dollars(jobs)} + {what} {dollars(extra)} = {dollars(jobs + extra)}")
    return EXIT_OK


def add_costs_parser(subparsers: Any, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
    """Add `costs` to the `squall` command's subparsers."""
    p = subparsers.add_parser(
        "costs", help="what each team's jobs cost per month, the overhead each caused, and the rest"
    )
    p.add_argument("--team", help="only this team's months and the overhead it caused")
    p.add_argument(
        "--since",
        type=since_argument(now),
        default="30d",
        metavar="WHEN",
        help="from the month of this long ago (30d, 12h, 2w) or of a date (2026-04-01); default 30d",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_costs)
