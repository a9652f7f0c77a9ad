"""Drains and launch waits as a durable state machine. Pure: no I/O, time is passed in.

Every lifecycle action Squall answers is one ``DrainRecord`` (kept in DynamoDB by
``drain_store.py``). A function invocation takes one bounded *step*: the service
observes the node and its pods, ``decide()`` says what to do and what the record
becomes, the service does it, saves the record and asks for the next step through
the delayed drain queue. Nothing here sleeps, polls or reads the clock.

Terminate (``autoscaling:EC2_INSTANCE_TERMINATING``):
  cordon (unless someone already did) -> note every Squall job that is about to lose
  a pod as ``NodeLost:<cause>`` -> evict the pods through policy/v1 Eviction, a
  budget group at a time -> wait until they are gone -> CONTINUE. DaemonSet and
  mirror pods are never evicted, and finished pods hold nothing worth waiting for.
  Past the drain deadline the action is completed with CONTINUE anyway and the pods
  left are reported: an action is never left to expire silently. No node for the
  instance: CONTINUE at once (it never joined, or it went away mid-drain).

Launch (``autoscaling:EC2_INSTANCE_LAUNCHING``):
  wait until the node with the instance's providerID is Ready and reports the
  group's GPUs allocatable -> CONTINUE; past the provision timeout -> ABANDON, and
  the group is backed off so the planner falls back to another group.

Heartbeats: Auto Scaling abandons an unanswered action when the hook's heartbeat
timeout runs out. A step records a heartbeat when less than a third of the timeout
is left, or less than the wait for the next step plus ``step_slack`` plus
``redelivery`` (so a next step that runs late, or whose invocation dies and whose
message comes back ``redelivery`` later, still finds the action alive); the drain
deadline, not the hook, bounds a drain.

At-least-once delivery and crashes: every step message carries the record's
version and the step id the record expects next. A message that does not match
is a duplicate or was overtaken, and is dropped (``verdict``); a lifecycle event
for an action already under way changes nothing (``arrival``). A step that dies
half way is retried from the record as it was before that step: evictions and
cordons are idempotent, job notes are guarded, and a second completion is answered
by Auto Scaling with "no active lifecycle action", which the service takes as done.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from squall.core.errors import MAX_ERROR_TEXT
from squall.core.fleet_refs import GroupRef, LifecycleAction
from squall.core.jobs import Reason, reason_code
from squall.planner import Pod

# The planner's one backoff rule, which the lifecycle service applies to an abandoned launch.
from squall.planner.health import PROVISION_TIMEOUT
from squall.planner.health import launch_backoff as launch_backoff
from squall.planner.kube import instance_id_from_provider_id, parse_node

Result = Literal["CONTINUE", "ABANDON"]  # the same words as squall.adapters.aws.autoscaling.LifecycleResult

# The contract with whoever terminates an instance on purpose (the scale function
# sets ``scale-in`` when it cordons a node to remove it): why the node goes.
DEFAULT_CAUSE = "terminate"
# SQS holds a message back at most 15 minutes; a step is never due later than that.
MAX_STEP_DELAY = timedelta(seconds=900)
# A step due "now" still goes through the queue: one second keeps the sender's
# save ahead of the message (the message is sent first, see service/lifecycle.py).
MIN_STEP_DELAY = timedelta(seconds=1)
# What the stack gives Squall's terminate hook when the policy leaves it to the
# default (stacks/lifecycle.py HookSettings): at least five minutes.
MIN_TERMINATE_HEARTBEAT = timedelta(seconds=300)
# How many pods a drain record lists by name (the count is always exact).
MAX_LISTED_PODS = 100
_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
# Auto Scaling's own words for why it terminates an instance (the scaling
# activity's Cause), checked in order: an AZ rebalance also "shrinks the capacity".
_CAUSE_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spot-reclaim", ("spot instance interruption", "spot interruption", "interruption notice")),
    ("spot-rebalance", ("rebalance recommendation",)),
    ("rebalance", ("balance instances in zones", "azrebalance", "availability zone rebalanc")),
    ("health-check", ("health check",)),
    ("instance-refresh", ("instance refresh",)),
    ("max-lifetime", ("instance lifetime",)),
    ("scale-in", ("shrinking the capacity", "changing the desired capacity", "scale in", "scale-in")),
)


class Kind(StrEnum):
    LAUNCH = "launch"
    TERMINATE = "terminate"


class DrainOutcome(StrEnum):
    """Why a record finished."""

    DRAINED = "drained"  # every pod is gone
    NO_NODE = "no-node"  # the instance never became a node
    NODE_DELETED = "node-deleted"  # the node went away mid-drain, its pods with it
    PAST_DEADLINE = "past-deadline"  # completed with pods left
    READY = "ready"  # launch: Ready with its GPUs
    PROVISION_TIMEOUT = "provision-timeout"  # launch: abandoned
    ACTION_GONE = "action-gone"  # completed by someone else, or timed out


class Verdict(StrEnum):
    """What to do with a drain-step message."""

    RUN = "run"
    STALE = "stale"  # a duplicate, or overtaken by a newer step or event
    EARLY = "early"  # sent by a step whose save is not visible yet: try again later
    FINISHED = "finished"
    MISSING = "missing"


class Arrival(StrEnum):
    """What a lifecycle event means for the record already kept for its instance."""

    NEW = "new"
    REPLACE = "replace"  # a newer action for the instance (a terminate during a launch wait)
    RESUME = "resume"  # the same action, whose first step never finished: take it again
    DUPLICATE = "duplicate"
    STALE = "stale"  # older than what is kept, or a launch while a drain is under way


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainPolicy:
    deadline: timedelta = timedelta(minutes=30)
    provision_timeout: timedelta = timedelta(minutes=10)
    step_delay: timedelta = timedelta(seconds=30)
    # A node holds at most 110 pods by default; 100 evictions take a few seconds,
    # far within the function's timeout, so nearly every drain evicts in one step.
    evictions_per_step: int = 100
    # How late a delayed step may run: heartbeats leave this much room.
    step_slack: timedelta = timedelta(seconds=30)
    # How long after a step's message was taken it comes back when the invocation
    # taking it dies (a timeout, out of memory): the drain function's timeout plus
    # the step delay, since it asks for that much at the start (service/lifecycle.py).
    redelivery: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        for name in ("deadline", "provision_timeout", "step_delay"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"drain policy {name} must be positive")
        if self.step_delay > MAX_STEP_DELAY:
            raise ValueError(f"drain policy step_delay must be at most {MAX_STEP_DELAY} (SQS's limit)")
        if self.evictions_per_step < 1:
            raise ValueError("drain policy evictions_per_step must be at least 1")
        if self.step_slack < timedelta(0):
            raise ValueError("drain policy step_slack must not be negative")
        if self.redelivery < timedelta(0):
            raise ValueError("drain policy redelivery must not be negative")

    def heartbeat_timeout(self, kind: Kind) -> timedelta:
        """The hook's heartbeat timeout when the event does not say.

        These are the values the stack gives Squall's own hooks (stacks/lifecycle.py):
        the provision timeout for launches, and four steps (at least five minutes)
        for terminations. Not Auto Scaling's 3600 s default: assuming an hour would
        let a five-minute hook expire between heartbeats.
        """
        if kind is Kind.LAUNCH:
            return self.provision_timeout
        return max(MIN_TERMINATE_HEARTBEAT, 4 * self.step_delay)


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainRecord:
    """One lifecycle action Squall answers, with where its drain or wait stands."""

    instance_id: str
    kind: Kind
    asg_name: str  # as Auto Scaling knows the group
    group: str  # Squall's name for it (settings.node_groups), the key of its health
    region: str
    hook_name: str
    token: str
    started_at: datetime  # when the action began (the event's time)
    deadline: datetime  # drain deadline, or provision timeout for a launch
    heartbeat_timeout: timedelta
    hook_expires_at: datetime  # unless a heartbeat is recorded before
    gpus_expected: int = 0  # launch: the group's GPUs per node
    cause_hint: str = ""  # what the event said about the cause, if anything
    cause: str = ""  # resolved on the first step that finds the node
    node_name: str | None = None
    cordoned: bool = False  # Squall cordoned the node (it was schedulable)
    pods_left: tuple[str, ...] = ()  # namespace/name, at most MAX_LISTED_PODS
    pods_left_count: int = 0
    noted_jobs: tuple[str, ...] = ()
    attempts: int = 0  # steps taken
    evicted: int = 0  # evictions accepted
    refused: int = 0  # evictions refused by a PodDisruptionBudget, or failed
    heartbeats: int = 0
    result: Result | None = None
    outcome: DrainOutcome | None = None
    detail: str = ""  # what an operator wants to know about how it ended
    finished_at: datetime | None = None
    next_step_id: str = ""  # the step message the record waits for
    version: int = 1

    @property
    def done(self) -> bool:
        return self.finished_at is not None

    @property
    def action(self) -> LifecycleAction:
        """The lifecycle action this record answers, as the Fleet port names it."""
        return LifecycleAction(
            ref=GroupRef(name=self.asg_name, region=self.region),
            hook_name=self.hook_name,
            instance_id=self.instance_id,
            token=self.token,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """What a drain or a launch wait needs to know about a node."""

    name: str
    ready: bool
    unschedulable: bool
    gpus: int
    annotations: Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRef:
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobNote:
    """``NodeLost:<cause>`` on a Squall job whose pods are about to be evicted."""

    job_id: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One step: what to do, in this order, and the record to save after it."""

    record: DrainRecord
    heartbeat: bool = False
    cordon: str | None = None
    notes: tuple[JobNote, ...] = ()
    # Budget groups: each is tried in order and stops at its first refusal, since
    # the pods of one job usually share a PodDisruptionBudget.
    evictions: tuple[tuple[PodRef, ...], ...] = ()
    complete: Result | None = None
    back_off: bool = False  # launch abandoned: back the group off
    # Cordoned just now: observe again, so that no pod bound before the cordon is missed.
    observe_again: bool = False
    next_step_in: timedelta | None = None  # None when done (or observing again)


