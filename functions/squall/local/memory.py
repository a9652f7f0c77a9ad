"""In-memory stand-ins for DynamoDB and Auto Scaling, for replays too large for moto.

`squall simulate` replays thousands of jobs; moto answers every DynamoDB query by
scanning the whole table, so a long replay would spend its time there. These keep
the same contracts as the DynamoDB adapters (conditional create, versioned save,
the status and queue indexes oldest first, the lease) and as Auto Scaling (desired capacity
launches and terminates instances), and the services cannot tell the difference.
The demo and the scenarios use moto; only trace replay uses these.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar, overload

from squall.adapters.aws.job_store import (
    FIRST_EVENT,
    MAX_ITEM_BYTES,
    creation_values,
    event_values,
    item_size,
    job_values,
)
from squall.adapters.aws.scale_state import DECISION_RETENTION
from squall.core.drain import DrainRecord
from squall.core.errors import (
    ConflictError,
    DuplicateJobError,
    ItemTooLargeError,
    NotFoundError,
    PermanentError,
)
from squall.core.jobs import Job, JobEvent, JobStatus
from squall.core.metrics import JobMetrics
from squall.core.queue import PLACED_PARTITION, QUEUE_PARTITION, QueueEntry, queue_entry, queue_key
from squall.planner import GroupHealth
from squall.ports import FleetGroup, FleetInstance, GroupRef


class _Record(Protocol):
    @property
    def version(self) -> int: ...

    @property
    def status(self) -> Enum: ...


R = TypeVar("R", bound=_Record)  # a job, a model service
E = TypeVar("E")  # its events
S = TypeVar("S", bound=Enum)  # its status


class VersionedRecords(Generic[R, E, S]):
    """Records with their events in memory, as the DynamoDB stores keep them.

    A key is created once, a put lands only on the version after the stored one, and
    the status index lists each status's records oldest first (as the DynamoDB
    tables' status index does). The stores check item sizes and name their errors.
    """

    def __init__(
        self,
        statuses: Iterable[S],
        *,
        kind: str,
        key: Callable[[R], str],
        since: Callable[[R], datetime],
    ) -> None:
        self._kind = kind
        self._key = key
        self._since = since
        self._records: dict[str, R] = {}
        self._events: dict[str, list[E]] = {}
        # status -> sorted [(since, key)], like the status index
        self._index: dict[Enum, list[tuple[datetime, str]]] = {s: [] for s in statuses}

    def create(self, record: R, event: E) -> bool:
        """Stores a new record and its first event; False (and nothing stored) when its key is taken."""
        key = self._key(record)
        if key in self._records:
            return False
        self._records[key] = record
        self._events[key] = [event]
        bisect.insort(self._index[record.status], (self._since(record), key))
        return True

    def put(self, record: R, event: E) -> None:
        """Stores the record's next version and appends its event; ConflictError on any other version."""
        key = self._key(record)
        stored = self._records.get(key)
        if stored is None or stored.version != record.version - 1:
            raise ConflictError(f"{self._kind} {key} changed since version {record.version - 1}")
        if stored.status is not record.status:
            self._index[stored.status].remove((self._since(stored), key))
            bisect.insort(self._index[record.status], (self._since(record), key))
        self._records[key] = record
        self._events[key].append(event)

    def get(self, key: str) -> R | None:
        return self._records.get(key)

    def replace(self, key: str, record: R) -> None:
        """Store the record as it is, in the same version and status (fields no version guards)."""
        stored = self._records[key]
        if stored.version != record.version or stored.status is not record.status:
            raise ConflictError(f"{self._kind} {key}: replace keeps its version and status")
        self._records[key] = record

    def events(self, key: str) -> list[E]:
        return list(self._events.get(key, []))

    def list_by_status(self, status: S, *, limit: int) -> list[R]:
        return [self._records[key] for _, key in self._index[status][: max(limit, 0)]]

    def list_all(self, *, limit: int) -> list[R]:
        return list(itertools.islice(self._records.values(), limit))


class RecordStore(Generic[R, E, S]):
    """The reads of an in-memory store over VersionedRecords, as the store ports name them.

    Each store adds its writes: the item sizes its DynamoDB adapter would write, and its errors.
    """

    def __init__(self, records: VersionedRecords[R, E, S]) -> None:
        self._records = records

    def get(self, key: str) -> R | None:
        return self._records.get(key)

    def events(self, key: str) -> list[E]:
        return self._records.events(key)

    def list_by_status(self, status: S, *, limit: int = 1000) -> list[R]:
        return self._records.list_by_status(status, limit=limit)


