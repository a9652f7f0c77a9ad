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

Each service's objects live in its record's cluster (``cluster``; None, from before
clusters, is the first configured): a new one is placed by ``core.serving.choose_serving_cluster``
(``ModelServing.placed``), and reconcile, re-creation and deletion all act there. A
cluster whose Deployments cannot be listed is reported (``unreachable``) and its services
are left as they are, neither failed nor made again elsewhere; a Deployment in a cluster
that is not its record's is an orphan there.

Work per run is bounded by construction: one list of Deployments per cluster, the live records, and
for at most MAX_SERVICES_PER_RUN services (taken in turn by name, so every one is
looked at) their pods and Service; at most MAX_ORPHANS_PER_RUN orphans are removed. A
failure on one service is that service's: the others are reconciled all the same.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger

from squall.conventions import MODEL_SERVICE_LABEL
from squall.core.errors import MAX_ERROR_TEXT, ConflictError, PermanentError, RetryableError, SquallError
from squall.core.manifests import name_taken, owned_alike
from squall.core.serving import (
    CLEARED_OBSERVATIONS,
    LEGACY_OBJECT_PREFIX,
    LIVE,
    ClusterRoom,
    ModelService,
    ServiceEvent,
    ServiceReason,
    ServiceStatus,
    choose_serving_cluster,
    object_name,
    transition_service,
)
from squall.core.serving_manifests import render_model_service, service_endpoints
from squall.core.serving_status import observe_serving
from squall.core.settings import ServingSettings
from squall.core.telemetry import SERVICE
from squall.planner.kube import parse_nodes, parse_pod, parse_pods
from squall.planner.model import NodeGroup, Pod
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
    """What model services need: their records, the SavedModels, the clusters' serving side, the settings."""

    store: ModelServiceStore
    saved_models: SavedModels
    # cluster name -> its API, in configuration order (the first is a record's without `cluster`)
    clusters: Mapping[str, ServingCluster]
    settings: ServingSettings
    # the configured node groups (their `cluster`, "" for the first): where room can be bought
    groups: Sequence[NodeGroup] = ()

    def cluster_name(self, service: ModelService) -> str:
        """The cluster the service's objects are in: its record's, else the first configured."""
        return service.cluster if service.cluster is not None else self._first

    @property
    def _first(self) -> str:
        return next(iter(self.clusters), "")

    def cluster_of(self, service: ModelService) -> ServingCluster:
        """The API of the service's cluster; PermanentError when that cluster is not configured (any more)."""
        name = self.cluster_name(service)
        cluster = self.clusters.get(name)
        if cluster is None:
            raise PermanentError(
                f"model service {service.name}: its cluster {name!r} is not configured "
                f"(configured: {', '.join(map(repr, self.clusters)) or 'none'})"
            )
        return cluster

    def placed(self, service: ModelService) -> ModelService:
        """The record with the cluster chosen for it (``core.serving.choose_serving_cluster``).

        With one cluster nothing is asked of it. With more, each cluster's nodes and
        pods are listed once; one that cannot be reached is chosen only when none can,
        one that refuses the lists (its role may not read nodes) counts its groups only.
        Intake records the result before it creates any object there.
        """
        names = list(self.clusters)
        replica = _replica(service, settings=self.settings) if len(names) > 1 else None
        if replica is None:
            return dataclasses.replace(service, cluster=names[0] if names and names[0] else None)
        rooms = [self._room(name, api) for name, api in self.clusters.items()]
        chosen = choose_serving_cluster(replica, replicas=service.replicas, clusters=rooms)
        logger.info(
            "model service placed",
            model_service=service.name,
            cluster=chosen,
            unreachable=[room.name for room in rooms if not room.reachable],
        )
        return dataclasses.replace(service, cluster=chosen)

    def _room(self, name: str, api: ServingCluster) -> ClusterRoom:
        groups = [g for g in self.groups if (g.cluster or self._first) == name]
        try:
            nodes = parse_nodes(api.list_nodes())
            pods = parse_pods(api.list_pods())
        except RetryableError as exc:
            logger.warning("cluster unreachable to place a model service", cluster=name, error=str(exc))
            return ClusterRoom(name=name, groups=groups, reachable=False)
        except (SquallError, ValueError) as exc:
            # It answered, but not with its nodes (a role that may not list them, an object
            # not understood): its ready room is unknown, its groups' room still counts.
            logger.warning("cluster's nodes not read to place a model service", cluster=name, error=str(exc))
            return ClusterRoom(name=name, groups=groups)
        return ClusterRoom(name=name, nodes=nodes, pods=pods, groups=groups)

    def create_objects(self, service: ModelService) -> int:
        """Create the service's Deployment, Service and PodDisruptionBudget in its cluster; how many were new.

        Those that exist are kept (creating is idempotent). PermanentError when serving is
        not configured, the service's cluster is not, or the API server refuses an object.
        """
        not_configured = self.settings.not_configured
        if not_configured is not None:
            raise PermanentError(not_configured)
        cluster = self.cluster_of(service)
        return sum(
            1
            for manifest in render_model_service(service, settings=self.settings)
            if cluster.create(manifest)
        )

    def delete_objects(self, service: ModelService) -> int:
        """Delete the service's objects in its cluster; nothing when that cluster is not configured."""
        cluster = self.clusters.get(self.cluster_name(service))
        if cluster is None:
            logger.warning(
                "model service objects not deleted: its cluster is not configured",
                model_service=service.name,
                cluster=self.cluster_name(service),
            )
            return 0
        return cluster.delete_model_service_objects(namespace=service.namespace, model_service=service.name)

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
    # clusters whose Deployments could not be listed: their services were left as they are
    unreachable: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # the services left so, by name

    def as_dict(self) -> dict[str, Any]:
        return {
            "live": dict(self.live),
            "transitions": dict(self.transitions),
            "recreated": self.recreated,
            "cleaned": self.cleaned,
            "errors": self.errors,
            "unreachableClusters": self.unreachable,
            "left": self.left,
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
        serving = self.serving
        # The Deployments first, the records after: intake writes a record before its
        # objects, so every Deployment listed here has its live record among those read next.
        deployments: dict[str, dict[tuple[str, str], KubeObject]] = {}
        for cluster_name, cluster in serving.clusters.items():
            listed = self._deployments(cluster_name, cluster, report)
            if listed is not None:
                deployments[cluster_name] = listed
        live = [
            service
            for status in (ServiceStatus.DEPLOYING, ServiceStatus.SERVING)
            for service in serving.store.list_by_status(status, limit=MAX_LIVE_SERVICES)
        ]
        report.live.update(service.status.value for service in live)
        by_name = {service.name: service for service in live}
        orphans = [
            (cluster_name, *key)
            for cluster_name, listed in deployments.items()
            for key in sorted(listed)
            if not _owns(serving, by_name.get(key[1]), cluster=cluster_name, namespace=key[0])
        ]
        for cluster_name, namespace, name in orphans[:MAX_ORPHANS_PER_RUN]:
            step = functools.partial(self._orphan, cluster_name, namespace, name, report)
            self._isolated(name, report, step)
        for service in self._turn(live):
            listed = deployments.get(serving.cluster_name(service))
            if listed is None:
                # Its cluster did not answer (or is not configured): nothing is known of its
                # objects, so nothing is decided; the next run looks again.
                report.left.append(service.name)
                if serving.cluster_name(service) not in serving.clusters:
                    report.errors.append(
                        f"{service.name}: its cluster {serving.cluster_name(service)!r} is not configured"[
                            :MAX_ERROR_TEXT
                        ]
                    )
                continue
            deployment = listed.get((service.namespace, service.name))
            step = functools.partial(self._service, service, deployment, report)
            self._isolated(service.name, report, step, fail=service)
        return report

    @staticmethod
    def _deployments(
        name: str, cluster: ServingCluster, report: ServingReport
    ) -> dict[tuple[str, str], KubeObject] | None:
        """One cluster's managed Deployments by (namespace, service); None when it cannot be listed."""
        try:
            listed = cluster.list_deployments()
        except SquallError as exc:
            if isinstance(exc, RetryableError):
                report.unreachable.append(name)
            report.errors.append(f"cluster {name}: {exc}"[:MAX_ERROR_TEXT])
            logger.warning(
                "model services of a cluster left as they are: its Deployments could not be listed",
                cluster=name,
                error=str(exc)[:MAX_ERROR_TEXT],
            )
            return None
        deployments: dict[tuple[str, str], KubeObject] = {}
        for obj in listed:
            key = _service_key(obj)
            if key is not None:
                deployments[key] = obj
        return deployments

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

    def _orphan(self, cluster_name: str, namespace: str, name: str, report: ServingReport) -> None:
        record = self.serving.store.get(name)  # the live list may have been cut at its bound, or moved on
        if _owns(self.serving, record, cluster=cluster_name, namespace=namespace):
            return
        cluster = self.serving.clusters[cluster_name]
        deleted = cluster.delete_model_service_objects(namespace=namespace, model_service=name)
        logger.info(
            "orphaned model service objects deleted",
            model_service=name,
            namespace=namespace,
            cluster=cluster_name,
            deleted=deleted,
        )
        report.cleaned.append(name)

    # ---- one live service -----------------------------------------------------

    def _service(self, service: ModelService, deployment: KubeObject | None, report: ServingReport) -> None:
        now = self.clock.now()
        cluster = self.serving.cluster_of(service)
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
        found = self.serving.cluster_of(service).get_service(namespace=service.namespace, name=legacy)
        return found is not None and (_service_key(found) == (service.namespace, service.name))


def _owns(serving: ModelServing, record: ModelService | None, *, cluster: str, namespace: str) -> bool:
    """Is `record` a live service whose objects belong in this namespace of this cluster?"""
    return (
        record is not None
        and record.status in LIVE
        and record.namespace == namespace
        and serving.cluster_name(record) == cluster
    )


def _replica(service: ModelService, *, settings: ServingSettings) -> Pod | None:
    """One replica of the service as the planner reads a pending pod; None while serving is not configured."""
    if settings.not_configured is not None:
        return None
    deployment = render_model_service(service, settings=settings)[0]
    template = deployment["spec"]["template"]
    return parse_pod(
        {
            "kind": "Pod",
            "metadata": {"namespace": service.namespace, "name": f"{object_name(service.name)}-replica"},
            "spec": template["spec"],
        }
    )


def _service_key(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, model service name) of a managed object; None for one without the label."""
    metadata = obj.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(MODEL_SERVICE_LABEL)
    namespace = metadata.get("namespace")
    return (namespace, name) if isinstance(name, str) and name and isinstance(namespace, str) else None
