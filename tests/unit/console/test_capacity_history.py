"""The capacity page's reading of decision records: pure, over records as the scale check writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.cli.errors import CommandError
from squall.console.pages.capacity import (
    GroupPlace,
    capacity_history,
    checked_hours,
    configured_places,
    read_decisions,
)

END = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PLACES = {
    "p3-usw2": GroupPlace(site="us-west-2", gpus_per_node=4),
    "p3-use1": GroupPlace(site="gpu-east/us-east-1", gpus_per_node=4),
}


def record(
    minutes_before: float, plan: dict[str, Any], acted: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    at = END - timedelta(minutes=minutes_before)
    return {
        "id": "x",
        "at": at.isoformat(),
        "trigger": "schedule",
        "dryRun": False,
        "plan": plan,
        "acted": acted or {},
    } | extra


def scale_up(group: str, before: int, to: int, *reasons: str) -> dict[str, Any]:
    return {"group": group, "from": before, "to": to, "reasons": list(reasons)}


def test_desired_capacity_is_a_step_series_per_site_from_the_first_change_on() -> None:
    records = [
        record(
            50,
            {"scaleUp": [scale_up("p3-usw2", 1, 3, "2 pending pod(s)")]},
            {"scaledUp": [{"group": "p3-usw2", "to": 3}]},
        ),
        record(
            20,
            {"scaleDown": [{"node": "n1", "instance": "i-1", "group": "p3-usw2", "reasons": ["empty"]}]},
            {"terminated": [{"instance": "i-1", "node": "n1", "group": "squall-p3-usw2"}]},
        ),
    ]
    history = capacity_history(records, places=PLACES, end=END, unit=timedelta(minutes=1))
    # 1 before the scale-up, 3 from it, 2 after the scale-down, held to the end
    assert history.nodes == {"us-west-2": [(-50, 1), (-50, 3), (-20, 3), (-20, 2), (0, 2)]}
    assert history.gpus == {"us-west-2": [(-50, 4), (-50, 12), (-20, 12), (-20, 8), (0, 8)]}
    assert history.records == 2 and history.oldest == (END - timedelta(minutes=50)).isoformat()


def test_a_fallback_is_read_from_the_spilled_scale_up_and_the_tables_list_newest_first() -> None:
    why = "in backoff until 2026-01-05T12:05:00+00:00 (insufficient capacity: none left)"
    records = [
        record(
            40,
            {"scaleUp": [scale_up("p3-usw2", 0, 2, "need 2 nodes")]},
            {"scaledUp": [{"group": "p3-usw2", "to": 2}]},
        ),
        record(
            39,
            {
                "scaleUp": [scale_up("p3-use1", 0, 2, "need 2 nodes", f"spilled over from p3-usw2: {why}")],
                "giveBack": [{"group": "p3-usw2", "from": 2, "to": 0, "reasons": ["failed"]}],
                "backoff": [
                    {
                        "group": "p3-usw2",
                        "until": "2026-01-05T12:05:00+00:00",
                        "reasons": ["insufficient capacity"],
                    }
                ],
                "admission": {
                    "admitted": [{"job": "a", "region": "gpu-east/us-east-1", "gpus": 4}],
                    "waitingTotal": 3,
                },
            },
            {"givenBack": [{"group": "p3-usw2", "to": 0}], "scaledUp": [{"group": "p3-use1", "to": 2}]},
        ),
    ]
    history = capacity_history(records, places=PLACES, end=END)
    assert [(r.group, r.where, r.from_desired, r.to_desired) for r in history.scale_ups] == [
        ("p3-use1", "cluster gpu-east, us-east-1", 0, 2),
        ("p3-usw2", "us-west-2", 0, 2),
    ]
    [fallback] = history.fallbacks
    assert (fallback.tried, fallback.tried_where, fallback.used, fallback.used_where, fallback.why) == (
        "p3-usw2",
        "us-west-2",
        "p3-use1",
        "cluster gpu-east, us-east-1",
        why,
    )
    assert [b.group for b in history.backoffs] == ["p3-usw2"]
    assert [(a.where, a.jobs, a.gpus) for a in history.admitted] == [("cluster gpu-east, us-east-1", 1, 4)]
    assert history.waiting == 3
    assert history.nodes["us-west-2"][-1] == (0, 0) and history.nodes["cluster gpu-east, us-east-1"][-1] == (
        0,
        2,
    )


def test_a_dry_run_or_a_refused_scale_up_changes_nothing_but_is_listed() -> None:
    records = [
        record(30, {"scaleUp": [scale_up("p3-usw2", 0, 2)]}, {}, dryRun=True),
        record(20, {"scaleUp": [scale_up("p3-use1", 0, 1)]}, {}),  # the fleet refused it: not in acted
    ]
    history = capacity_history(records, places=PLACES, end=END)
    assert history.nodes == {} and history.gpus == {}
    assert [(r.group, r.dry_run) for r in history.scale_ups] == [("p3-use1", False), ("p3-usw2", True)]


def test_groups_without_a_place_are_charted_by_name_and_named() -> None:
    records = [
        record(10, {"scaleUp": [scale_up("cpu-x", 0, 1)]}, {"scaledUp": [{"group": "cpu-x", "to": 1}]})
    ]
    history = capacity_history(records, places={}, end=END)
    assert list(history.nodes) == ["group cpu-x"] and history.gpus == {}
    assert history.unplaced == ("cpu-x",) and history.scale_ups[0].where == "-"


def test_records_of_any_shape_are_read_without_failing() -> None:
    records: list[Any] = [
        {"at": "not a time"},
        "not a record",
        record(5, {"scaleUp": "nope", "backoff": [1, None], "admission": []}, {"scaledUp": {"a": 1}}),
        record(4, [], "x"),  # type: ignore[arg-type]
        record(
            3,
            {"scaleUp": [{"group": 7, "from": "0", "to": True, "reasons": "text"}]},
            {"scaledUp": [{"group": 7, "to": True}]},
        ),
    ]
    history = capacity_history(records, places=PLACES, end=END)
    assert history.records == 3
    assert history.nodes == {}
    assert [(r.group, r.reasons) for r in history.scale_ups] == [("7", ())]


def test_the_tables_are_bounded() -> None:
    records = [
        record(
            i, {"scaleUp": [scale_up("p3-usw2", i, i + 1)]}, {"scaledUp": [{"group": "p3-usw2", "to": i + 1}]}
        )
        for i in range(120)
    ]
    history = capacity_history(records, places=PLACES, end=END)
    assert (
        len(history.scale_ups) == 50 and history.scale_ups[0].at == (END - timedelta(minutes=0)).isoformat()
    )


@pytest.mark.parametrize(("given", "hours"), [(None, 6), ("", 6), ("1", 1), (" 24 ", 24), ("336", 336)])
def test_hours_accepted(given: str | None, hours: int) -> None:
    assert checked_hours(given) == hours


@pytest.mark.parametrize("given", ["0", "337", "-1", "1.5", "six", "1e3"])
def test_hours_refused_naming_the_parameter(given: str) -> None:
    with pytest.raises(CommandError, match=r"^hours: expected a whole number of hours from 1 to 336"):
        checked_hours(given)


class Decisions:
    """The scale state's decisions(day, limit), over records by UTC day, newest first; records its calls."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.calls: list[tuple[str, int]] = []

    def decisions(self, *, day: datetime, limit: int = 100) -> list[dict[str, Any]]:
        self.calls.append((day.date().isoformat(), limit))
        same_day = [r for r in self.records if r["at"][:10] == day.date().isoformat()]
        return sorted(same_day, key=lambda r: r["at"], reverse=True)[:limit]


