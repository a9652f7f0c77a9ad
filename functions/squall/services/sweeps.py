"""Sweeps: a sweep's record follows its trials; trials are stopped early, ranked, and started as slots free.

Reconcile looks at each active sweep once a run (its parent record holds no object
of its own), reading its trials' records, metrics included:

- the sweep starts with its first trial's start;
- with earlyStopping, each running trial is judged by the median rule
  (core/experiments.py median_stop); one that loses stops: SUCCEEDED, reason
  EarlyStopped, its objects deleted and its cost recorded as for any finished run;
- its trials are ranked by the objective, and the sweep's record names its best trial
  whenever that changes (a note on its history);
- when every trial has ended the sweep ends, its message naming the best trial, or
  saying that no trial reported the objective;
- else waiting trials go in the queue while fewer than `parallelism` of its trials
  are queued or running. A tpe trial's parameters are chosen then, from the trials
  before it (core/search.py), and recorded with the version-checked move out of
  WaitingForTrialSlot (services/intake.py enqueue): a retried run finds it moved and
  neither chooses nor starts it again.

Transitions go through the reconciler's own recording (costs, metrics and the
clean-up of a finished job's objects are done there, the same for a trial as for any job).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from aws_lambda_powertools import Logger

from squall.core.experiments import SweepResults, TrialResult, median_stop, objective_series, results_of
from squall.core.jobs import Job, JobStatus, Reason, is_terminal, note
from squall.core.search import choose_parameters, observed_trials, trial_number
from squall.core.spec import JobSpec, Sweep, load_spec, with_parameters
from squall.core.telemetry import SERVICE
from squall.ports import Clock, JobStore
from squall.services.intake import Intake, update_job

logger = Logger(service=SERVICE, child=True)

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
        spec = load_spec(parent.spec)
        sweep = spec.sweep
        if sweep is not None and sweep.early_stopping is not None:
            trials = self._stop_early(sweep, trials)
        objective = sweep.objective if sweep is not None else None
        results = results_of(parent.id, trials, objective=objective, now=self.clock.now())
        if trials and all(is_terminal(t.status) for t in trials):
            succeeded = sum(1 for t in trials if t.status is JobStatus.SUCCEEDED)
            stopped = sum(1 for t in trials if t.reason == Reason.EARLY_STOPPED)
            last = max((t.finished_at for t in trials if t.finished_at is not None), default=None)
            best = results.best.id if results.best is not None else parent.best_trial
            self.record(
                parent,
                to=JobStatus.SUCCEEDED if succeeded else JobStatus.FAILED,
                reason=Reason.TRIALS_FINISHED,
                message=f"{succeeded}/{len(trials)} trials succeeded"
                + (f" ({stopped} stopped early)" if stopped else "")
                + _verdict(results),
                happened_at=self._recorded_time(last, not_before=parent.started_at or parent.submitted_at),
                best_trial=best,
            )
            return
        if results.best is not None and results.best.id != parent.best_trial:
            parent = self._best_trial(parent, results) or parent
        parallelism = sweep.parallelism if sweep else len(trials)
        active = sum(
            1 for t in trials if not is_terminal(t.status) and t.reason != Reason.WAITING_FOR_TRIAL_SLOT
        )
        for index, trial in enumerate(trials):
            if active >= parallelism:
                break
            waiting = trial.status is JobStatus.QUEUED and trial.reason == Reason.WAITING_FOR_TRIAL_SLOT
            # A trial that cannot start fails alone; its slot goes to the next one.
            step = functools.partial(self._start_trial, trial, sweep=sweep, trials=trials, index=index)
            if waiting and self.isolated(trial, step):
                active += 1

    # ---- early stopping ----------------------------------------------------

    def _stop_early(self, sweep: Sweep, trials: list[Job]) -> list[Job]:
        """Each running trial judged by the median rule; those stopped are the records written."""
        objective, rule = sweep.objective, sweep.early_stopping
        assert objective is not None and rule is not None  # the spec refuses earlyStopping without one
        finished = [objective_series(t, objective) for t in trials if t.status is JobStatus.SUCCEEDED]
        judged = []
        for trial in trials:
            decision = None
            if trial.status is JobStatus.RUNNING:
                decision = median_stop(
                    objective_series(trial, objective), finished, objective=objective, rule=rule
                )
            if decision is None:
                judged.append(trial)
                continue
            logger.info(
                "trial stopped early", job_id=trial.id, sweep=trial.parent_id, reason=decision.message()
            )
            # Onto the very record judged: a trial that ended meanwhile keeps its own end.
            stopped = self.record(
                trial,
                to=JobStatus.SUCCEEDED,
                reason=Reason.EARLY_STOPPED,
                message=decision.message(),
                strict=True,
            )
            judged.append(stopped or self.store.get(trial.id) or trial)
        return judged

    # ---- the best trial ----------------------------------------------------

    def _best_trial(self, parent: Job, results: SweepResults) -> Job | None:
        best = results.best
        assert best is not None
        message = f"best trial {best.id}: {_value(results, best)}"
        return update_job(
            self.store,
            parent,
            lambda current: (
                None
                if is_terminal(current.status) or current.best_trial == best.id
                else _with_best(
                    note(current, reason=Reason.BEST_TRIAL, at=self.clock.now(), message=message), best.id
                )
            ),
        )

    # ---- a waiting trial's slot --------------------------------------------

    def _start_trial(self, trial: Job, *, sweep: Sweep | None, trials: list[Job], index: int) -> None:
        """Its slot came: the trial goes in the queue (admission chooses where it runs); a tpe
        trial with its parameters chosen now."""
        spec = load_spec(trial.spec)
        if sweep is not None and sweep.strategy == "tpe" and spec.trial_parameters is None:
            spec = self._chosen(spec, sweep=sweep, trial=trial, trials=trials)
        queued = self.intake.enqueue(trial, spec)
        if queued is not None:
            trials[index] = queued  # the next trial chosen this run sees this one's parameters

    def _chosen(self, spec: JobSpec, *, sweep: Sweep, trial: Job, trials: Sequence[Job]) -> JobSpec:
        assert sweep.objective is not None  # the spec refuses tpe without one
        history = observed_trials([t for t in trials if t.id != trial.id], sweep.objective)
        values = choose_parameters(sweep, history, number=trial_number(trial.id))
        return with_parameters(spec, values, args=spec.args)

    def _recorded_time(self, at: datetime | None, *, not_before: datetime) -> datetime | None:
        """`at` no earlier than `not_before` and no later than now; None: not known."""
        if at is None:
            return None
        return min(max(at, not_before), self.clock.now())


def _with_best(noted: tuple[Job, object], best: str) -> tuple[Job, object]:
    job, event = noted
    return dataclasses.replace(job, best_trial=best), event


def _value(results: SweepResults, trial: TrialResult) -> str:
    return f"{results.objective_metric} {trial.value:.6g} at step {trial.step}"


def _verdict(results: SweepResults) -> str:
    """What the sweep found, for its final message."""
    if results.objective_metric is None:
        return ""
    if results.best is not None:
        return f"; best trial {results.best.id}: {_value(results, results.best)}"
    if results.unreported:
        return f"; no trial reported the objective metric {results.objective_metric}"
    return f"; no succeeded trial reported the objective metric {results.objective_metric}"