class InMemoryJobStore(RecordStore[Job, JobEvent, JobStatus]):
    """JobStore with DynamoDB's conditions and its item size limit, in memory.

    Items are measured as the DynamoDB adapter writes them, so a record DynamoDB
    would refuse (over 400 KB) is refused here too, with the adapter's error.
    """

    def __init__(self) -> None:
        super().__init__(
            VersionedRecords[Job, JobEvent, JobStatus](
                JobStatus, kind="job", key=lambda j: j.id, since=lambda j: j.submitted_at
            )
        )
        self._first_events: dict[str, str] = {}  # kept in the job item, as the adapter does
        # The queue index, kept as writes land: partition -> sorted [(sort key, job id)], and
        # each queued job's key and entry, so that reading the queue never passes over every job.
        self._queue: dict[str, list[tuple[str, str]]] = {QUEUE_PARTITION: [], PLACED_PARTITION: []}
        self._queued: dict[str, tuple[tuple[str, str], QueueEntry]] = {}
        # (partition, limit) -> the list last read, handed out again while the queue is unchanged
        # (as a lister hands out the same objects: admission then knows at once nothing changed)
        self._read: dict[tuple[str, int], list[QueueEntry]] = {}

    def create(self, job: Job, event: JobEvent) -> None:
        values = creation_values(job, event)
        check_item_size(f"create job {job.id}", item_size(values))
        if not self._records.create(job, event):
            raise DuplicateJobError(job.id)
        self._first_events[job.id] = values[FIRST_EVENT]
        self._index_queue(job)

    def save(self, job: Job, event: JobEvent) -> None:
        # An update SETs the job's attributes; the item keeps the first event it was created with,
        # and the metrics set_metrics wrote last (a save never writes them).
        stored = self._records.get(job.id)
        job = dataclasses.replace(job, metrics=stored.metrics if stored else None)
        first = self._first_events.get(job.id)
        check_item_size(f"save job {job.id}", item_size(job_values(job) | {FIRST_EVENT: first}))
        check_item_size(f"save job {job.id}", item_size(event_values(event)))
        self._records.put(job, event)
        self._index_queue(job)

    def set_estimates(
        self, job_id: str, *, starts_by: datetime | None, likely_start: datetime | None
    ) -> bool:
        job = self._records.get(job_id)
        if job is None or job.status is not JobStatus.QUEUED:
            return False
        self._records.replace(
            job_id,
            dataclasses.replace(
                job,
                starts_by=starts_by,
                likely_start=likely_start,
                first_starts_by=job.first_starts_by or starts_by,
                first_likely_start=job.first_likely_start or likely_start,
            ),
        )
        return True

    def set_metrics(self, job_id: str, metrics: JobMetrics) -> bool:
        job = self._records.get(job_id)
        if job is None:
            return False
        updated = dataclasses.replace(job, metrics=metrics)
        check_item_size(
            f"write the metrics of job {job_id}",
            item_size(job_values(updated) | {FIRST_EVENT: self._first_events.get(job_id)}),
        )
        self._records.replace(job_id, updated)
        return True

    def queue(self, *, placed: bool = False, limit: int = 200_000) -> list[QueueEntry]:
        """The partition's entries, oldest first; the very same list while nothing in it changed
        (callers read it, never change it)."""
        partition = PLACED_PARTITION if placed else QUEUE_PARTITION
        read = self._read.get((partition, limit))
        if read is None:
            keys = self._queue[partition]
            read = self._read[(partition, limit)] = [
                self._queued[job_id][1] for _, job_id in keys[: max(limit, 0)]
            ]
        return read

    def _index_queue(self, job: Job) -> None:
        """Moves the job's queue index entry as its stored record now says (as DynamoDB's GSI does)."""
        key = queue_key(job)
        held = self._queued.pop(job.id, None)
        if held is not None or key is not None:
            self._read.clear()
        if held is not None:
            (partition, sort_key), _ = held
            keys = self._queue[partition]
            del keys[bisect.bisect_left(keys, (sort_key, job.id))]
        if key is not None:
            partition, sort_key = key
            bisect.insort(self._queue[partition], (sort_key, job.id))
            self._queued[job.id] = (key, queue_entry(job))

    def list_all(self, *, limit: int = 100_000) -> list[Job]:
        return self._records.list_all(limit=limit)

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
        """The status index read as the DynamoDB adapter's Query reads it: `read` entries from
        the key `after` (its gsi1sk: `<submittedAt>#<id>`), then the filter."""
        if read <= 0:
            raise ValueError(f"read: expected at least 1 item, got {read}")
        entries = self._records._index[status]  # read only: the index as its writes keep it
        mark = None
        if after is not None:
            since, _, job_id = after["gsi1sk"].partition("#")
            mark = (datetime.fromisoformat(since), job_id)
        if newest_first:
            end = len(entries) if mark is None else bisect.bisect_left(entries, mark)
            chosen, more = entries[max(end - read, 0) : end][::-1], end > read
        else:
            start = 0 if mark is None else bisect.bisect_right(entries, mark)
            chosen, more = entries[start : start + read], start + read < len(entries)
        jobs = [job for job in (self._records.get(key) for _, key in chosen) if job is not None]
        kept = [job for job in jobs if (team is None or job.team == team) and (not name or name in job.name)]
        if not more or not jobs:
            return kept, None
        last = jobs[-1]
        return kept, {k: str(v) for k, v in job_values(last).items() if k in ("pk", "sk", "gsi1pk", "gsi1sk")}


