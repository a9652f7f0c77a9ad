"""The Job controller: one pod per Job, failures against backoffLimit, deadlines, TTLs.

Models (batch/v1): the defaults the API server fills in
on a Job; one pod created as soon as the Job exists; a failed pod judged by the Job's
podFailurePolicy rules in order (the first rule that matches decides: FailJob,
Ignore, Count), counted against backoffLimit and re-created after an exponential
back-off (10 s doubling, at most 6 minutes); the Job failed at activeDeadlineSeconds;
a finished Job's running pods deleted (and counted as failed); a finished Job deleted
ttlSecondsAfterFinished later; a deleted Job's pods deleted with it.

Suspend (batch/v1, 1.30): a Job created with spec.suspend true gets no pod and no
status.startTime; resuming it creates its pod and sets startTime to the resume time,
from which activeDeadlineSeconds counts, so time spent suspended is not counted;
suspending a running Job deletes its active pod (not counted as a failure) and
clears startTime; the Suspended condition (JobSuspended / JobResumed) and the
Suspended and Resumed events. What a patch may change: job_updates.py.

Leaves out: parallelism and completions other than 1 (refused), Indexed completion,
backoffLimitPerIndex, successPolicy, the FailIndex action, and the grace period
of pods deleted on suspension (they go at once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from squall.conventions import JOB_ID_LABEL, MANAGED_BY_LABEL
from squall.core.errors import PermanentError
from squall.local.cluster.conditions import changed_condition
from squall.local.cluster.job_updates import patched_job
from squall.local.cluster.parsing import parse_template
from squall.local.cluster.pods import PodLifecycle
from squall.local.cluster.state import (
    RUNNING,
    SUCCEEDED,
    TERMINAL,
    ClusterState,
    Key,
    StoredJob,
    StoredPod,
    discard,
)
from squall.local.cluster.views import thaw_manifest
from squall.ports import KubeObject

_DEFAULT_BACKOFF_LIMIT = 6
# Kubernetes re-creates a failed Job's pod after 10 s, doubling up to 6 min.
_BACKOFF_CAP = timedelta(minutes=6)


class JobController:
    def __init__(self, state: ClusterState, pods: PodLifecycle, *, pod_backoff: timedelta) -> None:
        self._state = state
        self._pods = pods
        self._pod_backoff = pod_backoff

    def create(self, key: Key, manifest: Mapping[str, Any]) -> None:
        state = self._state
        obj = thaw_manifest(manifest)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise PermanentError("spec is required")
        for count in ("parallelism", "completions"):
            if spec.get(count, 1) != 1:
                raise PermanentError(f"the simulated cluster runs one pod per Job; spec.{count} must be 1")
        template = spec.get("template")
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            raise PermanentError("spec.template.spec is required")
        pod_spec: dict[str, Any] = template["spec"]
        if not pod_spec.get("containers"):
            raise PermanentError("spec.template.spec.containers is required")
        policy = spec.get("podFailurePolicy")
        if policy is not None and pod_spec.get("restartPolicy") != "Never":
            raise PermanentError("spec.podFailurePolicy needs spec.template.spec.restartPolicy Never")
        suspended = spec.get("suspend", False)
        if suspended is None:
            suspended = False
        if not isinstance(suspended, bool):
            raise PermanentError(f"spec.suspend must be a boolean, not {suspended!r}")
        backoff_limit = spec.get("backoffLimit")
        if backoff_limit is None:
            backoff_limit = _DEFAULT_BACKOFF_LIMIT
        deadline_seconds = spec.get("activeDeadlineSeconds")
        ttl_seconds = spec.get("ttlSecondsAfterFinished")
        for label, value in (
            ("backoffLimit", backoff_limit),
            ("activeDeadlineSeconds", deadline_seconds),
            ("ttlSecondsAfterFinished", ttl_seconds),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise PermanentError(f"spec.{label} must be a non-negative integer")

        now = state.now()
        labels = dict(obj["metadata"].get("labels") or {})
        obj["metadata"].update(state.new_metadata(name=key[1], namespace=key[0], at=now, labels=labels))
        uid = obj["metadata"]["uid"]
        controller_labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": key[1],
            "controller-uid": uid,
            "job-name": key[1],
        }
        template.setdefault("metadata", {})
        pod_labels = {**(template["metadata"].get("labels") or {}), **controller_labels}
        template["metadata"]["labels"] = pod_labels
        spec.update(
            parallelism=1,
            completions=1,
            backoffLimit=backoff_limit,
            completionMode=spec.get("completionMode", "NonIndexed"),
            suspend=suspended,
            podReplacementPolicy="Failed" if policy is not None else "TerminatingOrFailed",
            selector={"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            manualSelector=False,
        )
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        # Parsing can refuse the Job (bad quantities): do it before anything is stored.
        parsed = parse_template(pod_spec, namespace=key[0], labels=pod_labels)

        job = StoredJob(
            key=key,
            obj=obj,
            job_id=labels.get(JOB_ID_LABEL),
            managed=labels.get(MANAGED_BY_LABEL) == "squall",
            template=parsed,
            pod_labels=pod_labels,
            pod_spec=pod_spec,
            backoff_limit=backoff_limit,
            rules=list((policy or {}).get("rules") or []),
            suspended=suspended,
            started_at=None,
            deadline_seconds=deadline_seconds,
            deadline=None,
            ttl=timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None,
        )
        state.jobs[key] = job
        state.jobs_created += 1
        state.priorities.add(parsed.priority)
        if job.job_id is not None:
            state.jobs_by_id.setdefault(job.job_id, {})[key] = None
        # The Job controller reacts within milliseconds: the pod exists once create returns.
        if suspended:
            self._set_suspended_condition(job, suspended=True, at=now)
            state.write_job_status(job)
        else:
            self._start(job, at=now)

    # ---- suspend and resume, and the patches that do them ----

    def patch(self, job: StoredJob, patch: Mapping[str, Any]) -> KubeObject:
        """Apply a JSON merge patch as the API server would, then act as the Job controller would."""
        state = self._state
        updated = patched_job(job.obj, patch, started=job.started_at is not None)
        template = updated["spec"]["template"]
        pod_labels = dict(template["metadata"].get("labels") or {})
        parsed = job.template
        if template != job.obj["spec"]["template"]:
            # Only scheduling directives can have changed, and only while no pod exists.
            parsed = parse_template(template["spec"], namespace=job.key[0], labels=pod_labels)
        labels = dict(updated["metadata"].get("labels") or {})
        job_id = labels.get(JOB_ID_LABEL)
        if job_id != job.job_id:
            self._reindex(job, job_id)
        job.managed = labels.get(MANAGED_BY_LABEL) == "squall"
        job.obj = updated
        job.template = parsed
        job.pod_labels = pod_labels
        job.pod_spec = template["spec"]
        state.touch(job)
        now = state.now()
        suspend = bool(updated["spec"]["suspend"])
        if suspend != job.suspended and job.finished is None:
            if suspend:
                self._suspend(job, at=now)
            else:
                self._resume(job, at=now)
        job.suspended = suspend
        return job.obj

    def _start(self, job: StoredJob, *, at: datetime) -> None:
        """status.startTime is now, the deadline counts from it, and the pod is created."""
        job.started_at = at
        job.deadline = (
            at + timedelta(seconds=job.deadline_seconds) if job.deadline_seconds is not None else None
        )
        if job.deadline is not None:
            self._state.push(job.deadline, "deadline", job)
        self._pods.create(job, at=at)

    def _suspend(self, job: StoredJob, *, at: datetime) -> None:
        state = self._state
        # Deleted on suspension, not failed: they count neither as failed nor against backoffLimit.
        for key in list(job.pods):
            pod = state.pods[key]
            if pod.phase not in TERMINAL:
                self._pods.remove(pod)
        job.active = None
        job.replacement_due = None
        job.started_at = None
        job.deadline = None
        self._set_suspended_condition(job, suspended=True, at=at)
        state.write_job_status(job)

    def _resume(self, job: StoredJob, *, at: datetime) -> None:
        job.suspended = False
        self._set_suspended_condition(job, suspended=False, at=at)
        self._start(job, at=at)

    def _set_suspended_condition(self, job: StoredJob, *, suspended: bool, at: datetime) -> None:
        condition = changed_condition(
            "Suspended",
            true=suspended,
            at=at,
            reason="JobSuspended" if suspended else "JobResumed",
            message="Job suspended" if suspended else "Job resumed",
        )
        for index, existing in enumerate(job.conditions):
            if existing.get("type") == "Suspended":
                job.conditions[index] = condition
                break
        else:
            job.conditions.append(condition)
        self._state.event(
            at, "Job", job.key[0], job.key[1], "Suspended" if suspended else "Resumed", condition["message"]
        )

    def _reindex(self, job: StoredJob, job_id: str | None) -> None:
        state = self._state
        if job.job_id is not None:
            discard(state.jobs_by_id, job.job_id, job.key)
            for key in job.pods:
                discard(state.pods_by_id, job.job_id, key)
        if job_id is not None:
            state.jobs_by_id.setdefault(job_id, {})[job.key] = None
            for key in job.pods:
                state.pods_by_id.setdefault(job_id, {})[key] = None
        job.job_id = job_id

    def on_pod_terminal(self, pod: StoredPod, at: datetime, counts: Counter[str] | None = None) -> None:
        """The answer to one of the Job's pods reaching Succeeded or Failed."""
        job = pod.owner
        assert isinstance(job, StoredJob)
        if job.active is pod:
            job.active = None
        if job.finished is not None or job.deleted:
            self._state.write_job_status(job)
            return
        if pod.phase == SUCCEEDED:
            job.succeeded += 1
            self.finish(
                job,
                "Complete",
                reason="CompletionsReached",
                message="Reached expected number of succeeded pods",
                at=at,
                counts=counts,
            )
            return
        action, message = policy_action(job.rules, pod)
        if action == "FailJob":
            job.failed += 1
            self.finish(job, "Failed", reason="PodFailurePolicy", message=message, at=at, counts=counts)
        elif action == "Ignore":
            self._replace(job, at=at, delay=timedelta(0))
        else:
            job.failed += 1
            if job.failed > job.backoff_limit:
                self.finish(
                    job,
                    "Failed",
                    reason="BackoffLimitExceeded",
                    message="Job has reached the specified backoff limit",
                    at=at,
                    counts=counts,
                )
            else:
                delay = min(self._pod_backoff * (2 ** (job.failed - 1)), _BACKOFF_CAP)
                self._replace(job, at=at, delay=delay)

    def _replace(self, job: StoredJob, *, at: datetime, delay: timedelta) -> None:
        if delay <= timedelta(0):
            self._pods.create(job, at=at)
            return
        job.replacement_due = at + delay
        self._state.push(job.replacement_due, "replace", job)
        self._state.write_job_status(job)

    def finish(
        self,
        job: StoredJob,
        kind: str,
        *,
        reason: str,
        message: str,
        at: datetime,
        counts: Counter[str] | None = None,
    ) -> None:
        state = self._state
        job.finished = kind
        job.replacement_due = None
        if kind == "Complete":
            job.completed_at = at
        job.conditions.append(changed_condition(kind, true=True, at=at, reason=reason, message=message))
        # A finished Job deletes its pods that still run; Kubernetes counts them as failed.
        for key in list(job.pods):
            pod = state.pods[key]
            if pod.phase not in TERMINAL:
                job.failed += 1
                self._pods.remove(pod)
        job.active = None
        state.write_job_status(job)
        if job.ttl is not None:
            state.push(at + job.ttl, "ttl", job)
        if counts is not None:
            counts["jobs_finished"] += 1
        state.event(at, "Job", job.key[0], job.key[1], "Completed" if kind == "Complete" else reason, message)

    def delete(self, job: StoredJob, *, at: datetime, reason: str) -> None:
        state = self._state
        for key in list(job.pods):
            self._pods.remove(state.pods[key])
        job.deleted = True
        job.active = None
        del state.jobs[job.key]
        if job.job_id is not None:
            discard(state.jobs_by_id, job.job_id, job.key)
        state.event(at, "Job", job.key[0], job.key[1], reason)

    # ---- time-driven: pods finishing, deadlines, re-creations, TTLs ----

    def still_due(self, at: datetime, kind: str, target: StoredPod | StoredJob) -> bool:
        if isinstance(target, StoredPod):
            return not target.deleted and target.phase == RUNNING and target.ends_at == at
        if target.deleted:
            return False
        if kind == "deadline":
            # A suspension clears the deadline, a resume sets a new one: an older entry is void.
            return target.finished is None and target.deadline == at
        if kind == "replace":
            return target.finished is None and target.replacement_due == at and target.active is None
        return target.finished is not None  # ttl

    def handle_due(
        self, at: datetime, kind: str, target: StoredPod | StoredJob, counts: Counter[str]
    ) -> None:
        """One entry of the cluster's timetable that `still_due` said holds."""
        if isinstance(target, StoredPod):
            self._pods.finish(target, at=at, counts=counts)
        elif kind == "deadline":
            self.finish(
                target,
                "Failed",
                reason="DeadlineExceeded",
                message="Job was active longer than specified deadline",
                at=at,
                counts=counts,
            )
        elif kind == "replace":
            self._pods.create(target, at=at)
        else:
            self.delete(target, at=at, reason="TTLExpired")


