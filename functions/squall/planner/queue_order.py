"""The order admission reads the queue in: priority bands, fair share between teams, quotas. Pure.

Within a priority (highest first), each team's jobs keep their own order (a job back in
the queue after losing its objects first, then by submission), and the teams take
turns by fair share: the next job is the head of the team with the fewest GPUs in use
or ordered ahead of it, per unit of its weight. A job that would take its team past its
quota is held back (planner/admission.py says what admission does with it).

With backfill, a job that has waited longer than the policy's `agedAfter` takes its turn
ahead of the fair share, oldest first: a busy team's jobs cannot be passed for ever by
the jobs of teams using less, however long the fleet stays full.
"""

from __future__ import annotations

import functools
import heapq
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime

from squall.planner.queue_types import QueuedJob, TeamShare


@functools.lru_cache(maxsize=4096)  # the same places come up check after check
def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def bands_of(queued: Iterable[QueuedJob]) -> dict[int, dict[str, list[QueuedJob]]]:
    """Priority -> team -> the team's jobs in their order (re-queued first, then by submission)."""
    bands: dict[int, dict[str, list[QueuedJob]]] = {}
    for job in queued:
        bands.setdefault(job.priority, {}).setdefault(job.team, []).append(job)
    for by_team in bands.values():
        for jobs in by_team.values():
            jobs.sort(key=operator.methodcaller("order_key"))
    return bands


def in_admission_order(
    queued: Sequence[QueuedJob],
    *,
    in_use: Mapping[str, int],
    teams: Mapping[str, TeamShare],
    bands: Mapping[int, Mapping[str, Sequence[QueuedJob]]] | None = None,
    aged_before: datetime | None = None,
) -> Iterator[tuple[QueuedJob, int | None]]:
    """The queue in admission order, each job with None, or the GPUs in use or ahead when its quota holds it.

    Priority bands, highest first. Within a band, each team's jobs in their own order
    (re-queued first, then by submission), and the teams interleaved by fair share: the
    next job is the head of the team with the fewest GPUs in use or ordered ahead, per
    unit of weight. A job that would take its team past its quota is held back; the
    team's later, smaller jobs may still fit under it. A team's next job submitted before
    `aged_before` comes ahead of the fair share, the oldest such first. Lazy: a caller that stops early
    pays for the part it read (and the sorting).
    """
    prospective = dict(in_use)
    bands = bands_of(queued) if bands is None else bands
    for priority in sorted(bands, reverse=True):
        by_team = bands[priority]
        heap: list[tuple[tuple[int, float], str, int]] = [
            (_turn(by_team[team][0], team, prospective, teams, aged_before), team, 0) for team in by_team
        ]
        heapq.heapify(heap)
        while heap:
            _, team, index = heapq.heappop(heap)
            job = by_team[team][index]
            share = teams.get(team)
            used = prospective.get(team, 0)
            if share is not None and share.quota is not None and used + job.gpus > share.quota:
                yield job, used
            else:
                prospective[team] = used + job.gpus
                yield job, None
            if index + 1 < len(by_team[team]):
                turn = _turn(by_team[team][index + 1], team, prospective, teams, aged_before)
                heapq.heappush(heap, (turn, team, index + 1))


def _turn(
    job: QueuedJob,
    team: str,
    used: Mapping[str, int],
    teams: Mapping[str, TeamShare],
    aged_before: datetime | None,
) -> tuple[int, float]:
    """When a team's next job comes: one submitted before `aged_before` ahead of the fair share, oldest first."""
    if aged_before is not None and job.submitted_at is not None and job.submitted_at < aged_before:
        return (0, job.submitted_at.timestamp())
    return (1, _share(team, used, teams))


def _share(team: str, used: Mapping[str, int], teams: Mapping[str, TeamShare]) -> float:
    share = teams.get(team)
    return used.get(team, 0) / (share.weight if share is not None else 1.0)
