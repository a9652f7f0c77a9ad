"""The queue of jobs waiting for admission, as the job table keeps it. Pure.

A queued job has no Kubernetes objects anywhere until admission places it: its record
is its queue entry. The table's sparse ``queue-index`` holds exactly the records that
`queue_key` gives a key (gsi2pk/gsi2sk), oldest submission first:

- ``QUEUE``: waiting for admission to choose a cluster and a region;
- ``PLACED``: admission chose them (the record says where) but has not yet created the
  job's objects there; the next check finishes it before admitting anything new.

What admission needs of a job rides in the index's projection (team, namespace,
priority, submission time, requeued, placement, version) and its gang's shape in
``queueShape``: per distinct replica pod template, how many replicas have it and the
part of the pod spec that scheduling reads (`queue_shape`). `replica_jobs` turns an
entry back into the planner's ReplicaJobs, as if it read suspended Jobs from a cluster.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from squall.core.jobs import Job, JobStatus, Reason
from squall.planner.kube import parse_pod, pod_requests
from squall.planner.model import Pod
from squall.planner.queue_types import ReplicaJob
from squall.planner.sites import site

if TYPE_CHECKING:
    # Only queue_shape reads a spec (and renders it): `squall plan --queue` reads entries
    # without loading the spec's pydantic models.
    from squall.core.spec import JobSpec

QUEUE_PARTITION = "QUEUE"
PLACED_PARTITION = "PLACED"
# The job table's queue index (adapters/aws/job_store.py writes its keys; stacks/table.py and
# local/aws.py define it): sparse, and it projects only the job attributes an entry reads.
QUEUE_INDEX = "queue-index"
QUEUE_INDEX_PARTITION_KEY = "gsi2pk"
QUEUE_INDEX_SORT_KEY = "gsi2sk"
QUEUE_INDEX_ATTRIBUTES = (
    "team",
    "namespace",
    "priority",
    "submittedAt",
    "requeued",
    "queueShape",
    "cluster",
    "region",
    "version",
)

# The longest shape a valid spec renders: at most four distinct templates (one per replica
# type: replicas of a type share their resources), each at most its two quantities (64
# characters each), the GPU toleration and a node affinity of at most 16 regions and 64
# node groups (63 characters each): about 22 kB. A usual job's is about 200 bytes.
MAX_QUEUE_SHAPE_BYTES = 32_000
# What a shape may hold when read back: at most the replicas a valid spec may have, the sum
# of core/spec/limits.py MAX_REPLICAS (chief 1, workers 64, parameter servers 16, evaluator 1).
# Written out rather than imported: importing the spec package loads its pydantic models,
# which `squall plan --queue` does without (tests/unit/test_review26_fixes.py holds the two equal).
MAX_SHAPE_REPLICAS = 82
_MAX_SHAPE_TEMPLATES = 16
# The longest run time a stored shape may declare: ten years (a policy's maxRuntimeLimit is far below).
MAX_DEADLINE_SECONDS = 10 * 366 * 24 * 3600


class QueueShapeError(ValueError):
    """A stored queue shape that cannot be read; the message names the job."""


def queue_key(job: Job) -> tuple[str, str] | None:
    """The job's key in the queue index, (partition, sort key); None when it is not in the queue."""
    if job.status is not JobStatus.QUEUED:
        return None
    sort_key = f"{job.submitted_at.isoformat()}#{job.id}"
    if job.cluster is not None:
        return None if job.objects_created else (PLACED_PARTITION, sort_key)
    if job.is_sweep or job.reason == Reason.WAITING_FOR_TRIAL_SLOT or not job.queue_shape:
        return None
    return (QUEUE_PARTITION, sort_key)