# ---- starting ---------------------------------------------------------------------


def event_step_id(token: str) -> str:
    """The step id of a record's first step, taken by the lifecycle event itself."""
    return f"event:{token}"


def start(
    action: LifecycleAction,
    *,
    kind: Kind,
    group: str,
    started_at: datetime,
    policy: DrainPolicy,
    heartbeat_timeout: timedelta | None = None,
    gpus_expected: int = 0,
    cause_hint: str = "",
) -> DrainRecord:
    """The record for a lifecycle action that just began (``group``: Squall's name for its group)."""
    if started_at.utcoffset() is None:
        raise ValueError("started_at must be timezone-aware")
    # A lifecycle event always carries its token, and the record's step ids are made of it.
    token = action.token
    if not token:
        raise ValueError("a lifecycle action that begins has a token")
    timeout = heartbeat_timeout or policy.heartbeat_timeout(kind)
    budget = policy.provision_timeout if kind is Kind.LAUNCH else policy.deadline
    return DrainRecord(
        instance_id=action.instance_id,
        kind=kind,
        asg_name=action.ref.name,
        group=group,
        region=action.ref.region,
        hook_name=action.hook_name,
        token=token,
        started_at=started_at,
        deadline=started_at + budget,
        heartbeat_timeout=timeout,
        hook_expires_at=started_at + timeout,
        gpus_expected=gpus_expected,
        cause_hint=cause_hint,
        next_step_id=event_step_id(token),
    )


