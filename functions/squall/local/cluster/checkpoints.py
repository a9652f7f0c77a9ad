"""The trainer's checkpoints, as the simulated cluster plays them.

Models: a job whose behaviour has `checkpoint_every` saves a checkpoint that often
while its pods run (counted from each run's start, as the trainer counts steps from
the step it resumed at); when its pods stop before the end (deleted, evicted, lost
with a node, failed), the work up to its latest checkpoint is kept, and its next run,
in this cluster or another that shares this store (as S3 is shared), runs only for
what was left after it. `latest` answers what the trainer reported: when it last saved
(services/preemption.py's CheckpointReader).

Leaves out: the checkpoint a real trainer also saves on SIGTERM within its grace (the
simulated pods stop at once), and replicas of one job checkpointing at different
steps (one job's runs share one count of work).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from squall.core.jobs import Job
from squall.ports import Clock


@dataclass(slots=True)
class _Saved:
    work: timedelta = timedelta(0)  # run time its latest checkpoint holds
    at: datetime | None = None  # when it was saved
    # pod key -> (when its run began, the work it began from, how often it checkpoints)
    runs: dict[object, tuple[datetime, timedelta, timedelta]] = field(default_factory=dict)


class SimulatedCheckpoints:
    """Per job: the work its checkpoints hold, and when it last saved one."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._jobs: dict[str, _Saved] = {}

    def saved(self, job_id: str) -> timedelta:
        """The run time its latest checkpoint holds: a new run starts from there."""
        saved = self._jobs.get(job_id)
        return saved.work if saved is not None else timedelta(0)

    def begin(self, job_id: str, pod: object, *, at: datetime, every: timedelta) -> timedelta:
        """A pod of the job starts running; returns the work it resumes from."""
        saved = self._jobs.setdefault(job_id, _Saved())
        saved.runs[pod] = (at, saved.work, every)
        return saved.work

    def end(self, job_id: str, pod: object, *, at: datetime) -> None:
        """A pod of the job stops: what its run checkpointed is kept."""
        saved = self._jobs.get(job_id)
        if saved is None or pod not in saved.runs:
            return
        start, base, every = saved.runs.pop(pod)
        done = _checkpoints(start, at, every)
        if done and base + done * every > saved.work:
            saved.work = base + done * every
            saved.at = start + done * every

    def latest(self, job: Job) -> datetime | None:
        """When the job last saved a checkpoint, by now (None: never)."""
        saved = self._jobs.get(job.id)
        if saved is None:
            return None
        now = self._clock.now()
        latest = saved.at
        for start, _, every in saved.runs.values():
            done = _checkpoints(start, now, every)
            if done and (latest is None or start + done * every > latest):
                latest = start + done * every
        return latest


def _checkpoints(start: datetime, end: datetime, every: timedelta) -> int:
    """Checkpoints saved by a run from `start` to `end`, one each `every`."""
    if every <= timedelta(0) or end <= start:
        return 0
    return (end - start) // every
