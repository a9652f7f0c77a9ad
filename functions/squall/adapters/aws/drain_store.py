"""Drain records in the jobs table (DynamoDB); the DrainStore port is in squall.ports.

- drain:  pk=DRAIN#<instance-id>  sk=DRAIN  kind=drain, the record's fields, version,
          expiresAt (epoch seconds, the table's TTL attribute)

One item per instance: a newer lifecycle action of the same instance replaces the
older one (under the same version condition). Every write is conditional on the
version the writer read, so a duplicated or out-of-order event, or two steps that
run at once, can never both move a drain on: the loser gets ConflictError and stops.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from squall.adapters.aws.job_store import call_dynamodb, from_item, on_conflict, read_item, to_item
from squall.core.drain import DrainOutcome, DrainRecord, Kind
from squall.core.errors import ConflictError

# Finished drains stay readable this long (for `squall` and post-mortems), then TTL removes them.
DRAIN_RETENTION = timedelta(days=7)


def drain_key(instance_id: str) -> dict[str, Any]:
    return to_item({"pk": f"DRAIN#{instance_id}", "sk": "DRAIN"})


def record_to_item(record: DrainRecord) -> dict[str, Any]:
    ends = record.finished_at or max(record.deadline, record.hook_expires_at)
    return to_item(
        {
            "pk": f"DRAIN#{record.instance_id}",
            "sk": "DRAIN",
            "kind": "drain",
            "instanceId": record.instance_id,
            "drainKind": record.kind.value,
            "asgName": record.asg_name,
            "group": record.group,
            "region": record.region,
            "hookName": record.hook_name,
            "token": record.token,
            "startedAt": record.started_at.isoformat(),
            "deadline": record.deadline.isoformat(),
            "heartbeatTimeoutSeconds": int(record.heartbeat_timeout.total_seconds()),
            "hookExpiresAt": record.hook_expires_at.isoformat(),
            "gpusExpected": record.gpus_expected,
            "causeHint": record.cause_hint or None,
            "cause": record.cause or None,
            "nodeName": record.node_name,
            "cordoned": record.cordoned,
            "podsLeft": list(record.pods_left),
            "podsLeftCount": record.pods_left_count,
            "notedJobs": list(record.noted_jobs),
            "attempts": record.attempts,
            "evicted": record.evicted,
            "refused": record.refused,
            "heartbeats": record.heartbeats,
            "result": record.result,
            "outcome": record.outcome.value if record.outcome else None,
            "detail": record.detail or None,
            "finishedAt": record.finished_at.isoformat() if record.finished_at else None,
            "nextStepId": record.next_step_id or None,
            "version": record.version,
            "expiresAt": int((ends + DRAIN_RETENTION).timestamp()),
        }
    )


def record_from_item(item: dict[str, Any]) -> DrainRecord:
    v = from_item(item)
    result = v.get("result")
    return DrainRecord(
        instance_id=v["instanceId"],
        kind=Kind(v["drainKind"]),
        asg_name=v["asgName"],
        group=v["group"],
        region=v["region"],
        hook_name=v["hookName"],
        token=v["token"],
        started_at=datetime.fromisoformat(v["startedAt"]),
        deadline=datetime.fromisoformat(v["deadline"]),
        heartbeat_timeout=timedelta(seconds=int(v["heartbeatTimeoutSeconds"])),
        hook_expires_at=datetime.fromisoformat(v["hookExpiresAt"]),
        gpus_expected=int(v.get("gpusExpected", 0)),
        cause_hint=v.get("causeHint", ""),
        cause=v.get("cause", ""),
        node_name=v.get("nodeName"),
        cordoned=bool(v.get("cordoned", False)),
        pods_left=tuple(v.get("podsLeft") or ()),
        pods_left_count=int(v.get("podsLeftCount", 0)),
        noted_jobs=tuple(v.get("notedJobs") or ()),
        attempts=int(v.get("attempts", 0)),
        evicted=int(v.get("evicted", 0)),
        refused=int(v.get("refused", 0)),
        heartbeats=int(v.get("heartbeats", 0)),
        result="ABANDON" if result == "ABANDON" else "CONTINUE" if result == "CONTINUE" else None,
        outcome=DrainOutcome(v["outcome"]) if v.get("outcome") else None,
        detail=v.get("detail", ""),
        finished_at=datetime.fromisoformat(v["finishedAt"]) if v.get("finishedAt") else None,
        next_step_id=v.get("nextStepId", ""),
        version=int(v["version"]),
    )


class DynamoDrainStore:
    """DrainStore on the jobs table (see the module docstring for the item)."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def get(self, instance_id: str) -> DrainRecord | None:
        item = read_item(f"get drain {instance_id}", self._client, table=self._table, key=drain_key(instance_id))
        return record_from_item(item) if item else None

    def create(self, record: DrainRecord) -> None:
        self._put(record, condition="attribute_not_exists(pk)", values=None, what="create")

    def save(self, record: DrainRecord) -> None:
        self._put(
            record,
            condition="version = :expected",
            values=to_item({":expected": record.version - 1}),
            what="save",
        )

    def _put(self, record: DrainRecord, *, condition: str, values: dict[str, Any] | None, what: str) -> None:
        args: dict[str, Any] = {
            "TableName": self._table,
            "Item": record_to_item(record),
            "ConditionExpression": condition,
        }
        if values:
            args["ExpressionAttributeValues"] = values
        call_dynamodb(
            f"{what} drain {record.instance_id}",
            lambda: self._client.put_item(**args),
            rules=(
                on_conflict(
                    lambda: ConflictError(
                        f"drain {record.instance_id}: {what} lost to another writer (version {record.version})"
                    )
                ),
            ),
        )
