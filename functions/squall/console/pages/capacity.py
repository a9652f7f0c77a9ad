"""The capacity page: nodes and GPUs per region and cluster over the last hours, what the scale
checks bought and why, and the fallbacks to another region.

Everything comes from the scale checks' decision records (adapters/aws/scale_state.py), read
newest first a day's partition at a time and never more than MAX_RECORDS of them. A record
holds what a check changed, not the fleet it saw: a group's desired capacity is known from
its first change in the window on (a scale-up's `from`, a give-back's `to`), and held until
the next change (a quiet check records nothing). Which region and cluster a group is in,
and how many GPUs a node of it has, come from the node groups of ./cdk.json, as `squall
plan` reads them; without them the page charts groups by name.

A record is read as it was written, by whatever Squall wrote it: any key may be missing or
hold anything, and everything shown is escaped by the template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flask import Blueprint, render_template, request

from squall.cli import deployment
from squall.cli.errors import CommandError
from squall.cli.queue import site_words
from squall.console.charts import LineChart, line_chart
from squall.console.context import current

blueprint = Blueprint("capacity", __name__, url_prefix="/capacity")

DEFAULT_HOURS = 6
MAX_HOURS = 14 * 24  # the decision records' retention (scale_state.DECISION_RETENTION)
# Records read at most, newest first: a check records at most one a minute, so a day of
# busy checks. A longer window on a busy deployment shows its newest part (the page says so).
MAX_RECORDS = 1_500
TABLE_ROWS = 50  # rows each table shows, newest first
CDK_JSON = Path("cdk.json")
SPILLED = (
    "spilled over from "  # planner/planning.py's reason on a scale-up a backed-off group forced elsewhere
)


@dataclass(frozen=True)
class GroupPlace:
    """Where a node group's nodes are, and how many GPUs one has (cdk.json's nodeGroups)."""

    site: str  # "<cluster>/<region>", or the region (planner/sites.py)
    gpus_per_node: int


@dataclass(frozen=True)
class ScaleUpRow:
    at: str
    group: str
    where: str
    from_desired: Any
    to_desired: Any
    reasons: tuple[str, ...]
    dry_run: bool


@dataclass(frozen=True)
class FallbackRow:
    at: str
    tried: str  # the preferred group, in backoff
    tried_where: str
    used: str  # the group bought instead
    used_where: str
    why: str


@dataclass(frozen=True)
class BackoffRow:
    at: str
    group: str
    where: str
    until: Any
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class SiteAdmissions:
    where: str
    jobs: int
    gpus: int


@dataclass
class CapacityHistory:
    """What the decision records of a window say, for the page. Points are (`unit`s from `end`, value)."""

    records: int = 0
    oldest: str | None = None
    newest: str | None = None
    nodes: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    gpus: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    scale_ups: list[ScaleUpRow] = field(default_factory=list)
    fallbacks: list[FallbackRow] = field(default_factory=list)
    backoffs: list[BackoffRow] = field(default_factory=list)
    admitted: list[SiteAdmissions] = field(default_factory=list)
    unreachable: tuple[str, ...] = ()  # the newest record's clusters whose API did not answer
    waiting: Any = None  # jobs waiting in the newest record's queue
    unplaced: tuple[str, ...] = ()  # groups the configuration does not place


# ---- reading ----------------------------------------------------------------------------------


def checked_hours(value: str | None) -> int:
    """`?hours=`: a whole number of hours from 1 to MAX_HOURS (absent: DEFAULT_HOURS)."""
    if value is None or value == "":
        return DEFAULT_HOURS
    text = value.strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_HOURS:
        raise CommandError(
            f"hours: expected a whole number of hours from 1 to {MAX_HOURS}, got {value[:40]!r}"
        )
    return int(text)


def read_decisions(state: Any, *, end: datetime, hours: int, most: int = MAX_RECORDS) -> list[dict[str, Any]]:
    """The decision records of the `hours` before `end`, newest first, at most `most`: one bounded
    Query of each day's partition, newest day first."""
    end = end.astimezone(UTC)  # the partitions are UTC days
    since = end - timedelta(hours=hours)
    found: list[dict[str, Any]] = []
    day = end
    while len(found) < most and day.date() >= since.date():
        wanted = most - len(found)
        page = state.decisions(day=day, limit=wanted)
        found.extend(r for r in page if (at := _moment(r.get("at"))) is not None and since <= at <= end)
        if len(page) >= wanted:
            break  # the budget is spent within this day: older days would leave a gap
        day -= timedelta(days=1)
    return found