def policy_action(rules: list[dict[str, Any]], pod: StoredPod) -> tuple[str, str]:
    """The podFailurePolicy rule that decides a failed pod's fate: first match wins."""
    status = pod.obj["status"]
    namespace, name = pod.key
    for index, rule in enumerate(rules):
        action = str(rule.get("action", "Count"))
        on_exit = rule.get("onExitCodes")
        if on_exit is not None:
            for container in status.get("containerStatuses") or []:
                terminated = (container.get("state") or {}).get("terminated")
                if not terminated or terminated.get("exitCode", 0) == 0:
                    continue
                if on_exit.get("containerName") not in (None, container.get("name")):
                    continue
                code = terminated["exitCode"]
                listed = code in (on_exit.get("values") or [])
                if listed == (on_exit.get("operator") == "In"):
                    return action, (
                        f"Container {container.get('name')} for pod {namespace}/{name} failed with exit code "
                        f"{code} matching {action} rule at index {index}"
                    )
        elif rule.get("onPodConditions") is not None:
            for wanted in rule["onPodConditions"]:
                for condition in status.get("conditions") or []:
                    if condition.get("type") == wanted.get("type") and condition.get("status") == wanted.get(
                        "status", "True"
                    ):
                        return action, (
                            f"Pod {namespace}/{name} has condition {wanted.get('type')} matching {action} "
                            f"rule at index {index}"
                        )
    return "Count", ""
