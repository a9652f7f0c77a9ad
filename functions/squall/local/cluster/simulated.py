"""SimulatedCluster: an in-memory Kubernetes cluster for the local runtime.

It implements the `ServingCluster` port (the `Cluster` port, and the Deployments,
Services and PodDisruptionBudgets of model services) and behaves like Kubernetes wherever Squall's
services, the planner or the reconcile function depend on it, so a demo, an
end-to-end test or a replay of a 10,000-job trace exercises the same code paths as
a real cluster. This class is the façade: it owns the shared state and composes the
parts, each in its own module with what it models and leaves out:

- views.py: API-shaped answers (copies, or read-only objects shared until they
  change, as client-go's informer listers share theirs), the JSON merge patch;
- faults.py: recorded port calls, planned failures, how a job's containers behave;
- job_controller.py: one pod per Job, suspend and resume, podFailurePolicy,
  backoffLimit, deadlines, TTLs; job_updates.py: what a patch of a Job may change;
- deployments.py: a Deployment's ReplicaSet keeping its pods, its status and conditions;
- service_objects.py: a LoadBalancer Service's address, PodDisruptionBudgets from manifests;
- pods.py: pod creation, the kubelet starting containers, readiness, restarts (with
  containers.py: container statuses and the back-off), exits and disruptions;
  checkpoints.py: the trainers' checkpoints, from which a stopped job's next run resumes;
- scheduler.py: kube-scheduler's filters and MostAllocated score, pod affinity,
  PodDisruptionBudgets for evictions; index.py: its node indexes;
- nodes.py: nodes joining, readiness, GPUs, patches, removal (PodGC);
- parsing.py: a Job's pod template parsed once into what the scheduler reads.

Real pods: given a `PodRunner` (pods.py), the pods it chooses run for real (the
local runtime of `squall local up` runs the worker image's pods as local
processes: local/processes.py); every other pod keeps its simulated run time.
`advance()` polls them, so a caller with real pods advances the cluster on a
wall-clock tick: their ends are not in `next_event_time()`.

Time only moves through the injected clock: after moving it, call `advance()`;
`next_event_time()` says when something will happen on its own next, so a virtual
clock can jump straight there.

Not modelled: DaemonSets, rollouts of a changed Deployment, pod anti-affinity and preferred (scoring)
affinities, NoExecute evictions by the taint manager, termination grace periods
(a pod stops at once), namespaces as objects, and Jobs with more than one pod.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from squall.conventions import JOB_ID_LABEL, MANAGED_BY_LABEL, MODEL_SERVICE_LABEL
from squall.core.errors import NotFoundError, PermanentError
from squall.core.manifests import name_taken, owned_alike
from squall.local.cluster import service_objects
from squall.local.cluster.checkpoints import SimulatedCheckpoints
from squall.local.cluster.deployments import DeploymentController
from squall.local.cluster.faults import Behaviours, PortFaults
from squall.local.cluster.index import NodeIndex
from squall.local.cluster.job_controller import JobController
from squall.local.cluster.nodes import NodeLifecycle
from squall.local.cluster.parsing import label_selector
from squall.local.cluster.pods import PodLifecycle, PodRunner
from squall.local.cluster.scheduler import Scheduler
from squall.local.cluster.state import (
    EVICTED_BY_API,
    FAILED,
    PENDING,
    RUNNING,
    SIGTERM_EXIT_CODE,
    SUCCEEDED,
    TERMINAL,
    AdvanceSummary,
    ClusterCall,
    ClusterEvent,
    ClusterState,
    Key,
    Owner,
    Pdb,
    Stored,
    StoredDeployment,
    StoredJob,
    StoredPod,
    discard,
    non_negative,
)
from squall.local.cluster.views import ListViews, json_copy, object_view, thaw, thaw_manifest
from squall.ports import Clock, KubeObject, ServingCluster

# The one cluster's name when the configuration names none (scenarios, groups files, `squall local`).
DEFAULT_CLUSTER_NAME = "local"
# With run_for 0 and an Ignore rule a pod could fail and come back forever within
# one instant; Kubernetes would spin too, the simulator just moves on.
_MAX_ROUNDS_PER_ADVANCE = 100


class SimulatedCluster:
    """In-memory Kubernetes for what Squall uses; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Clock,
        default_run_for: timedelta = timedelta(seconds=60),
        seed: int = 0,
        pod_backoff: timedelta = timedelta(seconds=10),
        event_limit: int = 10_000,
        lists: str = "copies",
        runner: PodRunner | None = None,
        name: str = DEFAULT_CLUSTER_NAME,
        region: str = "",
        checkpoints: SimulatedCheckpoints | None = None,
    ) -> None:
        """`runner`: runs the pods it chooses for real (see pods.py); None simulates every pod.

        `checkpoints`: the work jobs' checkpoints hold (checkpoints.py); the clusters of one
        run share one, as their trainers share S3, so a job resumes wherever it runs next.

        `name` and `region`: the cluster's entry in the configuration (`clusters`), which
        the local runtime keys its clusters by; the simulation itself does not read them.

        `lists` says what list_pods, list_jobs and list_nodes hand out:

        - "copies": objects the caller owns, as every API server response is;
        - "shared": an object unchanged since the last list is the same dict again
          until its resourceVersion changes, as client-go's informer listers share
          their cache; callers must not change it. The simulator uses this: a
          replay's scale checks list every node and pod each time, and copying
          them was most of the replay's time;
        - "checked": shared, and each object handed out again is first compared
          with a fresh copy: SharedObjectChanged if a caller changed it, or the
          cluster changed an object without giving it a new resourceVersion.
        """
        self.name = name
        self.region = region
        self._state = state = ClusterState(clock=clock, seed=seed, event_limit=event_limit)
        self._views = ListViews(lists, lambda: state.resource_version)
        self._faults = PortFaults(now=state.now, name=name)
        self._behaviours = Behaviours(default_run_for=default_run_for)
        index = NodeIndex()
        self._pods = PodLifecycle(state, index, self._behaviours, runner, checkpoints)
        self._jobs = JobController(state, self._pods, pod_backoff=non_negative("pod_backoff", pod_backoff))
        self._deployments = DeploymentController(state, self._pods)
        self._pods.on_terminal = self._on_pod_terminal
        self._pods.on_changed = self._on_pod_changed
        self._runner = runner
        self._scheduler = Scheduler(state, index)
        self._nodes = NodeLifecycle(state, index, self._pods, self._scheduler)

    # What a test reads and sets directly, as on every fake.

    @property
    def next_error(self) -> Exception | None:
        """Raised (once) by the next Cluster-port call, after that call is recorded."""
        return self._faults.next_error

    @next_error.setter
    def next_error(self, error: Exception | None) -> None:
        self._faults.next_error = error

    @property
    def calls(self) -> list[ClusterCall]:
        return self._faults.calls

    @property
    def events(self) -> deque[ClusterEvent]:
        return self._state.events

    # ==== the Cluster port ===========================================================

    def create(self, manifest: KubeObject) -> bool:
        body: Mapping[str, Any] = manifest if isinstance(manifest, Mapping) else {}
        metadata = body.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        kind, api_version = body.get("kind"), body.get("apiVersion")
        name, namespace = metadata.get("name"), metadata.get("namespace")
        self._faults.record("create", kind=kind, namespace=namespace, name=name)
        if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
            raise PermanentError("metadata.name and metadata.namespace are required")
        key = (namespace, name)
        state = self._state
        # (apiVersion, kind) -> the objects of that kind by key, and how one is created.
        creators: dict[
            tuple[Any, Any], tuple[Mapping[Key, Any], Callable[[Key, Mapping[str, Any]], object]]
        ] = {
            ("batch/v1", "Job"): (state.jobs, self._jobs.create),
            ("v1", "Service"): (state.services, self._create_service),
            ("apps/v1", "Deployment"): (state.deployments, self._deployments.create),
            ("policy/v1", "PodDisruptionBudget"): (state.pdb_objects, self._create_pdb),
        }
        creator = creators.get((api_version, kind))
        if creator is None:
            raise PermanentError(f"the simulated cluster cannot create {api_version}/{kind}")
        existing, create = creator
        found = existing.get(key)
        if found is not None:
            # As the API server answers 409 AlreadyExists, and the adapter reads the object:
            # kept when it is that very job's or service's, else the name is taken.
            obj = found.obj if isinstance(found, Stored) else found
            if not owned_alike(body, obj):
                raise PermanentError(f"create {kind} {namespace}/{name}: {name_taken(body, obj)}")
            return False
        create(key, body)
        return True

    def delete_job_objects(self, *, namespace: str, job_id: str) -> int:
        self._faults.record("delete_job_objects", namespace=namespace, job_id=job_id)
        state = self._state
        deleted = 0
        for key in list(state.jobs_by_id.get(job_id, ())):
            if key[0] == namespace:
                self._jobs.delete(state.jobs[key], at=state.now(), reason="Deleted")
                deleted += 1
        for key in list(state.services_by_id.get(job_id, ())):
            if key[0] == namespace:
                del state.services[key]
                discard(state.services_by_id, job_id, key)
                deleted += 1
        return deleted

    def delete_model_service_objects(self, *, namespace: str, model_service: str) -> int:
        self._faults.record("delete_model_service_objects", namespace=namespace, model_service=model_service)
        state = self._state
        deleted = 0
        for key in list(state.deployments_by_service.get(model_service, ())):
            deployment = state.deployments[key]
            if key[0] == namespace and deployment.managed:
                self._deployments.delete(deployment)
                deleted += 1
        for store in (state.services, state.pdb_objects):
            for key in [
                k for k, obj in store.items() if k[0] == namespace and _of_model_service(obj, model_service)
            ]:
                del store[key]
                deleted += 1
        if deleted:
            state.pdbs = [
                p for p in state.pdbs if p.name is None or (p.namespace, p.name) in state.pdb_objects
            ]
            state.next_resource_version()
        return deleted

    def list_deployments(
        self, *, namespace: str | None = None, model_service: str | None = None
    ) -> list[KubeObject]:
        self._faults.record("list_deployments", namespace=namespace, model_service=model_service)
        state = self._state
        if namespace is None and model_service is None:
            return self._views.whole_list(
                "deployments",
                lambda: self._views.views(
                    (d for d in state.deployments.values() if d.managed and d.model_service is not None),
                    json_copy,
                ),
                version=lambda: state.kind_version("Deployment"),
            )
        deployments: Iterable[StoredDeployment] = (
            [state.deployments[k] for k in state.deployments_by_service.get(model_service, ())]
            if model_service is not None
            else state.deployments.values()
        )
        return [
            self._views.view(d, json_copy)
            for d in deployments
            if d.managed and d.model_service is not None and (namespace is None or d.key[0] == namespace)
        ]

    def list_model_service_pods(self, *, namespace: str, model_service: str) -> list[KubeObject]:
        self._faults.record("list_model_service_pods", namespace=namespace, model_service=model_service)
        state = self._state
        return [
            self._views.view(state.pods[key], object_view)
            for key in state.pods_by_service.get(model_service, ())
            if key[0] == namespace
        ]

    def get_service(self, *, namespace: str, name: str) -> KubeObject | None:
        self._faults.record("get_service", namespace=namespace, name=name)
        service = self._state.services.get((namespace, name))
        if service is None:
            return None
        self._refresh_load_balancer(service)
        return json_copy(service)

    def patch_job(self, *, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        self._faults.record("patch_job", namespace=namespace, name=name, patch=thaw(patch))
        job = self._state.jobs.get((namespace, name))
        if job is None:
            raise NotFoundError(f'jobs.batch "{name}" not found in {namespace}')
        return json_copy(self._jobs.patch(job, patch))

    def list_jobs(self, *, namespace: str | None = None, job_id: str | None = None) -> list[KubeObject]:
        self._faults.record("list_jobs", namespace=namespace, job_id=job_id)
        state = self._state
        if namespace is None and job_id is None:
            return self._views.whole_list(
                "jobs",
                lambda: self._views.views((job for job in state.jobs.values() if job.managed), object_view),
                version=lambda: state.kind_version("Job"),
            )
        jobs = (
            [state.jobs[k] for k in state.jobs_by_id.get(job_id, ())]
            if job_id is not None
            else state.jobs.values()
        )
        return [
            self._views.view(job, object_view)
            for job in jobs
            if job.managed and (namespace is None or job.key[0] == namespace)
        ]

    def list_pods(
        self, *, namespace: str | None = None, job_id: str | None = None, node_name: str | None = None
    ) -> list[KubeObject]:
        self._faults.record("list_pods", namespace=namespace, job_id=job_id, node_name=node_name)
        state = self._state
        if job_id is not None:
            keys: Iterable[Key] = state.pods_by_id.get(job_id, ())
        elif node_name is not None:
            node = state.nodes.get(node_name)
            keys = node.pods if node else ()
        elif namespace is None:
            return self._views.whole_list(
                "pods",
                lambda: self._views.views(state.pods.values(), object_view),
                version=lambda: state.kind_version("Pod"),
            )
        else:
            keys = state.pods
        views: list[KubeObject] = []
        for key in keys:
            pod = state.pods[key]
            if namespace is not None and key[0] != namespace:
                continue
            if node_name is not None and (pod.node is None or pod.node.name != node_name):
                continue
            views.append(self._views.view(pod, object_view))
        return views

    def list_nodes(self) -> list[KubeObject]:
        self._faults.record("list_nodes")
        nodes = self._state.nodes
        return self._views.whole_list(
            "nodes",
            lambda: self._views.views(nodes.values(), json_copy),
            version=lambda: self._state.kind_version("Node"),
        )

    def get_node(self, name: str) -> KubeObject | None:
        self._faults.record("get_node", name=name)
        node = self._state.nodes.get(name)
        return json_copy(node.obj) if node else None

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        self._faults.record("patch_node", name=name, patch=thaw(patch))
        return self._nodes.patch(name, patch)

    def evict(self, *, namespace: str, name: str) -> bool:
        self._faults.record("evict", namespace=namespace, name=name)
        pod = self._state.pods.get((namespace, name))
        if pod is None:
            return True
        if pod.phase in TERMINAL:
            # A finished pod holds nothing a budget protects: the API just deletes it.
            self._pods.remove(pod)
            return True
        if not self._scheduler.budgets_allow(pod):
            return False
        self._pods.disrupt(
            pod,
            at=self._state.now(),
            reason=EVICTED_BY_API,
            message="Eviction API: evicting",
            exit_code=self._pods.evicted_exit_code(pod),
        )
        return True

    # ==== nodes and budgets ==========================================================

    def add_node(
        self,
        *,
        name: str,
        allocatable: Mapping[str, str | int],
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] | None = None,
        provider_id: str | None = None,
        ready: bool = True,
        gpus_ready: bool = True,
    ) -> KubeObject:
        """Register a node, as a kubelet does when an instance joins the cluster."""
        return self._nodes.add(
            name=name,
            allocatable=allocatable,
            labels=labels,
            taints=taints,
            provider_id=provider_id,
            ready=ready,
            gpus_ready=gpus_ready,
        )

    def remove_node(self, name: str, *, reason: str = "instance terminated") -> int:
        """The node object goes (its instance is gone); its pods fail as PodGC fails them.

        Returns how many running or waiting pods were disrupted.
        """
        return self._nodes.remove(name, reason=reason)

    def set_ready(self, name: str, ready: bool) -> None:
        self._nodes.set_ready(name, ready)

    def set_gpus_ready(self, name: str, ready: bool = True) -> None:
        """The NVIDIA device plugin registered (or lost) the node's GPUs."""
        self._nodes.set_gpus_ready(name, ready)

    def delete_pod(self, *, namespace: str, name: str) -> bool:
        """A pod deleted through the API (kubectl delete pod): it stops at once; its owner decides what next.

        Not a port call (Squall never deletes pods): how a test deletes one. False when there is none.
        """
        pod = self._state.pods.get((namespace, name))
        if pod is None:
            return False
        if pod.phase in TERMINAL:
            self._pods.remove(pod)
            return True
        self._pods.disrupt(
            pod,
            at=self._state.now(),
            reason="Killing",
            message="Stopping container: the pod was deleted",
            exit_code=self._pods.evicted_exit_code(pod),
            disruption_target=False,
        )
        return True

    def add_pdb(
        self,
        namespace: str,
        selector_labels: Mapping[str, str],
        max_unavailable: int | None = None,
        *,
        min_available: int | None = None,
    ) -> None:
        """A PodDisruptionBudget over the pods with these labels; evictions honour it."""
        if (max_unavailable is None) == (min_available is None):
            raise ValueError("give exactly one of max_unavailable and min_available")
        self._state.pdbs.append(
            Pdb(namespace, label_selector(selector_labels), max_unavailable, min_available)
        )

    # ==== behaviour and faults =======================================================

    def set_behaviour(
        self,
        job_id: str,
        *,
        run_for: timedelta | None = None,
        exit_code: int = 0,
        image_error: bool = False,
        evicted_exit_code: int = SIGTERM_EXIT_CODE,
        checkpoint_every: timedelta | None = None,
    ) -> None:
        """How the pods of Squall job `job_id` behave; pods read it when they start.

        `checkpoint_every`: its trainer checkpoints that often, and a run after one that
        stopped early runs only for what was left after its latest checkpoint.
        """
        self._behaviours.set(
            job_id,
            run_for=run_for,
            exit_code=exit_code,
            image_error=image_error,
            evicted_exit_code=evicted_exit_code,
            checkpoint_every=checkpoint_every,
        )

    @property
    def checkpoints(self) -> SimulatedCheckpoints:
        """The jobs' checkpoints as their trainers report them (a CheckpointReader)."""
        return self._pods.checkpoints

    def fail_calls(self, method_name: str, error: Exception, *, times: int = 1) -> None:
        """The next `times` calls of one port method raise `error`."""
        self._faults.fail_calls(method_name, error, times=times)

    def outage(self, *, until: datetime) -> None:
        """The API cannot be reached until then: every port call raises RetryableError.

        Only the API is down (a cluster outage as its callers see it: timeouts, 5xx):
        nodes, the scheduler and the pods go on, and what Squall does not call (the
        fleet's nodes joining and leaving) still happens. Afterwards it answers again.
        Outages that overlap make one: it lasts until the later of their ends.
        """
        self._faults.unreachable_for(until)

    @property
    def unreachable(self) -> bool:
        """Whether the API is in an outage now."""
        return self._faults.unreachable()

    def set_model_service_behaviour(
        self,
        name: str,
        *,
        run_for: timedelta | None = None,
        exit_code: int = 1,
        image_error: bool = False,
        evicted_exit_code: int = SIGTERM_EXIT_CODE,
    ) -> None:
        """How the simulated pods of model service `name` behave (pods read it when they start).

        By default they keep running, as a server does; with `run_for` each run of their
        containers exits with `exit_code` after that long and is restarted after the
        kubelet's back-off; `image_error`: their images cannot be pulled. Pods run for
        real by the PodRunner behave as their processes do.
        """
        self._behaviours.set_model_service(
            name,
            run_for=run_for,
            exit_code=exit_code,
            image_error=image_error,
            evicted_exit_code=evicted_exit_code,
        )

    # ==== time =======================================================================

    def advance(self) -> AdvanceSummary:
        """Catch up with the clock: due events in time order, then schedule and start pods."""
        now = self._state.now()
        counts: Counter[str] = Counter()
        self._pods.poll_real(now, counts)
        for _ in range(_MAX_ROUNDS_PER_ADVANCE):
            self._process_due(now, counts)
            counts["scheduled"] += self._scheduler.schedule(now)
            counts["started"] += self._pods.start_bound(now)
            upcoming = self.next_event_time()
            if upcoming is None or upcoming > now:
                break
        return AdvanceSummary(
            scheduled=counts["scheduled"],
            started=counts["started"],
            finished=counts["finished"],
            jobs_finished=counts["jobs_finished"],
        )

    def next_event_time(self) -> datetime | None:
        """When a pod finishes, a deadline or a TTL passes, a pod is re-created or a container restarted next.

        Scheduling and starting pods happen on every `advance()`; this is only what
        would happen with nothing else going on.
        """
        heap = self._state.heap
        while heap:
            at, _, kind, target = heap[0]
            if self._still_due(at, kind, target):
                return at
            heapq.heappop(heap)
        return None

    def _process_due(self, now: datetime, counts: Counter[str]) -> None:
        heap = self._state.heap
        while heap and heap[0][0] <= now:
            at, _, kind, target = heapq.heappop(heap)
            if not self._still_due(at, kind, target):
                continue
            if isinstance(target, StoredPod) and kind == "restart":
                self._pods.restart(target, at=at)
            elif isinstance(target, StoredDeployment):
                self._deployments.handle_due(at, target)
            elif isinstance(target, (StoredPod, StoredJob)):
                self._jobs.handle_due(at, kind, target, counts)

    def _still_due(self, at: datetime, kind: str, target: StoredPod | Owner) -> bool:
        if isinstance(target, StoredPod) and kind == "restart":
            return not target.deleted and target.phase == RUNNING and target.restart_due == at
        if isinstance(target, StoredDeployment):
            return self._deployments.still_due(at, kind, target)
        if isinstance(target, (StoredPod, StoredJob)):
            return self._jobs.still_due(at, kind, target)
        return False

    def _on_pod_terminal(self, pod: StoredPod, at: datetime, counts: Counter[str] | None) -> None:
        if isinstance(pod.owner, StoredDeployment):
            self._deployments.on_pod_terminal(pod, at, counts)
        else:
            self._jobs.on_pod_terminal(pod, at, counts)

    def _on_pod_changed(self, owner: Owner, at: datetime) -> None:
        if isinstance(owner, StoredDeployment):
            self._deployments.on_pod_changed(owner, at)

    # ==== reading state ==============================================================

    def stats(self) -> dict[str, int]:
        """Counts for a live view; cheap enough to call on every frame."""
        state = self._state
        nodes = state.nodes.values()
        jobs = Counter(job.finished or "Active" for job in state.jobs.values())
        allocatable, in_use = self.gpus()
        return {
            "nodes": len(state.nodes),
            "nodes_ready": sum(1 for n in nodes if n.ready),
            "nodes_cordoned": sum(1 for n in nodes if n.unschedulable),
            "pods_pending": state.phases[PENDING],
            "pods_unscheduled": len(state.pending),
            "pods_running": state.phases[RUNNING],
            "pods_succeeded": state.phases[SUCCEEDED],
            "pods_failed": state.phases[FAILED],
            "pods_real": self._pods.real_running,
            "gpus_allocatable": allocatable,
            "gpus_in_use": in_use,
            "jobs_created": state.jobs_created,
            "jobs_active": jobs["Active"],
            "jobs_complete": jobs["Complete"],
            "jobs_failed": jobs["Failed"],
        }

    def gpus_held_on(self, node: str) -> int:
        """GPUs the pods bound to a node hold (0 for a node that is not here); not a port call."""
        found = self._state.nodes.get(node)
        return found.gpu - found.free_gpu if found is not None else 0

    def holds_job(self, job_id: str) -> bool:
        """Whether any Kubernetes Job of Squall job `job_id` exists here now; not a port call."""
        return bool(self._state.jobs_by_id.get(job_id))

    def trainer_progress(self, job_id: str) -> tuple[timedelta, timedelta] | None:
        """How far the simulated trainer of Squall job `job_id` is here: (run time its work
        holds, run time of the whole work), the furthest of its pods; None when none of
        its pods is running or has finished here, or they run for real. Not a port call:
        the simulated metric lines (metrics.py) read it."""
        state = self._state
        now = state.now()
        found: tuple[timedelta, timedelta] | None = None
        for key in state.pods_by_id.get(job_id, ()):
            pod = state.pods.get(key)
            behaviour = pod.behaviour if pod is not None else None
            # A real pod (run by the runner) never has an end planned: its process decides.
            if pod is None or behaviour is None or pod.deleted or pod.ends_at is None:
                continue
            if pod.phase == SUCCEEDED:
                done = behaviour.run_for
            elif pod.phase == RUNNING:
                # Its run ends when the work is done: a resumed run began with part of it done.
                done = behaviour.run_for - max(pod.ends_at - now, timedelta(0))
            else:
                continue
            if found is None or done > found[0]:
                found = (max(done, timedelta(0)), behaviour.run_for)
        return found

    def gpus(self) -> tuple[int, int]:
        """(allocatable, in use) over all nodes: what stats() says, without counting the rest."""
        allocatable = in_use = 0
        for node in self._state.nodes.values():
            allocatable += node.gpu
            in_use += node.gpu - node.free_gpu
        return allocatable, in_use

    def list_services(self, *, namespace: str | None = None) -> list[KubeObject]:
        services = [
            obj for key, obj in self._state.services.items() if namespace is None or key[0] == namespace
        ]
        for service in services:
            self._refresh_load_balancer(service)
        return [json_copy(obj) for obj in services]

    def list_pdbs(self, *, namespace: str | None = None) -> list[KubeObject]:
        """The PodDisruptionBudgets created from manifests (not a port call: for tests and views)."""
        return [
            json_copy(obj)
            for key, obj in self._state.pdb_objects.items()
            if namespace is None or key[0] == namespace
        ]

    def _refresh_load_balancer(self, service: KubeObject) -> None:
        """A LoadBalancer's ingress follows its pods: the runner's ports of the first ready one, else the spec's."""
        ports = getattr(self._runner, "ports", None) if self._runner is not None else None
        load_balancer = service_objects.load_balancer_status(
            self._state, service, ports if callable(ports) else None
        )
        status = service.setdefault("status", {})
        if status.get("loadBalancer") != load_balancer:
            status["loadBalancer"] = load_balancer
            service["metadata"]["resourceVersion"] = self._state.next_resource_version()

    def _create_pdb(self, key: Key, manifest: Mapping[str, Any]) -> None:
        state = self._state
        obj, pdb = service_objects.parse_pdb(key, manifest)
        labels = dict(obj["metadata"].get("labels") or {})
        obj["metadata"].update(
            state.new_metadata(name=key[1], namespace=key[0], at=state.now(), labels=labels)
        )
        obj["metadata"]["generation"] = 1
        state.pdb_objects[key] = obj
        state.pdbs.append(pdb)

    def _create_service(self, key: Key, manifest: Mapping[str, Any]) -> None:
        state = self._state
        obj = thaw_manifest(manifest)
        labels = dict(obj["metadata"].get("labels") or {})
        obj["metadata"].update(
            state.new_metadata(name=key[1], namespace=key[0], at=state.now(), labels=labels)
        )
        obj.setdefault("spec", {}).setdefault("type", "ClusterIP")
        obj["status"] = {"loadBalancer": {}}
        state.services[key] = obj
        self._refresh_load_balancer(obj)
        if (job_id := labels.get(JOB_ID_LABEL)) is not None:
            state.services_by_id.setdefault(job_id, {})[key] = None


def _of_model_service(obj: KubeObject, model_service: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == "squall" and labels.get(MODEL_SERVICE_LABEL) == model_service


if TYPE_CHECKING:

    def _held_to_the_port(cluster: SimulatedCluster) -> ServingCluster:
        return cluster  # mypy fails here when the simulator drifts from the ServingCluster protocol