def configured_places(path: Path = CDK_JSON) -> tuple[dict[str, GroupPlace], str]:
    """Each node group's place from `path`'s nodeGroups, and what to say when there are none."""
    from squall.cli.config import load_document
    from squall.planner.inputs import InputError, read_node_groups

    if not path.exists():
        return (
            {},
            f"no {path} here: groups are shown by name (run the console where cdk.json is to see regions)",
        )
    try:
        groups, _ = read_node_groups(load_document(str(path)))
    except (CommandError, InputError) as exc:
        return {}, f"{path}'s node groups cannot be read, so groups are shown by name: {exc}"
    return {g.name: GroupPlace(site=g.site, gpus_per_node=g.allocatable.gpu) for g in groups}, ""


# ---- the records, folded ----------------------------------------------------------------------


def capacity_history(
    records: Sequence[Mapping[str, Any]],
    *,
    places: Mapping[str, GroupPlace],
    end: datetime,
    unit: timedelta = timedelta(hours=1),
) -> CapacityHistory:
    """The window's records (any order) as series per site and tables, newest rows first."""
    dated = sorted(
        ((at, r) for r in records if isinstance(r, Mapping) and (at := _moment(r.get("at"))) is not None),
        key=lambda pair: pair[0],
    )
    history = CapacityHistory(records=len(dated))
    if not dated:
        return history
    history.oldest, history.newest = dated[0][0].isoformat(), dated[-1][0].isoformat()
    desired: dict[str, int] = {}
    snapshots: list[tuple[datetime, dict[str, int]]] = []
    admitted: dict[str, list[int]] = {}
    unplaced: set[str] = set()

    def where(group: str) -> str:
        place = places.get(group)
        if place is None:
            unplaced.add(group)
            return "-"
        return site_words(place.site)

    for at, record in dated:
        plan = _mapping(record.get("plan"))
        acted = _mapping(record.get("acted"))
        dry = bool(record.get("dryRun"))
        stamp = at.isoformat()
        for entry in _dicts(plan.get("backoff")):
            group = _text(entry.get("group"))
            history.backoffs.append(
                BackoffRow(stamp, group, where(group), entry.get("until"), _texts(entry.get("reasons")))
            )
        for entry in _dicts(plan.get("scaleUp")):
            group = _text(entry.get("group"))
            reasons = _texts(entry.get("reasons"))
            history.scale_ups.append(
                ScaleUpRow(stamp, group, where(group), entry.get("from"), entry.get("to"), reasons, dry)
            )
            for reason in reasons:
                if reason.startswith(SPILLED):
                    tried, _, why = reason[len(SPILLED) :].partition(": ")
                    history.fallbacks.append(
                        FallbackRow(stamp, tried, where(tried), group, where(group), why)
                    )
        if not dry:
            first = _first_seen(plan, acted, desired)
            if first:
                snapshots.append((at, desired | first))  # their values before this check
            _apply_changes(plan, acted, desired)
            snapshots.append((at, dict(desired)))
            for entry in _dicts(_mapping(plan.get("admission")).get("admitted")):
                site, gpus = _text(entry.get("region")), _whole(entry.get("gpus")) or 0
                counts = admitted.setdefault(site, [0, 0])
                counts[0], counts[1] = counts[0] + 1, counts[1] + gpus
    newest = _mapping(dated[-1][1].get("plan"))
    history.unreachable = _texts(newest.get("unreachableClusters"))
    history.waiting = _mapping(newest.get("admission")).get("waitingTotal")
    history.nodes, history.gpus = _series(snapshots, places=places, end=end, unit=unit)
    history.unplaced = tuple(sorted(unplaced | {g for _, s in snapshots for g in s if g not in places}))
    history.admitted = sorted(
        (SiteAdmissions(site_words(site), jobs, gpus) for site, (jobs, gpus) in admitted.items()),
        key=lambda row: row.where,
    )
    for rows in (history.scale_ups, history.fallbacks, history.backoffs):
        rows.reverse()
        del rows[TABLE_ROWS:]
    return history


def _first_seen(
    plan: Mapping[str, Any], acted: Mapping[str, Any], desired: Mapping[str, int]
) -> dict[str, int]:
    """Groups this check scaled up that no earlier record of the window changed: their `from`."""
    done = {_text(e.get("group")) for e in _dicts(acted.get("scaledUp"))}
    return {
        group: before
        for entry in _dicts(plan.get("scaleUp"))
        if (group := _text(entry.get("group"))) in done
        and group not in desired
        and (before := _whole(entry.get("from"))) is not None
    }