def arrival(existing: DrainRecord | None, incoming: DrainRecord) -> Arrival:
    """How a lifecycle event relates to the record kept for its instance.

    One record per instance: a newer action replaces an older one (an instance
    terminated while its launch was awaited; a warm-pool instance launched again),
    but a late launch event never interrupts a drain under way.
    """
    if existing is None:
        return Arrival.NEW
    if existing.token == incoming.token and existing.kind is incoming.kind:
        if not existing.done and existing.next_step_id == incoming.next_step_id:
            return Arrival.RESUME
        return Arrival.DUPLICATE
    if existing.kind is Kind.TERMINATE and incoming.kind is Kind.LAUNCH and not existing.done:
        return Arrival.STALE
    if incoming.started_at < existing.started_at:
        return Arrival.STALE
    return Arrival.REPLACE


def verdict(record: DrainRecord | None, *, step_id: str, version: int) -> Verdict:
    """Whether a drain-step message is the one its record waits for."""
    if record is None:
        return Verdict.MISSING
    if record.done:
        return Verdict.FINISHED
    if record.next_step_id == step_id and record.version == version:
        return Verdict.RUN
    if version > record.version:
        return Verdict.EARLY
    return Verdict.STALE


# ---- deciding ---------------------------------------------------------------------


def decide(
    record: DrainRecord,
    *,
    node: NodeState | None,
    pods: Sequence[Pod] | None,
    now: datetime,
    policy: DrainPolicy,
) -> Decision:
    """The next step, given the node of the instance (None: there is none) and its pods.

    ``pods`` are the pods bound to the node, listed after the node was seen
    cordoned; they are not needed (None) for a launch, or when the node is still
    schedulable (the decision is then to cordon and observe again).
    """
    if record.done:
        return Decision(record=record)
    if record.kind is Kind.LAUNCH:
        return _decide_launch(record, node=node, now=now, policy=policy)
    return _decide_terminate(record, node=node, pods=pods, now=now, policy=policy)


