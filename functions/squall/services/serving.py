"""Model services: their Kubernetes objects made and removed, and their records kept in line with them.

Intake creates a model service (services/intake.py: record first, then objects); this
module holds what intake and reconcile both do to the objects, and the reconciler the
reconcile function runs every minute:

- every DEPLOYING or SERVING record is compared with its Deployment, pods and Service:
  the Deployment (or Service) gone → the objects are created again (``ObjectsRecreated``);
  a Service under the Deployment's name that is not the service's (its labels say
  whose it is) → FAILED (``ClusterRefused``), that Service neither adopted nor deleted;
  a failure seen on the pods → FAILED with its reason, objects deleted; every replica
  ready and the endpoints known → SERVING (``Ready:<r>/<n>``); a SERVING service with
  fewer ready → DEPLOYING (``Unready:<r>/<n>``). A record is written only when it changes;
- a managed Deployment whose record is not live (or is missing, or names another
  namespace) loses its objects.

Objects are found by their labels, never by the name they would be given now: a service
made before its objects were named ``<name>-model`` keeps its ``model-<name>`` objects,
read under the Deployment's own name, until something of it must be made again; then
the old objects go first, so one service never has two Deployments or budgets.

Work per run is bounded by construction: one list of Deployments, the live records, and
for at most MAX_SERVICES_PER_RUN services (taken in turn by name, so every one is
looked at) their pods and Service; at most MAX_ORPHANS_PER_RUN orphans are removed. A
failure on one service is that service's: the others are reconciled all the same.
"""

from __future__ import annotations

import bisect
import functools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger

from squall.conventions import MODEL_SERVICE_LABEL
from squall.core.errors import MAX_ERROR_TEXT, ConflictError, PermanentError, RetryableError
from squall.core.manifests import name_taken, owned_alike
from squall.core.serving import (
    CLEARED_OBSERVATIONS,
    LEGACY_OBJECT_PREFIX,
    LIVE,
    ModelService,
    ServiceEvent,
    ServiceReason,
    ServiceStatus,
    object_name,
    transition_service,
)
from squall.core.serving_manifests import render_model_service, service_endpoints
from squall.core.serving_status import observe_serving
from squall.core.settings import ServingSettings
from squall.core.telemetry import SERVICE
from squall.ports import Clock, KubeObject, ModelServiceStore, SavedModels, ServingCluster
from squall.services.versioned import CREATE_GRACE, update_record

logger = Logger(service=SERVICE, child=True)

# Live records one run reads, per state: far beyond what one installation serves.
MAX_LIVE_SERVICES = 10_000
# Services whose pods and Service one run reads (two API calls each); the rest are next.
MAX_SERVICES_PER_RUN = 200
MAX_ORPHANS_PER_RUN = 50


@dataclass(frozen=True)
class ModelServing:
    """What model services need: their records, the SavedModels, the cluster's serving side, the settings."""

    store: ModelServiceStore
    saved_models: SavedModels
    cluster: ServingCluster
    settings: ServingSettings

    def create_objects(self, service: ModelService) -> int:
        """Create the service's Deployment, Service and PodDisruptionBudget; returns how many were new.

        Those that exist are kept (creating is idempotent). PermanentError when serving is
        not configured or the API server refuses an object.
        """
        not_configured = self.settings.not_configured
        if not_configured is not None:
            raise PermanentError(not_configured)
        return sum(
            1
            for manifest in render_model_service(service, settings=self.settings)
            if self.cluster.create(manifest)
        )

    def delete_objects(self, service: ModelService) -> int:
        return self.cluster.delete_model_service_objects(
            namespace=service.namespace, model_service=service.name
        )

    def record(
        self,
        service: ModelService,
        *,
        to: ServiceStatus,
        reason: str,
        at: datetime,
        message: str = "",
        **changes: Any,
    ) -> ModelService | None:
        """Move the service to `to` if its record is still the version read; None when it changed meanwhile.

        A record someone else changed since (an unserve, another run) is decided on again
        when it is next read, not overwritten on what this one saw.
        """

        def change(current: ModelService) -> tuple[ModelService, ServiceEvent] | None:
            if current.version != service.version:
                return None
            return transition_service(
                current, to=to, reason=reason, at=at, message=message[:MAX_ERROR_TEXT], **changes
            )

        return update_record(
            self.store, service, key=service.name, what=f"model service {service.name}", change=change
        )

    def fail(self, service: ModelService, *, reason: str, message: str, at: datetime) -> ModelService | None:
        """FAILED with the reason, then its objects deleted; None (nothing done) when the record changed meanwhile.

        Should the delete not happen now, reconcile deletes the objects of a record that is not live.
        """
        failed = self.record(
            service, to=ServiceStatus.FAILED, reason=reason, message=message, at=at, **CLEARED_OBSERVATIONS
        )
        if failed is not None:
            self.delete_objects(service)
        return failed


