"""Sweeps: a sweep's record follows its trials, and a waiting trial goes in the queue when its slot comes.

Reconcile looks at each active sweep once a run (its parent record holds no object
of its own): the sweep starts with its first trial's start and ends when every trial
has ended; in between, waiting trials are put in the queue while fewer than
`parallelism` of its trials are queued or running. Transitions go through the
reconciler's own recording (costs, metrics and the clean-up of a finished job's
objects are done there, the same for a trial as for any job).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from squall.core.jobs import Job, JobStatus, Reason, is_terminal
from squall.core.spec import load_spec
from squall.ports import Clock, JobStore
from squall.services.intake import Intake

# Reconciler._record with its report bound: the transition recorded, or None when there was none.
Record = Callable[..., Job | None]
# Reconciler._isolated with its report bound: whether the step ran without an error.
Isolated = Callable[[Job, Callable[[], None]], bool]


@dataclass
class SweepCheck:
    """One reconcile run's look at its sweeps."""

    store: JobStore
    intake: Intake
    clock: Clock
    record: Record
    isolated: Isolated

    def run(self, parent: Job) -> None:
        trials = [t for t in (self.store.get(tid) for tid in parent.trial_ids) if t is not None]
        # A sweep runs from its first trial's start, however short that trial's run was.
        first = min((t.started_at for t in trials if t.started_at is not None), default=None)
        if parent.status is JobStatus.QUEUED and first is not None:
            started = self.record(
                parent,
                to=JobStatus.RUNNING,
                reason=Reason.STARTED,
                message="",
                happened_at=self._recorded_time(first, not_before=parent.submitted_at),
            )
            parent = started or parent
        if trials and all(is_terminal(t.status) for t in trials):
            succeeded = sum(1 for t in trials if t.status is JobStatus.SUCCEEDED)
            last = max((t.finished_at for t in trials if t.finished_at is not None), default=None)
            self.record(
                parent,
                to=JobStatus.SUCCEEDED if succeeded else JobStatus.FAILED,
                reason=Reason.TRIALS_FINISHED,
                message=f"{succeeded}/{len(trials)} trials succeeded",
                happened_at=self._recorded_time(last, not_before=parent.started_at or parent.submitted_at),
            )
            return
        spec = load_spec(parent.spec)
        parallelism = spec.sweep.parallelism if spec.sweep else len(trials)
        active = sum(
            1 for t in trials if not is_terminal(t.status) and t.reason != Reason.WAITING_FOR_TRIAL_SLOT
        )
        for trial in trials:
            if active >= parallelism:
                break
            waiting = trial.status is JobStatus.QUEUED and trial.reason == Reason.WAITING_FOR_TRIAL_SLOT
            # A trial that cannot start fails alone; its slot goes to the next one.
            if waiting and self.isolated(trial, functools.partial(self._start_trial, trial)):
                active += 1

    def _start_trial(self, trial: Job) -> None:
        """Its slot came: the trial goes in the queue (admission chooses where it runs)."""
        self.intake.enqueue(trial, load_spec(trial.spec))

    def _recorded_time(self, at: datetime | None, *, not_before: datetime) -> datetime | None:
        """`at` no earlier than `not_before` and no later than now; None: not known."""
        if at is None:
            return None
        return min(max(at, not_before), self.clock.now())