def decide_unobserved(record: DrainRecord, *, error: str, now: datetime, policy: DrainPolicy) -> Decision:
    """The next step when the node could not be observed (Kubernetes API errors).

    Try again later; past the deadline answer anyway, as the hook's own default
    would: CONTINUE a termination, ABANDON a launch (without backing the group
    off: the fault was ours, not the capacity's).
    """
    if record.done:
        return Decision(record=record)
    record = dataclasses.replace(
        record, attempts=record.attempts + 1, detail=f"could not observe the node: {error}"[:MAX_ERROR_TEXT]
    )
    if now < record.deadline:
        return _continue(record, now=now, policy=policy)
    if record.kind is Kind.LAUNCH:
        outcome, detail = DrainOutcome.PROVISION_TIMEOUT, record.detail
    else:
        outcome, detail = DrainOutcome.PAST_DEADLINE, f"drain deadline passed; {record.detail}"
    return _complete(record, outcome=outcome, detail=detail, now=now)


def _decide_terminate(
    record: DrainRecord, *, node: NodeState | None, pods: Sequence[Pod] | None, now: datetime, policy: DrainPolicy
) -> Decision:
    if node is None:
        record = _step_taken(record)
        if record.node_name is None:
            outcome = DrainOutcome.NO_NODE
            detail = f"no node has the providerID of {record.instance_id}: it never joined the cluster"
        else:
            outcome = DrainOutcome.NODE_DELETED
            detail = f"node {record.node_name} was deleted mid-drain; its pods went with it"
        return _complete(record, outcome=outcome, detail=detail, now=now)
    if not node.unschedulable:
        marked = dataclasses.replace(record, node_name=node.name, cordoned=True)
        return Decision(record=marked, cordon=node.name, observe_again=True)
    if pods is None:
        raise ValueError(f"node {node.name} is cordoned: its pods must be listed to decide")
    record = _step_taken(dataclasses.replace(record, node_name=node.name))
    left = [p for p in pods if p.is_workload and p.phase not in _FINISHED_PHASES]
    notes = _notes(record, left, node=node.name)
    record = dataclasses.replace(
        record,
        pods_left=tuple(p.key for p in left[:MAX_LISTED_PODS]),
        pods_left_count=len(left),
        noted_jobs=record.noted_jobs + tuple(n.job_id for n in notes),
    )
    if not left:
        return _complete(record, outcome=DrainOutcome.DRAINED, detail=f"node {node.name} drained", now=now)
    if now >= record.deadline:
        return _complete(
            record,
            outcome=DrainOutcome.PAST_DEADLINE,
            detail=(
                f"drain deadline passed with {len(left)} pod(s) left on {node.name}: "
                + ", ".join(p.key for p in left[:10])
                + (", ..." if len(left) > 10 else "")
            ),
            now=now,
            notes=notes,
        )
    waiting = [p for p in left if not p.deleting]  # the others are on their way out already
    return _continue(
        record, now=now, policy=policy, notes=notes, evictions=_budget_groups(waiting, policy.evictions_per_step)
    )


