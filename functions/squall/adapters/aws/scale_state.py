"""DynamoDB adapter for the autoscaler's own state, in the jobs table.

- lease:     pk=LEASE#<name>      sk=LEASE     holder, expiresAt (epoch s; also the TTL)
- health:    pk=HEALTH            sk=<group>   backoffUntil, consecutiveFailures, lastFailureAt, reason
- decision:  pk=DECISION#<date>   sk=<time>#<id>  trigger, dryRun, plan (JSON), expiresAt (TTL)
- latest:    pk=DECISION#LATEST   sk=LATEST    decisionPk, decisionSk: the newest decision's key

The newest decision is read with one Query of today's partition, newest first (then
yesterday's, just after midnight); the `latest` item finds it when the reader's clock
and the writer's disagree by more than that (a laptop, the local runtime's virtual
clock) or when no check ran for a day, so `squall queue` never scans the table.

The lease makes "two scale checks never act at once" hold even when the schedule
and a scale-check request invoke the function together: whoever writes the lease
item first (or after it expired) acts, the other one returns at once.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from squall.adapters.aws.job_store import (
    call_dynamodb,
    from_iso,
    from_item,
    iso,
    on_conflict,
    query_pages,
    to_item,
)
from squall.core.errors import ConflictError
from squall.planner import GroupHealth

DECISION_RETENTION = timedelta(days=14)
LATEST_DECISION = {"pk": "DECISION#LATEST", "sk": "LATEST"}


class DynamoScaleState:
    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    # ---- lease -------------------------------------------------------------

    def acquire_lease(self, *, name: str, holder: str, now: datetime, duration: timedelta) -> bool:
        """True when `holder` now holds the lease; False when someone else does."""
        item = to_item({"pk": f"LEASE#{name}", "sk": "LEASE", "holder": holder, "expiresAt": int((now + duration).timestamp())})
        try:
            call_dynamodb(
                f"acquire lease {name}",
                lambda: self._client.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(pk) OR expiresAt < :now OR holder = :holder",
                    ExpressionAttributeValues=to_item({":now": int(now.timestamp()), ":holder": holder}),
                ),
                rules=(on_conflict(lambda: ConflictError(f"lease {name} is held by someone else")),),
            )
        except ConflictError:
            return False
        return True

    def release_lease(self, *, name: str, holder: str) -> None:
        try:
            call_dynamodb(
                f"release lease {name}",
                lambda: self._client.delete_item(
                    TableName=self._table,
                    Key=to_item({"pk": f"LEASE#{name}", "sk": "LEASE"}),
                    ConditionExpression="holder = :holder",
                    ExpressionAttributeValues=to_item({":holder": holder}),
                ),
                rules=(on_conflict(lambda: ConflictError(f"lease {name} is not held by {holder}")),),
            )
        except ConflictError:
            return  # it expired and someone else holds it now: nothing of ours to release

    # ---- group health -------------------------------------------------------

    def load_health(self) -> dict[str, GroupHealth]:
        health: dict[str, GroupHealth] = {}
        for item in query_pages(
            "load group health",
            self._client,
            "query",
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=to_item({":pk": "HEALTH"}),
            ConsistentRead=True,
        ):
            values = from_item(item)
            health[values["sk"]] = GroupHealth(
                backoff_until=from_iso(values.get("backoffUntil")),
                consecutive_failures=int(values.get("consecutiveFailures", 0)),
                last_failure_at=from_iso(values.get("lastFailureAt")),
                reason=values.get("reason", ""),
            )
        return health

    def save_health(self, group: str, health: GroupHealth) -> None:
        item = to_item(
            {
                "pk": "HEALTH",
                "sk": group,
                "backoffUntil": iso(health.backoff_until),
                "consecutiveFailures": health.consecutive_failures,
                "lastFailureAt": iso(health.last_failure_at),
                "reason": health.reason or None,
            }
        )
        call_dynamodb(f"save health of {group}", lambda: self._client.put_item(TableName=self._table, Item=item))

    # ---- decisions ----------------------------------------------------------

    def record_decision(
        self, *, at: datetime, trigger: str, dry_run: bool, plan: dict[str, Any], acted: dict[str, Any]
    ) -> str:
        decision_id = uuid.uuid4().hex[:12]
        pk, sk = f"DECISION#{at.date().isoformat()}", f"{iso(at)}#{decision_id}"
        item = to_item(
            {
                "pk": pk,
                "sk": sk,
                "trigger": trigger,
                "dryRun": dry_run,
                "plan": json.dumps(plan, separators=(",", ":")),
                "acted": json.dumps(acted, separators=(",", ":")),
                "expiresAt": int((at + DECISION_RETENTION).timestamp()),
            }
        )
        call_dynamodb("record decision", lambda: self._client.put_item(TableName=self._table, Item=item))
        latest = to_item(
            {"pk": LATEST_DECISION["pk"], "sk": LATEST_DECISION["sk"], "decisionPk": pk, "decisionSk": sk}
        )
        call_dynamodb(
            "record the latest decision", lambda: self._client.put_item(TableName=self._table, Item=latest)
        )
        return decision_id

    def latest_decision(self, *, now: datetime) -> dict[str, Any] | None:
        """The newest decision: today's partition newest first, then yesterday's, then the `latest` item."""
        for day in (now, now - timedelta(days=1)):
            found = self.decisions(day=day, limit=1)
            if found:
                return found[0]
        pointer = call_dynamodb(
            "read the latest decision's key",
            lambda: self._client.get_item(TableName=self._table, Key=to_item(LATEST_DECISION)),
        ).get("Item")
        if pointer is None:
            return None
        key = from_item(pointer)
        item = call_dynamodb(
            "read the latest decision",
            lambda: self._client.get_item(
                TableName=self._table, Key=to_item({"pk": key["decisionPk"], "sk": key["decisionSk"]})
            ),
        ).get("Item")
        return _decision(item) if item is not None else None  # None: expired (TTL) since

    def decisions(self, *, day: datetime, limit: int = 100) -> list[dict[str, Any]]:
        page = call_dynamodb(
            "read decisions",
            lambda: self._client.query(
                TableName=self._table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=to_item({":pk": f"DECISION#{day.date().isoformat()}"}),
                ScanIndexForward=False,
                Limit=limit,
            ),
        )
        return [_decision(item) for item in page.get("Items", [])]


def _decision(item: dict[str, Any]) -> dict[str, Any]:
    values = from_item(item)
    at, _, decision_id = values["sk"].partition("#")
    return {
        "id": decision_id,
        "at": at,
        "trigger": values["trigger"],
        "dryRun": bool(values["dryRun"]),
        "plan": json.loads(values["plan"]),
        "acted": json.loads(values["acted"]),
    }
