"""`squall queue`, and a queued job's place in it for `squall describe`: the latest scale check's
decision record, as admission left it (positions, reasons, start estimates).

A decision record is read as it was written, by whatever Squall wrote it: a key may be
missing (an older Squall's) or hold anything, and is shown escaped.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from squall.cli import deployment
from squall.cli.errors import EXIT_FAILED, EXIT_OK, CommandError
from squall.cli.human import estimate, moment_text
from squall.cli.text import one_line, print_table
from squall.core.errors import SquallError
from squall.core.jobs import JobStatus, Reason
from squall.planner.text import counted


def start_words(job: Any, place: dict[str, Any] | None) -> str:
    """`starts by <moment>, likely <moment>; 3rd in research`: the latest scale check's estimate
    (its queue entry's, else the one on the job's record) and the job's place in its team."""
    if place is not None and (place.get("startsBy") or place.get("likelyStart")):
        when = estimate(place.get("startsBy"), place.get("likelyStart"))
    else:
        when = estimate(job.starts_by, job.likely_start)
    if not when:
        return ""
    from squall.planner.queue_order import ordinal

    team_position = place.get("teamPosition") if place is not None else None
    if isinstance(team_position, int) and not isinstance(team_position, bool) and team_position > 0:
        when += f"; {ordinal(team_position)} in {one_line(job.team)}"
    return when


def place_in_queue(job: Any) -> tuple[dict[str, Any] | None, str]:
    """A QUEUED job's place in the latest decision's queue, or None and why there is none to show."""
    if job.status is not JobStatus.QUEUED or job.is_sweep:
        return None, ""
    try:
        decision = deployment.scale_state().latest_decision(now=datetime.now(UTC))
    except SquallError as exc:  # the history is shown all the same
        return None, f"cannot read the latest scale-check decision: {exc}"
    queue = _admission(decision)
    if queue is None:
        return None, "no scale-check decision with a queue recorded yet"
    for entry in queue.get("waiting", []):
        if isinstance(entry, dict) and entry.get("job") == job.id:
            return {
                "position": entry.get("position"),
                "teamPosition": entry.get("teamPosition"),
                "reason": entry.get("reason"),
                "message": _queue_message(entry, scaling=_scaling(decision)),
                "startsBy": entry.get("startsBy"),
                "likelyStart": entry.get("likelyStart"),
                "decidedAt": decision["at"] if decision is not None else None,
            }, ""
    listed, total = len(queue.get("waiting", [])), queue.get("waitingTotal", 0)
    if isinstance(total, int) and total > listed:
        return None, f"not among the first {listed} of the {total} waiting in the latest scale check"
    return None, "not in the latest scale check's queue (submitted, or admitted, since)"


def _admission(decision: dict[str, Any] | None) -> dict[str, Any] | None:
    plan = decision.get("plan") if decision is not None else None
    admission = plan.get("admission") if isinstance(plan, dict) else None
    return admission if isinstance(admission, dict) else None


def _scaling(decision: dict[str, Any] | None) -> str:
    """The check's scale-ups as the scale check writes them on waiting jobs' records."""
    plan = decision.get("plan") if decision is not None else None
    ups = plan.get("scaleUp") if isinstance(plan, dict) else None
    if not isinstance(ups, list):
        return ""
    return "; ".join(
        f"{up.get('group')} scaling {up.get('from')}->{up.get('to')}"
        for up in ups[:3]
        if isinstance(up, dict)
    )


def _queue_message(entry: dict[str, Any], *, scaling: str) -> str:
    """A waiting job's message as the scale check renders it on the job's record."""
    from squall.services.admission import with_scaling

    # held back by its team's quota or budget: nothing is bought for it
    held = str(entry.get("reason", "")).startswith((Reason.QUOTA_EXCEEDED, Reason.BUDGET_EXCEEDED))
    return with_scaling(str(entry.get("message", "")), scaling=scaling, held=held)


@dataclass(frozen=True)
class QueueSnapshot:
    """The queue as one scale check's decision record left it (`squall queue`, `Client.queue`).

    `waiting`: its entries in admission order (queue_row's dicts, times as ISO 8601), only
    `team`'s when one was asked for; `waiting_total`: how many waited in all;
    `not_listed`: how many the record leaves out; `admitted`: what that check admitted.
    """

    decided_at: Any
    trigger: Any
    dry_run: Any
    team: str | None
    waiting: list[dict[str, Any]]
    waiting_total: int
    listed: int  # entries the record lists, of every team
    not_listed: int
    admitted: list[dict[str, Any]]
    in_use: Any

    def as_json(self) -> dict[str, Any]:
        """What `squall queue --json` prints."""
        return {
            "decidedAt": self.decided_at,
            "trigger": self.trigger,
            "dryRun": self.dry_run,
            "team": self.team,
            "waiting": self.waiting,
            "waitingTotal": self.waiting_total,
            "notListed": self.not_listed,
            "admitted": self.admitted,
            "inUse": self.in_use,
        }


