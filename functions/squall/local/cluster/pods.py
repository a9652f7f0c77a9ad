"""Pod lifecycle: creation by the Job controller, the kubelet's part, and how pods stop.

Models: a pod named as generateName names it, owned by its Job; the kubelet pulling
the image (or backing off when it cannot) and starting the containers; a container
exiting on its own with the code its job's behaviour says; a disruption (node gone,
eviction) marking the pod with DisruptionTarget and, if its container was running,
the exit code it answers SIGTERM with; a pod's requests held on its node until it
stops. The Job controller hears of every pod that reaches Succeeded or Failed.

Real pods: with a `PodRunner`, a pod the runner `runs` is started by it instead of
being given a simulated run time (the kubelet asks again on the next advance while
the runner says it cannot start it yet); its exit code, when the runner's `poll`
reports one, decides its phase as a simulated exit does; a real pod that stops for
any other reason (eviction, node loss, its Job deleted, suspended or finished) is
`stop`ped: the runner sends SIGTERM and keeps the grace period. Its phase after a
disruption is decided at once, by the exit code SIGTERM is answered with
(SIGTERM_EXIT_CODE unless its behaviour says otherwise), as for a simulated pod.

Leaves out: termination grace periods (a pod stops at once; a real pod's process
gets its grace period, but the pod object goes at once), container restarts
(restartPolicy OnFailure/Always), probes, init containers running one by one, and
more than one pod per Job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from squall.local.cluster.faults import Behaviours
from squall.local.cluster.index import NodeIndex
from squall.local.cluster.state import (
    DISRUPTION_TARGET,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    ClusterState,
    Job,
    Pod,
    discard,
    set_condition,
    timestamp,
)
from squall.ports import KubeObject

# generateName's alphabet in Kubernetes: no vowels, no look-alike characters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATE_PREFIX = 58

OnTerminal = Callable[[Pod, datetime, "Counter[str] | None"], None]


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


class PodLifecycle:
    def __init__(
        self, state: ClusterState, index: NodeIndex, behaviours: Behaviours, runner: PodRunner | None = None
    ) -> None:
        self._state = state
        self._index = index
        self._behaviours = behaviours
        self._runner = runner
        # Pods the runner runs: those started (running) and those waiting for it to start them.
        self._real: dict[Pod, bool] = {}
        # The Job controller's answer to a pod reaching Succeeded or Failed.
        self.on_terminal: OnTerminal = lambda pod, at, counts: None

    def create(self, job: Job, *, at: datetime) -> Pod:
        state = self._state
        prefix = f"{job.key[1]}-"[:_MAX_GENERATE_PREFIX]
        while True:
            name = prefix + "".join(state.rng.choice(_NAME_ALPHABET) for _ in range(5))
            if (job.key[0], name) not in state.pods:
                break
        key = (job.key[0], name)
        labels = dict(job.pod_labels)
        metadata = state.new_metadata(name=name, namespace=key[0], at=at, labels=labels)
        metadata["generateName"] = prefix
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job.key[1],
                "uid": job.obj["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        metadata["finalizers"] = ["batch.kubernetes.io/job-tracking"]
        obj: KubeObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            # Pods share their Job's template spec read-only; views copy the top level.
            "spec": dict(job.pod_spec),
            "status": {"phase": PENDING, "qosClass": "Burstable"},
        }
        pod = Pod(key=key, obj=obj, labels=labels, job=job, seq=state.next_seq())
        state.pods[key] = pod
        job.pods[key] = None
        job.active = pod
        job.replacement_due = None
        if job.job_id is not None:
            state.pods_by_id.setdefault(job.job_id, {})[key] = None
        state.phases[PENDING] += 1
        state.pending[key] = pod
        state.schedule_dirty = True
        state.write_job_status(job)
        state.event(at, "Job", job.key[0], job.key[1], "SuccessfulCreate", f"Created pod: {name}")
        return pod

    def release(self, pod: Pod) -> None:
        """The pod's requests go back to its node."""
        node = pod.node
        if node is None or not pod.holds_resources:
            return
        template = pod.job.template
        node.free_cpu += template.cpu
        node.free_memory += template.memory
        node.free_gpu += template.gpu
        node.free_pods += 1
        node.holding -= 1
        pod.holds_resources = False
        self._index.update(node)
        self._state.schedule_dirty = True

    def remove(self, pod: Pod) -> None:
        state = self._state
        self._stop_real(pod)
        self.release(pod)
        state.next_resource_version()  # a deletion moves the cluster's version on too
        pod.deleted = True
        state.phases[pod.phase] -= 1
        del state.pods[pod.key]
        state.pending.pop(pod.key, None)
        state.to_start.pop(pod.key, None)
        pod.job.pods.pop(pod.key, None)
        if pod.job.active is pod:
            pod.job.active = None
        if pod.node is not None:
            pod.node.pods.pop(pod.key, None)
        if pod.job.job_id is not None:
            discard(state.pods_by_id, pod.job.job_id, pod.key)

    def disrupt(self, pod: Pod, *, at: datetime, reason: str, message: str, exit_code: int | None) -> None:
        """A pod stops because of its node or an eviction; the Job controller decides what next."""
        stamp = timestamp(at)
        status = pod.obj["status"]
        status.setdefault("conditions", []).append(
            {
                "type": DISRUPTION_TARGET,
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": stamp,
                "reason": reason,
                "message": message,
            }
        )
        pod.obj["metadata"]["deletionTimestamp"] = stamp
        pod.obj["metadata"]["deletionGracePeriodSeconds"] = 0
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

    def evicted_exit_code(self, pod: Pod) -> int | None:
        """What the pod's container exits with when evicted; None if it was not running."""
        if pod.phase != RUNNING:
            return None
        return (pod.behaviour or self._behaviours.of(pod.job.job_id)).evicted_exit_code

    def finish(self, pod: Pod, *, at: datetime, counts: Counter[str], exit_code: int | None = None) -> None:
        """The pod's container exits on its own: after its run time, or with a real process's code."""
        if exit_code is None:
            exit_code = (pod.behaviour or self._behaviours.default).exit_code
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
        """Real pods whose process exited finish with its exit code."""
        runner = self._runner
        if runner is None or not self._real:
            return
        for pod, started in list(self._real.items()):
            if not started or pod.deleted or pod.phase != RUNNING:
                continue
            code = runner.poll(pod.obj)
            if code is not None:
                del self._real[pod]
                self.finish(pod, at=now, counts=counts, exit_code=code)

    @property
    def real_running(self) -> int:
        return sum(1 for started in self._real.values() if started)

    def _stop_real(self, pod: Pod) -> None:
        started = self._real.pop(pod, None)
        if started and self._runner is not None:
            self._runner.stop(pod.obj)

    def _start_real(self, pod: Pod) -> bool | None:
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

    def start_bound(self, now: datetime) -> int:
        """The kubelet's part: pull the image, start the containers."""
        state = self._state
        started = 0
        for pod in list(state.to_start.values()):
            behaviour = self._behaviours.of(pod.job.job_id)
            status = pod.obj["status"]
            status.setdefault("startTime", timestamp(now))
            if behaviour.image_error:
                if not pod.image_blocked:
                    pod.image_blocked = True
                    status["containerStatuses"] = [
                        _waiting_status(
                            c,
                            reason="ImagePullBackOff",
                            message=f'Back-off pulling image "{c.get("image", "")}"',
                        )
                        for c in pod.obj["spec"]["containers"]
                    ]
                    state.touch(pod)
                    state.event(now, "Pod", pod.key[0], pod.key[1], "BackOff", "Back-off pulling image")
                continue
            pod.image_blocked = False
            real = self._start_real(pod)
            if real is False:
                continue  # ContainerCreating until the runner can start it
            del state.to_start[pod.key]
            pod.behaviour = behaviour
            # A real pod ends when its process does (poll_real), not after a run time.
            pod.ends_at = None if real else now + behaviour.run_for
            stamp = timestamp(now)
            status["containerStatuses"] = [
                _container_status(c, ready=True, state={"running": {"startedAt": stamp}})
                for c in pod.obj["spec"]["containers"]
            ]
            for kind in ("Initialized", "ContainersReady", "Ready"):
                set_condition(status, kind, "True", now)
            state.set_phase(pod, RUNNING)
            state.touch(pod)
            if pod.ends_at is not None:
                state.push(pod.ends_at, "finish", pod)
            state.write_job_status(pod.job)
            state.event(now, "Pod", pod.key[0], pod.key[1], "Started", "Started container")
            started += 1
        return started

    def _terminate_containers(self, pod: Pod, *, exit_code: int, at: datetime) -> None:
        started = pod.obj["status"].get("startTime")
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": timestamp(at),
        }
        status = pod.obj["status"]
        status["containerStatuses"] = [
            _container_status(c, ready=False, state={"terminated": dict(terminated)})
            for c in pod.obj["spec"]["containers"]
        ]
        reason = "PodCompleted" if exit_code == 0 else "PodFailed"
        set_condition(status, "Ready", "False", at, reason=reason)
        set_condition(status, "ContainersReady", "False", at, reason=reason)
        self._state.touch(pod)


def _container_status(container: Mapping[str, Any], *, ready: bool, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "ready": ready,
        "restartCount": 0,
        "started": ready,
        "state": state,
    }


def _waiting_status(container: Mapping[str, Any], *, reason: str, message: str) -> dict[str, Any]:
    return _container_status(
        container, ready=False, state={"waiting": {"reason": reason, "message": message}}
    )
