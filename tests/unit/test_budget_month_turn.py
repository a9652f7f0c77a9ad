"""A quiet scale check ends by the month's turn while a budget holds a job (the new month's spend is nothing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from squall.planner.admission import AdmissionPlan
from squall.services.scale import _until_budgets_renew

NOW = datetime(2026, 12, 31, 22, 0, tzinfo=UTC)


def test_a_budget_hold_ends_quiet_at_the_months_turn() -> None:
    held = AdmissionPlan(held_by_budget={"vision": 2})
    assert _until_budgets_renew(None, held, now=NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    soon = NOW + timedelta(minutes=10)
    assert _until_budgets_renew(soon, held, now=NOW) == soon


def test_without_a_budget_hold_quiet_ends_as_before() -> None:
    assert _until_budgets_renew(None, AdmissionPlan(held_by_budget={"vision": 0}), now=NOW) is None
    later = NOW + timedelta(days=3)
    assert _until_budgets_renew(later, AdmissionPlan(), now=NOW) == later
