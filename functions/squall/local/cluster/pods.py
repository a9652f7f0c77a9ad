"""Pod lifecycle: creation by the Job and Deployment controllers, the kubelet's part, and how pods stop.

Models: a pod named as generateName names it, owned by its Job (or its Deployment's
ReplicaSet); the kubelet pulling the image (or backing off when it cannot) and
starting the containers (init containers first: they show as completed in
initContainerStatuses); a container exiting on its own with the code its behaviour
says; a disruption (node gone, eviction, deletion) marking the pod with
DisruptionTarget (not for a plain deletion) and, if its container was running, the
exit code it answers SIGTERM with; a pod's requests held on its node until it stops.
The owner's controller hears of every pod that reaches Succeeded or Failed, and of
every change to a pod's readiness.

restartPolicy Always (a Deployment's pods): a container that exits does not end the
pod; the kubelet starts it again after its back-off (containers.py), counting
`restartCount` and keeping the exit in `lastState.terminated`, the container waiting
in CrashLoopBackOff meanwhile. Such a pod, simulated, keeps running unless its model
service's behaviour says it exits.

Times, as the kubelet reports them: the pod's `status.startTime` when the kubelet
first takes it (before its images are pulled), each container's
`state.running.startedAt` when it starts, kept as `state.terminated.startedAt` when it
ends; the reconcile function reads a job's real start from them.

Readiness: a pod is Ready once its containers run, except a real pod with a
readinessProbe whose runner has a `ready(pod)` method: that pod is Ready only while
the runner says so (asked on every advance).

Real pods: with a `PodRunner`, a pod the runner `runs` is started by it instead of
being given a simulated run time (the kubelet asks again on the next advance while
the runner says it cannot start it yet); its exit code, when the runner's `poll`
reports one, decides its phase as a simulated exit does (or, under restartPolicy
Always, the same pod is `start`ed again after the back-off); a real pod that stops
for any other reason (eviction, node loss, deletion, its owner deleted, suspended or
finished) is `stop`ped: the runner sends SIGTERM and keeps the grace period. Its
phase after a disruption is decided at once, by the exit code SIGTERM is answered
with (SIGTERM_EXIT_CODE unless its behaviour says otherwise), as for a simulated pod.

Leaves out: termination grace periods (a pod stops at once; a real pod's process
gets its grace period, but the pod object goes at once), restartPolicy OnFailure,
liveness and startup probes, init containers that fail, and more than one pod per Job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from squall.conventions import MODEL_SERVICE_LABEL
from squall.local.cluster import containers
from squall.local.cluster.checkpoints import SimulatedCheckpoints
from squall.local.cluster.faults import Behaviours
from squall.local.cluster.index import NodeIndex
from squall.local.cluster.state import (
    DISRUPTION_TARGET,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    Behaviour,
    ClusterState,
    Owner,
    StoredDeployment,
    StoredJob,
    StoredPod,
    discard,
    set_condition,
    timestamp,
)
from squall.ports import KubeObject

# generateName's alphabet in Kubernetes: no vowels, no look-alike characters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATE_PREFIX = 58

OnTerminal = Callable[[StoredPod, datetime, "Counter[str] | None"], None]
OnChanged = Callable[[Owner, datetime], None]


class PodRunner(Protocol):
    """Runs chosen pods for real (local/processes.py runs them as local processes).

    Each method gets the pod as the cluster keeps it (bound: spec.nodeName is set);
    it must not change it.
    """

    def runs(self, pod: KubeObject) -> bool:
        """Whether this pod is run for real; asked once, when its containers would start."""
        ...

    def start(self, pod: KubeObject) -> bool:
        """Start it; False when it cannot start yet (asked again on the next advance)."""
        ...

    def poll(self, pod: KubeObject) -> int | None:
        """Its exit code once it has exited, else None."""
        ...

    def stop(self, pod: KubeObject) -> None:
        """It must stop (SIGTERM now, SIGKILL after its grace period); it is not polled again."""
        ...

    # Optional, asked with getattr: `ready(pod) -> bool`, whether a pod with a
    # readinessProbe answers it now; `ports(pod) -> Mapping[int, int] | None`, each
    # containerPort and the loopback port the pod really listens on (for Services).
    # A pod whose process exited under restartPolicy Always is `start`ed again.


class PodLifecycle:
    def __init__(
        self,
        state: ClusterState,
        index: NodeIndex,
        behaviours: Behaviours,
        runner: PodRunner | None = None,
        checkpoints: SimulatedCheckpoints | None = None,
    ) -> None:
        self._state = state
        # The work a job's checkpoints hold (shared by the clusters of one run, as S3 is).
        self.checkpoints = checkpoints if checkpoints is not None else SimulatedCheckpoints(state.clock)
        self._index = index
        self._behaviours = behaviours
        self._runner = runner
        # Pods the runner runs: those started (running) and those waiting for it to start them.
        self._real: dict[StoredPod, bool] = {}
        # The owner's controller's answer to a pod reaching Succeeded or Failed, and to a
        # pod of its starting, or becoming ready or unready.
        self.on_terminal: OnTerminal = lambda pod, at, counts: None
        self.on_changed: OnChanged = lambda owner, at: None
        # Restarting containers of real pods whose runner could not start them yet.
        self._restarting: dict[StoredPod, None] = {}

    def create(self, owner: Owner, *, at: datetime) -> StoredPod:
        state = self._state
        namespace = owner.key[0]
        is_job = isinstance(owner, StoredJob)
        if isinstance(owner, StoredDeployment):
            prefix = f"{owner.replica_set}-"
            reference = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner.replica_set}
            reference["uid"] = owner.replica_set_uid
        else:
            prefix = f"{owner.key[1]}-"[:_MAX_GENERATE_PREFIX]
            reference = {"apiVersion": "batch/v1", "kind": "Job", "name": owner.key[1]}
            reference["uid"] = owner.obj["metadata"]["uid"]
        while True:
            name = prefix + "".join(state.rng.choice(_NAME_ALPHABET) for _ in range(5))
            if (namespace, name) not in state.pods:
                break
        key = (namespace, name)
        labels = dict(owner.pod_labels)
        metadata = state.new_metadata(name=name, namespace=namespace, at=at, labels=labels)
        metadata["generateName"] = prefix
        metadata["ownerReferences"] = [{**reference, "controller": True, "blockOwnerDeletion": True}]
        if is_job:
            metadata["finalizers"] = ["batch.kubernetes.io/job-tracking"]
        obj: KubeObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            # Pods share their owner's template spec read-only; views copy the top level.
            "spec": dict(owner.pod_spec),
            "status": {"phase": PENDING, "qosClass": "Burstable"},
        }
        pod = StoredPod(key=key, obj=obj, labels=labels, owner=owner, seq=state.next_seq())
        pod.restart_always = owner.pod_spec.get("restartPolicy", "Always") == "Always"
        pod.probed = containers.has_readiness_probe(owner.pod_spec)
        state.pods[key] = pod
        owner.pods[key] = None
        if owner.job_id is not None:
            state.pods_by_id.setdefault(owner.job_id, {})[key] = None
        if (service := labels.get(MODEL_SERVICE_LABEL)) is not None:
            state.pods_by_service.setdefault(service, {})[key] = None
        state.phases[PENDING] += 1
        state.pending[key] = pod
        state.schedule_dirty = True
        if isinstance(owner, StoredJob):
            owner.active = pod
            owner.replacement_due = None
            state.write_job_status(owner)
        state.event(
            at, reference["kind"], namespace, reference["name"], "SuccessfulCreate", f"Created pod: {name}"
        )
        return pod

    def release(self, pod: StoredPod) -> None:
        """The pod's requests go back to its node."""
        node = pod.node
        if node is None or not pod.holds_resources:
            return
        template = pod.owner.template
        node.free_cpu += template.cpu
        node.free_memory += template.memory
        node.free_gpu += template.gpu
        node.free_pods += 1
        node.holding -= 1
        pod.holds_resources = False
        self._index.update(node)
        self._state.schedule_dirty = True

    def remove(self, pod: StoredPod) -> None:
        state = self._state
        self._stopped(pod, at=state.now())
        self._stop_real(pod)
        self.release(pod)
        state.next_resource_version()  # a deletion moves the cluster's version on too
        pod.deleted = True
        state.phases[pod.phase] -= 1
        del state.pods[pod.key]
        state.pending.pop(pod.key, None)
        state.to_start.pop(pod.key, None)
        self._restarting.pop(pod, None)
        owner = pod.owner
        owner.pods.pop(pod.key, None)
        if isinstance(owner, StoredJob) and owner.active is pod:
            owner.active = None
        if pod.node is not None:
            pod.node.pods.pop(pod.key, None)
        if owner.job_id is not None:
            discard(state.pods_by_id, owner.job_id, pod.key)
        if (service := pod.labels.get(MODEL_SERVICE_LABEL)) is not None:
            discard(state.pods_by_service, service, pod.key)

    def disrupt(
        self,
        pod: StoredPod,
        *,
        at: datetime,
        reason: str,
        message: str,
        exit_code: int | None,
        disruption_target: bool = True,
    ) -> None:
        """A pod stops because of its node, an eviction or a deletion; its owner decides what next.

        `disruption_target`: the pod gets the DisruptionTarget condition (not for a plain deletion).
        """
        stamp = timestamp(at)
        status = pod.obj["status"]
        if disruption_target:
            status["conditions"] = [
                *(status.get("conditions") or []),
                {
                    "type": DISRUPTION_TARGET,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                    "reason": reason,
                    "message": message,
                },
            ]
        pod.obj["metadata"]["deletionTimestamp"] = stamp
        pod.obj["metadata"]["deletionGracePeriodSeconds"] = 0
        self._stopped(pod, at=at)
        self._stop_real(pod)
        if exit_code is not None:
            self._terminate_containers(pod, exit_code=exit_code, at=at)
        self.release(pod)
        self._state.pending.pop(pod.key, None)
        self._state.to_start.pop(pod.key, None)
        # A container that exits 0 on SIGTERM leaves a Succeeded pod, even when evicted.
        self._state.set_phase(pod, SUCCEEDED if exit_code == 0 else FAILED)
        self._state.event(at, "Pod", pod.key[0], pod.key[1], reason, message)
        self.on_terminal(pod, at, None)
        # The pod was being deleted: once terminal (and counted), it is gone.
        self.remove(pod)

    def evicted_exit_code(self, pod: StoredPod) -> int | None:
        """What the pod's container exits with when evicted; None if it was not running."""
        if pod.phase != RUNNING:
            return None
        return (pod.behaviour or self._behaviour(pod) or self._behaviours.default).evicted_exit_code

    def _behaviour(self, pod: StoredPod) -> Behaviour | None:
        """How the pod's containers behave; None: they keep running (a model service's, by default)."""
        owner = pod.owner
        if isinstance(owner, StoredDeployment):
            return self._behaviours.of_model_service(owner.model_service)
        return self._behaviours.of(owner.job_id)

    def finish(
        self, pod: StoredPod, *, at: datetime, counts: Counter[str], exit_code: int | None = None
    ) -> None:
        """The pod's container exits on its own: after its run time, or with a real process's code."""
        if exit_code is None:
            exit_code = (pod.behaviour or self._behaviours.default).exit_code
        if pod.restart_always:
            self._crash(pod, at=at, exit_code=exit_code)
            return
        self._stopped(pod, at=at)
        self._terminate_containers(pod, exit_code=exit_code, at=at)
        self.release(pod)
        self._state.set_phase(pod, SUCCEEDED if exit_code == 0 else FAILED)
        counts["finished"] += 1
        self._state.event(
            at,
            "Pod",
            pod.key[0],
            pod.key[1],
            "Completed" if exit_code == 0 else "Error",
            f"container exited with code {exit_code}",
        )
        self.on_terminal(pod, at, counts)

    # ---- real pods ----

    def poll_real(self, now: datetime, counts: Counter[str]) -> None:
        """Real pods whose process exited finish with its exit code; probed ones say whether they are ready."""
        runner = self._runner
        if runner is None or not self._real:
            return
        ready = getattr(runner, "ready", None)
        for pod, started in list(self._real.items()):
            if not started or pod.deleted or pod.phase != RUNNING:
                continue
            code = runner.poll(pod.obj)
            if code is not None:
                if pod.restart_always:
                    self._real[pod] = False  # still the runner's: started again after the back-off
                else:
                    del self._real[pod]
                self.finish(pod, at=now, counts=counts, exit_code=code)
            elif pod.probed and callable(ready):
                self._set_ready(pod, bool(ready(pod.obj)), at=now)
        for pod in list(self._restarting):
            self.restart(pod, at=now)

    # ---- restartPolicy Always ----

    def _crash(self, pod: StoredPod, *, at: datetime, exit_code: int) -> None:
        """A container exited: the kubelet starts it again after its back-off, the pod goes on."""
        state = self._state
        pod.restarts += 1
        pod.ends_at = None
        pod.ready = False
        status = pod.obj["status"]
        last = {
            "terminated": containers.terminated(
                exit_code=exit_code, started=_running_since(status), finished=timestamp(at)
            )
        }
        delay = containers.restart_delay(pod.restarts)
        message = f"back-off {int(delay.total_seconds())}s restarting failed container"
        status["containerStatuses"] = [
            containers.waiting(
                c,
                reason=containers.CRASH_LOOP,
                message=f"{message} {c['name']} in pod {pod.key[1]}",
                restarts=pod.restarts,
                last_state=last,
            )
            for c in pod.obj["spec"]["containers"]
        ]
        set_condition(status, "Ready", "False", at, reason="ContainersNotReady")
        set_condition(status, "ContainersReady", "False", at, reason="ContainersNotReady")
        state.touch(pod)
        pod.restart_due = at + delay
        state.push(pod.restart_due, "restart", pod)
        state.event(at, "Pod", pod.key[0], pod.key[1], "BackOff", message)
        self.on_changed(pod.owner, at)

    def restart(self, pod: StoredPod, *, at: datetime) -> None:
        """The back-off is over: the containers start again (a real pod's runner starts it again)."""
        self._restarting.pop(pod, None)
        if pod.deleted or pod.phase != RUNNING:
            return
        pod.restart_due = None
        if pod in self._real and self._runner is not None:
            if not self._runner.start(pod.obj):
                self._restarting[pod] = None  # asked again on the next advance
                return
            self._real[pod] = True
            self._run(pod, at=at, real=True)
            return
        self._run(pod, at=at, real=False)

    @property
    def real_running(self) -> int:
        return sum(1 for started in self._real.values() if started)

    def _stop_real(self, pod: StoredPod) -> None:
        started = self._real.pop(pod, None)
        if started and self._runner is not None:
            self._runner.stop(pod.obj)

    def _start_real(self, pod: StoredPod) -> bool | None:
        """None: not a real pod; True: started; False: the runner cannot start it yet."""
        runner = self._runner
        if runner is None:
            return None
        if pod not in self._real:
            if not runner.runs(pod.obj):
                return None
            self._real[pod] = False
        if not runner.start(pod.obj):
            return False
        self._real[pod] = True
        return True

    def _set_ready(self, pod: StoredPod, ready: bool, *, at: datetime) -> None:
        if pod.ready == ready:
            return
        pod.ready = ready
        status = pod.obj["status"]
        status["containerStatuses"] = [
            {**entry, "ready": ready} for entry in status.get("containerStatuses") or []
        ]
        reason = None if ready else "ContainersNotReady"
        for kind in ("ContainersReady", "Ready"):
            set_condition(status, kind, "True" if ready else "False", at, reason=reason)
        self._state.touch(pod)
        self.on_changed(pod.owner, at)

    def _run(self, pod: StoredPod, *, at: datetime, real: bool) -> None:
        """The containers run (again): running since `at`, ready unless a runner must say so."""
        state = self._state
        behaviour = pod.behaviour
        if real or behaviour is None:
            pod.ends_at = None  # a real pod ends when its process does; a model service's keeps running
        elif behaviour.checkpoint_every is not None and pod.owner.job_id is not None:
            resumed = self.checkpoints.begin(
                pod.owner.job_id, pod.key, at=at, every=behaviour.checkpoint_every
            )
            pod.ends_at = at + max(behaviour.run_for - resumed, timedelta(0))
        else:
            pod.ends_at = at + behaviour.run_for
        stamp = timestamp(at)
        status = pod.obj["status"]
        # A real pod with a readinessProbe is ready once its runner says so (asked on every advance).
        ready = not (real and pod.probed and callable(getattr(self._runner, "ready", None)))
        pod.ready = ready
        last = _last_state(pod)
        status["containerStatuses"] = [
            containers.status(
                c,
                ready=ready,
                state={"running": {"startedAt": stamp}},
                restarts=pod.restarts,
                last_state=last,
            )
            for c in pod.obj["spec"]["containers"]
        ]
        set_condition(status, "Initialized", "True", at)
        for kind in ("ContainersReady", "Ready"):
            set_condition(
                status, kind, "True" if ready else "False", at, reason=None if ready else "ContainersNotReady"
            )
        state.touch(pod)
        if pod.ends_at is not None:
            state.push(pod.ends_at, "finish", pod)
        self.on_changed(pod.owner, at)

    def start_bound(self, now: datetime) -> int:
        """The kubelet's part: pull the images, run the init containers, start the containers."""
        state = self._state
        started = 0
        for pod in list(state.to_start.values()):
            behaviour = self._behaviour(pod)
            status = pod.obj["status"]
            status.setdefault("startTime", timestamp(now))
            if behaviour is not None and behaviour.image_error:
                if not pod.image_blocked:
                    pod.image_blocked = True
                    spec = pod.obj["spec"]
                    blocked = [
                        containers.waiting(
                            c,
                            reason="ImagePullBackOff",
                            message=f'Back-off pulling image "{c.get("image", "")}"',
                        )
                        for c in spec["containers"]
                    ]
                    if spec.get("initContainers"):
                        status["initContainerStatuses"] = [
                            containers.waiting(
                                c,
                                reason="ImagePullBackOff",
                                message=f'Back-off pulling image "{c.get("image", "")}"',
                            )
                            for c in spec["initContainers"]
                        ]
                    status["containerStatuses"] = blocked
                    state.touch(pod)
                    state.event(now, "Pod", pod.key[0], pod.key[1], "BackOff", "Back-off pulling image")
                continue
            pod.image_blocked = False
            real = self._start_real(pod)
            if real is False:
                continue  # ContainerCreating until the runner can start it
            del state.to_start[pod.key]
            pod.behaviour = behaviour
            if pod.obj["spec"].get("initContainers"):
                status["initContainerStatuses"] = containers.init_statuses(
                    pod.obj["spec"], started=status["startTime"], finished=timestamp(now)
                )
            state.set_phase(pod, RUNNING)
            self._run(pod, at=now, real=bool(real))
            if isinstance(pod.owner, StoredJob):
                state.write_job_status(pod.owner)
            state.event(now, "Pod", pod.key[0], pod.key[1], "Started", "Started container")
            started += 1
        return started

    def _stopped(self, pod: StoredPod, *, at: datetime) -> None:
        """Its containers stop: the work its checkpoints hold is kept for the job's next run."""
        if pod.owner.job_id is not None:
            self.checkpoints.end(pod.owner.job_id, pod.key, at=at)

    def _terminate_containers(self, pod: StoredPod, *, exit_code: int, at: datetime) -> None:
        # The container's own start, as the kubelet reports it: later than the pod's
        # startTime when the image took a while or a real pod's runner could not start it yet.
        started = _running_since(pod.obj["status"])
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": timestamp(at),
        }
        status = pod.obj["status"]
        pod.ready = False
        last = _last_state(pod)
        status["containerStatuses"] = [
            containers.status(
                c,
                ready=False,
                state={"terminated": dict(terminated)},
                restarts=pod.restarts,
                last_state=last,
            )
            for c in pod.obj["spec"]["containers"]
        ]
        reason = "PodCompleted" if exit_code == 0 else "PodFailed"
        set_condition(status, "Ready", "False", at, reason=reason)
        set_condition(status, "ContainersReady", "False", at, reason=reason)
        self._state.touch(pod)


def _running_since(status: Mapping[str, Any]) -> str | None:
    for entry in status.get("containerStatuses") or []:
        running = (entry.get("state") or {}).get("running")
        if running:
            return running.get("startedAt")
    return status.get("startTime")


def _last_state(pod: StoredPod) -> dict[str, Any] | None:
    """A restarted container's lastState, kept across its restarts (None: a pod that never restarts)."""
    if not pod.restart_always:
        return None
    previous = pod.obj["status"].get("containerStatuses") or []
    return dict(previous[0].get("lastState") or {}) if previous else {}
