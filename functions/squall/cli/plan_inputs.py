"""What `squall plan` reads besides the groups: each cluster's snapshot and the queue.

A cluster's snapshot is its `kubectl get nodes -o json` and `kubectl get pods -A -o json`
(and, for the GPUs its teams have running, `kubectl get jobs -A -o json`): given by
today's flags for one cluster, or once per cluster as `--cluster NAME=NODES,PODS[,JOBS]`.

The queue is the jobs table's, as `squall list --status QUEUED --json` prints it: the
records admission reads (core/queue.py's entries). A queued job has no Kubernetes objects
until admission places it, so the queue is not in any cluster's snapshot. Records that
are not in the queue (running or final, a sweep's parent, a trial waiting for its slot,
a placed job whose objects exist) are left out, as the queue index leaves them out.
Every problem names the file, the record and the field.

Nothing here imports pydantic or an AWS client: `squall plan` starts without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from squall.core.jobs import Reason
from squall.planner.inputs import AWS_REGION, CLUSTER_NAME, CLUSTER_NAME_WORDS
from squall.planner.text import kind, shown

if TYPE_CHECKING:
    from squall.core.queue import QueueEntry
    from squall.planner.queue_types import ReplicaJob


class PlanArgumentError(ValueError):
    """A `squall plan` argument or input that cannot be used; the message names it."""


@dataclass(frozen=True)
class ClusterFiles:
    """One cluster's kubectl output, as files."""

    name: str  # "" for today's flags (one cluster, not named)
    nodes: str
    pods: str
    jobs: str | None = None


def cluster_option(text: str) -> ClusterFiles:
    """`NAME=nodes.json,pods.json[,jobs.json]`; PlanArgumentError saying what is wrong."""
    name, sep, paths = text.partition("=")
    if not sep:
        raise PlanArgumentError(
            f"--cluster: expected NAME=nodes.json,pods.json[,jobs.json], got {shown(text)}"
        )
    if not CLUSTER_NAME.fullmatch(name):
        raise PlanArgumentError(f"--cluster {shown(name)}: expected {CLUSTER_NAME_WORDS}")
    files = paths.split(",")
    if not 2 <= len(files) <= 3 or not all(files):
        raise PlanArgumentError(
            f"--cluster {name}: expected {name}=nodes.json,pods.json[,jobs.json] (its nodes, its pods and "
            f"optionally its Jobs, kubectl's JSON), got {shown(paths)}"
        )
    return ClusterFiles(name, files[0], files[1], files[2] if len(files) == 3 else None)


def snapshots(
    *,
    clusters: Sequence[ClusterFiles],
    nodes: str | None,
    pods: str | None,
    jobs: str | None,
) -> list[ClusterFiles]:
    """The clusters to plan for: the --cluster ones, or the one today's flags give."""
    if clusters:
        given = [flag for flag, value in (("--nodes", nodes), ("--pods", pods), ("--jobs", jobs)) if value]
        if given:
            raise PlanArgumentError(
                f"{'/'.join(given)} with --cluster: give every cluster's snapshot as "
                "--cluster NAME=nodes.json,pods.json[,jobs.json]"
            )
        seen: set[str] = set()
        for snapshot in clusters:
            if snapshot.name in seen:
                raise PlanArgumentError(f"--cluster {snapshot.name}: given twice")
            seen.add(snapshot.name)
        return list(clusters)
    if nodes is None or pods is None:
        raise PlanArgumentError(
            "the cluster's snapshot is needed: --nodes and --pods for one cluster, or "
            "--cluster NAME=nodes.json,pods.json[,jobs.json] for each cluster"
        )
    return [ClusterFiles("", nodes, pods, jobs)]


# ---- the queue ----

# The most records a queue file may hold: as many as the scale check reads of one
# partition (JobStore.queue's limit).
MAX_QUEUE_RECORDS = 200_000
# The most replicas the queue's entries may stand for together. Each becomes a ReplicaJob
# and a pending pod for the planner: about 0.5 KiB and 10 us to build each, so 1,000,000
# is about 0.5 GiB and 10 s before planning starts (200,000 jobs of 5 replicas on
# average; one job has at most core/queue.py MAX_SHAPE_REPLICAS). A file beyond it is
# not a deployment's queue to plan on a workstation.
MAX_QUEUE_REPLICAS = 1_000_000
PRIORITIES = range(0, 101)  # a spec's priority: 0 to 100 (core/spec/model.py)