def check_item_size(what: str, size: int) -> None:
    if size > MAX_ITEM_BYTES:
        # DynamoDB's words, as the adapter passes them on.
        raise ItemTooLargeError(
            f"{what}: ValidationException: Item size has exceeded the maximum allowed size "
            f"({size} bytes, at most {MAX_ITEM_BYTES})"
        )


class InMemoryDrainStore:
    """DrainStore in memory, with the same version conditions as the DynamoDB one."""

    def __init__(self) -> None:
        self._records: dict[str, DrainRecord] = {}

    def get(self, instance_id: str) -> DrainRecord | None:
        return self._records.get(instance_id)

    def create(self, record: DrainRecord) -> None:
        if record.instance_id in self._records:
            raise ConflictError(f"a drain record for {record.instance_id} exists already")
        self._records[record.instance_id] = record

    def save(self, record: DrainRecord) -> None:
        stored = self._records.get(record.instance_id)
        if stored is None or stored.version != record.version - 1:
            raise ConflictError(f"drain {record.instance_id} changed since version {record.version - 1}")
        self._records[record.instance_id] = record


class InMemoryScaleState:
    """ScaleState in memory: the lease, group health and the decision log."""

    def __init__(self) -> None:
        self._lease: tuple[str, datetime] | None = None
        self._health: dict[str, GroupHealth] = {}
        self.decisions = DecisionLog()
        self._recorded = 0  # decision ids: the log forgets old records, the count goes on

    def acquire_lease(self, *, name: str, holder: str, now: datetime, duration: timedelta) -> bool:
        if self._lease and self._lease[0] != holder and self._lease[1] > now:
            return False
        self._lease = (holder, now + duration)
        return True

    def release_lease(self, *, name: str, holder: str) -> None:
        if self._lease and self._lease[0] == holder:
            self._lease = None

    def load_health(self) -> dict[str, GroupHealth]:
        return dict(self._health)

    def save_health(self, group: str, health: GroupHealth) -> None:
        self._health[group] = health

    def record_decision(
        self, *, at: datetime, trigger: str, dry_run: bool, plan: dict[str, Any], acted: dict[str, Any]
    ) -> str:
        self.decisions.append(at=at, trigger=trigger, dry_run=dry_run, plan=plan, acted=acted)
        self._recorded += 1
        return str(self._recorded)

    def latest_decision(self, *, now: datetime) -> dict[str, Any] | None:
        """The newest decision in the DynamoDB adapter's shape (`at` as ISO 8601, an `id`)."""
        if not self.decisions:
            return None
        newest = self.decisions[-1]
        return {**newest, "id": str(self._recorded), "at": newest["at"].isoformat()}


