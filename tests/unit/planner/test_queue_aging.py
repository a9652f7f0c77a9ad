"""Backfill's guard against starvation: a job that has waited longer than the policy's
`agedAfter` goes ahead of the fair share, oldest first (planner/queue_order.py)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from squall.planner.model import Policy
from squall.planner.queue_order import in_admission_order
from squall.planner.queue_types import QueuedJob

from .builders import NOW, POLICY
from .test_admission import _patched, admitted, job_objects, p4d, run

DAY = timedelta(days=1)


def queued(job_id: str, team: str, waited: timedelta) -> QueuedJob:
    return QueuedJob(
        job_id=job_id,
        team=team,
        namespace=f"team-{team}",
        priority=50,
        submitted_at=NOW - waited,
        requeued=False,
        replicas=(),
        gpus=8,
    )


def order(jobs: list[QueuedJob], aged_before: datetime | None = None) -> list[str]:
    in_use = {"a": 100, "b": 50, "c": 0}
    return [
        job.job_id for job, _ in in_admission_order(jobs, in_use=in_use, teams={}, aged_before=aged_before)
    ]


def test_jobs_waiting_past_the_limit_go_ahead_of_the_fair_share_oldest_first() -> None:
    jobs = [
        queued("a1", "a", 10 * DAY),
        queued("a2", "a", 6 * DAY),
        queued("b1", "b", 8 * DAY),
        queued("b2", "b", timedelta(hours=1)),
        queued("c1", "c", timedelta(hours=2)),
    ]
    # fair share alone: the team using least first, the busiest team's old jobs last
    assert order(jobs) == ["c1", "b1", "b2", "a1", "a2"]
    # aged: those older than five days first, the oldest first, then the fair share
    assert order(jobs, aged_before=NOW - 5 * DAY) == ["a1", "b1", "a2", "c1", "b2"]


def first_admitted(*, waited_days: int, policy: Policy = POLICY) -> dict[str, str]:
    """research runs a job on one of two nodes; its job queued `waited_days` ago and vision's
    queued half an hour ago both want the other node: which is admitted."""
    running = job_objects("r-run", team="research")
    for obj in running:
        obj.update(_patched(obj, "us-west-2"))
    old = job_objects("r-old", team="research", minute=-waited_days * 24 * 60)
    new = job_objects("v-new", team="vision", minute=30)
    return admitted(run(running + old + new, groups=[p4d(nodes=2, max_size=2)], policy=policy))


def test_a_busy_teams_old_job_is_admitted_before_a_new_job_of_an_idle_team() -> None:
    assert first_admitted(waited_days=6) == {"r-old": "us-west-2"}
    # without backfill, today's rule: the fair share alone
    assert first_admitted(waited_days=6, policy=dataclasses.replace(POLICY, backfill=False)) == {
        "v-new": "us-west-2"
    }
    # nor before the limit: five days is the default
    assert first_admitted(waited_days=4) == {"v-new": "us-west-2"}


def test_a_limit_longer_than_the_calendar_ages_no_job_and_admits_as_the_fair_share() -> None:
    policy = dataclasses.replace(POLICY, aged_after=timedelta(days=9_999_999))  # as cdk.json may say
    assert first_admitted(waited_days=6, policy=policy) == {"v-new": "us-west-2"}