def test_a_window_over_midnight_reads_each_day_once_within_the_budget() -> None:
    end = datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    stamps = [end - timedelta(minutes=m) for m in (10, 50, 70, 90, 200)]
    state = Decisions([{"at": t.isoformat()} for t in stamps])
    found = read_decisions(state, end=end, hours=2, most=10)
    # the window is 23:00 to 01:00: 200 minutes before is outside it
    assert [r["at"] for r in found] == [t.isoformat() for t in stamps[:4]]
    assert state.calls == [("2026-01-05", 10), ("2026-01-04", 8)]


def test_a_spent_budget_stops_the_read() -> None:
    end = datetime(2026, 1, 5, 1, 0, tzinfo=UTC)
    state = Decisions([{"at": (end - timedelta(minutes=m)).isoformat()} for m in range(1, 50)])
    found = read_decisions(state, end=end, hours=48, most=5)
    assert len(found) == 5 and state.calls == [("2026-01-05", 5)]


def test_places_come_from_cdk_json_node_groups(tmp_path: Path) -> None:
    path = tmp_path / "cdk.json"
    assert configured_places(path)[0] == {} and "no " in configured_places(path)[1]
    path.write_text('{"context": {"nodeGroups": [{"name": "g1", "region": "us-east-1", "cluster": "c1", "asgName": "a",'
                    ' "instanceType": "p3.2xlarge", "allocatable": {"cpu": "8", "memory": "60Gi", "nvidia.com/gpu": 1, "pods": 58},'
                    ' "maxSize": 2}]}}')  # fmt: skip
    assert configured_places(path) == ({"g1": GroupPlace(site="c1/us-east-1", gpus_per_node=1)}, "")
    path.write_text('{"context": {"nodeGroups": [{"name": 5}]}}')
    places, note = configured_places(path)
    assert places == {} and "nodeGroups[0].name" in note
