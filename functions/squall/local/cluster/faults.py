"""Fault controls: port calls that fail on purpose, and how a job's containers behave.

Models: the Cluster port's calls as a fake records them, one error for the next call
(`next_error`, as every fake in Squall has), a number of failures planned for one
method (an API server throttling or down for a while), an outage of the whole API
until a time (a cluster that cannot be reached: every call fails as a timeout or a
5xx does, while the nodes and their pods go on running), and per Squall job how long
its containers run, what they exit with (on their own and on SIGTERM), whether
their image cannot be pulled and how often they checkpoint (checkpoints.py); the same per model service, whose containers keep
running unless told otherwise (they are restarted when they exit).

Leaves out: latency, partial failures (a call either happens in full or raises
before it changes anything), and faults of the nodes themselves (see nodes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from squall.core.errors import RetryableError
from squall.local.cluster.state import SIGTERM_EXIT_CODE, Behaviour, ClusterCall, non_negative

PORT_METHODS = frozenset(
    {
        "create",
        "delete_job_objects",
        "list_jobs",
        "list_pods",
        "list_nodes",
        "get_node",
        "patch_node",
        "patch_job",
        "evict",
        "list_deployments",
        "list_model_service_pods",
        "get_service",
        "delete_model_service_objects",
    }
)


@dataclass(slots=True)
class _PlannedFailure:
    error: Exception
    times: int


class PortFaults:
    """Records every port call; raises what the test planned for it."""

    def __init__(self, *, now: Callable[[], datetime], name: str = "") -> None:
        # Raised (once) by the next Cluster-port call, after that call is recorded.
        self.next_error: Exception | None = None
        self.calls: list[ClusterCall] = []
        self._planned: dict[str, _PlannedFailure] = {}
        self._now = now
        self._name = name
        # Every call fails until then (a cluster outage); None: the API answers.
        self.unreachable_until: datetime | None = None

    def unreachable(self) -> bool:
        """Whether the API cannot be reached now (an outage that has not ended)."""
        return self.unreachable_until is not None and self._now() < self.unreachable_until

    def unreachable_for(self, until: datetime) -> None:
        """An outage until then; one already under way that ends later keeps its end."""
        if self.unreachable_until is None or until > self.unreachable_until:
            self.unreachable_until = until

    def fail_calls(self, method_name: str, error: Exception, *, times: int = 1) -> None:
        if method_name not in PORT_METHODS:
            raise ValueError(f"{method_name!r} is not a Cluster port method: {sorted(PORT_METHODS)}")
        if times < 1:
            raise ValueError("times must be at least 1")
        self._planned[method_name] = _PlannedFailure(error=error, times=times)

    def record(self, method: str, **args: object) -> None:
        self.calls.append(ClusterCall(method=method, args=args))
        if self.unreachable_until is not None:
            if self.unreachable():
                # As the adapter translates a connect timeout or a 503 from the API server.
                raise RetryableError(
                    f"{method}: cluster {self._name or '(unnamed)'} cannot be reached: "
                    "the API server timed out (simulated outage)"
                )
            self.unreachable_until = None
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        planned = self._planned.get(method)
        if planned is not None:
            planned.times -= 1
            if planned.times <= 0:
                del self._planned[method]
            raise planned.error


class Behaviours:
    """How each Squall job's pods behave; a job nobody described runs for the default time."""

    def __init__(self, *, default_run_for: timedelta) -> None:
        self.default = Behaviour(run_for=non_negative("default_run_for", default_run_for))
        self._by_job: dict[str, Behaviour] = {}
        self._by_model_service: dict[str, Behaviour] = {}

    def set(
        self,
        job_id: str,
        *,
        run_for: timedelta | None,
        exit_code: int,
        image_error: bool,
        evicted_exit_code: int = SIGTERM_EXIT_CODE,
        checkpoint_every: timedelta | None = None,
    ) -> None:
        if checkpoint_every is not None and checkpoint_every <= timedelta(0):
            raise ValueError("checkpoint_every must be positive")
        self._by_job[job_id] = Behaviour(
            run_for=non_negative("run_for", run_for if run_for is not None else self.default.run_for),
            exit_code=exit_code,
            image_error=image_error,
            evicted_exit_code=evicted_exit_code,
            checkpoint_every=checkpoint_every,
        )

    def of(self, job_id: str | None) -> Behaviour:
        if job_id is None:
            return self.default
        return self._by_job.get(job_id, self.default)

    def set_model_service(
        self,
        name: str,
        *,
        run_for: timedelta | None,
        exit_code: int,
        image_error: bool,
        evicted_exit_code: int = SIGTERM_EXIT_CODE,
    ) -> None:
        if run_for is None and not image_error:
            self._by_model_service.pop(name, None)  # keeps running: the default
            return
        self._by_model_service[name] = Behaviour(
            run_for=non_negative("run_for", run_for if run_for is not None else self.default.run_for),
            exit_code=exit_code,
            image_error=image_error,
            evicted_exit_code=evicted_exit_code,
        )

    def of_model_service(self, name: str | None) -> Behaviour | None:
        """None: its containers keep running, as a server does."""
        return self._by_model_service.get(name) if name is not None else None