@dataclass
class Queue:
    """The queue a file holds: its entries in the file's order, and how many records were left out."""

    entries: list[QueueEntry] = field(default_factory=list)
    left_out: int = 0
    # Where each entry is in the file (``FILE: [i] (job ID)``), in the entries' order.
    records: list[str] = field(default_factory=list)


def read_queue(records: Any, *, source: str) -> Queue:
    """Queue entries from the records `squall list --json` prints (a list)."""
    if not isinstance(records, list):
        raise PlanArgumentError(
            f"{source}: expected the list of job records `squall list --status QUEUED --json` prints, "
            f"got {kind(records)}"
        )
    if len(records) > MAX_QUEUE_RECORDS:
        raise PlanArgumentError(
            f"{source}: {len(records):,} records, more than the {MAX_QUEUE_RECORDS:,} the scale check "
            "reads of its queue"
        )
    queue = Queue()
    seen: set[str] = set()
    replicas = 0
    for index, record in enumerate(records):
        where = f"{source}: [{index}]"
        entry = queue_record(record, where=where)
        if entry is None:
            queue.left_out += 1
            continue
        if entry.job_id in seen:
            raise PlanArgumentError(f"{where}.id: job {entry.job_id} is listed twice")
        seen.add(entry.job_id)
        replicas += sum(shape.count for shape in entry.shape)
        if replicas > MAX_QUEUE_REPLICAS:
            raise PlanArgumentError(
                f"{where} (job {entry.job_id}): the queue's jobs up to here have {replicas:,} replicas, more "
                f"than the {MAX_QUEUE_REPLICAS:,} squall plan reads"
            )
        queue.entries.append(entry)
        queue.records.append(f"{where} (job {entry.job_id})")
    return queue


def queue_record(record: Any, *, where: str) -> QueueEntry | None:
    """The queue entry of one record; None when the job is not in the queue."""
    from squall.core.queue import QueueEntry, QueueShapeError

    if not isinstance(record, Mapping):
        raise PlanArgumentError(f"{where}: expected a job record (an object), got {kind(record)}")
    job_id = _text(record, "id", where)
    where = f"{where} (job {job_id})"
    status = _text(record, "status", where)
    cluster = _optional_text(record, "cluster", where)
    if cluster is not None and not CLUSTER_NAME.fullmatch(cluster):
        raise PlanArgumentError(f"{where}.cluster: expected {CLUSTER_NAME_WORDS}, got {shown(cluster)}")
    region = _optional_text(record, "region", where)
    if region is not None and not AWS_REGION.fullmatch(region):
        raise PlanArgumentError(
            f"{where}.region: expected an AWS region name such as us-west-2, got {shown(region)}"
        )
    if (cluster is None) != (region is None):
        raise PlanArgumentError(f"{where}: cluster and region: a placed job has both, a waiting one neither")
    shape = record.get("queueShape", "")
    if not isinstance(shape, str):
        raise PlanArgumentError(f"{where}.queueShape: expected a string (compact JSON), got {kind(shape)}")
    if status != "QUEUED" or _waits_elsewhere(record, where):
        return None
    if cluster is not None and _flag(record, "objectsCreated", where):
        return None  # its Jobs are in its cluster: they come with that cluster's jobs.json
    if not shape:
        if cluster is None:
            return None  # recorded before Squall kept queue shapes: not in the queue index
        raise PlanArgumentError(f"{where}.queueShape: a placed job needs its queue shape")
    entry = QueueEntry(
        job_id=job_id,
        team=_text(record, "team", where),
        namespace=_text(record, "namespace", where),
        priority=_priority(record, where),
        submitted_at=_time(record, "submittedAt", where),
        requeued=_flag(record, "requeued", where),
        queue_shape=shape,
        cluster=cluster,
        region=region,
        version=_whole(record, "version", where, default=1),
    )
    try:
        entry.shape  # noqa: B018  (decoded now, so that a bad one is named with its file)
    except QueueShapeError as exc:
        raise PlanArgumentError(f"{where}.queueShape: {_after_job(str(exc))}") from None
    return entry


def _waits_elsewhere(record: Mapping[str, Any], where: str) -> bool:
    """A sweep's parent (its trials queue) or a trial waiting for its slot: not in the queue."""
    trials = record.get("trials") or []
    if not isinstance(trials, list):
        raise PlanArgumentError(f"{where}.trials: expected a list, got {kind(trials)}")
    reason = record.get("reason")
    return bool(trials) or reason == Reason.WAITING_FOR_TRIAL_SLOT