class DecisionLog(Sequence[dict[str, Any]]):
    """The decision records, oldest first, each read back as a dict.

    Kept as the DynamoDB adapter writes them, plan and actions as compact JSON text:
    a long replay records a decision per check, and the text is a fraction of the
    dicts' size (a long queue's plans list hundreds of waiting pods each). A record
    leaves once it is `retention` older than the newest, as DynamoDB's TTL takes the
    adapter's (expiresAt): a replay of months holds two weeks of checks, not every one.
    """

    def __init__(self, *, retention: timedelta = DECISION_RETENTION) -> None:
        self._records: deque[tuple[datetime, str, bool, str, str]] = deque()
        self._retention = retention

    def append(
        self, *, at: datetime, trigger: str, dry_run: bool, plan: Mapping[str, Any], acted: Mapping[str, Any]
    ) -> None:
        self._records.append((at, trigger, dry_run, _compact(plan), _compact(acted)))
        while self._records[0][0] < at - self._retention:
            self._records.popleft()

    def clear(self) -> None:
        self._records.clear()

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [_decision(record) for record in list(self._records)[index]]
        return _decision(self._records[index])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, DecisionLog)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _compact(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), check_circular=False)


def _decision(record: tuple[datetime, str, bool, str, str]) -> dict[str, Any]:
    at, trigger, dry_run, plan, acted = record
    return {
        "at": at,
        "trigger": trigger,
        "dryRun": dry_run,
        "plan": json.loads(plan),
        "acted": json.loads(acted),
    }


@dataclass
class _Group:
    name: str
    region: str
    min_size: int
    max_size: int
    desired: int = 0
    instances: list[FleetInstance] = field(default_factory=list)


class InMemoryAutoScaling:
    """Auto Scaling groups in memory: desired capacity launches and terminates instances.

    Only what LocalFleet asks of its adapter; launches are instant (the capacity
    model and boot times live in LocalFleet, as they do on top of moto).
    """

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], _Group] = {}
        self._ids = itertools.count(1)

    def create_group(self, *, name: str, region: str, min_size: int, max_size: int, desired: int = 0) -> None:
        group = _Group(name=name, region=region, min_size=min_size, max_size=max_size)
        self._groups[(region, name)] = group
        self._resize(group, max(min_size, desired))

    def describe_groups(self, refs: Sequence[GroupRef]) -> list[FleetGroup]:
        found = []
        for ref in refs:
            group = self._groups.get((ref.region, ref.name))
            if group is not None:
                found.append(
                    FleetGroup(
                        name=group.name,
                        region=group.region,
                        desired=group.desired,
                        min_size=group.min_size,
                        max_size=group.max_size,
                        instances=tuple(group.instances),
                    )
                )
        return found

    def set_desired_capacity(self, *, ref: GroupRef, desired: int) -> None:
        group = self._group(ref)
        if not group.min_size <= desired <= group.max_size:
            raise PermanentError(
                f"New SetDesiredCapacity value {desired} is outside {group.min_size}..{group.max_size}"
            )
        self._resize(group, desired)

    def terminate_instance(self, *, region: str, instance_id: str, decrement: bool = True) -> None:
        for group in self._groups.values():
            for instance in group.instances:
                if instance.instance_id == instance_id and group.region == region:
                    group.instances.remove(instance)
                    if decrement:
                        group.desired -= 1
                    else:
                        self._resize(group, group.desired)
                    return
        raise NotFoundError(
            f"Instance Id not found - No managed instance found for instance ID: {instance_id}"
        )

    def set_scale_in_protection(self, *, ref: GroupRef, instance_ids: Sequence[str], protected: bool) -> None:
        group = self._group(ref)
        wanted = set(instance_ids)
        group.instances = [
            replace(i, protected_from_scale_in=protected) if i.instance_id in wanted else i
            for i in group.instances
        ]

    def _group(self, ref: GroupRef) -> _Group:
        group = self._groups.get((ref.region, ref.name))
        if group is None:
            raise NotFoundError(f"no Auto Scaling group {ref.name} in {ref.region}")
        return group

    def _resize(self, group: _Group, desired: int) -> None:
        group.desired = desired
        while len(group.instances) < desired:
            number = next(self._ids)
            group.instances.append(
                FleetInstance(
                    instance_id=f"i-{number:017x}",
                    group=group.name,
                    region=group.region,
                    lifecycle_state="InService",
                    health_status="Healthy",
                    launch_time=None,
                    protected_from_scale_in=False,
                    availability_zone=f"{group.region}{'abc'[number % 3]}",
                )
            )
        # Like Auto Scaling's default policy, the newest instances go first here;
        # Squall itself never lowers desired capacity to remove a node.
        while len(group.instances) > desired:
            group.instances.pop()