def queue_shape(spec: JobSpec, *, job_id: str, namespace: str) -> str:
    """The scheduling part of the job's replica pods, compact JSON: ``[{"n": 2, "pod": {...}}]``.

    Deterministic (sorted keys, templates in the order the replicas render) and bounded:
    a valid spec's shape is at most MAX_QUEUE_SHAPE_BYTES (about 22 kB at worst, a few
    hundred bytes as jobs usually are); a longer one is a bug and raises ValueError.
    Kept per pod: the containers' resources, nodeSelector, the node affinity and the
    tolerations. Not kept: the pod affinity that holds a gang in one region (it names
    the job itself; admission places a gang whole) and everything scheduling ignores.
    """
    counts: dict[str, int] = {}
    pods: dict[str, dict[str, Any]] = {}
    deadlines: dict[str, int] = {}
    from squall.core.manifests import render

    for obj in render(spec, job_id=job_id, namespace=namespace):
        if obj.get("kind") != "Job":
            continue
        pod = _scheduling_part(obj["spec"]["template"]["spec"])
        key = json.dumps(pod, sort_keys=True, separators=(",", ":"))
        counts[key] = counts.get(key, 0) + 1
        pods.setdefault(key, pod)
        deadline = obj["spec"].get("activeDeadlineSeconds")
        if isinstance(deadline, int):
            deadlines[key] = deadline
    text = json.dumps(
        [
            {"n": counts[key], "pod": pods[key]} | ({"d": deadlines[key]} if key in deadlines else {})
            for key in counts
        ],
        sort_keys=True,
        separators=(",", ":"),
    )
    if len(text) > MAX_QUEUE_SHAPE_BYTES:
        raise ValueError(f"job {job_id}: queue shape of {len(text)} bytes, more than {MAX_QUEUE_SHAPE_BYTES}")
    return text


