"""DynamoDB adapter for jobs and their events: one table, several item kinds.

Keys (the CDK table construct defines the same):
- job:    pk=JOB#<id>  sk=META             gsi1pk=STATUS#<status>  gsi1sk=<submittedAt>#<id>
                                           gsi2pk=QUEUE|PLACED     gsi2sk=<submittedAt>#<id>
                                           firstEvent=<the job's first event, JSON>

gsi2pk/gsi2sk (the sparse queue index, core/queue.py queue_key) are there only while the
job waits in the queue; the save that takes it out removes them.
- event:  pk=JOB#<id>  sk=EVENT#<version>  (version zero-padded, so events sort in order)

Creating a job is one conditional put (its first event inside the item), so a
duplicate delivery cannot create it twice. Every later change writes the job
and its event in one transaction whose conditions make a stale update fail as a
whole: an event is never lost or written twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError

from squall.adapters.aws import errors
from squall.adapters.aws.errors import Rule, cancellation_codes, error_code, error_message
from squall.core.errors import (
    ConflictError,
    DuplicateJobError,
    ItemTooLargeError,
    PermanentError,
    RetryableError,
    SquallError,
)
from squall.core.jobs import Job, JobEvent, JobStatus
from squall.core.metrics import JobMetrics, from_json, to_json
from squall.core.queue import (
    PLACED_PARTITION,
    QUEUE_INDEX,
    QUEUE_INDEX_PARTITION_KEY,
    QUEUE_INDEX_SORT_KEY,
    QUEUE_PARTITION,
    QueueEntry,
    queue_key,
)

T = TypeVar("T")

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


def _item_too_large(exc: ClientError, text: str) -> SquallError | None:
    """DynamoDB's answer to an item over 400 KB, for a put (ValidationException) or in a transaction."""
    code = error_code(exc)
    messages = [error_message(exc)] if code == "ValidationException" else []
    if code == "TransactionCanceledException":
        messages = [
            str(r.get("Message", ""))
            for r in exc.response.get("CancellationReasons") or []
            if r.get("Code") == "ValidationError"
        ]
    if any("size" in m and "exceeded" in m for m in messages):
        return ItemTooLargeError(text)
    return None


# A transaction cancelled only because another one held an item, or for throughput: try again.
_TRANSIENT_CANCELLATIONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


def _transaction_contention(exc: ClientError, text: str) -> SquallError | None:
    if error_code(exc) != "TransactionCanceledException":
        return None
    reasons = set(cancellation_codes(exc)) - {"None"}
    if reasons and reasons <= _TRANSIENT_CANCELLATIONS:
        return RetryableError(text)
    return None


def conditional_failed(exc: ClientError) -> bool:
    """A condition of a put, update or delete (or of one item of a transaction) did not hold."""
    if error_code(exc) == "ConditionalCheckFailedException":
        return True
    return error_code(
        exc
    ) == "TransactionCanceledException" and "ConditionalCheckFailed" in cancellation_codes(exc)


def on_conflict(error: Callable[[], SquallError]) -> Rule:
    """A rule that answers a failed condition with ``error()`` (ConflictError, DuplicateJobError)."""
    return lambda exc, _text: error() if conditional_failed(exc) else None


DYNAMODB_RULES: tuple[Rule, ...] = (_transaction_contention, _item_too_large)


def translate(what: str, exc: ClientError | BotoCoreError, *, rules: tuple[Rule, ...] = ()) -> SquallError:
    """Squall's error for a botocore one from DynamoDB (squall.adapters.aws.errors, with DynamoDB's rules)."""
    return errors.translate(what, exc, rules=(*rules, *DYNAMODB_RULES))


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


def call_dynamodb(what: str, fn: Callable[[], T], *, rules: tuple[Rule, ...] = ()) -> T:
    """Run one DynamoDB call, translating its errors into Squall's (``rules`` first)."""
    result: T = errors.call(what, fn, rules=(*rules, *DYNAMODB_RULES))
    return result


