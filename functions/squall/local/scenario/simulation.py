"""The simulation driver: a LocalRuntime taken through a ScenarioPlan on a virtual clock.

- Arrivals are sent to the jobs queue at their time, their pods told how long to
  run, whether to fail and how often to checkpoint (a run after a preemption resumes
  from the latest checkpoint: the clusters share the checkpoints, as S3 is shared).
- Faults happen at their time: a node terminated, a spot instance reclaimed, an
  instance lost without notice, a region out of capacity, Auto Scaling or
  Kubernetes API throttling, a cluster's API unreachable for a while, a function
  invocation killed half way.
- Each configured cluster is simulated on its own (an ObservedCluster each, with
  its own API, nodes, scheduler and faults); pods run where their Jobs were created.
- The clock jumps from one interesting moment to the next (an arrival, a fault, a
  pod finishing, or whatever the runtime says it does next: a schedule, a debounced
  scale request, a retry, an instance finishing its boot) instead of ticking: a
  quiet hour costs a handful of steps.

The runtime owns its function invocations: a failed one is recorded, counted in
Lambda's metrics and retried (or not) by its trigger there; the simulation only
reads the failures for its notes and summary.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from squall.core.errors import RetryableError
from squall.core.jobs import JobStatus, is_terminal
from squall.core.spec import derive_job_id, expand_sweep
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCheckpoints, SimulatedCluster
from squall.local.runtime import LocalRuntime, clusters_of_groups
from squall.local.scenario.models import (
    ZERO,
    CapacityChange,
    ClusterOutage,
    FunctionDies,
    InstanceLost,
    RegionOutage,
    SpotReclaim,
    TerminateNode,
    Throttle,
    _NodeSelector,
    format_span,
)
from squall.local.scenario.plan import PlannedSubmission, ScenarioPlan
from squall.local.summary import (
    Invariants,
    JobRow,
    ObservedCluster,
    PlacementWatch,
    Recorder,
    build_summary,
    gangs_released,
    instances,
    invariants,
    job_rows,
)
from squall.services.preemption import CheckpointReader

# Steps at one instant before moving on: a scale check launches instances that the
# fleet must see at that same instant, and that in turn may let pods bind.
MAX_SETTLE_STEPS = 8


def start_runtime(
    plan: ScenarioPlan,
    *,
    clock: VirtualClock,
    backend: str,
    cluster: SimulatedCluster | None = None,
    simulated: Mapping[str, SimulatedCluster] | None = None,
    log_level: int = logging.WARNING,
    checkpoints: CheckpointReader | None = None,
) -> AbstractContextManager[LocalRuntime]:
    """A LocalRuntime configured as the plan says: its clusters, teams (quotas, budgets), registries,
    policy, node groups and capacity. `simulated`: the clusters by name, made by the caller (else the
    runtime makes them); `checkpoints`: what their simulated trainers report (preemption reads it)."""
    return LocalRuntime.start(
        clock=clock,
        cluster=cluster,
        clusters=plan.clusters or None,
        simulated=simulated,
        teams=plan.teams,
        registries=plan.registries,
        policy=plan.policy,
        node_groups=plan.node_groups,
        capacity=plan.capacity,
        log_level=log_level,
        backend=backend,
        submitters=plan.submitters,
        quotas=plan.quotas,
        budgets=plan.budgets,
        checkpoints=checkpoints,
    )


class LiveView(Protocol):
    """What the simulation shows while it runs (live.py has the terminal views)."""

    def update(self, local: LocalRuntime, recorder: Recorder) -> None: ...

    def note(self, at: timedelta, text: str) -> None: ...

    def close(self, local: LocalRuntime, recorder: Recorder) -> None: ...


@dataclass
class SimulationResult:
    summary: dict[str, Any]
    finished: bool  # the end condition held before the limit
    checks: Invariants
    function_errors: list[tuple[datetime, str]]  # (when, function): failed or killed invocations
    notes: list[str]
    jobs: list[JobRow] = field(default_factory=list)  # every job record at the end, for --jobs-out

    @property
    def ok(self) -> bool:
        return self.finished and self.checks.hold


class Simulation:
    """Drives a LocalRuntime through a ScenarioPlan on a virtual clock, jumping between events."""

    def __init__(
        self,
        plan: ScenarioPlan,
        *,
        backend: str = "moto",
        view: LiveView | None = None,
        pace: bool = True,
        log_level: int | None = None,
        lists: str = "shared",
    ) -> None:
        """`lists`: SimulatedCluster's list mode; tests pass "checked" to prove sharing safe."""
        self.plan = plan
        self.backend = backend
        self.lists = lists
        self.view = view
        self.pace = pace and plan.speed is not None
        self.log_level = log_level
        self.notes: list[str] = []
        self.expected_ids: list[str] = []  # accepted submissions: each must end in a final state
        self._open: set[str] = set()  # of those, the ones not yet seen final
        self._errors_noted = 0  # the runtime's function errors already told as notes
        # The run's clusters by name, in configuration order (made by `run`).
        self.clusters: dict[str, ObservedCluster] = {}

    def run(
        self,
        *,
        before: Callable[[LocalRuntime], None] | None = None,
        after: Callable[[LocalRuntime, SimulationResult], None] | None = None,
    ) -> SimulationResult:
        """Run the plan to its end; `before` and `after` see the runtime while it is up."""
        plan = self.plan
        started = time.monotonic()
        clock = VirtualClock(plan.start)
        # Squall's functions only read what they list: shared objects spare a copy of
        # every node and pod per scale check (SimulatedCluster's `lists`).
        watch = PlacementWatch()
        checkpoints = SimulatedCheckpoints(clock)
        clusters = {
            entry.name: ObservedCluster(
                clock=clock,
                watch=watch,
                name=entry.name,
                region=entry.region,
                default_run_for=plan.default_run_time,
                lists=self.lists,
                seed=index,  # pod uids differ between clusters, as real clusters' do
                checkpoints=checkpoints,
            )
            for index, entry in enumerate(plan.clusters or clusters_of_groups(plan.node_groups))
        }
        self.clusters = clusters
        with start_runtime(
            plan,
            clock=clock,
            simulated=clusters,
            log_level=self.log_level if self.log_level is not None else logging.CRITICAL,
            backend=self.backend,
            checkpoints=checkpoints.latest,
        ) as local:
            first = next(iter(clusters.values()))
            recorder = Recorder(
                clock=clock, cluster=first, clusters=clusters, fleet=local.fleet, groups=plan.groups
            )
            if before is not None:
                before(local)
            try:
                finished = self._loop(local, recorder)
            finally:
                # A live view owns the terminal until it is closed, whatever happened.
                if self.view is not None:
                    self.view.close(local, recorder)
            jobs = local.jobs()
            checks = invariants(
                jobs=jobs,
                expected_ids=self.expected_ids,
                cluster=list(clusters.values()),
                fleet=local.fleet,
                recorder=recorder,
            )
            summary = build_summary(
                jobs=jobs,
                metrics=local.metrics,
                recorder=recorder,
                fleet=local.fleet,
                checks=checks,
                gangs_released=gangs_released(jobs, events=local.events),
                overhead=ledger.overhead(since=plan.start) if (ledger := local.backend.cost_ledger) else None,
            ) | {
                "virtualSeconds": int(clock.elapsed.total_seconds()),
                "wallSeconds": round(time.monotonic() - started, 2),
                "functionErrors": dict(sorted(Counter(e.function for e in local.function_errors).items())),
                "finished": finished,
            }
            result = SimulationResult(
                summary=summary,
                finished=finished,
                checks=checks,
                function_errors=[(e.at, e.function) for e in local.function_errors],
                notes=self.notes,
                jobs=job_rows(jobs, start=plan.start),
            )
            if after is not None:
                after(local, result)
        return result

    # ---- the loop --------------------------------------------------------------------------

    def _loop(self, local: LocalRuntime, recorder: Recorder) -> bool:
        plan = self.plan
        clock = local.clock
        deadline = plan.start + plan.end.limit
        submissions, faults = list(plan.submissions), list(plan.faults)
        next_submission = next_fault = 0
        wall_start = time.monotonic()
        recorder.observe()
        while True:
            elapsed = clock.now() - plan.start
            while next_submission < len(submissions) and submissions[next_submission].at <= elapsed:
                self._send(submissions[next_submission], local)
                next_submission += 1
            while next_fault < len(faults) and faults[next_fault].at <= elapsed:
                self._fault(local, recorder, faults[next_fault])
                next_fault += 1
            self._settle(local)
            recorder.observe()
            if self.view is not None:
                self.view.update(local, recorder)
            all_sent = next_submission == len(submissions)
            if self._ended(local, all_sent=all_sent):
                return True
            if clock.now() >= deadline:
                self._note(
                    clock.now() - plan.start, "the time limit is reached; what is unfinished counts as lost"
                )
                return False
            # Jump to the next moment anything happens. Pod endings in between only
            # touch the cluster (kube-scheduler binds what they free at once), so they
            # are played without stepping Squall's functions.
            upcoming = min(
                [
                    deadline,
                    *([runtime_event] if (runtime_event := local.next_event_time()) is not None else []),
                    *([plan.start + submissions[next_submission].at] if not all_sent else []),
                    *([plan.start + faults[next_fault].at] if next_fault < len(faults) else []),
                    *([plan.start + plan.end.at] if plan.end.at is not None else []),
                ]
            )
            upcoming = max(upcoming, clock.now() + timedelta(seconds=1))
            while (
                pod_event := local.clusters_next_event_time()
            ) is not None and clock.now() < pod_event < upcoming:
                self._move(clock, pod_event, wall_start)
                local.advance_clusters()
                recorder.observe()
            self._move(clock, upcoming, wall_start)
            local.advance_clusters()
            recorder.observe()

    def _move(self, clock: VirtualClock, to: datetime, wall_start: float) -> None:
        if self.pace and self.plan.speed:
            due = wall_start + (to - self.plan.start).total_seconds() / self.plan.speed
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        clock.advance_to(to)

    def _settle(self, local: LocalRuntime) -> None:
        """Step the runtime at this instant until what it did needs nothing more at this instant.

        A failed invocation counts as activity: a failed SQS batch is visible again
        at once (visibility timeout 0), and the next step delivers it again.
        """
        for _ in range(MAX_SETTLE_STEPS):
            before = local.activity()
            local.step(ZERO)
            self._note_errors(local)
            if local.activity() == before and not local.due_now():
                return

    def _note_errors(self, local: LocalRuntime) -> None:
        for error in local.function_errors[self._errors_noted :]:
            what = f"was killed half way ({error.error})" if error.killed else f"failed: {error.error}"
            self._note(error.at - self.plan.start, f"the {error.function} function {what}")
        self._errors_noted = len(local.function_errors)

    def _ended(self, local: LocalRuntime, *, all_sent: bool) -> bool:
        end = self.plan.end
        if end.when == "time":
            return end.at is not None and local.clock.elapsed >= end.at
        if not all_sent or not self._all_final(local):
            return False
        if end.when == "allFinished" or local.fleet is None:
            return True
        launched: dict[str, int] = {}
        for instance in instances(local.fleet):
            if instance.launched:
                launched[instance.group] = launched.get(instance.group, 0) + 1
        return all(launched.get(g.asg_name or g.name, 0) <= g.min_size for g in self.plan.groups)

    def _all_final(self, local: LocalRuntime) -> bool:
        store = local.store
        if store.list_by_status(JobStatus.QUEUED, limit=1) or store.list_by_status(
            JobStatus.RUNNING, limit=1
        ):
            return False
        for job_id in list(self._open):
            job = store.get(job_id)
            if job is not None and is_terminal(job.status):
                self._open.discard(job_id)
        # An accepted job with no record yet is still on its way, or lost: wait for the limit.
        return not self._open

    # ---- arrivals and faults ------------------------------------------------------------------

    def _send(self, submission: PlannedSubmission, local: LocalRuntime) -> None:
        message_id = local.send(submission.body, sender=submission.sender)
        if submission.deliver_twice:
            local.deliver_twice.add(message_id)
        if submission.expect != "accepted":
            return
        job_id = submission.job_id
        if job_id is None and submission.spec is not None:
            job_id = derive_job_id(submission.spec, message_id=message_id)
        if job_id is None:
            return
        self.expected_ids.append(job_id)
        self._open.add(job_id)
        spec = submission.spec
        pods_of = (
            [trial for trial, _ in expand_sweep(spec, job_id=job_id)]
            if spec is not None and spec.sweep
            else [job_id]
        )
        if submission.objective is not None:
            # What its trainer (each trial's, for a sweep: they are found by their sweep) reports.
            local.simulated_metrics.set_objective(job_id, submission.objective)
        # Its pods behave alike in whichever cluster admission places it.
        checkpoint_every = getattr(submission, "checkpoint_every", None)
        for cluster in self.clusters.values():
            for pod_job in pods_of:
                cluster.set_behaviour(
                    pod_job,
                    run_for=submission.run_for,
                    exit_code=submission.exit_code,
                    checkpoint_every=checkpoint_every,
                )

    def _fault(self, local: LocalRuntime, recorder: Recorder, fault: Any) -> None:
        fleet = local.fleet
        at = local.clock.elapsed
        named: str | None = getattr(fault, "cluster", None)
        cluster = self.clusters[named] if named is not None else next(iter(self.clusters.values()))
        if isinstance(fault, TerminateNode | SpotReclaim | InstanceLost):
            if fleet is None:
                return
            victims = self._pick_nodes(local, fault)
            for node in victims:
                instance_id = fleet.instance_of(node)
                if instance_id is None:
                    continue
                recorder.reclaimed_nodes.add(node)
                if isinstance(fault, InstanceLost):
                    fleet.lose(instance_id)
                else:
                    fleet.reclaim(instance_id)
            what = {
                SpotReclaim: "spot reclaim",
                TerminateNode: "node terminated",
                InstanceLost: "instance lost without notice",
            }[type(fault)]
            self._note(at, f"{what}: {', '.join(victims) or 'no node matched'}")
        elif isinstance(fault, RegionOutage):
            if fleet is None:
                return
            types = fault.instance_types or sorted(
                {g.instance_type for g in self.plan.groups if g.region == fault.region}
            )
            for instance_type in types:
                fleet.set_capacity(region=fault.region, instance_type=instance_type, instances=0)
            self._note(at, f"{fault.region} has no more {', '.join(types)} capacity")
            if fault.reclaim_running:
                nodes = [n for n, (_, region) in fleet.running_nodes().items() if region == fault.region]
                for node in nodes:
                    if (instance_id := fleet.instance_of(node)) is not None:
                        recorder.reclaimed_nodes.add(node)
                        fleet.reclaim(instance_id)
                self._note(at, f"{fault.region}: {len(nodes)} running instances lost")
        elif isinstance(fault, CapacityChange):
            if fleet is not None:
                fleet.set_capacity(
                    region=fault.region, instance_type=fault.instance_type, instances=fault.instances
                )
            self._note(at, f"{fault.region} can run {fault.instances} {fault.instance_type} from now on")
        elif isinstance(fault, Throttle):
            if fault.api == "autoscaling":
                if fleet is not None:
                    fleet.throttle(fault.calls)
            else:
                for method in fault.methods:
                    cluster.fail_calls(
                        method,
                        RetryableError(f"{method}: 429 Too Many Requests (throttled)"),
                        times=fault.calls,
                    )
            where = (
                f" of cluster {cluster.name}" if len(self.clusters) > 1 and fault.api == "kubernetes" else ""
            )
            self._note(at, f"{fault.api} API{where} throttled for the next {fault.calls} calls")
        elif isinstance(fault, ClusterOutage):
            until = local.clock.now() + fault.duration
            cluster.outage(until=until)
            self._note(
                at,
                f"cluster {cluster.name}'s API cannot be reached until {format_span(until - self.plan.start)} "
                "(its nodes and pods keep running)",
            )
        elif isinstance(fault, FunctionDies):
            cluster.kill_at(fault.call, after=fault.after)
            where = f" to cluster {cluster.name}" if len(self.clusters) > 1 else ""
            self._note(
                at,
                f"the function making Kubernetes call {fault.call} #{fault.after + 1}{where} will be killed",
            )

    def _pick_nodes(self, local: LocalRuntime, fault: _NodeSelector) -> list[str]:
        fleet = local.fleet
        if fleet is None:
            return []
        group_names = {
            g.asg_name or g.name for g in self.plan.groups if fault.group in (None, g.name, g.asg_name)
        }
        where = fleet.node_clusters()
        candidates = [
            node
            for node, (group, region) in fleet.running_nodes().items()
            if group in group_names
            and (fault.region is None or region == fault.region)
            and (fault.cluster is None or where[node] == fault.cluster)
            and (fault.node is None or node == fault.node)
        ]
        # Read off the simulated nodes, not through the API: it may be in an outage.
        busy = {node: self.clusters[where[node]].gpus_held_on(node) for node in candidates}
        return sorted(candidates, key=lambda n: (-busy[n], n))[: fault.count]

    def _note(self, at: timedelta, text: str) -> None:
        self.notes.append(f"{format_span(at)}  {text}")
        if self.view is not None:
            self.view.note(at, text)
