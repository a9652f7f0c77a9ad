"""DynamoDB adapter for jobs and their events: one table, several item kinds.

Keys (the CDK table construct defines the same):
- job:    pk=JOB#<id>  sk=META             gsi1pk=STATUS#<status>  gsi1sk=<submittedAt>#<id>
                                           firstEvent=<the job's first event, JSON>
- event:  pk=JOB#<id>  sk=EVENT#<version>  (version zero-padded, so events sort in order)

Creating a job is one conditional put (its first event inside the item), so a
duplicate delivery cannot create it twice. Every later change writes the job
and its event in one transaction whose conditions make a stale update fail as a
whole: an event is never lost or written twice.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError

from squall.core.errors import (
    ConflictError,
    DuplicateJobError,
    ItemTooLargeError,
    PermanentError,
    RetryableError,
    SquallError,
)
from squall.core.jobs import Job, JobEvent, JobStatus

T = TypeVar("T")

RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionInProgressException",
        "LimitExceededException",
    }
)

# DynamoDB's limit on one item, attribute names and values in UTF-8: "400 KB". Taken as
# 400,000 bytes, a little under what DynamoDB (409,600) and moto (405,000) refuse, so
# that whatever the in-memory store accepts, both of them accept too.
MAX_ITEM_BYTES = 400_000

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(v) for k, v in values.items() if v is not None}


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def translate(what: str, exc: ClientError | BotoCoreError) -> SquallError:
    """Squall's error for a botocore one: throttling, 5xx and transport are retryable."""
    if isinstance(exc, BotoCoreError):
        return RetryableError(f"{what}: {exc}")
    code = exc.response.get("Error", {}).get("Code", "")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code in RETRYABLE_CODES or status >= 500:
        return RetryableError(f"{what}: {code}")
    if _item_too_large(exc):
        return ItemTooLargeError(f"{what}: {code}: {exc}")
    return PermanentError(f"{what}: {code}: {exc}")


def _item_too_large(exc: ClientError) -> bool:
    """DynamoDB's answer to an item over 400 KB, for a put (ValidationException) or in a transaction."""
    error = exc.response.get("Error", {})
    messages = [str(error.get("Message", ""))] if error.get("Code") == "ValidationException" else []
    if error.get("Code") == "TransactionCanceledException":
        messages = [
            str(r.get("Message", ""))
            for r in exc.response.get("CancellationReasons") or []
            if r.get("Code") == "ValidationError"
        ]
    return any("size" in m and "exceeded" in m for m in messages)


def item_size(values: Mapping[str, Any]) -> int:
    """The size DynamoDB counts for an item of these plain values (None is not written).

    Attribute names (Squall's are ASCII) and strings count their UTF-8 bytes, numbers about one byte per
    two significant digits plus one, lists and maps three bytes plus one per element.
    Raises PermanentError for text that is not valid UTF-8, which DynamoDB refuses.
    """
    return sum(len(name) + _value_size(value) for name, value in values.items() if value is not None)


