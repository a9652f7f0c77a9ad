"""DynamoDB adapter for the cost ledger, in the jobs table (core/costs.py says what it counts).

- team month: pk=SPEND     sk=<YYYY-MM>#<team>   jobs, gpuHours, dollars, spotSavings (ADDed)
- costed:     pk=COSTED#<job id>  sk=COSTED      month, dollars: the job's cost is in its team's month
- overhead:   pk=OVERHEAD  sk=<YYYY-MM>#<group>  dollars (ADDed): the unattributed part
              pk=OVERHEAD  sk=<YYYY-MM>#<group>#<team>  dollars (ADDed): the part a team caused
- accrual:    pk=OVERHEAD#ACCRUAL  sk=ACCRUAL    at (ISO 8601), rates (JSON: group -> $/h),
              caused (JSON: group -> team -> $/h), buyers (JSON: group -> team -> node shares)

Neither group names nor team names hold "#". Overhead written before teams were told
apart has no team in its key: it reads as unattributed, as it was. An accrual without
`caused` or `buyers` reads as having none.

Every team's months are in one partition, so `squall costs` and a budget's month to
date are one Query each, never a scan. A job's cost is added in one transaction with
the put of its `costed` marker, conditional on the marker being absent: a retried
write, or a second reconcile run that saw the same end, adds nothing. Overhead is
added in one transaction with the new accrual item, conditional on the accrual being
the one the meter read: two meters (a retry after a timeout) cannot count the same
interval twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from squall.adapters.aws.job_store import (
    call_dynamodb,
    from_item,
    iso,
    on_conflict,
    query_pages,
    read_item,
    to_item,
)
from squall.core.costs import FleetAccrual, GroupOverhead, JobCharge, TeamMonth, month_key
from squall.core.errors import ConflictError

SPEND_PARTITION = "SPEND"
OVERHEAD_PARTITION = "OVERHEAD"
ACCRUAL_KEY = {"pk": "OVERHEAD#ACCRUAL", "sk": "ACCRUAL"}
# DynamoDB's limit on the items of one transaction.
MAX_TRANSACTION_ITEMS = 100


def _number(value: float) -> Decimal:
    """A float as DynamoDB stores numbers (to the micro-dollar: sums stay exact enough)."""
    return Decimal(str(round(value, 6)))


class DynamoCostLedger:
    """Per team and month: what finished jobs cost; per group and month: the fleet's overhead."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    # ---- jobs ----------------------------------------------------------------

    def add_job(self, charge: JobCharge) -> bool:
        """Add a finished job's cost to its team's month, once: False when it was added before."""
        marker = to_item(
            {
                "pk": f"COSTED#{charge.job_id}",
                "sk": "COSTED",
                "month": charge.month,
                "team": charge.team,
                "dollars": _number(charge.dollars),
            }
        )
        items = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": marker,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Update": {
                    "TableName": self._table,
                    "Key": to_item({"pk": SPEND_PARTITION, "sk": f"{charge.month}#{charge.team}"}),
                    "UpdateExpression": "ADD jobs :one, gpuHours :gpu, dollars :dollars, spotSavings :saved "
                    "SET team = :team, #month = :month",
                    "ExpressionAttributeNames": {"#month": "month"},
                    "ExpressionAttributeValues": to_item(
                        {
                            ":one": 1,
                            ":gpu": _number(charge.gpu_hours),
                            ":dollars": _number(charge.dollars),
                            ":saved": _number(charge.spot_savings),
                            ":team": charge.team,
                            ":month": charge.month,
                        }
                    ),
                }
            },
        ]
        try:
            call_dynamodb(
                f"add the cost of job {charge.job_id}",
                lambda: self._client.transact_write_items(TransactItems=items),
                rules=(on_conflict(lambda: ConflictError(f"job {charge.job_id} is costed already")),),
            )
        except ConflictError:
            return False
        return True

    def team_months(self, *, since: datetime, team: str | None = None) -> list[TeamMonth]:
        """Every team's months from `since`'s month on (one team's with `team`), oldest first."""
        found = []
        for item in query_pages(
            "read the teams' spend",
            self._client,
            "query",
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND sk >= :since",
            ExpressionAttributeValues=to_item({":pk": SPEND_PARTITION, ":since": month_key(since)}),
        ):
            values = from_item(item)
            month, _, name = str(values["sk"]).partition("#")
            if team is not None and name != team:
                continue
            found.append(
                TeamMonth(
                    team=name,
                    month=month,
                    jobs=int(values.get("jobs", 0)),
                    gpu_hours=float(values.get("gpuHours", 0)),
                    dollars=float(values.get("dollars", 0)),
                    spot_savings=float(values.get("spotSavings", 0)),
                )
            )
        return found

    def finished_in_month(self, *, now: datetime) -> dict[str, float]:
        """Team -> dollars of its jobs that ended in `now`'s month."""
        return {row.team: row.dollars for row in self.team_months(since=now) if row.month == month_key(now)}

    # ---- overhead --------------------------------------------------------------

    def last_accrual(self) -> FleetAccrual | None:
        item = read_item(
            "read the overhead accrual", self._client, table=self._table, key=to_item(ACCRUAL_KEY)
        )
        if item is None:
            return None
        values = from_item(item)
        rates = json.loads(values.get("rates") or "{}")
        return FleetAccrual(
            at=datetime.fromisoformat(values["at"]),
            rates={k: float(v) for k, v in rates.items()},
            caused=_by_group(values.get("caused")),
            buyers=_by_group(values.get("buyers")),
        )

    def accrue(
        self, *, previous: FleetAccrual | None, accrual: FleetAccrual, overhead: Sequence[GroupOverhead]
    ) -> bool:
        """Add `overhead` and move the accrual from `previous` to `accrual`, together.

        False (nothing written) when the stored accrual is no longer `previous`: another
        meter counted the interval first. More groups and months than one transaction
        holds are added in further ones after it (the interval is claimed by the first).
        """
        condition = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if previous is None
            else {
                "ConditionExpression": "#at = :previous",
                "ExpressionAttributeNames": {"#at": "at"},
                "ExpressionAttributeValues": to_item({":previous": iso(previous.at)}),
            }
        )
        claim = {
            "Put": {
                "TableName": self._table,
                "Item": to_item(
                    {
                        **ACCRUAL_KEY,
                        "at": iso(accrual.at),
                        "rates": json.dumps({k: round(v, 6) for k, v in sorted(accrual.rates.items())}),
                        "caused": _json_by_group(accrual.caused),
                        "buyers": _json_by_group(accrual.buyers),
                    }
                ),
                **condition,
            }
        }
        updates = [self._overhead_update(row) for row in overhead if row.dollars > 0]
        first, rest = updates[: MAX_TRANSACTION_ITEMS - 1], updates[MAX_TRANSACTION_ITEMS - 1 :]
        try:
            call_dynamodb(
                "add the fleet's overhead",
                lambda: self._client.transact_write_items(TransactItems=[claim, *first]),
                rules=(on_conflict(lambda: ConflictError("the overhead accrual moved on")),),
            )
        except ConflictError:
            return False
        for start in range(0, len(rest), MAX_TRANSACTION_ITEMS):
            self._write(rest[start : start + MAX_TRANSACTION_ITEMS])
        return True

    def _write(self, items: list[dict[str, Any]]) -> None:
        call_dynamodb(
            "add the fleet's overhead", lambda: self._client.transact_write_items(TransactItems=items)
        )

    def _overhead_update(self, row: GroupOverhead) -> dict[str, Any]:
        sk = f"{row.month}#{row.group}" if row.team is None else f"{row.month}#{row.group}#{row.team}"
        return {
            "Update": {
                "TableName": self._table,
                "Key": to_item({"pk": OVERHEAD_PARTITION, "sk": sk}),
                "UpdateExpression": "ADD dollars :dollars",
                "ExpressionAttributeValues": to_item({":dollars": _number(row.dollars)}),
            }
        }

    def overhead(self, *, since: datetime) -> list[GroupOverhead]:
        """Each group's overhead per month from `since`'s month on, oldest first: a row per team
        that caused some, and the unattributed rest (`team` None)."""
        found = []
        for item in query_pages(
            "read the fleet's overhead",
            self._client,
            "query",
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND sk >= :since",
            ExpressionAttributeValues=to_item({":pk": OVERHEAD_PARTITION, ":since": month_key(since)}),
        ):
            values = from_item(item)
            month, _, rest = str(values["sk"]).partition("#")
            group, _, team = rest.partition("#")
            found.append(
                GroupOverhead(
                    group=group, month=month, dollars=float(values.get("dollars", 0)), team=team or None
                )
            )
        return found


def _json_by_group(values: Mapping[str, Mapping[str, float]]) -> str:
    return json.dumps(
        {group: {k: round(v, 6) for k, v in sorted(inner.items())} for group, inner in sorted(values.items())}
    )


def _by_group(text: object) -> dict[str, dict[str, float]]:
    """group -> name -> number, as _json_by_group wrote it; anything else reads as none."""
    try:
        values = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    if not isinstance(values, dict):
        return {}
    return {
        str(group): {str(k): float(v) for k, v in inner.items() if isinstance(v, int | float)}
        for group, inner in values.items()
        if isinstance(inner, dict)
    }
