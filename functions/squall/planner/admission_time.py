"""Admission's time and money: the time profiles behind backfill and start estimates, and jobs' worst-case cost. Pure.

`Timing` is what admission (planner/admission.py) switches to once a job in line does
not fit: two profiles of the fleet over time (planner/timeline.py), one by declared run
times (who may run now without delaying anyone booked ahead, and each job's `startsBy`),
one by how long each team's jobs really run (`likelyStart`). `Pricing` says what a
queued job may cost at worst, for budgets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from squall.planner.demand import PodShape, shape_of
from squall.planner.fleet_profile import FleetMemo, timelines_of
from squall.planner.inventory import Inventory
from squall.planner.model import NodeGroup, Pod
from squall.planner.queue_types import QueuedJob, ReplicaJob
from squall.planner.timeline import Booking, Timeline, seconds_until

# Jobs in line booked on the time profile with start estimates, at most; those after them
# are only tried now, in order (up to the first that cannot start), and have no estimate,
# for at most MAX_TRIED_NOW more.
MAX_SCHEDULED = 150
MAX_TRIED_NOW = 2_000
# Jobs in line given a likelyStart as well, at most (a second profile: as much work again).
MAX_LIKELY = 100
# A job that declares no run time is taken for the spec's default maxRuntime.
DEFAULT_RUN_TIME = timedelta(hours=24)
# A likely run time is never taken for less than this share of the declared one.
LEAST_RATIO = 0.05


@dataclass(slots=True)
class Timing:
    """Admission's two time profiles once a job did not fit: declared run times (`startsBy`,
    and who may run now) and likely ones (`likelyStart`), booked job by job in line."""

    declared: Timeline
    likely: Timeline
    now: datetime
    ratios: Mapping[str, float]
    booked: int = 0
    stopped: bool = False  # past MAX_SCHEDULED, a job could not start now: the rest wait behind it
    bought: int = 0  # jobs whose pods were given to the planner to buy nodes for
    _likely: Booking | None = None

    @classmethod
    def start(
        cls,
        *,
        inventory: Inventory,
        pods: Sequence[Pod],
        running: Mapping[str, Sequence[ReplicaJob]],
        admitted_now: Sequence[tuple[QueuedJob, Mapping[PodShape, Sequence[Pod]], str]],
        earlier: Sequence[Pod],
        interned: dict[tuple[object, ...], PodShape],
        now: datetime,
        run_ratios: Mapping[str, float],
        shapes: Iterable[PodShape],
        queued_pods: Mapping[PodShape, int],
        memo: FleetMemo | None = None,
    ) -> Timing:
        """The profiles as admission found the fleet: running jobs end by their declared (or
        likely) run time from their start, and admitted jobs whose pods are not bound yet,
        and those admitted so far in this check, run from now. `queued_pods`: the queue's
        pods of each shape, the most that bookings will place on nodes to come. `memo`: what
        the last check read of the fleet (fleet_profile.FleetMemo)."""
        declared_ends: dict[str, float | None] = {}
        likely_ends: dict[str, float | None] = {}
        regions: dict[str, str] = {}
        for job_id, replicas in running.items():
            limit = max((r.max_runtime for r in replicas if r.max_runtime is not None), default=None)
            site = next((r.admitted_region for r in replicas if r.admitted_region), None)
            if site is not None:
                regions[job_id] = site
            if limit is None:
                continue
            starts = [r.started_at for r in replicas if r.started_at is not None]
            began = min(starts) if starts else now
            ratio = _ratio(run_ratios, replicas[0].team)
            declared_ends[job_id] = (began + limit - now).total_seconds()
            likely_ends[job_id] = (began + limit * ratio - now).total_seconds()
        declared, likely = timelines_of(
            inventory=inventory,
            pods=pods,
            now=now,
            ends=[declared_ends, likely_ends],
            shapes=shapes,
            to_place=queued_pods,
            memo=memo,
        )
        timing = cls(
            declared=declared,
            likely=likely,
            now=now,
            ratios=run_ratios,
        )
        waiting: dict[str, dict[PodShape, int]] = {}
        for pod in earlier:
            if pod.job_id is not None:
                counts = waiting.setdefault(pod.job_id, {})
                shape = shape_of(pod, interned)
                counts[shape] = counts.get(shape, 0) + 1
        for job_id, counts in waiting.items():
            where = inventory.job_regions.get(job_id) or regions.get(job_id)
            if where is not None:
                parts = list(counts.items())
                timing.declared.place_now(parts, seconds_until(declared_ends.get(job_id)), where)
                timing.likely.place_now(parts, seconds_until(likely_ends.get(job_id)), where)
        for job, by_shape, where in admitted_now:
            parts = [(shape, len(pods)) for shape, pods in by_shape.items()]
            timing.declared.place_now(parts, timing._declared(job), where)
            timing.likely.place_now(parts, timing._likely_run(job), where)
        return timing

    @property
    def exhausted(self) -> bool:
        """No job further on is looked at for now or later."""
        return self.stopped or self.booked >= MAX_SCHEDULED + MAX_TRIED_NOW

    def _declared(self, job: QueuedJob) -> float:
        return (job.max_runtime or DEFAULT_RUN_TIME).total_seconds()

    def _likely_run(self, job: QueuedJob) -> float:
        return self._declared(job) * _ratio(self.ratios, job.team)

    def book(self, job: QueuedJob, by_shape: Mapping[PodShape, Sequence[Pod]]) -> Booking | None:
        """Book the job at its earliest start by declared run times; start 0: it runs now."""
        parts = [(shape, len(pods)) for shape, pods in by_shape.items()]
        self.booked += 1
        self._likely = None
        if self.booked > MAX_SCHEDULED:
            # Past the booked part of the line, in order only: a job that cannot start now has
            # no booking to protect it, so none behind it may pass it (it would starve).
            if self.stopped:
                return None
            booking = self.declared.schedule(parts, self._declared(job), latest=0.0)
            if booking is None or booking.start > 0:
                self.stopped = True
                return None
        else:
            booking = self.declared.schedule(parts, self._declared(job))
        if booking is None:
            return None
        if booking.start <= 0:
            self.likely.place_now(parts, self._likely_run(job), booking.site)
        elif self.booked <= MAX_LIKELY:
            # in the site its room is reserved in, as it would be booked there node by node
            self._likely = self.likely.schedule(parts, self._likely_run(job), sites=[booking.site])
        return booking

    def estimate(self, booking: Booking | None) -> tuple[datetime | None, datetime | None]:
        """(startsBy, likelyStart) of the job just booked, to the second; None: no estimate."""
        if booking is None or booking.start == math.inf:
            return (None, None)
        starts_by = self.now + timedelta(seconds=math.ceil(booking.start))
        if self._likely is None:
            # past the first MAX_LIKELY in line, or no likely start found: none better than startsBy
            return (starts_by, starts_by if self.booked <= MAX_LIKELY else None)
        likely = self.now + timedelta(seconds=math.ceil(min(self._likely.start, booking.start)))
        return (starts_by, likely)


def _ratio(ratios: Mapping[str, float], team: str) -> float:
    return min(1.0, max(LEAST_RATIO, ratios.get(team, 1.0)))


class Pricing:
    """What a queued job may cost at worst: its declared run time on the dearest group each pod fits.

    A pod's part of a node is what it asks of the node's GPUs (on a GPU node, for a GPU
    pod), else the larger of its CPU and memory shares; a group without a price costs nothing.
    """

    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self._groups = [g for g in groups if g.price_per_hour]
        self._hourly: dict[PodShape, float] = {}
        self._jobs: dict[str, float] = {}

    def worst_case(self, job: QueuedJob, by_shape: Mapping[PodShape, Sequence[Pod]]) -> float:
        known = self._jobs.get(job.job_id)
        if known is None:
            hourly = sum(self._pod_hourly(shape) * len(pods) for shape, pods in by_shape.items())
            hours = (job.max_runtime or DEFAULT_RUN_TIME).total_seconds() / 3600
            known = self._jobs[job.job_id] = hourly * hours
        return known

    def _pod_hourly(self, shape: PodShape) -> float:
        price = self._hourly.get(shape)
        if price is None:
            price = 0.0
            cpu, memory, gpu, _ = shape.request
            for group in self._groups:
                size = group.allocatable
                labels = group.template_labels()
                if shape.placement_mismatch(labels, group.taints) is not None:
                    continue
                if cpu > size.cpu or memory > size.memory or gpu > size.gpu:
                    continue
                if gpu and size.gpu:
                    share = gpu / size.gpu
                else:
                    share = max(
                        cpu / size.cpu if size.cpu else 0.0, memory / size.memory if size.memory else 0.0
                    )
                price = max(price, share * (group.price_per_hour or 0.0))
            self._hourly[shape] = price
        return price