def _decide_launch(record: DrainRecord, *, node: NodeState | None, now: datetime, policy: DrainPolicy) -> Decision:
    record = _step_taken(record if node is None else dataclasses.replace(record, node_name=node.name))
    if node is not None and node.ready and node.gpus >= record.gpus_expected:
        return _complete(
            record,
            outcome=DrainOutcome.READY,
            detail=f"node {node.name} is Ready with {node.gpus} GPU(s) allocatable",
            now=now,
        )
    if now < record.deadline:
        return _continue(record, now=now, policy=policy)
    if node is None:
        state = "no node joined the cluster"
    elif not node.ready:
        state = f"node {node.name} is not Ready"
    else:
        state = f"node {node.name} has {node.gpus}/{record.gpus_expected} GPU(s) allocatable"
    return _complete(
        record,
        outcome=DrainOutcome.PROVISION_TIMEOUT,
        detail=f"{PROVISION_TIMEOUT}: {state} {_minutes(record.deadline - record.started_at)} after launch",
        now=now,
        back_off=True,
    )


def _step_taken(record: DrainRecord) -> DrainRecord:
    return dataclasses.replace(record, attempts=record.attempts + 1)


def _notes(record: DrainRecord, left: Sequence[Pod], *, node: str) -> tuple[JobNote, ...]:
    """One note per Squall job losing pods, the first time the drain sees it."""
    cause = record.cause or DEFAULT_CAUSE
    pods_by_job: dict[str, list[str]] = {}
    for pod in left:
        if pod.job_id and pod.job_id not in record.noted_jobs:
            pods_by_job.setdefault(pod.job_id, []).append(pod.key)
    return tuple(
        JobNote(
            job_id=job_id,
            reason=reason_code(Reason.NODE_LOST, cause),
            message=(
                f"node {node} (instance {record.instance_id}, group {record.group}) is drained before "
                f"termination ({cause}): evicting {', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''}"
            )[:MAX_ERROR_TEXT],
        )
        for job_id, keys in pods_by_job.items()
    )


def _budget_groups(pods: Sequence[Pod], limit: int) -> tuple[tuple[PodRef, ...], ...]:
    """The pods to evict this step, grouped by Squall job (else one group per pod)."""
    groups: dict[str, list[PodRef]] = {}
    for pod in pods[:limit]:
        key = f"job:{pod.namespace}/{pod.job_id}" if pod.job_id else f"pod:{pod.key}"
        groups.setdefault(key, []).append(PodRef(namespace=pod.namespace, name=pod.name))
    return tuple(tuple(group) for group in groups.values())


def _continue(
    record: DrainRecord,
    *,
    now: datetime,
    policy: DrainPolicy,
    notes: tuple[JobNote, ...] = (),
    evictions: tuple[tuple[PodRef, ...], ...] = (),
) -> Decision:
    """Not done yet: the next step, no later than the deadline, and a heartbeat if one is due."""
    wait = min(policy.step_delay, record.deadline - now)
    heartbeat = record.hook_expires_at - now < max(
        record.heartbeat_timeout / 3, wait + policy.step_slack + policy.redelivery
    )
    if heartbeat:
        record = dataclasses.replace(
            record, hook_expires_at=now + record.heartbeat_timeout, heartbeats=record.heartbeats + 1
        )
    return Decision(
        record=record,
        heartbeat=heartbeat,
        notes=notes,
        evictions=evictions,
        next_step_in=min(max(wait, MIN_STEP_DELAY), MAX_STEP_DELAY),
    )