def read_item(what: str, client: Any, *, table: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The item under ``key``, read consistently (a write just made is seen), or None."""
    response = call_dynamodb(what, lambda: client.get_item(TableName=table, Key=key, ConsistentRead=True))
    item: dict[str, Any] | None = response.get("Item")
    return item or None


def query_pages(
    what: str, client: Any, operation: str, /, *, limit: int | None = None, **params: Any
) -> Iterator[dict[str, Any]]:
    """The items of a DynamoDB query or scan, page by page (boto3's paginator), at most ``limit``.

    Pages are read only as far as the items are: the limit bounds the requests too.
    """
    if limit is not None and limit <= 0:
        return
    seen = 0
    for page in errors.pages(what, client, operation, rules=DYNAMODB_RULES, **params):
        for item in page.get("Items", []):
            yield item
            seen += 1
            if limit is not None and seen >= limit:
                return


def query_status_index(
    what: str, client: Any, table: str, status_key: str, *, limit: int
) -> Iterator[dict[str, Any]]:
    """The items under ``status_key`` in the table's status index (gsi1pk), in its order, at most ``limit``."""
    return query_pages(
        what,
        client,
        "query",
        limit=limit,
        TableName=table,
        IndexName="status-index",
        KeyConditionExpression="gsi1pk = :status",
        ExpressionAttributeValues=to_item({":status": status_key}),
    )


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
    queued = queue_key(job)
    return {
        "pk": f"JOB#{job.id}",
        "sk": "META",
        "kind": "job",
        "gsi1pk": f"STATUS#{job.status.value}",
        "gsi1sk": f"{iso(job.submitted_at)}#{job.id}",
        QUEUE_INDEX_PARTITION_KEY: queued[0] if queued else None,
        QUEUE_INDEX_SORT_KEY: queued[1] if queued else None,
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
        "cluster": job.cluster,
        "region": job.region,
        "priority": job.priority,
        "requeued": job.requeued or None,
        "queueShape": job.queue_shape or None,
        "objectsCreated": job.objects_created or None,
        "startsBy": iso(job.starts_by),
        "likelyStart": iso(job.likely_start),
        "firstStartsBy": iso(job.first_starts_by),
        "firstLikelyStart": iso(job.first_likely_start),
        "cost": _decimal(job.cost),
        "costRate": _decimal(job.cost_rate),
        "spotSavings": _decimal(job.spot_savings),
        "ranSeconds": _decimal(job.ran_seconds or None),
        "checkpointAt": iso(job.checkpoint_at),
        METRICS: to_json(job.metrics) if job.metrics is not None else None,
        "bestTrial": job.best_trial,
    }


# The job's metrics (compact JSON, core/metrics.py): written by `create` and `set_metrics` only.
# A versioned save leaves them as stored, so a save of a record read before the last
# set_metrics cannot take back what that wrote.
METRICS = "metrics"


def _decimal(value: float | None) -> Decimal | None:
    """A float as DynamoDB takes a number (boto3 refuses floats), to a millionth."""
    return None if value is None else Decimal(str(round(value, 6)))


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
        cluster=v.get("cluster"),
        region=v.get("region"),
        priority=int(v.get("priority", 0)),
        requeued=bool(v.get("requeued", False)),
        queue_shape=v.get("queueShape") or "",
        objects_created=bool(v.get("objectsCreated", False)),
        starts_by=from_iso(v.get("startsBy")),
        likely_start=from_iso(v.get("likelyStart")),
        first_starts_by=from_iso(v.get("firstStartsBy")),
        first_likely_start=from_iso(v.get("firstLikelyStart")),
        cost=_float(v.get("cost")),
        cost_rate=_float(v.get("costRate")),
        spot_savings=_float(v.get("spotSavings")),
        ran_seconds=_float(v.get("ranSeconds")) or 0.0,
        checkpoint_at=from_iso(v.get("checkpointAt")),
        metrics=from_json(v[METRICS]) if METRICS in v else None,
        best_trial=v.get("bestTrial"),
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def queue_entry_from_item(item: Mapping[str, Any]) -> QueueEntry:
    """A queue index item (its keys and projected attributes) as the entry admission reads.

    Read attribute by attribute, not through boto3's TypeDeserializer: a check reads the
    whole queue, and this is most of its own work at 100,000 entries. An item that does not
    read (an attribute missing or of the wrong type, a priority outside 0..100, a time that
    is none) is an entry with its `problem`: it fails its own job, never the whole read.
    """

    def text(name: str) -> str | None:
        value = item.get(name)
        return value["S"] if value else None

    try:
        priority = int(item["priority"]["N"]) if item.get("priority") else 0
        if not 0 <= priority <= 100:
            raise ValueError(f"priority {priority} is not from 0 to 100")
        requeued = item.get("requeued")
        submitted_at = datetime.fromisoformat(item["submittedAt"]["S"])
        if submitted_at.tzinfo is None:
            submitted_at = submitted_at.replace(tzinfo=UTC)
        return QueueEntry(
            job_id=item["pk"]["S"].removeprefix("JOB#"),
            team=item["team"]["S"],
            namespace=item["namespace"]["S"],
            priority=priority,
            submitted_at=submitted_at,
            requeued=bool(requeued["BOOL"]) if requeued else False,
            queue_shape=text("queueShape") or "",
            cluster=text("cluster"),
            region=text("region"),
            version=int(item["version"]["N"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return _unreadable_entry(item, exc)


def _unreadable_entry(item: Mapping[str, Any], exc: Exception) -> QueueEntry:
    """What can be told of a queue item that does not read: its job (by its key) and why."""

    def part(name: str, kind: str) -> Any:
        value = item.get(name)
        return value.get(kind) if isinstance(value, Mapping) else None

    key = part("pk", "S")
    version = part("version", "N")
    return QueueEntry(
        job_id=key.removeprefix("JOB#") if isinstance(key, str) else "",
        team="",
        namespace="",
        priority=0,
        submitted_at=datetime(1970, 1, 1, tzinfo=UTC),
        requeued=False,
        queue_shape="",
        cluster=None,
        region=None,
        version=int(version) if isinstance(version, str) and version.isdigit() else 0,
        problem=f"its queue entry does not read: {type(exc).__name__}: {exc}"[:500],
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


class Transition(Protocol):
    """What a job's and a model service's events have alike, and their items keep."""

    @property
    def version(self) -> int: ...
    @property
    def at(self) -> datetime: ...
    @property
    def status(self) -> StrEnum: ...
    @property
    def previous(self) -> StrEnum | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...


def transition_values(event: Transition, *, pk: str, kind: str) -> dict[str, Any]:
    """An event item's attributes as plain values (None: not written), under `pk`."""
    return {
        "pk": pk,
        "sk": f"EVENT#{event.version:08d}",
        "kind": kind,
        "at": iso(event.at),
        "status": event.status.value,
        "previous": event.previous.value if event.previous else None,
        "reason": event.reason,
        "message": event.message or None,
    }


def transition_fields(values: Mapping[str, Any], status: Callable[[str], Any]) -> dict[str, Any]:
    """An event item's fields (its plain values, `from_item`'s) but its owner's id, states read by `status`."""
    return {
        "version": int(values["sk"].removeprefix("EVENT#")),
        "at": datetime.fromisoformat(values["at"]),
        "status": status(values["status"]),
        "previous": status(values["previous"]) if values.get("previous") else None,
        "reason": values["reason"],
        "message": values.get("message", ""),
    }


def event_values(event: JobEvent) -> dict[str, Any]:
    """An event item's attributes as plain values (None: not written)."""
    return transition_values(event, pk=f"JOB#{event.job_id}", kind="event")


def event_from_item(item: dict[str, Any]) -> JobEvent:
    v = from_item(item)
    return JobEvent(job_id=v["pk"].removeprefix("JOB#"), **transition_fields(v, JobStatus))


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
        call_dynamodb(
            f"create job {job.id}",
            lambda: self._client.put_item(
                TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            ),
            rules=(on_conflict(lambda: DuplicateJobError(job.id)),),
        )

    def set_estimates(
        self, job_id: str, *, starts_by: datetime | None, likely_start: datetime | None
    ) -> bool:
        """One update of the estimates while the job is queued; the first ones are set only once."""
        values = {":q": {"S": JobStatus.QUEUED.value}}
        sets = []
        for name, value in (("startsBy", starts_by), ("likelyStart", likely_start)):
            if value is not None:
                values[f":{name}"] = {"S": iso(value) or ""}
                first = "first" + name[0].upper() + name[1:]
                sets += [f"{name} = :{name}", f"{first} = if_not_exists({first}, :{name})"]
        if not sets:
            return True
        try:
            self._client.update_item(
                TableName=self._table,
                Key=job_key(job_id),
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression="#status = :q",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if conditional_failed(exc):
                return False
            raise translate(f"write the start estimates of job {job_id}", exc) from exc
        except BotoCoreError as exc:
            raise translate(f"write the start estimates of job {job_id}", exc) from exc
        return True

    def set_metrics(self, job_id: str, metrics: JobMetrics) -> bool:
        """One update of the job's metrics, no new version; False when there is no such job."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=job_key(job_id),
                UpdateExpression="SET #metrics = :metrics",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={"#metrics": METRICS},
                ExpressionAttributeValues={":metrics": {"S": to_json(metrics)}},
            )
        except ClientError as exc:
            if conditional_failed(exc):
                return False
            raise translate(f"write the metrics of job {job_id}", exc) from exc
        except BotoCoreError as exc:
            raise translate(f"write the metrics of job {job_id}", exc) from exc
        return True

    def save(self, job: Job, event: JobEvent) -> None:
        """The job (version n) and its event, in one transaction, if the stored job is version n - 1."""
        plain = {k: v for k, v in job_values(job).items() if k != METRICS}
        attributes = {k: v for k, v in to_item(plain).items() if k not in ("pk", "sk")}
        # (its metrics are not written: see METRICS)
        # An attribute the job no longer has is removed, so the item is the job: above all the
        # queue index's keys (gsi2pk/gsi2sk), which must go when a job leaves the queue.
        absent = [k for k, v in plain.items() if v is None]
        names = {f"#a{i}": name for i, name in enumerate(attributes)}
        names |= {f"#r{i}": name for i, name in enumerate(absent)}
        values = {f":v{i}": value for i, value in enumerate(attributes.values())}
        expression = "SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(attributes)))
        if absent:
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(absent)))
        update_job = {
            "TableName": self._table,
            "Key": job_key(job.id),
            # SET, not a whole-item put: the item keeps the first event it was created with.
            "UpdateExpression": expression,
            "ConditionExpression": "#version = :expected",
            "ExpressionAttributeNames": names | {"#version": "version"},
            "ExpressionAttributeValues": values | {":expected": {"N": str(job.version - 1)}},
        }
        put_event = {
            "TableName": self._table,
            "Item": event_to_item(event),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        call_dynamodb(
            f"save job {job.id}",
            lambda: self._client.transact_write_items(
                TransactItems=[{"Update": update_job}, {"Put": put_event}]
            ),
            rules=(
                on_conflict(lambda: ConflictError(f"job {job.id} changed since version {job.version - 1}")),
            ),
        )

    def get(self, job_id: str) -> Job | None:
        item = read_item(f"get job {job_id}", self._client, table=self._table, key=job_key(job_id))
        return job_from_item(item) if item else None

    def events(self, job_id: str) -> list[JobEvent]:
        """The first event from the job item, the rest from the event items: one query."""
        events: list[JobEvent] = []
        for item in query_pages(
            f"read events of job {job_id}",
            self._client,
            "query",
            TableName=self._table,
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
        items = query_status_index(
            f"list {status.value} jobs", self._client, self._table, f"STATUS#{status.value}", limit=limit
        )
        return [job_from_item(i) for i in items]

    def page_by_status(
        self,
        status: JobStatus,
        *,
        read: int,
        after: Mapping[str, str] | None = None,
        team: str | None = None,
        name: str | None = None,
        newest_first: bool = False,
    ) -> tuple[list[Job], dict[str, str] | None]:
        """One Query of the status index: Limit `read` (items read, before the filter), from
        ExclusiveStartKey `after`, `team` and `name` (a substring, case as written) as a
        FilterExpression; its LastEvaluatedKey as plain strings."""
        if read <= 0:
            raise ValueError(f"read: expected at least 1 item, got {read}")
        params: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "status-index",
            "KeyConditionExpression": "gsi1pk = :status",
            "Limit": read,
            "ScanIndexForward": not newest_first,
        }
        values: dict[str, Any] = {":status": f"STATUS#{status.value}"}
        names: dict[str, str] = {}
        filters = []
        if team is not None:
            filters.append("#team = :team")
            names["#team"], values[":team"] = "team", team
        if name:
            filters.append("contains(#name, :name)")
            names["#name"], values[":name"] = "name", name
        if filters:
            params["FilterExpression"] = " AND ".join(filters)
            params["ExpressionAttributeNames"] = names
        params["ExpressionAttributeValues"] = to_item(values)
        if after is not None:
            params["ExclusiveStartKey"] = to_item(dict(after))
        response = call_dynamodb(f"list {status.value} jobs (a page)", lambda: self._client.query(**params))
        jobs = [job_from_item(item) for item in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return jobs, ({k: str(v) for k, v in from_item(last).items()} if last else None)

    def queue(self, *, placed: bool = False, limit: int = 200_000) -> list[QueueEntry]:
        """The queue index's QUEUE (or PLACED) partition, oldest submission first: a paged query."""
        partition = PLACED_PARTITION if placed else QUEUE_PARTITION
        items = query_pages(
            f"read the {partition} queue",
            self._client,
            "query",
            limit=limit,
            TableName=self._table,
            IndexName=QUEUE_INDEX,
            KeyConditionExpression=f"{QUEUE_INDEX_PARTITION_KEY} = :queue",
            ExpressionAttributeValues=to_item({":queue": partition}),
        )
        return [queue_entry_from_item(i) for i in items]

    def list_all(self, *, limit: int = 100_000) -> list[Job]:
        """Every job, in no particular order: one scan, for tools and small tables."""
        items = query_pages(
            "scan jobs",
            self._client,
            "scan",
            limit=limit,
            TableName=self._table,
            FilterExpression="kind = :kind",
            ExpressionAttributeValues=to_item({":kind": "job"}),
        )
        return [job_from_item(i) for i in items]