def _scheduling_part(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = {
        "containers": [{"resources": c.get("resources", {})} for c in pod_spec.get("containers", [])]
    }
    if pod_spec.get("nodeSelector"):
        part["nodeSelector"] = pod_spec["nodeSelector"]
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity")
    if node_affinity:
        part["affinity"] = {"nodeAffinity": node_affinity}
    if pod_spec.get("tolerations"):
        part["tolerations"] = pod_spec["tolerations"]
    return part


@dataclass(frozen=True, slots=True)
class ReplicaShape:
    """`count` replicas whose pods ask for what `pod` (the scheduling part of a pod spec) says."""

    count: int
    pod: Mapping[str, Any]
    # Their Jobs' activeDeadlineSeconds: the job's declared maxRuntime (None in shapes stored before it was kept).
    deadline: int | None = None

    @property
    def gpus(self) -> int:
        """GPUs of one such replica."""
        return pod_requests(self.pod).gpu


def decode_shape(text: str, *, job_id: str) -> tuple[ReplicaShape, ...]:
    """A stored queue shape; QueueShapeError naming the job and what is wrong."""
    try:
        return _decode(text)
    except ValueError as exc:
        raise QueueShapeError(f"job {job_id}: stored queue shape: {exc}") from None


def _decode(text: str) -> tuple[ReplicaShape, ...]:
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("not JSON") from None
    if not isinstance(raw, list) or not 1 <= len(raw) <= _MAX_SHAPE_TEMPLATES:
        raise ValueError(f"expected a list of 1 to {_MAX_SHAPE_TEMPLATES} pod templates")
    shapes = []
    for i, entry in enumerate(raw):
        count = entry.get("n") if isinstance(entry, dict) else None
        pod = entry.get("pod") if isinstance(entry, dict) else None
        if type(count) is not int or not 1 <= count <= MAX_SHAPE_REPLICAS:
            raise ValueError(f"[{i}].n: expected a count from 1 to {MAX_SHAPE_REPLICAS}")
        if not isinstance(pod, dict):
            raise ValueError(f"[{i}].pod: expected an object")
        deadline = entry.get("d")
        if deadline is not None and (type(deadline) is not int or not 1 <= deadline <= MAX_DEADLINE_SECONDS):
            raise ValueError(f"[{i}].d: expected a run time in seconds from 1 to {MAX_DEADLINE_SECONDS}")
        shapes.append(ReplicaShape(count=count, pod=pod, deadline=deadline))
    total = sum(s.count for s in shapes)
    if total > MAX_SHAPE_REPLICAS:
        raise ValueError(f"{total} replicas, more than a job may have ({MAX_SHAPE_REPLICAS})")
    return tuple(shapes)


@lru_cache(maxsize=4096)
def _templates(text: str, namespace: str, cluster: str | None) -> tuple[tuple[int, Pod], ...]:
    """Each template's count and pending pod (named for none yet), parsed once per distinct shape.

    Jobs of one kind share their shape's text exactly (`queue_shape` is deterministic and
    names no job), so a queue of 100,000 parses a few hundred pods, not 100,000.
    """
    templates = []
    for i, shape in enumerate(_decode(text)):
        obj = {"metadata": {"name": "template", "namespace": namespace}, "spec": shape.pod}
        try:
            pod = parse_pod(obj, cluster=cluster)
        except ValueError as exc:
            raise ValueError(f"[{i}].pod: {str(exc).split(': ', 1)[-1]}") from None
        templates.append((shape.count, pod))
    return tuple(templates)


@dataclass(frozen=True)
class QueueEntry:
    """A job in the queue index, as admission reads it (the index's projection of its record).

    `queue_shape` is the stored JSON; `shape` decodes it on first use, so that one bad
    record fails only its own job (QueueShapeError), not the read of the whole queue.
    """

    job_id: str
    team: str
    namespace: str
    priority: int
    submitted_at: datetime
    requeued: bool
    queue_shape: str
    cluster: str | None
    region: str | None
    version: int
    # Why the stored item could not be read as an entry (the store's word), "" when it could:
    # such an entry fails its own job (QueueShapeError), never the read of the queue.
    problem: str = ""

    @property
    def placed(self) -> bool:
        """Admission chose its cluster and region (a PLACED entry)."""
        return self.cluster is not None

    @cached_property
    def shape(self) -> tuple[ReplicaShape, ...]:
        return decode_shape(self.queue_shape, job_id=self.job_id)

    @property
    def replicas(self) -> int:
        return sum(count for count, _ in self._templates(None))

    @property
    def max_runtime(self) -> timedelta | None:
        """Its declared run time, as its shape keeps it (None: a shape stored before it was kept)."""
        return _max_runtime(self.queue_shape) if not self.problem else None

    @property
    def gpus(self) -> int:
        """GPUs of the whole gang."""
        return sum(count * pod.requests.gpu for count, pod in self._templates(None))

    def _templates(self, cluster: str | None) -> tuple[tuple[int, Pod], ...]:
        if self.problem:
            raise QueueShapeError(f"job {self.job_id}: {self.problem}")
        try:
            return _templates(self.queue_shape, self.namespace, cluster)
        except ValueError as exc:
            raise QueueShapeError(f"job {self.job_id}: stored queue shape: {exc}") from None


@lru_cache(maxsize=4096)
def _max_runtime(text: str) -> timedelta | None:
    try:
        deadlines = [shape.deadline for shape in _decode(text) if shape.deadline is not None]
    except ValueError:
        return None
    return timedelta(seconds=max(deadlines)) if deadlines else None


def queue_entry(job: Job) -> QueueEntry:
    """The entry the queue index holds for this record (whether or not it is in the queue)."""
    return QueueEntry(
        job_id=job.id,
        team=job.team,
        namespace=job.namespace,
        priority=job.priority,
        submitted_at=job.submitted_at,
        requeued=job.requeued,
        queue_shape=job.queue_shape,
        cluster=job.cluster,
        region=job.region,
        version=job.version,
    )


def replica_jobs(entry: QueueEntry, *, qualify_cluster: bool) -> list[ReplicaJob]:
    """The planner's ReplicaJob for each replica of the entry's job (synthetic names ``<id>-r<i>``).

    Every replica is suspended: a queued job has no objects in any cluster, and a PLACED
    one's are not all created yet. A PLACED entry's replicas are also admitted to its
    site, ``<cluster>/<region>`` when `qualify_cluster` (more than one cluster is
    configured; its pods then only fit that cluster's nodes), else its region: the planner
    reads them as an admission to finish there (as services/admission.py and `squall plan`
    give them to it); a QUEUE entry's are admitted nowhere yet. Each
    distinct shape is parsed once, and an entry's ReplicaJobs are kept while it is
    unchanged (an entry is immutable: a changed record is a new version), so a warm
    check reads a queue it has seen at the cost of a lookup per job.
    QueueShapeError names the job when its stored shape cannot be read.
    """
    return list(_replica_jobs(entry, qualify_cluster))


@lru_cache(maxsize=200_000)
def _replica_jobs(entry: QueueEntry, qualify_cluster: bool) -> tuple[ReplicaJob, ...]:
    cluster = entry.cluster if qualify_cluster else None
    admitted_region = None
    if entry.placed and entry.region:
        admitted_region = site(entry.region, cluster or "")
    templates = entry._templates(cluster)
    max_runtime = entry.max_runtime
    total = sum(count for count, _ in templates)
    jobs: list[ReplicaJob] = []
    for count, template in templates:
        for _ in range(count):
            name = f"{entry.job_id}-r{len(jobs)}"
            jobs.append(
                ReplicaJob(
                    name=name,
                    namespace=entry.namespace,
                    job_id=entry.job_id,
                    team=entry.team,
                    priority=entry.priority,
                    submitted_at=entry.submitted_at,
                    requeued=entry.requeued,
                    replicas=total,
                    suspended=True,
                    admitted_region=admitted_region,
                    max_runtime=max_runtime,
                    pod=dataclasses.replace(template, name=name, job_id=entry.job_id),
                )
            )
    return tuple(jobs)
