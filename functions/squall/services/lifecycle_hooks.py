"""Lifecycle hooks: drain before terminate, wait for a usable node before launch.

The shell around the pure state machine in ``squall.core.drain``. A lifecycle event
creates the instance's drain record and takes the first step at once (an empty
node, or one that never joined, is answered in that same invocation); every later
step comes through the delayed drain queue. A step is bounded work: observe the
node (and, once it is cordoned, its pods), let ``drain.decide`` choose, act, then
send the next step's message and save the record.

Why send before saving: the message is the drain's continuation. Sent first, a
crash before the save leaves the record as it was, the message that started this
step is delivered again and the step is retaken; the early message finds a record
that does not expect it and is dropped. Saved first, a crash before sending would
leave a record nobody comes back to. Every save is conditional on the version
read, so of two steps that run at once only one moves the drain on.

A group's instances join one cluster (the group's ``cluster``; the first configured
when it names none): a drain observes, cordons and evicts there and nowhere else. That
cluster's API failing is "not now" for the step, as any API error is: the step comes
back a step delay later, and only the deadline answers the hook without it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from aws_lambda_powertools import Logger

from squall import conventions
from squall.core import drain
from squall.core.asg_events import DrainStepMessage, LaunchLifecycleEvent, LifecycleEvent
from squall.core.drain import (
    Arrival,
    Decision,
    DrainOutcome,
    DrainPolicy,
    DrainRecord,
    Kind,
    NodeState,
    PodRef,
    Verdict,
)
from squall.core.errors import (
    ConflictError,
    LifecycleActionGone,
    NotFoundError,
    PermanentError,
    RetryableError,
    SquallError,
)
from squall.core.jobs import Job, is_terminal, note
from squall.core.telemetry import SERVICE, Metric
from squall.planner import GroupHealth, NodeGroup, Policy
from squall.planner.kube import parse_pods
from squall.ports import (
    Clock,
    Cluster,
    DrainQueue,
    DrainStore,
    Fleet,
    GroupRef,
    JobStore,
    LifecycleAction,
    MetricsSink,
    ScaleState,
)
from squall.services.intake import update_job
from squall.services.scale import cordon_patch

logger = Logger(service=SERVICE, child=True)

# Auto Scaling accepts heartbeat timeouts of 30 s to 2 h; NotificationMetadata
# outside that range is a mistake, not a reason to heartbeat never or constantly.
_HEARTBEAT_RANGE = (timedelta(seconds=30), timedelta(hours=2))
# Terminations are looked up among the group's scaling activities this far back.
_ACTIVITY_LOOKBACK = timedelta(minutes=15)


class _Beat(Enum):
    RECORDED = "recorded"
    FAILED = "failed"
    GONE = "gone"  # Auto Scaling no longer waits on the action


class StepMessageEarly(RetryableError):
    """A step message whose record does not show the sender's save yet: deliver it again later."""


@dataclass(frozen=True)
class LifecycleConfig:
    # the configured groups (settings.node_groups); a group's `cluster` names the cluster
    # its nodes join ("" for the first, as with one cluster)
    groups: Sequence[NodeGroup]
    launch_hook_name: str
    terminate_hook_name: str
    policy: DrainPolicy
    planner_policy: Policy  # the backoff rules


@dataclass(frozen=True)
class Handled:
    """What an event or a step message came to, for the handler's answer and the logs."""

    outcome: str
    instance_id: str
    record: DrainRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"outcome": self.outcome, "instanceId": self.instance_id}
        if self.record is not None:
            answer.update(
                kind=self.record.kind.value,
                done=self.record.done,
                result=self.record.result,
                drainOutcome=self.record.outcome.value if self.record.outcome else None,
                podsLeft=self.record.pods_left_count,
                attempts=self.record.attempts,
            )
        return answer