def read_queue(decision: dict[str, Any] | None, *, team: str | None) -> QueueSnapshot:
    """The queue in the latest scale check's decision record; CommandError when it has none."""
    if decision is None:
        raise CommandError(
            "no scale-check decision recorded yet, so there is no queue to show: the scale function "
            "records one every minute (is it deployed and running?)",
            code=EXIT_FAILED,
        )
    admission = _admission(decision)
    if admission is None:
        raise CommandError(
            f"the latest scale-check decision ({moment_text(decision.get('at'))}) recorded no queue "
            "(written by a Squall without admission)",
            code=EXIT_FAILED,
        )
    scaling = _scaling(decision)
    listed = [w for w in admission.get("waiting", []) if isinstance(w, dict)]
    total = admission.get("waitingTotal", len(listed))
    total = total if isinstance(total, int) else len(listed)
    rows = [queue_row(w, scaling=scaling) for w in listed if team is None or w.get("team") == team]
    admitted = [a for a in admission.get("admitted", []) if isinstance(a, dict)]
    if team is not None:
        admitted = [a for a in admitted if a.get("team") == team]
    return QueueSnapshot(
        decided_at=decision.get("at"),
        trigger=decision.get("trigger"),
        dry_run=decision.get("dryRun"),
        team=team,
        waiting=rows,
        waiting_total=total,
        listed=len(listed),
        not_listed=max(total - len(listed), 0),
        admitted=admitted,
        in_use=admission.get("inUse", {}),
    )


def cmd_queue(args: argparse.Namespace) -> int:
    from squall.cli.client import Client

    queue = Client().queue(team=args.team)
    rows, more, total, team = queue.waiting, queue.not_listed, queue.waiting_total, args.team
    if args.json:
        print(json.dumps(queue.as_json()))
        return EXIT_OK
    dry = ", dry run: nothing was admitted" if queue.dry_run else ""
    whose = f" ({team}: {len(rows)} listed)" if team is not None else ""
    print(
        f"queue at {moment_text(queue.decided_at)} (scale check, {one_line(queue.trigger)}{dry}): "
        f"{total} waiting{whose}"
    )
    in_use = queue.in_use
    if isinstance(in_use, dict) and in_use:
        print(
            "GPUs admitted: "
            + ", ".join(f"{one_line(name)} {one_line(gpus)}" for name, gpus in in_use.items())
        )
    for entry in queue.admitted:
        job, who, region = (one_line(entry.get(key)) for key in ("job", "team", "region"))
        gpus = entry.get("gpus")
        asks = counted(gpus, "GPU") if isinstance(gpus, int) else f"{one_line(gpus)} GPUs"
        print(f"admitted in that check: {job} ({who}, {asks}) in {site_words(region)}")
    if rows:
        print_table(*queue_table(rows))
    elif team is not None:
        print(
            f"no job of team {team} among the first {queue.listed}"
            if more
            else f"no job of team {team} is waiting"
        )
    elif not more:
        print("no job is waiting")
    if more:
        print(f"{more} more not listed (the scale check records the first {queue.listed} of the queue)")
    return EXIT_OK


def queue_row(entry: dict[str, Any], *, scaling: str) -> dict[str, Any]:
    """A waiting entry of a decision record as `squall queue --json` gives it (times as ISO 8601)."""
    return {
        "position": entry.get("position"),
        "teamPosition": entry.get("teamPosition"),
        "job": entry.get("job"),
        "team": entry.get("team"),
        "priority": entry.get("priority"),
        "gpus": entry.get("gpus"),
        "startsBy": entry.get("startsBy"),
        "likelyStart": entry.get("likelyStart"),
        "reason": entry.get("reason"),
        "message": _queue_message(entry, scaling=scaling),
    }


def queue_table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """`squall queue`'s table: header and cells. The start estimates' columns (STARTS-BY, LIKELY)
    only when some job has one: a Squall that makes none leaves them out."""
    header = ["POS", "TEAM-POS", "JOB", "TEAM", "PRIORITY", "GPUS", "REASON", "MESSAGE"]
    keys = ("teamPosition", "job", "team", "priority", "gpus", "reason", "message")
    # position 0: held back by the team's quota, not in the admission order
    cells = [[one_line(r["position"] or "-"), *(one_line(r[key]) for key in keys)] for r in rows]
    if any(r["startsBy"] or r["likelyStart"] for r in rows):
        header[6:6] = ["STARTS-BY", "LIKELY"]
        for row, r in zip(cells, rows, strict=True):
            row[6:6] = [_moment_or_dash(r["startsBy"]), _moment_or_dash(r["likelyStart"])]
    return header, cells


def _moment_or_dash(value: object) -> str:
    return moment_text(value) if value else "-"


def site_words(site: str) -> str:
    """Where admission placed a gang, as a decision records it: `us-west-2`, or `gpu-east/us-east-1`
    (a cluster's region, when there are several) written `cluster gpu-east, us-east-1`."""
    from squall.planner.sites import split_site

    cluster, region = split_site(site)
    return f"cluster {cluster}, {region}" if cluster else site