def _apply_changes(plan: Mapping[str, Any], acted: Mapping[str, Any], desired: dict[str, int]) -> None:
    """A check's changes to desired capacity, in the order the scale check makes them: give-backs,
    scale-ups, then scale-downs (one instance terminated with a decrement each)."""
    for entry in _dicts(acted.get("givenBack")):
        group, to = _text(entry.get("group")), _whole(entry.get("to"))
        if to is not None:
            desired[group] = to
    done = {_text(e.get("group")): _whole(e.get("to")) for e in _dicts(acted.get("scaledUp"))}
    for entry in _dicts(plan.get("scaleUp")):
        group = _text(entry.get("group"))
        to, before = done.get(group), _whole(entry.get("from"))
        if to is None:
            continue  # not done (the fleet refused it): desired stayed where it was
        if group not in desired and before is not None:
            desired[group] = before  # first seen: its value before this check
        desired[group] = to
    terminated = {_text(e.get("instance")) for e in _dicts(acted.get("terminated"))}
    for entry in _dicts(plan.get("scaleDown")):
        group = _text(entry.get("group"))
        if _text(entry.get("instance")) in terminated and group in desired:
            desired[group] = max(0, desired[group] - 1)


def _series(
    snapshots: Sequence[tuple[datetime, Mapping[str, int]]],
    *,
    places: Mapping[str, GroupPlace],
    end: datetime,
    unit: timedelta,
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[tuple[float, float]]]]:
    """Nodes and GPUs per site as steps: each value held until the next, the last until `end`."""
    nodes: dict[str, list[tuple[float, float]]] = {}
    gpus: dict[str, list[tuple[float, float]]] = {}

    def add(series: dict[str, list[tuple[float, float]]], name: str, x: float, value: float) -> None:
        points = series.setdefault(name, [])
        if points and points[-1][1] != value and points[-1][0] != x:
            points.append((x, points[-1][1]))  # the step: the old value up to this moment
        if not points or points[-1] != (x, value):
            points.append((x, value))

    for at, desired in snapshots:
        x = _before(at, end, unit)
        node_totals: dict[str, int] = {}
        gpu_totals: dict[str, int] = {}
        for group, count in desired.items():
            place = places.get(group)
            name = site_words(place.site) if place is not None else f"group {group}"
            node_totals[name] = node_totals.get(name, 0) + count
            if place is not None:
                gpu_totals[name] = gpu_totals.get(name, 0) + count * place.gpus_per_node
        for name, total in node_totals.items():
            add(nodes, name, x, total)
        for name, total in gpu_totals.items():
            add(gpus, name, x, total)
    x_end = 0.0
    for series in (nodes, gpus):
        for points in series.values():
            if points[-1][0] < x_end:
                points.append((x_end, points[-1][1]))
    return nodes, gpus


def _before(at: datetime, end: datetime, unit: timedelta) -> float:
    """`at` as a (negative) number of `unit`s from `end`."""
    return round((at - end) / unit, 3)


def x_unit(hours: int) -> tuple[timedelta, str]:
    """The charts' x unit: minutes for a window of up to 6 hours, else hours."""
    return (timedelta(minutes=1), "minutes") if hours <= 6 else (timedelta(hours=1), "hours")


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(_text(v) for v in value) if isinstance(value, list) else ()


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---- the page ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityPage:
    hours: int
    end: datetime
    anchored: bool  # the window ends at the newest record, not now (a virtual clock, a stopped schedule)
    history: CapacityHistory
    nodes_chart: LineChart | None
    gpus_chart: LineChart | None
    places_note: str
    unit: str  # the charts' x: minutes or hours before `end`


def capacity_page(*, hours: int, now: datetime) -> CapacityPage:
    state = deployment.scale_state()
    end, anchored = now, False
    records = read_decisions(state, end=end, hours=hours)
    if not records:
        # Nothing in the window by this clock: end it at the newest record instead, if there is one.
        latest = state.latest_decision(now=now)
        at = _moment(latest.get("at")) if isinstance(latest, Mapping) else None
        if at is not None:
            end, anchored = at, True
            records = read_decisions(state, end=end, hours=hours)
    places, note = configured_places()
    unit, unit_name = x_unit(hours)
    history = capacity_history(records, places=places, end=end, unit=unit)
    return CapacityPage(
        hours=hours,
        end=end,
        anchored=anchored,
        history=history,
        nodes_chart=line_chart(history.nodes) if history.nodes else None,
        gpus_chart=line_chart(history.gpus) if history.gpus else None,
        places_note=note,
        unit=unit_name,
    )


@blueprint.get("")
def page() -> str:
    hours = checked_hours(request.args.get("hours"))
    view = capacity_page(hours=hours, now=current().now())
    return render_template("capacity.html", view=view, choices=(1, 6, 24, 72, MAX_HOURS))
