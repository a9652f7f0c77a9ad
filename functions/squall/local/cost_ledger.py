"""The cost ledger in memory: what adapters/aws/cost_ledger.py keeps in DynamoDB, the same way.

A job's cost is added once (its id is remembered); overhead moves the accrual only
from the one the meter read. `next_error` makes the next call raise, as a fake should.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from datetime import datetime

from squall.core.costs import FleetAccrual, GroupOverhead, JobCharge, TeamMonth, month_key


class InMemoryCostLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._months: dict[tuple[str, str], TeamMonth] = {}  # (month, team) -> totals
        self._costed: dict[str, JobCharge] = {}
        # (month, group, team) -> dollars; team "": unattributed
        self._overhead: dict[tuple[str, str, str], float] = {}
        self._accrual: FleetAccrual | None = None
        self.next_error: Exception | None = None

    def _fail_if_told(self) -> None:
        error, self.next_error = self.next_error, None
        if error is not None:
            raise error

    def add_job(self, charge: JobCharge) -> bool:
        with self._lock:
            self._fail_if_told()
            if charge.job_id in self._costed:
                return False
            self._costed[charge.job_id] = charge
            key = (charge.month, charge.team)
            row = self._months.get(key) or TeamMonth(team=charge.team, month=charge.month)
            self._months[key] = dataclasses.replace(
                row,
                jobs=row.jobs + 1,
                gpu_hours=row.gpu_hours + charge.gpu_hours,
                dollars=row.dollars + charge.dollars,
                spot_savings=row.spot_savings + charge.spot_savings,
            )
            return True

    def team_months(self, *, since: datetime, team: str | None = None) -> list[TeamMonth]:
        with self._lock:
            self._fail_if_told()
            first = month_key(since)
            return [
                row
                for (month, name), row in sorted(self._months.items())
                if month >= first and (team is None or name == team)
            ]

    def finished_in_month(self, *, now: datetime) -> dict[str, float]:
        return {row.team: row.dollars for row in self.team_months(since=now) if row.month == month_key(now)}

    def last_accrual(self) -> FleetAccrual | None:
        with self._lock:
            self._fail_if_told()
            return self._accrual

    def accrue(
        self, *, previous: FleetAccrual | None, accrual: FleetAccrual, overhead: Sequence[GroupOverhead]
    ) -> bool:
        with self._lock:
            self._fail_if_told()
            stored = self._accrual
            if (stored is None) != (previous is None) or (
                stored is not None and previous is not None and stored.at != previous.at
            ):
                return False
            self._accrual = accrual
            for row in overhead:
                if row.dollars > 0:
                    key = (row.month, row.group, row.team or "")
                    self._overhead[key] = self._overhead.get(key, 0.0) + row.dollars
            return True

    def overhead(self, *, since: datetime) -> list[GroupOverhead]:
        with self._lock:
            self._fail_if_told()
            first = month_key(since)
            return [
                GroupOverhead(group=group, month=month, dollars=dollars, team=team or None)
                for (month, group, team), dollars in sorted(self._overhead.items())
                if month >= first
            ]
