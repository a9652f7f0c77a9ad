"""What admission decides, as its callers read it: the admitted jobs, the waiting ones (their
place, why they wait, when they start) and the plan around them. Values only: planner/admission.py
makes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from squall.planner.model import Pod
from squall.planner.queue_order import ordinal
from squall.planner.queue_types import ReplicaJob
from squall.planner.text import amounts

NEVER_FITS = "; no region can ever hold it: it is larger than the node groups at max size"
# A job held to regions where no group is says so, not that it is too large.
NO_GROUP_IN = "; no region can ever hold it: no node group is in {asked} (the groups are in {served})"
MAX_REGIONS_NAMED = 8
# Where a gang's replicas must all be: with several clusters, one cluster's region.
_ONE_SITE = {False: "one region", True: "one cluster and region"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Admitted:
    """Let the job run in `region`: pin every replica Job there and unsuspend it."""

    job_id: str
    team: str
    namespace: str
    region: str  # a site: "<cluster>/<region>" when the planner sees several clusters
    gpus: int
    # The replica Jobs still to unsuspend (all of them, or those a half-done admission left).
    jobs: tuple[ReplicaJob, ...]
    resumed: bool = False  # an admission an earlier check began, finished now
    # Let run in room kept for a job ahead of it: its declared run time ends before that one starts.
    backfilled: bool = False


# Not frozen: a check makes hundreds (its first MAX_LISTED in line), and a frozen
# dataclass takes three times as long to build. Treat it as a value all the same.
@dataclass(slots=True, kw_only=True)
class Waiting:
    """A queued job that stays queued, with its place in the queue and why."""

    job_id: str
    team: str
    priority: int
    gpus: int
    replicas: int
    position: int  # 1-based, in admission order over every team (0: held by its quota)
    team_position: int  # 1-based within its team
    reason: str  # "Queued", or "QuotaExceeded:8/8 GPUs" (held back by the team's quota)
    reserved_region: str | None = None  # where (the site) it keeps the room it can use now
    never_fits: bool = False  # larger than what the node groups could hold at their max sizes
    # With never_fits: the regions it is held to, when no node group is in any of them.
    unserved_regions: tuple[str, ...] = ()
    served_regions: tuple[str, ...] = ()
    in_use: int = 0  # with a quota: the team's GPUs in use or ahead of it
    quota: int | None = None
    # All replicas together: a job without GPUs is described by what it does ask for.
    cpu_millis: int = 0
    memory_bytes: int = 0
    # The planner sees several clusters: a gang's place is one cluster's region.
    clusters: bool = False
    # When it starts at the latest if nothing of higher priority arrives (declared run
    # times), and most likely (run times as its team's jobs really run); None: not estimated.
    starts_by: datetime | None = None
    likely_start: datetime | None = None
    # Held by its team's budget: spent this month, the budget, and this job's worst case (dollars).
    spent: float = 0.0
    budget: float = 0.0
    worst_case: float = 0.0
    _entry: dict[str, object] | None = field(default=None, compare=False, repr=False)

    def entry(self) -> dict[str, object]:
        """Its entry in the decision record (made once: a Waiting does not change; do not change it)."""
        if self._entry is None:
            entry = {
                "job": self.job_id,
                "team": self.team,
                "priority": self.priority,
                "gpus": self.gpus,
                "position": self.position,
                "teamPosition": self.team_position,
                "reason": self.reason,
                "message": self.message,
            }
            if self.starts_by is not None:
                entry["startsBy"] = self.starts_by.isoformat()
            if self.likely_start is not None:
                entry["likelyStart"] = self.likely_start.isoformat()
            self._entry = entry
            return entry
        return self._entry

    @property
    def message(self) -> str:
        asks = amounts(gpus=self.gpus, cpu_millis=self.cpu_millis, memory_bytes=self.memory_bytes)
        needs = (
            f"needs {asks} over {self.replicas} replicas in {_ONE_SITE[self.clusters]}"
            if self.replicas > 1
            else f"needs {asks}"
        )
        if self.reason == "BudgetExceeded":
            return (
                f"BudgetExceeded: ${self.spent:,.0f} of ${self.budget:,.0f} this month; "
                f"it may cost up to ${self.worst_case:,.0f}; {needs}"
            )
        if self.held_back:
            return f"{self.in_use}/{self.quota} GPUs of {self.team} in use or ahead of it; {needs}"
        place = f"{ordinal(self.team_position)} in {self.team}, {ordinal(self.position)} overall"
        if self.never_fits and self.unserved_regions:
            return f"{place}; {needs}" + NO_GROUP_IN.format(
                asked=_listed(self.unserved_regions), served=_listed(self.served_regions) or "no region"
            )
        return f"{place}; {needs}" + (NEVER_FITS if self.never_fits else "")

    @property
    def held_back(self) -> bool:
        """Held back by its team's quota or budget: neither admitted nor bought for."""
        return self.reason.startswith(("QuotaExceeded", "BudgetExceeded"))


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionPlan:
    admitted: tuple[Admitted, ...] = ()
    waiting: tuple[Waiting, ...] = ()  # admission order, then those held by quota
    # Pods for the planner: those of admitted jobs not created yet (pinned to their
    # region), then the queue's, head first (a higher priority means earlier).
    demand: tuple[Pod, ...] = ()
    # GPUs of admitted, unfinished jobs by team, this check's admissions included.
    in_use: Mapping[str, int] = field(default_factory=dict)
    incomplete: tuple[str, ...] = ()  # jobs whose replica Jobs are not all created yet
    # Every job still waiting, by team: (jobs, GPUs). `waiting` lists the first MAX_LISTED.
    queued: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    held_by_budget: Mapping[str, int] = field(default_factory=dict)  # team -> jobs its budget holds

    @property
    def waiting_total(self) -> int:
        return sum(jobs for jobs, _ in self.queued.values())

    def to_dict(self, *, most: int = 200) -> dict[str, object]:
        """For the decision record and `squall queue`: the first `most` waiting jobs."""
        return {
            "admitted": [
                {"job": a.job_id, "team": a.team, "region": a.region, "gpus": a.gpus} for a in self.admitted
            ],
            "waiting": [w.entry() for w in self.waiting[:most]],
            "waitingTotal": self.waiting_total,
            "inUse": dict(sorted(self.in_use.items())),
        }


def _listed(regions: Sequence[str]) -> str:
    shown = [region[:40] for region in regions[:MAX_REGIONS_NAMED]]
    more = len(regions) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")
