"""The Deployment controller (apps/v1) and its one ReplicaSet's part.

Models: the defaults the API server fills in on a Deployment, and what it refuses
(422 Invalid, naming the field): a selector that is missing, empty or does not match
the template's labels, no containers, a restartPolicy other than Always, replicas or
progressDeadlineSeconds out of range. One ReplicaSet per Deployment, named
`<deployment>-<pod-template-hash>` (a 10-character hash of the template), whose pods
are `<replica set>-<5 characters>`, carry the template's labels plus
`pod-template-hash`, and are created as soon as they are missing: at creation, and
whenever one is deleted, evicted or lost with its node (the ReplicaSet controller
reacts within milliseconds). The status: replicas, updatedReplicas, readyReplicas,
availableReplicas, unavailableReplicas (zeros left out, as the API leaves them out),
observedGeneration, and the conditions Available (MinimumReplicasAvailable: at most
the rolling update's maxUnavailable short, 25% of replicas rounded down by default)
and Progressing (NewReplicaSetCreated, ReplicaSetUpdated on every step forward,
NewReplicaSetAvailable once every replica is available, and ProgressDeadlineExceeded
(False) when no step forward was made for progressDeadlineSeconds before that).

Leaves out: template changes and rollouts (there is no patch: one ReplicaSet, ever),
scaling, minReadySeconds (available = ready), ReplicaSets as objects one can list,
pod deletion cost, and the controller's slow-start batches (every missing pod is
created at once).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from squall.conventions import MANAGED_BY_LABEL, MODEL_SERVICE_LABEL
from squall.core.errors import PermanentError
from squall.local.cluster.parsing import parse_selector, parse_template
from squall.local.cluster.pods import PodLifecycle
from squall.local.cluster.state import (
    TERMINAL,
    ClusterState,
    Key,
    StoredDeployment,
    StoredPod,
    discard,
    timestamp,
)
from squall.local.cluster.views import thaw_manifest

_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' SafeEncodeString alphabet
_HASH_LENGTH = 10
# Nothing unbounded: a Deployment asking for more pods than this is refused.
MAX_REPLICAS = 10_000
_DEFAULT_PROGRESS_DEADLINE = 600
TEMPLATE_HASH_LABEL = "pod-template-hash"

AVAILABLE, PROGRESSING = "Available", "Progressing"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"


def invalid(name: str, field: str, detail: str) -> PermanentError:
    return PermanentError(f'Deployment.apps "{name}" is invalid: {field}: {detail}')


class DeploymentController:
    def __init__(self, state: ClusterState, pods: PodLifecycle) -> None:
        self._state = state
        self._pods = pods

    # ---- the API server's part ----

    def create(self, key: Key, manifest: Mapping[str, Any]) -> StoredDeployment:
        state = self._state
        name = key[1]
        obj = thaw_manifest(manifest)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise invalid(name, "spec", "Required value")
        labels = obj["metadata"].get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise invalid(name, "metadata.labels", "Invalid value: must map strings to strings")
        replicas = _whole(name, spec, "replicas", default=1, low=0, high=MAX_REPLICAS)
        deadline = _whole(
            name, spec, "progressDeadlineSeconds", default=_DEFAULT_PROGRESS_DEADLINE, low=1, high=2**31 - 1
        )
        selector = parse_selector(spec.get("selector"), field="spec.selector", empty_ok=False)
        template = spec.get("template")
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            raise invalid(name, "spec.template.spec", "Required value")
        template_metadata = template.setdefault("metadata", {})
        template_labels = template_metadata.get("labels") or {}
        if not isinstance(template_labels, dict) or not all(
            isinstance(v, str) for v in template_labels.values()
        ):
            raise invalid(name, "spec.template.metadata.labels", "Invalid value: must map strings to strings")
        if not selector.matches(template_labels):
            raise invalid(
                name,
                "spec.template.metadata.labels",
                f"Invalid value: {template_labels!r}: `selector` does not match template `labels`",
            )
        pod_spec: dict[str, Any] = template["spec"]
        if not isinstance(pod_spec.get("containers"), list) or not pod_spec["containers"]:
            raise invalid(name, "spec.template.spec.containers", "Required value")
        restart_policy = pod_spec.setdefault("restartPolicy", "Always")
        if restart_policy != "Always":
            raise invalid(
                name,
                "spec.template.spec.restartPolicy",
                f'Unsupported value: "{restart_policy}": supported values: "Always"',
            )
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        template_hash = _template_hash(template)
        pod_labels = {**template_labels, TEMPLATE_HASH_LABEL: template_hash}
        # Parsing can refuse the Deployment (bad quantities): do it before anything is stored.
        parsed = parse_template(pod_spec, namespace=key[0], labels=pod_labels)

        now = state.now()
        obj["metadata"].update(state.new_metadata(name=name, namespace=key[0], at=now, labels=dict(labels)))
        obj["metadata"]["generation"] = 1
        obj["metadata"]["annotations"] = {
            **(obj["metadata"].get("annotations") or {}),
            "deployment.kubernetes.io/revision": "1",
        }
        spec.update(replicas=replicas, progressDeadlineSeconds=deadline)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault(
            "strategy",
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
        )
        replica_set = f"{name}-{template_hash}"
        deployment = StoredDeployment(
            key=key,
            obj=obj,
            job_id=None,
            managed=labels.get(MANAGED_BY_LABEL) == "squall",
            template=parsed,
            pod_labels=pod_labels,
            pod_spec=pod_spec,
            model_service=labels.get(MODEL_SERVICE_LABEL),
            replicas=replicas,
            progress_deadline=timedelta(seconds=deadline),
            replica_set=replica_set,
            replica_set_uid=state.new_metadata(name=replica_set, namespace=key[0], at=now, labels={})["uid"],
        )
        state.deployments[key] = deployment
        state.priorities.add(parsed.priority)
        if deployment.model_service is not None:
            state.deployments_by_service.setdefault(deployment.model_service, {})[key] = None
        state.event(
            now,
            "Deployment",
            key[0],
            name,
            "ScalingReplicaSet",
            f"Scaled up replica set {replica_set} from 0 to {replicas}",
        )
        deployment.conditions = [
            _condition(
                PROGRESSING,
                True,
                at=now,
                reason="NewReplicaSetCreated",
                message=f'Created new replica set "{replica_set}"',
            )
        ]
        self._set_progress(deployment, now)
        self._reconcile(deployment, now)
        return deployment

    def delete(self, deployment: StoredDeployment) -> None:
        """The Deployment goes, its ReplicaSet and pods with it (background propagation, at once)."""
        state = self._state
        deployment.deleted = True
        for key in list(deployment.pods):
            self._pods.remove(state.pods[key])
        del state.deployments[deployment.key]
        if deployment.model_service is not None:
            discard(state.deployments_by_service, deployment.model_service, deployment.key)
        state.event(state.now(), "Deployment", deployment.key[0], deployment.key[1], "Deleted")

    # ---- the controllers' part ----

    def on_pod_terminal(self, pod: StoredPod, at: datetime, counts: Counter[str] | None = None) -> None:
        """One of its pods failed or succeeded (deleted, evicted, its node gone): a new one takes its place."""
        deployment = pod.owner
        if isinstance(deployment, StoredDeployment) and not deployment.deleted:
            self._reconcile(deployment, at)

    def on_pod_changed(self, deployment: StoredDeployment, at: datetime) -> None:
        if not deployment.deleted:
            self.write_status(deployment, at)

    def still_due(self, at: datetime, kind: str, deployment: StoredDeployment) -> bool:
        if deployment.deleted or kind != "progress" or deployment.progress_at is None:
            return False
        return deployment.progress_at + deployment.progress_deadline == at

    def handle_due(self, at: datetime, deployment: StoredDeployment) -> None:
        """The progress deadline passed since the last step forward: written as status says then."""
        self.write_status(deployment, at)

    def live_pods(self, deployment: StoredDeployment) -> list[StoredPod]:
        pods = self._state.pods
        return [pods[key] for key in deployment.pods if pods[key].phase not in TERMINAL]

    def _reconcile(self, deployment: StoredDeployment, at: datetime) -> None:
        missing = deployment.replicas - len(self.live_pods(deployment))
        for _ in range(max(missing, 0)):
            self._pods.create(deployment, at=at)
        self.write_status(deployment, at)

    def _set_progress(self, deployment: StoredDeployment, at: datetime) -> None:
        deployment.progress_at = at
        self._state.push(at + deployment.progress_deadline, "progress", deployment)

    def write_status(self, deployment: StoredDeployment, at: datetime) -> None:
        """status as the Deployment controller writes it; a new resourceVersion only when it changed."""
        live = self.live_pods(deployment)
        replicas = deployment.replicas
        ready = sum(1 for pod in live if pod.ready)
        counts = {
            "replicas": len(live),
            "updatedReplicas": len(live),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(replicas - ready, 0),
        }
        old: Mapping[str, Any] = deployment.obj.get("status") or {}
        progressed = any(
            counts[field] > int(old.get(field, 0))
            for field in ("updatedReplicas", "readyReplicas", "availableReplicas")
        )
        conditions = {c["type"]: c for c in deployment.conditions}
        max_unavailable = _max_unavailable(deployment.obj["spec"], replicas)
        available = ready >= replicas - max_unavailable
        conditions[AVAILABLE] = _changed(
            conditions.get(AVAILABLE),
            _condition(
                AVAILABLE,
                available,
                at=at,
                reason="MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                message="Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            ),
        )
        progressing = conditions.get(PROGRESSING)
        reason = progressing.get("reason") if progressing else None
        replica_set = deployment.replica_set
        # Progressing as (status, reason, message), where it changes.
        progress: tuple[bool, str, str] | None = None
        if len(live) == replicas and ready == replicas:
            if reason != NEW_RS_AVAILABLE:
                progress = (
                    True,
                    NEW_RS_AVAILABLE,
                    f'ReplicaSet "{replica_set}" has successfully progressed.',
                )
        elif progressed:
            progress = (True, "ReplicaSetUpdated", f'ReplicaSet "{replica_set}" is progressing.')
            self._set_progress(deployment, at)
        elif (
            reason not in (NEW_RS_AVAILABLE, TIMED_OUT)
            and deployment.progress_at is not None
            and at >= deployment.progress_at + deployment.progress_deadline
        ):
            progress = (False, TIMED_OUT, f'ReplicaSet "{replica_set}" has timed out progressing.')
        if progress is not None:
            true, new_reason, message = progress
            conditions[PROGRESSING] = _changed(
                progressing, _condition(PROGRESSING, true, at=at, reason=new_reason, message=message)
            )
        deployment.conditions = [conditions[kind] for kind in (AVAILABLE, PROGRESSING) if kind in conditions]
        status: dict[str, Any] = {"observedGeneration": deployment.obj["metadata"]["generation"]}
        # Zero counts are left out, as the API server's JSON leaves them out.
        status.update((field, value) for field, value in counts.items() if value)
        status["conditions"] = [dict(c) for c in deployment.conditions]
        if status != old:
            deployment.obj["status"] = status
            self._state.touch(deployment)


def _whole(name: str, spec: dict[str, Any], field: str, *, default: int, low: int, high: int) -> int:
    value = spec.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(
            name, f"spec.{field}", f"Invalid value: {value!r}: must be a whole number from {low} to {high}"
        )
    return value


def _max_unavailable(spec: Mapping[str, Any], replicas: int) -> int:
    """The rolling update's maxUnavailable (a number, or a percentage rounded down), as Available reads it."""
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    value = rolling.get("maxUnavailable", "25%")
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, 0)
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return int(value[:-1]) * replicas // 100
    return 0


def _template_hash(template: Mapping[str, Any]) -> str:
    """A 10-character pod-template-hash from the template, in Kubernetes' alphabet."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, default=str).encode()).digest()
    return "".join(_HASH_ALPHABET[byte % len(_HASH_ALPHABET)] for byte in digest[:_HASH_LENGTH])


def _condition(kind: str, true: bool, *, at: datetime, reason: str, message: str) -> dict[str, Any]:
    stamp = timestamp(at)
    return {
        "type": kind,
        "status": "True" if true else "False",
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def _changed(old: Mapping[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """`new`, keeping the old times where nothing changed (and the transition time while the status holds)."""
    if old is None:
        return new
    if all(old.get(k) == new[k] for k in ("status", "reason", "message")):
        return dict(old)
    if old.get("status") == new["status"]:
        new["lastTransitionTime"] = old.get("lastTransitionTime", new["lastTransitionTime"])
    return new