def _value_size(value: Any) -> int:
    if isinstance(value, str):
        if value.isascii():
            return len(value)
        try:
            return len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise PermanentError("an attribute value is not valid UTF-8") from exc
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int):
        digits = len(str(abs(value)).strip("0")) if value else 1
        return (digits + 1) // 2 + 1
    if isinstance(value, float | Decimal):
        return 21  # at most 38 significant digits
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, Mapping):
        return 3 + sum(len(str(k).encode()) + _value_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 3 + sum(_value_size(v) + 1 for v in value)
    raise TypeError(f"no DynamoDB size for {type(value).__name__}")


def call_dynamodb(what: str, fn: Callable[[], T]) -> T:
    """Run one DynamoDB call, translating its errors into Squall's."""
    try:
        return fn()
    except (ClientError, BotoCoreError) as exc:
        raise translate(what, exc) from exc


def iso(value: datetime | None) -> str | None:
    """A time as stored in items (ISO 8601), None for no time."""
    return value.isoformat() if value else None


def from_iso(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def job_key(job_id: str) -> dict[str, Any]:
    return to_item({"pk": f"JOB#{job_id}", "sk": "META"})


def job_to_item(job: Job) -> dict[str, Any]:
    return to_item(job_values(job))


def job_values(job: Job) -> dict[str, Any]:
    """The job item's attributes as plain values (None: not written)."""
    return {
        "pk": f"JOB#{job.id}",
        "sk": "META",
        "kind": "job",
        "gsi1pk": f"STATUS#{job.status.value}",
        "gsi1sk": f"{iso(job.submitted_at)}#{job.id}",
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "namespace": job.namespace,
        "status": job.status.value,
        "reason": job.reason,
        "submittedAt": iso(job.submitted_at),
        "updatedAt": iso(job.updated_at),
        "startedAt": iso(job.started_at),
        "finishedAt": iso(job.finished_at),
        "version": job.version,
        "spec": json.dumps(job.spec, separators=(",", ":")) if job.spec else None,
        "errors": json.dumps(list(job.errors)) if job.errors else None,
        "parentId": job.parent_id,
        "trialIds": list(job.trial_ids) or None,
        "messageId": job.message_id,
        "gpus": job.gpus,
        "replicas": job.replicas,
        "retriesUsed": job.retries_used,
        "maxRetries": job.max_retries,
        "submittedBy": job.submitted_by,
    }


def job_from_item(item: dict[str, Any]) -> Job:
    v = from_item(item)
    return Job(
        id=v["id"],
        name=v["name"],
        team=v["team"],
        namespace=v["namespace"],
        status=JobStatus(v["status"]),
        reason=v["reason"],
        submitted_at=datetime.fromisoformat(v["submittedAt"]),
        updated_at=datetime.fromisoformat(v["updatedAt"]),
        started_at=from_iso(v.get("startedAt")),
        finished_at=from_iso(v.get("finishedAt")),
        version=int(v["version"]),
        spec=json.loads(v["spec"]) if v.get("spec") else {},
        errors=tuple(json.loads(v["errors"])) if v.get("errors") else (),
        parent_id=v.get("parentId"),
        trial_ids=tuple(v.get("trialIds") or ()),
        message_id=v.get("messageId"),
        gpus=int(v.get("gpus", 0)),
        replicas=int(v.get("replicas", 0)),
        retries_used=int(v.get("retriesUsed", 0)),
        max_retries=int(v.get("maxRetries", 0)),
        submitted_by=v.get("submittedBy"),
    )


FIRST_EVENT = "firstEvent"


def creation_values(job: Job, event: JobEvent) -> dict[str, Any]:
    """A new job's item as plain values: the job and, inside it, its first event."""
    return job_values(job) | {FIRST_EVENT: _event_json(event)}


def _event_json(event: JobEvent) -> str:
    return json.dumps(
        {
            "version": event.version,
            "at": iso(event.at),
            "status": event.status.value,
            "reason": event.reason,
            "message": event.message,
        },
        separators=(",", ":"),
    )


def _event_from_json(job_id: str, text: str) -> JobEvent:
    v = json.loads(text)
    return JobEvent(
        job_id=job_id,
        version=int(v["version"]),
        at=datetime.fromisoformat(v["at"]),
        status=JobStatus(v["status"]),
        previous=None,
        reason=v["reason"],
        message=v.get("message", ""),
    )


def event_to_item(event: JobEvent) -> dict[str, Any]:
    return to_item(event_values(event))


def event_values(event: JobEvent) -> dict[str, Any]:
    """An event item's attributes as plain values (None: not written)."""
    return {
        "pk": f"JOB#{event.job_id}",
        "sk": f"EVENT#{event.version:08d}",
        "kind": "event",
        "at": iso(event.at),
        "status": event.status.value,
        "previous": event.previous.value if event.previous else None,
        "reason": event.reason,
        "message": event.message or None,
    }


def event_from_item(item: dict[str, Any]) -> JobEvent:
    v = from_item(item)
    return JobEvent(
        job_id=v["pk"].removeprefix("JOB#"),
        version=int(v["sk"].removeprefix("EVENT#")),
        at=datetime.fromisoformat(v["at"]),
        status=JobStatus(v["status"]),
        previous=JobStatus(v["previous"]) if v.get("previous") else None,
        reason=v["reason"],
        message=v.get("message", ""),
    )


def _conditional_failure(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    if error.get("Code") == "ConditionalCheckFailedException":
        return True
    reasons = exc.response.get("CancellationReasons") or []
    return error.get("Code") == "TransactionCanceledException" and any(
        r.get("Code") == "ConditionalCheckFailed" for r in reasons
    )


class DynamoJobStore:
    """JobStore on one DynamoDB table (see the module docstring for the keys)."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def create(self, job: Job, event: JobEvent) -> None:
        """One conditional put: the first event rides in the job item.

        A submission is the hot path of a burst; a put costs a quarter of the
        write units of a two-item transaction and is just as atomic.
        """
        item = to_item(creation_values(job, event))
        try:
            self._client.put_item(
                TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as exc:
            if _conditional_failure(exc):
                raise DuplicateJobError(job.id) from exc
            raise translate(f"create job {job.id}", exc) from exc
        except BotoCoreError as exc:
            raise translate(f"create job {job.id}", exc) from exc

    def save(self, job: Job, event: JobEvent) -> None:
        """The job (version n) and its event, in one transaction, if the stored job is version n - 1."""
        attributes = {k: v for k, v in job_to_item(job).items() if k not in ("pk", "sk")}
        names = {f"#a{i}": name for i, name in enumerate(attributes)}
        values = {f":v{i}": value for i, value in enumerate(attributes.values())}
        update_job = {
            "TableName": self._table,
            "Key": job_key(job.id),
            # SET, not a whole-item put: the item keeps the first event it was created with.
            "UpdateExpression": "SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(attributes))),
            "ConditionExpression": "#version = :expected",
            "ExpressionAttributeNames": names | {"#version": "version"},
            "ExpressionAttributeValues": values | {":expected": {"N": str(job.version - 1)}},
        }
        put_event = {
            "TableName": self._table,
            "Item": event_to_item(event),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        try:
            self._client.transact_write_items(TransactItems=[{"Update": update_job}, {"Put": put_event}])
        except ClientError as exc:
            if _conditional_failure(exc):
                raise ConflictError(f"job {job.id} changed since version {job.version - 1}") from exc
            raise translate(f"save job {job.id}", exc) from exc
        except BotoCoreError as exc:
            raise translate(f"save job {job.id}", exc) from exc

    def get(self, job_id: str) -> Job | None:
        response = call_dynamodb(
            f"get job {job_id}",
            lambda: self._client.get_item(TableName=self._table, Key=job_key(job_id), ConsistentRead=True),
        )
        item = response.get("Item")
        return job_from_item(item) if item else None

    def events(self, job_id: str) -> list[JobEvent]:
        """The first event from the job item, the rest from the event items: one query."""
        events: list[JobEvent] = []
        for item in self._query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=to_item({":pk": f"JOB#{job_id}"}),
            ConsistentRead=True,
        ):
            sk = item["sk"]["S"]
            if sk == "META" and FIRST_EVENT in item:
                events.append(_event_from_json(job_id, item[FIRST_EVENT]["S"]))
            elif sk.startswith("EVENT#"):
                events.append(event_from_item(item))
        return sorted(events, key=lambda e: e.version)

    def list_by_status(self, status: JobStatus, *, limit: int = 1000) -> list[Job]:
        items = self._query(
            IndexName="status-index",
            KeyConditionExpression="gsi1pk = :status",
            ExpressionAttributeValues=to_item({":status": f"STATUS#{status.value}"}),
            limit=limit,
        )
        return [job_from_item(i) for i in items]

    def list_all(self, *, limit: int = 100_000) -> list[Job]:
        """Every job, in no particular order: one scan, for tools and small tables."""
        jobs: list[Job] = []
        start: dict[str, Any] | None = None
        while len(jobs) < limit:
            args: dict[str, Any] = {
                "TableName": self._table,
                "FilterExpression": "kind = :kind",
                "ExpressionAttributeValues": to_item({":kind": "job"}),
            }
            if start:
                args["ExclusiveStartKey"] = start
            page = call_dynamodb("scan jobs", functools.partial(self._client.scan, **args))
            jobs.extend(job_from_item(item) for item in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        return jobs[:limit]

    def _query(self, *, limit: int | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
        seen = 0
        start: dict[str, Any] | None = None
        while True:
            page_args = dict(kwargs, TableName=self._table)
            if start:
                page_args["ExclusiveStartKey"] = start
            page = call_dynamodb("query", functools.partial(self._client.query, **page_args))
            for item in page.get("Items", []):
                yield item
                seen += 1
                if limit is not None and seen >= limit:
                    return
            start = page.get("LastEvaluatedKey")
            if not start:
                return