@dataclass
class LifecycleService:
    drains: DrainStore
    queue: DrainQueue
    # cluster name -> its API, in configuration order; a drain acts on its group's cluster only
    clusters: Mapping[str, Cluster]
    fleet: Fleet
    jobs: JobStore
    scale_state: ScaleState
    clock: Clock
    metrics: MetricsSink
    config: LifecycleConfig

    # ---- entry points ---------------------------------------------------------

    def on_lifecycle_event(self, event: LifecycleEvent) -> Handled:
        """A launch or terminate lifecycle action began (or its event came again)."""
        detail = event.detail
        instance_id = detail.ec2_instance_id
        kind = Kind.LAUNCH if isinstance(event, LaunchLifecycleEvent) else Kind.TERMINATE
        group = self._group(detail.auto_scaling_group_name, event.region)
        if group is None:
            logger.info(
                "lifecycle event of a group Squall does not manage",
                group=detail.auto_scaling_group_name,
                region=event.region,
                instance_id=instance_id,
            )
            return Handled("ignored-group", instance_id)
        expected_hook = (
            self.config.launch_hook_name if kind is Kind.LAUNCH else self.config.terminate_hook_name
        )
        if detail.lifecycle_hook_name != expected_hook:
            logger.info(
                "lifecycle event of a hook that is not Squall's",
                hook=detail.lifecycle_hook_name,
                expected=expected_hook,
                group=group.name,
                instance_id=instance_id,
            )
            return Handled("ignored-hook", instance_id)
        metadata = drain.notification_metadata(detail.notification_metadata)
        action = LifecycleAction(
            ref=GroupRef(name=detail.auto_scaling_group_name, region=event.region),
            hook_name=detail.lifecycle_hook_name,
            instance_id=instance_id,
            token=detail.lifecycle_action_token,
        )
        incoming = drain.start(
            action,
            kind=kind,
            group=group.name,
            started_at=event.time,
            policy=self.config.policy,
            heartbeat_timeout=_heartbeat_timeout(metadata, instance_id=instance_id),
            gpus_expected=group.allocatable.gpu,
            cause_hint=_cause_hint(metadata, destination=detail.destination),
        )
        existing = self.drains.get(instance_id)
        arrival = drain.arrival(existing, incoming)
        if arrival in (Arrival.DUPLICATE, Arrival.STALE):
            logger.info(
                "lifecycle event changes nothing",
                arrival=arrival.value,
                instance_id=instance_id,
                kind=kind.value,
                kept_kind=existing.kind.value if existing else None,
            )
            return Handled(arrival.value, instance_id, existing)
        try:
            if arrival is Arrival.NEW:
                record = incoming
                self.drains.create(record)
            elif arrival is Arrival.REPLACE:
                assert existing is not None
                record = dataclasses.replace(incoming, version=existing.version + 1)
                self.drains.save(record)
            else:
                assert existing is not None
                record = existing
        except ConflictError:
            # Another delivery of an event for this instance got there first.
            logger.info("lifecycle event raced another delivery", instance_id=instance_id)
            return Handled("raced", instance_id, self.drains.get(instance_id))
        if arrival is not Arrival.RESUME:
            if kind is Kind.TERMINATE:
                self.metrics.add(Metric.DRAINS_STARTED, 1)
            logger.info(
                "lifecycle action",
                kind=kind.value,
                instance_id=instance_id,
                group=group.name,
                cluster=self._cluster_name(action.ref),
                replaced=arrival is Arrival.REPLACE,
                deadline=record.deadline.isoformat(),
                heartbeat_timeout_s=int(record.heartbeat_timeout.total_seconds()),
            )
        return self._step(record, started=arrival.value)

    def step(self, message: DrainStepMessage, *, receipt_handle: str | None = None) -> Handled:
        """The next step of a drain or launch wait, asked for by a drain-queue message.

        A step that fails is retried after the step delay: ``receipt_handle`` (the
        message's, as received) is made visible again that soon, since the queue's
        own visibility timeout is longer than a terminate hook waits.
        """
        try:
            return self._step_message(message)
        except Exception:
            if receipt_handle is not None:
                self._retry_soon(message, receipt_handle)
            raise

    def lease(self, receipt_handles: Sequence[str], *, time_left: timedelta) -> None:
        """Should this invocation die with these step messages, they come back a step delay after it.

        Asked before any step is taken: a killed invocation (a timeout, out of
        memory) cannot ask anything, and the queue's own visibility timeout is
        longer than a terminate hook waits. A message whose step ends is deleted
        (done) or asked back sooner (failed) anyway.
        """
        handles = [h for h in receipt_handles if h]
        if not handles:
            return
        try:
            self.queue.retry_after(handles, delay=time_left + self.config.policy.step_delay)
        except SquallError as exc:
            logger.warning(
                "could not shorten the drain steps' visibility", steps=len(handles), error=str(exc)
            )

    def _retry_soon(self, message: DrainStepMessage, receipt_handle: str) -> None:
        delay = self.config.policy.step_delay
        try:
            self.queue.retry_after([receipt_handle], delay=delay)
        except SquallError as exc:
            # The message still comes back, after the queue's visibility timeout.
            logger.warning(
                "could not hasten a failed drain step", instance_id=message.instance_id, error=str(exc)
            )
            return
        logger.info(
            "failed drain step retried soon",
            instance_id=message.instance_id,
            step_id=message.step_id,
            retry_in_s=int(delay.total_seconds()),
        )

    def _step_message(self, message: DrainStepMessage) -> Handled:
        record = self.drains.get(message.instance_id)
        verdict = drain.verdict(record, step_id=message.step_id, version=message.version)
        if verdict is Verdict.EARLY:
            raise StepMessageEarly(
                f"drain {message.instance_id}: step {message.step_id} of version {message.version} "
                f"is ahead of the record (version {record.version if record else '-'})"
            )
        if verdict is not Verdict.RUN:
            logger.info(
                "drain step message dropped",
                verdict=verdict.value,
                instance_id=message.instance_id,
                step_id=message.step_id,
                version=message.version,
            )
            return Handled(verdict.value, message.instance_id, record)
        assert record is not None
        return self._step(record, started="step")

    # ---- one step ---------------------------------------------------------------

    def _step(self, record: DrainRecord, *, started: str) -> Handled:
        now = self.clock.now()
        before = record
        cluster_name = self._cluster_name(record.action.ref)
        cluster = self.clusters.get(cluster_name)
        if cluster is None:
            # Settings name only configured clusters; a group moved since the drain began
            # is waited on, as an unreachable API is, until the deadline answers for it.
            decision = drain.decide_unobserved(
                record,
                error=f"its group's cluster {cluster_name!r} is not configured",
                now=now,
                policy=self.config.policy,
            )
        else:
            decision = self._observe_and_decide(record, cluster=cluster, cluster_name=cluster_name, now=now)
        record = decision.record
        if decision.heartbeat:
            beat = self._heartbeat(record)
            if beat is _Beat.GONE:
                return self._save(drain.action_gone(record, now=now), outcome="action-gone", decision=None)
            if beat is _Beat.FAILED:
                # The hook was not extended: the next step must try again in time.
                record = dataclasses.replace(
                    record, hook_expires_at=before.hook_expires_at, heartbeats=before.heartbeats
                )
        for job_note in decision.notes:
            self._note(job_note, record=record, now=now)
        accepted, refused = (
            self._evict(decision.evictions, cluster=cluster, instance_id=record.instance_id)
            if cluster is not None
            else (0, 0)
        )
        record = drain.evictions_done(record, accepted=accepted, refused=refused)
        if decision.complete is not None:
            record = self._complete(record, result=decision.complete, now=now)
            if decision.back_off:
                self._back_off(record, now=now)
        return self._save(record, outcome=started, decision=decision)

    def _observe_and_decide(
        self, record: DrainRecord, *, cluster: Cluster, cluster_name: str, now: datetime
    ) -> Decision:
        """Observe the node in its group's cluster and decide; an API that fails there means "not now"."""
        policy = self.config.policy
        # At most twice: a node found schedulable is cordoned, then seen again, so
        # that a pod bound just before the cordon is not missed.
        for _ in range(2):
            try:
                node = self._find_node(record, cluster=cluster)
                if record.kind is Kind.TERMINATE and not record.cause:
                    record = dataclasses.replace(record, cause=self._cause(record, node))
                pods = None
                if record.kind is Kind.TERMINATE and node is not None and node.unschedulable:
                    pods = parse_pods(cluster.list_pods(node_name=node.name))
            except (SquallError, ValueError) as exc:
                # ValueError: the API answered something we cannot parse; both mean "not now".
                logger.warning(
                    "could not observe node",
                    instance_id=record.instance_id,
                    cluster=cluster_name,
                    error=str(exc),
                )
                return drain.decide_unobserved(record, error=str(exc), now=now, policy=policy)
            decision = drain.decide(record, node=node, pods=pods, now=now, policy=policy)
            if decision.cordon is None:
                return decision
            try:
                cluster.patch_node(decision.cordon, cordon_patch(now))
            except NotFoundError:
                pass  # deleted since we looked: the next observation finds no node
            except SquallError as exc:
                logger.warning("cordon failed", node=decision.cordon, cluster=cluster_name, error=str(exc))
                return drain.decide_unobserved(
                    decision.record, error=f"cordon: {exc}", now=now, policy=policy
                )
            logger.info("node cordoned for drain", node=decision.cordon, instance_id=record.instance_id)
            record = decision.record
        return drain.decide_unobserved(
            record, error="the node is still schedulable after cordoning", now=now, policy=policy
        )

    @staticmethod
    def _find_node(record: DrainRecord, *, cluster: Cluster) -> NodeState | None:
        if record.node_name is not None:
            obj = cluster.get_node(record.node_name)
            if obj is not None or record.kind is Kind.TERMINATE:
                return drain.node_state(obj) if obj is not None else None
        # A launch waits for its node to register; a terminate looks once, at its first step.
        found = drain.find_node(cluster.list_nodes(), record.instance_id)
        return drain.node_state(found) if found is not None else None

    def _cause(self, record: DrainRecord, node: NodeState | None) -> str:
        annotation = node.annotations.get(conventions.TERMINATION_REASON_ANNOTATION) if node else None
        activity_cause = None
        if not annotation and not record.cause_hint and node is not None:
            activity_cause = self._termination_activity(record)
        return drain.termination_cause(
            annotation=annotation, hint=record.cause_hint, activity_cause=activity_cause
        )

    def _termination_activity(self, record: DrainRecord) -> str | None:
        """Auto Scaling's own reason for terminating this instance, if it can be found."""
        try:
            activities = self.fleet.recent_activities(
                [record.action.ref], since=record.started_at - _ACTIVITY_LOOKBACK
            )
        except SquallError as exc:
            logger.warning("scaling activities unavailable", instance_id=record.instance_id, error=str(exc))
            return None
        for activity in activities:
            if record.instance_id in activity.description and "terminat" in activity.description.lower():
                return activity.cause
        return None

    # ---- acting -------------------------------------------------------------------

    def _heartbeat(self, record: DrainRecord) -> _Beat:
        try:
            self.fleet.record_lifecycle_heartbeat(record.action)
        except LifecycleActionGone:
            logger.info("lifecycle action gone at heartbeat", instance_id=record.instance_id)
            return _Beat.GONE
        except SquallError as exc:
            # A heartbeat is due with a step and its slack to spare (drain._continue):
            # the next step tries again before the hook runs out.
            logger.warning("heartbeat failed", instance_id=record.instance_id, error=str(exc))
            return _Beat.FAILED
        return _Beat.RECORDED

    def _note(self, job_note: drain.JobNote, *, record: DrainRecord, now: datetime) -> None:
        """Record on a Squall job that it is losing pods; a failure never holds a drain up."""

        def change(current: Job) -> tuple[Job, Any] | None:
            if is_terminal(current.status):
                return None
            if current.reason == job_note.reason and current.updated_at >= record.started_at:
                return None  # written by an earlier try of this step
            return note(current, reason=job_note.reason, at=now, message=job_note.message)

        try:
            job = self.jobs.get(job_note.job_id)
            if job is not None:
                update_job(self.jobs, job, change)
        except SquallError as exc:
            logger.warning("could not note node loss on job", job_id=job_note.job_id, error=str(exc))

    @staticmethod
    def _evict(groups: Sequence[Sequence[PodRef]], *, cluster: Cluster, instance_id: str) -> tuple[int, int]:
        """Evict budget group by group; a refusal (429) ends its group for this step."""
        accepted = refused = 0
        for group in groups:
            for pod in group:
                try:
                    ok = cluster.evict(namespace=pod.namespace, name=pod.name)
                except NotFoundError:
                    ok = True  # gone already
                except RetryableError as exc:
                    # The API server is struggling: stop here, the next step tries again.
                    logger.warning("eviction failed", pod=pod.key, instance_id=instance_id, error=str(exc))
                    return accepted, refused + 1
                except PermanentError as exc:
                    logger.warning("eviction refused", pod=pod.key, instance_id=instance_id, error=str(exc))
                    refused += 1
                    continue
                if not ok:
                    refused += 1
                    break
                accepted += 1
        return accepted, refused

    def _complete(self, record: DrainRecord, *, result: drain.Result, now: datetime) -> DrainRecord:
        try:
            self.fleet.complete_lifecycle_action(record.action, result)
        except LifecycleActionGone:
            logger.info("lifecycle action was completed already", instance_id=record.instance_id)
            return drain.action_gone(record, now=now)
        except RetryableError:
            raise  # the step is retaken from the record as it was (nothing saved yet)
        except PermanentError as exc:
            logger.error(
                "could not complete lifecycle action", instance_id=record.instance_id, error=str(exc)
            )
            return drain.not_completed(record, error=str(exc))
        self.metrics.add(Metric.HOOKS_COMPLETED, 1)
        return record

    def _back_off(self, record: DrainRecord, *, now: datetime) -> None:
        """The launch was abandoned: the planner must skip the group for a while."""
        try:
            previous = self.scale_state.load_health().get(record.group)
            health = drain.launch_backoff(
                previous or GroupHealth(),
                failed_at=record.deadline,
                reason=record.detail,
                now=now,
                policy=self.config.planner_policy,
            )
            if health != previous:
                self.scale_state.save_health(record.group, health)
        except SquallError as exc:
            # The planner notices the same provision timeout from the instance's age.
            logger.warning("could not back the group off", group=record.group, error=str(exc))
            return
        logger.info(
            "group backed off after an abandoned launch",
            group=record.group,
            until=health.backoff_until.isoformat() if health.backoff_until else None,
            consecutive_failures=health.consecutive_failures,
        )

    # ---- saving and going on ---------------------------------------------------------

    def _save(self, record: DrainRecord, *, outcome: str, decision: Decision | None) -> Handled:
        record = dataclasses.replace(record, version=record.version + 1)
        if not record.done:
            step_id = uuid.uuid4().hex
            record = dataclasses.replace(record, next_step_id=step_id)
            assert decision is not None and decision.next_step_in is not None
            self.queue.send_step(
                DrainStepMessage(instance_id=record.instance_id, step_id=step_id, version=record.version),
                delay=decision.next_step_in,
            )
        else:
            record = dataclasses.replace(record, next_step_id="")
        try:
            self.drains.save(record)
        except ConflictError:
            # A concurrent step (a duplicate delivery) moved the drain on first; the
            # message just sent does not match its record and will be dropped.
            logger.info("drain step lost a race", instance_id=record.instance_id)
            return Handled("raced", record.instance_id, record)
        self._report(record)
        return Handled(outcome, record.instance_id, record)

    def _report(self, record: DrainRecord) -> None:
        fields: dict[str, Any] = {
            "instance_id": record.instance_id,
            "kind": record.kind.value,
            "group": record.group,
            "cluster": self._cluster_name(record.action.ref),
            "node": record.node_name,
            "cause": record.cause or None,
            "attempts": record.attempts,
            "pods_left": record.pods_left_count,
            "evicted": record.evicted,
            "refused": record.refused,
            "heartbeats": record.heartbeats,
        }
        if not record.done:
            logger.info("drain continues", **fields)
            return
        assert record.finished_at is not None
        logger.info(
            "lifecycle action answered",
            result=record.result,
            outcome=record.outcome.value if record.outcome else None,
            detail=record.detail,
            pods_left_names=list(record.pods_left),
            **fields,
        )
        if record.kind is Kind.TERMINATE:
            self.metrics.add(Metric.DRAINS_COMPLETED, 1)
            self.metrics.add(
                Metric.DRAIN_SECONDS, (record.finished_at - record.started_at).total_seconds(), unit="Seconds"
            )
            if record.outcome is DrainOutcome.PAST_DEADLINE:
                self.metrics.add(Metric.DRAINS_PAST_DEADLINE, 1)
        elif record.result == "ABANDON":
            self.metrics.add(Metric.LAUNCHES_ABANDONED, 1)

    def _group(self, asg_name: str, region: str) -> NodeGroup | None:
        for group in self.config.groups:
            if (group.asg_name or group.name) == asg_name and group.region == region:
                return group
        return None

    def _cluster_name(self, ref: GroupRef) -> str:
        """The cluster whose nodes the group's instances are: the group's own, else the first configured.

        With one cluster it is that one, whatever the group calls it.
        """
        group = self._group(ref.name, ref.region)
        if group is not None and group.cluster and len(self.clusters) > 1:
            return group.cluster
        return next(iter(self.clusters), "")


def _heartbeat_timeout(metadata: dict[str, Any], *, instance_id: str) -> timedelta | None:
    """The hook's heartbeat timeout, when its NotificationMetadata carries {"heartbeatTimeout": seconds}."""
    raw = metadata.get("heartbeatTimeout")
    if raw is None:
        return None
    try:
        timeout = timedelta(seconds=float(raw))
    except (TypeError, ValueError):
        timeout = timedelta(0)
    low, high = _HEARTBEAT_RANGE
    if not low <= timeout <= high:
        logger.warning(
            "ignoring heartbeatTimeout in NotificationMetadata", value=raw, instance_id=instance_id
        )
        return None
    return timeout


def _cause_hint(metadata: dict[str, Any], *, destination: str | None) -> str:
    """What the event itself says about why the instance goes."""
    reason = metadata.get("terminationReason")
    if isinstance(reason, str) and reason.strip():
        return reason.strip()
    if destination == "WarmPool":
        return "warm-pool"
    return ""
