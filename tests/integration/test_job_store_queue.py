"""The queue index of the job table against moto, and the in-memory store that must agree with it."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.adapters.aws.job_store import DynamoJobStore, creation_values, job_to_item, to_item
from squall.core.jobs import Job, JobEvent, JobStatus, Reason, is_terminal, new_job, reason_code, transition
from squall.core.queue import QUEUE_INDEX, QueueEntry, queue_entry
from squall.local.memory import InMemoryJobStore
from tests.properties import examples

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SHAPE = '[{"n":2,"pod":{"containers":[{"resources":{"requests":{"cpu":"8","nvidia.com/gpu":"1"}}}]}}]'


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest) -> Any:
    """The DynamoDB adapter, and the in-memory store that replays use: one contract."""
    if request.param == "memory":
        return InMemoryJobStore()
    return DynamoJobStore(request.getfixturevalue("jobs_table"), "jobs")


def queued(job_id: str = "j-1", at: datetime = T0, **fields: Any) -> tuple[Job, JobEvent]:
    fields.setdefault("queue_shape", SHAPE)
    return new_job(job_id=job_id, name="j", team="research", namespace="team-research", at=at, **fields)


def step(store: Any, job: Job, *, to: JobStatus, reason: str, minutes: int, **changes: Any) -> Job:
    job, event = transition(job, to=to, reason=reason, at=T0 + timedelta(minutes=minutes), **changes)
    store.save(job, event)
    return job


def ids(entries: list[QueueEntry]) -> list[str]:
    return [e.job_id for e in entries]


def test_the_index_holds_exactly_the_queued_jobs_through_a_jobs_life(store: Any) -> None:
    # given a queued job, and one that stays queued behind it
    job, event = queued("j-1", priority=60)
    store.create(job, event)
    store.create(*queued("j-2", at=T0 + timedelta(seconds=1)))
    assert store.queue() == [queue_entry(job), queue_entry(store.get("j-2"))]
    assert store.queue(placed=True) == []
    # when admission places it, it is PLACED until its objects exist
    placed = dict(cluster="c1", region="us-east-1")
    job = step(
        store, job, to=JobStatus.QUEUED, reason=reason_code(Reason.ADMITTED, "us-east-1"), minutes=1, **placed
    )
    assert ids(store.queue()) == ["j-2"]
    assert store.queue(placed=True) == [queue_entry(job)]
    assert store.queue(placed=True)[0].cluster == "c1" and store.queue(placed=True)[0].region == "us-east-1"
    job = step(store, job, to=JobStatus.QUEUED, reason=Reason.ADMITTED, minutes=2, objects_created=True)
    assert ids(store.queue()) == ["j-2"] and store.queue(placed=True) == []
    # running: in neither
    job = step(store, job, to=JobStatus.RUNNING, reason=Reason.STARTED, minutes=3)
    assert ids(store.queue()) == ["j-2"] and store.queue(placed=True) == []
    # its node is lost: back in the queue, first of all by its submission time, and marked requeued
    job = step(
        store,
        job,
        to=JobStatus.QUEUED,
        reason=Reason.NODE_LOST,
        minutes=4,
        cluster=None,
        region=None,
        objects_created=False,
        requeued=True,
    )
    assert store.queue() == [queue_entry(job), queue_entry(store.get("j-2"))]
    assert store.queue()[0].requeued and store.queue()[0].version == 5
    # placed and run again, and finished: gone for good
    job = step(store, job, to=JobStatus.QUEUED, reason=Reason.ADMITTED, minutes=5, **placed)
    job = step(store, job, to=JobStatus.RUNNING, reason=Reason.STARTED, minutes=6, objects_created=True)
    step(store, job, to=JobStatus.SUCCEEDED, reason=Reason.COMPLETED, minutes=7)
    assert ids(store.queue()) == ["j-2"] and store.queue(placed=True) == []


def test_a_save_that_takes_a_job_out_of_the_queue_removes_the_index_keys_from_its_item(
    jobs_table: Any,
) -> None:
    store = DynamoJobStore(jobs_table, "jobs")
    job, event = queued()
    store.create(job, event)
    key = to_item({"pk": "JOB#j-1", "sk": "META"})
    assert jobs_table.get_item(TableName="jobs", Key=key)["Item"]["gsi2pk"] == {"S": "QUEUE"}
    job = step(
        store, job, to=JobStatus.QUEUED, reason=Reason.ADMITTED, minutes=1, cluster="c1", region="us-east-1"
    )
    assert jobs_table.get_item(TableName="jobs", Key=key)["Item"]["gsi2pk"] == {"S": "PLACED"}
    step(store, job, to=JobStatus.CANCELLED, reason=Reason.CANCEL_REQUESTED, minutes=2)
    item = jobs_table.get_item(TableName="jobs", Key=key)["Item"]
    assert "gsi2pk" not in item and "gsi2sk" not in item
    # the item keeps what was not taken away: its first event rides in it still
    assert "firstEvent" in item and item["cluster"] == {"S": "c1"}


@pytest.mark.parametrize(
    "fields",
    [
        {"queue_shape": ""},  # nothing admission could place
        {"trial_ids": ("j-1-t000", "j-1-t001")},  # a sweep's parent
        {"reason": Reason.WAITING_FOR_TRIAL_SLOT},  # a trial not yet let run
        {"status": JobStatus.REJECTED, "reason": Reason.INVALID_SPEC},
    ],
)
def test_jobs_that_wait_for_nothing_admission_does_are_not_in_the_index(
    store: Any, fields: dict[str, Any]
) -> None:
    store.create(*queued(**fields))
    assert store.queue() == [] and store.queue(placed=True) == []


def test_an_item_stored_before_the_queue_fields_loads_and_stays_out_of_the_queue(jobs_table: Any) -> None:
    # given a queued job's item as Squall wrote it before this index (none of the new attributes)
    job, event = queued(queue_shape="")
    item = to_item(creation_values(job, event))
    for name in (
        "priority",
        "cluster",
        "region",
        "requeued",
        "queueShape",
        "objectsCreated",
        "gsi2pk",
        "gsi2sk",
    ):
        item.pop(name, None)
    jobs_table.put_item(TableName="jobs", Item=item)
    store = DynamoJobStore(jobs_table, "jobs")
    # then it loads with the defaults, and a later save writes the new attributes
    assert store.get("j-1") == job
    assert store.queue() == []
    step(store, job, to=JobStatus.QUEUED, reason=Reason.QUEUED, minutes=1, queue_shape=SHAPE, priority=50)
    assert [(e.job_id, e.priority, e.queue_shape) for e in store.queue()] == [("j-1", 50, SHAPE)]


def test_thousands_of_entries_page_in_order_and_the_limit_bounds_them(jobs_table: Any) -> None:
    # given 2,600 queued jobs whose items (not their entries) fill several of DynamoDB's 1 MB pages
    padding = {"name": "j", "env": {"PAD": "x" * 1000}}
    count = 2_600
    items = [
        job_to_item(queued(f"j-{i:05d}", at=T0 + timedelta(seconds=i), spec=padding)[0]) for i in range(count)
    ]
    for start in range(0, count, 25):
        jobs_table.batch_write_item(
            RequestItems={"jobs": [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]}
        )
    queries: list[dict[str, Any]] = []
    jobs_table.meta.events.register(
        "provide-client-params.dynamodb.Query", lambda params, **_: queries.append(params)
    )
    store = DynamoJobStore(jobs_table, "jobs")
    # when the queue is read
    entries = store.queue()
    # then every job comes back once, oldest first, from the queue index in several pages
    assert ids(entries) == [f"j-{i:05d}" for i in range(count)]
    pages = len(queries)
    assert pages >= 3 and all(q["IndexName"] == QUEUE_INDEX for q in queries)
    assert all(e.queue_shape == SHAPE and e.team == "research" for e in entries)
    # and a limit reads no further than it needs
    queries.clear()
    assert ids(store.queue(limit=1_000)) == [f"j-{i:05d}" for i in range(1_000)]
    assert len(queries) < pages
    assert store.queue(limit=0) == []


# -- the in-memory store agrees with DynamoDB ----------------------------------------


def _moves(job: Job) -> list[tuple[JobStatus, str, dict[str, Any]]]:
    """What may happen next to a job, as the services move it: (to, reason, changes)."""
    if is_terminal(job.status):
        return []
    done: list[tuple[JobStatus, str, dict[str, Any]]] = [
        (s, r, {})
        for s, r in ((JobStatus.SUCCEEDED, Reason.COMPLETED), (JobStatus.CANCELLED, Reason.CANCEL_REQUESTED))
    ]
    if job.status is JobStatus.RUNNING:
        back = {"cluster": None, "region": None, "objects_created": False, "requeued": True}
        return [*done, (JobStatus.QUEUED, Reason.NODE_LOST, back), (JobStatus.RUNNING, "Note", {})]
    if job.reason == Reason.WAITING_FOR_TRIAL_SLOT:
        return [*done, (JobStatus.QUEUED, Reason.SUBMITTED, {})]
    if job.cluster is None:
        region = random.choice(["us-east-1", "us-west-2"])
        place = {"cluster": random.choice(["c1", "c2"]), "region": region}
        note = (
            JobStatus.QUEUED,
            reason_code(Reason.QUEUED, str(random.randint(1, 9))),
            {"priority": random.randint(0, 100)},
        )
        return [*done, (JobStatus.QUEUED, reason_code(Reason.ADMITTED, region), place), note]
    if not job.objects_created:
        return [*done, (JobStatus.QUEUED, Reason.ADMITTED, {"objects_created": True})]
    return [*done, (JobStatus.RUNNING, Reason.STARTED, {})]


def _new(job_id: str, minute: int) -> tuple[Job, JobEvent]:
    kind = random.random()
    fields: dict[str, Any] = {"priority": random.randint(0, 100), "requeued": random.random() < 0.1}
    if kind < 0.1:
        fields |= {"trial_ids": (f"{job_id}-t000",), "queue_shape": ""}
    elif kind < 0.2:
        fields["reason"] = Reason.WAITING_FOR_TRIAL_SLOT
    elif kind < 0.25:
        fields["queue_shape"] = ""
    # a few submission times only: ties are ordered by id, in both stores
    return queued(job_id, at=T0 + timedelta(minutes=minute % 5), **fields)


def test_the_memory_store_reads_the_same_queue_as_dynamodb_through_random_lives(jobs_table: Any) -> None:
    dynamo, memory = DynamoJobStore(jobs_table, "jobs"), InMemoryJobStore()
    random.seed(26)
    seen = {False: 0, True: 0}  # the longest queue of each kind

    def both(op: str, job: Job, event: JobEvent) -> None:
        getattr(dynamo, op)(job, event)
        getattr(memory, op)(job, event)

    for n in range(examples(500)):
        # new jobs keep arriving while the older ones move on
        job_id = f"j-{random.randrange(10 + n // 8):03d}"
        job = memory.get(job_id)
        if job is None:
            both("create", *_new(job_id, n))
        elif moves := _moves(job):
            to, reason, changes = random.choice(moves)
            both("save", *transition(job, to=to, reason=reason, at=T0 + timedelta(minutes=n), **changes))
        if n % 5 == 0:
            for placed in (False, True):
                entries = memory.queue(placed=placed)
                assert dynamo.queue(placed=placed) == entries, (n, placed)
                seen[placed] = max(seen[placed], len(entries))
    # and the lives went through both kinds of entry, several at once
    assert seen[False] >= 3 and seen[True] >= 2, seen
    assert dynamo.queue() == memory.queue() and dynamo.queue(placed=True) == memory.queue(placed=True)