@dataclass
class ServingReport:
    live: Counter[str] = field(default_factory=Counter)  # the live records read, by state
    transitions: Counter[str] = field(default_factory=Counter)
    recreated: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)  # services whose objects were deleted
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "live": dict(self.live),
            "transitions": dict(self.transitions),
            "recreated": self.recreated,
            "cleaned": self.cleaned,
            "errors": self.errors,
        }


@dataclass
class ServingMemory:
    """Where the last run of this process stopped, when there were more live services than one run reads."""

    after: str | None = None


@dataclass
class ServingReconciler:
    serving: ModelServing
    clock: Clock
    memory: ServingMemory = field(default_factory=ServingMemory)

    def run(self) -> ServingReport:
        report = ServingReport()
        cluster, store = self.serving.cluster, self.serving.store
        # The Deployments first, the records after: intake writes a record before its
        # objects, so every Deployment listed here has its live record among those read next.
        deployments: dict[tuple[str, str], KubeObject] = {}
        for listed in cluster.list_deployments():
            key = _service_key(listed)
            if key is not None:
                deployments[key] = listed
        live = [
            service
            for status in (ServiceStatus.DEPLOYING, ServiceStatus.SERVING)
            for service in store.list_by_status(status, limit=MAX_LIVE_SERVICES)
        ]
        report.live.update(service.status.value for service in live)
        by_name = {service.name: service for service in live}
        orphans = [
            key
            for key in sorted(deployments)
            if (record := by_name.get(key[1])) is None or record.namespace != key[0]
        ]
        for namespace, name in orphans[:MAX_ORPHANS_PER_RUN]:
            self._isolated(name, report, functools.partial(self._orphan, namespace, name, report))
        for service in self._turn(live):
            deployment = deployments.get((service.namespace, service.name))
            step = functools.partial(self._service, service, deployment, report)
            self._isolated(service.name, report, step, fail=service)
        return report

    def _turn(self, live: list[ModelService]) -> list[ModelService]:
        """The services this run looks at: all of them, or the next MAX_SERVICES_PER_RUN by name."""
        ordered = sorted(live, key=lambda s: s.name)
        if len(ordered) <= MAX_SERVICES_PER_RUN:
            self.memory.after = None
            return ordered
        start = bisect.bisect_right([s.name for s in ordered], self.memory.after) if self.memory.after else 0
        chosen = (ordered[start:] + ordered[:start])[:MAX_SERVICES_PER_RUN]
        self.memory.after = chosen[-1].name
        return chosen

    # ---- one service's failure stays that service's ----------------------------

    def _isolated(
        self, name: str, report: ServingReport, step: Callable[[], None], *, fail: ModelService | None = None
    ) -> None:
        """Run one step; the platform being unavailable is left for the next run, a defect fails the service."""
        try:
            step()
        except (RetryableError, ConflictError) as exc:
            report.errors.append(f"{name}: {exc}"[:MAX_ERROR_TEXT])
            logger.warning(
                "reconcile failed for model service", model_service=name, error=str(exc)[:MAX_ERROR_TEXT]
            )
        except Exception as exc:
            reason = f"{ServiceReason.RECONCILE_ERROR}:{type(exc).__name__}"
            report.errors.append(f"{name}: {reason}: {exc}"[:MAX_ERROR_TEXT])
            logger.exception(
                "reconcile failed for model service; failing it", model_service=name, reason=reason
            )
            if fail is None:
                return
            try:
                if self.serving.fail(
                    fail,
                    reason=reason,
                    message=f"reconcile could not handle this service: {exc}",
                    at=self.clock.now(),
                ):
                    report.transitions[ServiceStatus.FAILED.value] += 1
                    report.cleaned.append(name)
            except Exception:
                # Recording is best effort; the log above already tells.
                logger.exception("could not record the failure on the model service", model_service=name)

    # ---- orphans ------------------------------------------------------------

    def _orphan(self, namespace: str, name: str, report: ServingReport) -> None:
        record = self.serving.store.get(name)  # the live list may have been cut at its bound, or moved on
        if record is not None and record.status in LIVE and record.namespace == namespace:
            return
        deleted = self.serving.cluster.delete_model_service_objects(namespace=namespace, model_service=name)
        logger.info(
            "orphaned model service objects deleted", model_service=name, namespace=namespace, deleted=deleted
        )
        report.cleaned.append(name)

    # ---- one live service -----------------------------------------------------

    def _service(self, service: ModelService, deployment: KubeObject | None, report: ServingReport) -> None:
        now = self.clock.now()
        cluster = self.serving.cluster
        if deployment is None:
            if now - service.updated_at >= CREATE_GRACE:
                self._recreate(service, report, missing="Deployment")
            return
        pods = cluster.list_model_service_pods(namespace=service.namespace, model_service=service.name)
        seen = observe_serving(deployment, pods)
        if seen.failure is not None:
            reason, message = seen.failure
            if self.serving.fail(service, reason=reason, message=message, at=now):
                report.transitions[ServiceStatus.FAILED.value] += 1
                report.cleaned.append(service.name)
                logger.info("model service failed", model_service=service.name, reason=reason)
            return
        # The Service has the Deployment's name, whichever naming made them.
        name = (deployment.get("metadata") or {}).get("name") or object_name(service.name)
        kube_service = cluster.get_service(namespace=service.namespace, name=name)
        if kube_service is None:
            self._recreate(service, report, missing="Service", deployment=deployment)
            return
        if not owned_alike(deployment, kube_service):
            # Another's Service under this name (a job's, from before the names could not meet).
            message = name_taken({"kind": "Service", "metadata": deployment.get("metadata")}, kube_service)
            if self.serving.fail(service, reason=ServiceReason.CLUSTER_REFUSED, message=message, at=now):
                report.transitions[ServiceStatus.FAILED.value] += 1
                report.cleaned.append(service.name)
            return
        ready, wanted = seen.ready, service.replicas
        endpoints = service_endpoints(kube_service) if ready >= wanted else None
        rest_url, grpc_target = endpoints or (service.rest_url, service.grpc_target)
        to = ServiceStatus.SERVING if endpoints is not None else ServiceStatus.DEPLOYING
        if (to, ready, rest_url, grpc_target) == (
            service.status,
            service.ready_replicas,
            service.rest_url,
            service.grpc_target,
        ):
            return
        if ready >= wanted:
            reason = f"{ServiceReason.READY}:{ready}/{wanted}"
            message = "" if endpoints else "every replica ready; waiting for the Service's address"
        else:
            reason = f"{ServiceReason.UNREADY}:{ready}/{wanted}"
            message = ""
        if self.serving.record(
            service,
            to=to,
            reason=reason,
            at=now,
            message=message,
            ready_replicas=ready,
            rest_url=rest_url,
            grpc_target=grpc_target,
        ):
            report.transitions[to.value] += 1

    def _recreate(
        self,
        service: ModelService,
        report: ServingReport,
        *,
        missing: str,
        deployment: KubeObject | None = None,
    ) -> None:
        now = self.clock.now()
        if self._has_legacy_objects(service, deployment):
            # Made under the old names: they go (by label) before the new ones come, or the
            # service would have two Deployments, or two budgets, over the same pods.
            self.serving.delete_objects(service)
        try:
            created = self.serving.create_objects(service)
        except PermanentError as exc:
            if self.serving.fail(service, reason=ServiceReason.CLUSTER_REFUSED, message=str(exc), at=now):
                report.transitions[ServiceStatus.FAILED.value] += 1
                report.cleaned.append(service.name)
            return
        if not created:
            return  # made meanwhile (intake finishing its work): nothing was missing after all
        report.recreated.append(service.name)
        logger.info("model service objects re-created", model_service=service.name, missing=missing)
        if self.serving.record(
            service,
            to=ServiceStatus.DEPLOYING,
            reason=ServiceReason.OBJECTS_RECREATED,
            at=now,
            message=f"its {missing} was gone; {created} objects created again",
            ready_replicas=0,
        ):
            report.transitions[ServiceStatus.DEPLOYING.value] += 1

    def _has_legacy_objects(self, service: ModelService, deployment: KubeObject | None) -> bool:
        """Does the service keep objects under the names before ``<name>-model``?"""
        legacy = f"{LEGACY_OBJECT_PREFIX}{service.name}"
        if deployment is not None:
            return (deployment.get("metadata") or {}).get("name") == legacy
        found = self.serving.cluster.get_service(namespace=service.namespace, name=legacy)
        return found is not None and (_service_key(found) == (service.namespace, service.name))


def _service_key(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, model service name) of a managed object; None for one without the label."""
    metadata = obj.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(MODEL_SERVICE_LABEL)
    namespace = metadata.get("namespace")
    return (namespace, name) if isinstance(name, str) and name and isinstance(namespace, str) else None