def _after_job(message: str) -> str:
    """core/queue.py's message less its `job X: stored queue shape: ` head (the record is named already)."""
    head = "stored queue shape"
    return message.split(f"{head}: ", 1)[1] if f"{head}: " in message else message


def _text(record: Mapping[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise PlanArgumentError(f"{where}.{key}: expected a non-empty string, got {shown(value)}")
    return value


def _optional_text(record: Mapping[str, Any], key: str, where: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise PlanArgumentError(f"{where}.{key}: expected a non-empty string or null, got {shown(value)}")
    return value


def _whole(record: Mapping[str, Any], key: str, where: str, *, default: int) -> int:
    value = record.get(key, default)
    if type(value) is not int or not -(2**31) <= value < 2**31:
        raise PlanArgumentError(f"{where}.{key}: expected a whole number, got {shown(value)}")
    return value


def _priority(record: Mapping[str, Any], where: str) -> int:
    value = record.get("priority", 0)
    if type(value) is not int or value not in PRIORITIES:
        raise PlanArgumentError(
            f"{where}.priority: expected a whole number from {PRIORITIES[0]} to {PRIORITIES[-1]}, "
            f"got {shown(value)}"
        )
    return value


def _flag(record: Mapping[str, Any], key: str, where: str) -> bool:
    value = record.get(key, False)
    if not isinstance(value, bool):
        raise PlanArgumentError(f"{where}.{key}: expected true or false, got {shown(value)}")
    return value


def _time(record: Mapping[str, Any], key: str, where: str) -> datetime:
    from squall.planner.kube import EARLIEST, LATEST

    value = record.get(key)
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        at = None
    if at is None or at.utcoffset() is None or not EARLIEST <= at < LATEST:
        raise PlanArgumentError(
            f"{where}.{key}: expected an ISO 8601 time with a timezone, got {shown(value)}"
        )
    return at


def queued_replica_jobs(
    queue: Queue,
    *,
    clusters: Sequence[str],
    listed: set[str],
    source: str,
) -> list[ReplicaJob]:
    """The queue's replica Jobs as the scale check gives them to admission (services/admission.py).

    A waiting entry's replicas are suspended and unpinned; a placed one's (admitted, its
    objects not all created) are suspended and pinned to its site, so that admission
    finishes it where it was placed. `clusters`: the names given (when any is, a placed
    job must be in one of them); `listed`: job ids whose Jobs a jobs.json holds (they
    speak for the job: its entry is left out rather than counted twice).
    """
    from squall.core.queue import QueueShapeError, replica_jobs
    from squall.planner.sites import site

    qualified = len(clusters) > 1
    jobs: list[ReplicaJob] = []
    for index, entry in enumerate(queue.entries):
        if entry.job_id in listed:
            continue
        if clusters and entry.cluster is not None and entry.cluster not in clusters:
            where = queue.records[index] if index < len(queue.records) else f"{source}: job {entry.job_id}"
            raise PlanArgumentError(
                f"{where}.cluster: placed in cluster {entry.cluster}, which no --cluster gives "
                f"({', '.join(clusters)})"
            )
        try:
            replicas = replica_jobs(entry, qualify_cluster=qualified)
        except (QueueShapeError, ValueError) as exc:
            raise PlanArgumentError(f"{source}: job {entry.job_id}: {_after_job(str(exc))}") from None
        pinned = None
        if entry.cluster is not None and entry.region is not None:
            pinned = site(entry.region, entry.cluster if qualified else "")
        jobs += [dataclasses.replace(r, suspended=True, admitted_region=pinned) for r in replicas]
    return jobs


def job_ids(doc: Any) -> set[str]:
    """The Squall job ids a Job list's items are labelled with (kubectl get jobs -A -o json)."""
    from squall.conventions import JOB_ID_LABEL

    items = doc.get("items") if isinstance(doc, Mapping) else doc
    found: set[str] = set()
    for item in items if isinstance(items, list) else ():
        metadata = item.get("metadata") if isinstance(item, Mapping) else None
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        job_id = labels.get(JOB_ID_LABEL) if isinstance(labels, Mapping) else None
        if isinstance(job_id, str):
            found.add(job_id)
    return found
