"""What a model service's Deployment and pods say about it. Pure.

Reconcile lists a service's Deployment and pods and asks `observe_serving`: how many
replicas are ready, and whether the service has failed for good, with a reason code
from `ServiceReason` and a message:

- ImagePullBackOff: a container (init or not) cannot get its image.
- ModelNotFound: ``fetch-model`` (or the server) exited 2: there is no SavedModel at
  the model URI. Pods restart (restartPolicy Always), so the exit is found in
  ``lastState`` as well as ``state``.
- ModelLoadFailed: a container restarted MAX_RESTARTS times or more for any other reason.
- ProgressDeadlineExceeded: the Deployment gave up (condition Progressing False).

A pod that is being deleted counts for nothing: it is going, and its replacement
says what the service does now.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from squall.core.kubestatus import IMAGE_ERRORS
from squall.core.serving import ServiceReason
from squall.core.serving_manifests import FETCH_CONTAINER, FETCH_NO_SAVED_MODEL_EXIT, SERVING_CONTAINER

MAX_RESTARTS = 3
MAX_MESSAGE = 300
PROGRESS_DEADLINE_REASON = "ProgressDeadlineExceeded"


@dataclass(frozen=True)
class ServingObservation:
    ready: int  # replicas ready to answer (at most the Deployment's replicas)
    failure: tuple[str, str] | None = None  # (ServiceReason code, message): the service has failed


def observe_serving(deployment: dict[str, Any] | None, pods: Sequence[dict[str, Any]]) -> ServingObservation:
    """The ready replicas of one model service, and its failure if it has failed."""
    live = [pod for pod in pods if not (pod.get("metadata") or {}).get("deletionTimestamp")]
    ready = sum(1 for pod in live if _is_ready(pod))
    wanted = ((deployment or {}).get("spec") or {}).get("replicas")
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        ready = min(ready, max(wanted, 0))
    return ServingObservation(ready=ready, failure=_failure(deployment, live))


def _failure(deployment: dict[str, Any] | None, pods: Sequence[dict[str, Any]]) -> tuple[str, str] | None:
    statuses = [(pod, status) for pod in pods for status in _container_statuses(pod)]
    for pod, status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_ERRORS:
            detail = _clip(waiting.get("message") or waiting["reason"])
            return ServiceReason.IMAGE_PULL_BACK_OFF, f"{_where(pod, status)}: {detail}"
    for pod, status in statuses:
        if status.get("name") not in (FETCH_CONTAINER, SERVING_CONTAINER):
            continue
        for terminated in _terminations(status):
            if terminated.get("exitCode") == FETCH_NO_SAVED_MODEL_EXIT:
                detail = _clip(terminated.get("message") or "no SavedModel at the model URI")
                return ServiceReason.MODEL_NOT_FOUND, f"{_where(pod, status)} exited 2: {detail}"
    for pod, status in statuses:
        restarts = status.get("restartCount")
        if isinstance(restarts, int) and restarts >= MAX_RESTARTS:
            last = next(_terminations(status), {})
            detail = f"exit {last.get('exitCode')} ({last.get('reason') or 'unknown'})"
            if last.get("message"):
                detail += f": {_clip(last['message'])}"
            return (
                ServiceReason.MODEL_LOAD_FAILED,
                f"{_where(pod, status)} restarted {restarts} times; last {detail}",
            )
    for condition in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "Progressing"
            and condition.get("status") == "False"
            and condition.get("reason") == PROGRESS_DEADLINE_REASON
        ):
            return ServiceReason.PROGRESS_DEADLINE_EXCEEDED, _clip(
                condition.get("message") or "the Deployment made no progress within its deadline"
            )
    return None


def _container_statuses(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            if isinstance(container, dict):
                yield container


def _terminations(status: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The container's terminations the API server keeps: the current one, then the last."""
    for key in ("state", "lastState"):
        terminated = (status.get(key) or {}).get("terminated")
        if isinstance(terminated, dict):
            yield terminated


def _is_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _where(pod: dict[str, Any], status: dict[str, Any]) -> str:
    return f"pod {(pod.get('metadata') or {}).get('name')} container {status.get('name')}"


def _clip(text: Any) -> str:
    value = " ".join(str(text).split())
    return value if len(value) <= MAX_MESSAGE else value[: MAX_MESSAGE - 1] + "…"