def _complete(
    record: DrainRecord,
    *,
    outcome: DrainOutcome,
    detail: str,
    now: datetime,
    notes: tuple[JobNote, ...] = (),
    back_off: bool = False,
) -> Decision:
    # A launch that never became a usable node is abandoned; every other ending lets Auto Scaling go on.
    result: Result = "ABANDON" if outcome is DrainOutcome.PROVISION_TIMEOUT else "CONTINUE"
    done = dataclasses.replace(record, result=result, outcome=outcome, detail=detail[:MAX_ERROR_TEXT], finished_at=now)
    return Decision(record=done, notes=notes, complete=result, back_off=back_off)


# ---- folding results in ---------------------------------------------------------------


def evictions_done(record: DrainRecord, *, accepted: int, refused: int) -> DrainRecord:
    return dataclasses.replace(record, evicted=record.evicted + accepted, refused=record.refused + refused)


def action_gone(record: DrainRecord, *, now: datetime) -> DrainRecord:
    """Auto Scaling no longer waits on this action: someone completed it, or it timed out."""
    if record.done:
        # Our own completion found it gone (a retried step): keep how it ended.
        return dataclasses.replace(record, detail=f"{record.detail}; the action was already completed"[:MAX_ERROR_TEXT])
    return dataclasses.replace(
        record,
        outcome=DrainOutcome.ACTION_GONE,
        detail="the lifecycle action was completed elsewhere or timed out",
        finished_at=now,
    )


def not_completed(record: DrainRecord, *, error: str) -> DrainRecord:
    """Completing failed for good (e.g. access denied): the hook's default result will apply."""
    return dataclasses.replace(
        record, detail=f"{record.detail}; could not complete the action: {error}"[:MAX_ERROR_TEXT]
    )


# ---- observations -----------------------------------------------------------------------


def node_state(obj: Mapping[str, Any]) -> NodeState:
    """A Kubernetes Node (API JSON) as a drain sees it; ValueError names what is wrong."""
    node = parse_node(obj)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return NodeState(
        name=node.name,
        ready=node.ready,
        unschedulable=node.unschedulable,
        gpus=node.allocatable.gpu,
        annotations={str(k): str(v) for k, v in annotations.items()},
    )


def find_node(nodes: Sequence[Mapping[str, Any]], instance_id: str) -> Mapping[str, Any] | None:
    """The node whose spec.providerID names this instance (aws:///<zone>/<instance-id>)."""
    for obj in nodes:
        provider_id = str((obj.get("spec") or {}).get("providerID") or "")
        # The substring test first: most nodes are some other instance's.
        if instance_id in provider_id and instance_id_from_provider_id(provider_id) == instance_id:
            return obj
    return None


def notification_metadata(raw: str | None) -> dict[str, Any]:
    """A hook's NotificationMetadata when it is a JSON object; anything else means nothing."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def termination_cause(*, annotation: str | None, hint: str, activity_cause: str | None) -> str:
    """Why a node goes: what Squall wrote on it, else what the event said, else Auto Scaling."""
    for known in (annotation, hint):
        if known and known.strip():
            return known.strip()
    if activity_cause:
        return classify_termination(activity_cause)
    return DEFAULT_CAUSE


def classify_termination(activity_cause: str) -> str:
    """A scaling activity's Cause, as AWS words it, in a word or two."""
    lowered = activity_cause.lower()
    for cause, words in _CAUSE_WORDS:
        if any(word in lowered for word in words):
            return cause
    return DEFAULT_CAUSE


def _minutes(duration: timedelta) -> str:
    seconds = int(duration.total_seconds())
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"
