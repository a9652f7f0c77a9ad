"""The sweeps pages: every sweep with its objective, trials done and best value; one sweep's
trials ranked as `squall sweep` ranks them, with a chart of its parameters against the objective.

The list reads as the jobs list does (Client.jobs_page: the status index page by page, newest
submission first within a state, `?team=` as its filter, the same strict cursor) and keeps the
sweeps (jobs with trials): the table has no index of sweeps alone, so each request reads at
most MOST_READ jobs, CHUNK at a time (a chunk with more sweeps than the page wants is read
again up to its last sweep shown, so that the cursor passes over none), and a page may hold
fewer sweeps than it could and still have a next one. With no `?state=` it shows RUNNING, QUEUED, then the ended states.
Each row reads the sweep's best trial (one item), and an active sweep's trials to count
those done (at most TRIALS_READ trials a request; past them a row shows only the total). A sweep's page is `Client.sweep_results` (the ranking of
core/experiments.py) and each early-stopped trial's history, for the reason it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, render_template, request

from squall.cli.errors import NotFound
from squall.cli.human import dollars
from squall.cli.sweeps import best_line, early_stopped, metric_words, run_time, state_words
from squall.cli.text import one_line
from squall.console.context import current
from squall.console.pages.jobs import decode_cursor, encode_cursor, state_argument, text_argument
from squall.console.plots import ParallelChart, PlotAxis, PlotTrial, ScatterChart, parallel, scatter
from squall.core.experiments import SweepResults, TrialResult, sweep_objective, trial_result
from squall.core.jobs import Job, JobStatus, Reason, is_terminal
from squall.core.spec import ParameterRange, SpecError, Sweep, load_spec

blueprint = Blueprint("sweeps", __name__, url_prefix="/sweeps")

# Jobs read from the status index per request for the list (the table has no index of sweeps),
# CHUNK at a time.
MOST_READ = 500
CHUNK = 250
# Trials read a request to count an active sweep's trials done.
TRIALS_READ = 500
# The list's states, in this order, when no `?state=` picks one (a rejected job has no trials).
LISTED_STATES = (
    JobStatus.RUNNING,
    JobStatus.QUEUED,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)


@dataclass(frozen=True)
class SweepRow:
    id: str
    name: str
    team: str
    state: str
    reason: str
    objective: str  # "eval/score (maximize)"; "" for none
    done: int | None  # None: not counted (the request's trial reads were spent)
    total: int
    best_id: str
    best_value: str


@dataclass(frozen=True)
class TrialRow:
    rank: int | None
    id: str
    state: str
    value: str
    run_time: str
    gpu_hours: str
    cost: str
    parameters: tuple[str, ...]  # one cell per parameter column
    stopped: bool
    stopped_why: str
    best: bool


@blueprint.get("")
def page() -> str:
    context = current()
    state = state_argument(request.args.get("state"))
    team = text_argument("team", request.args.get("team"))
    states = [state] if state is not None else list(LISTED_STATES)
    after = request.args.get("after")
    cursor = decode_cursor(after, states=states) if after else None
    sweeps, following = sweeps_page(states=states, team=team, after=cursor, size=context.page_size)
    return render_template(
        "sweeps.html",
        rows=sweep_rows(sweeps),
        states=[s.value for s in JobStatus],
        state=state.value if state else "",
        team=team or "",
        cursor=encode_cursor(*following) if following is not None else None,
        args={k: v for k, v in (("state", request.args.get("state")), ("team", team), ("after", after)) if v},
    )


def sweeps_page(
    *,
    states: Sequence[JobStatus],
    team: str | None,
    after: tuple[JobStatus, dict[str, str] | None] | None,
    size: int,
) -> tuple[list[Job], tuple[JobStatus, dict[str, str] | None] | None]:
    """At most `size` sweeps from `after` on, and where the next page starts (None: no more).

    Jobs are read CHUNK at a time; a chunk that holds more sweeps than the page still wants
    is read again only up to the last sweep shown, for a cursor that passes over no sweep.
    """
    client = current().client
    sweeps: list[Job] = []
    read = 0
    # A call that meets a state's end goes on in the next one; an empty state reads nothing.
    for _ in range(MOST_READ // CHUNK + len(states)):
        chunk = min(CHUNK, MOST_READ - read)
        jobs, following = client.jobs_page(states=states, team=team, after=after, size=chunk, most_read=chunk)
        # without a team every job read is kept; with one, the filter may have read a whole chunk
        read += len(jobs) if team is None else chunk
        found = [job for job in jobs if job.is_sweep]
        wanted = size - len(sweeps)
        if len(found) > wanted:
            upto = jobs.index(found[wanted - 1]) + 1
            jobs, following = client.jobs_page(
                states=states, team=team, after=after, size=upto, most_read=chunk
            )
            found = [job for job in jobs if job.is_sweep][:wanted]
        sweeps += found
        after = following
        if after is None or len(sweeps) >= size or read >= MOST_READ:
            break
    return sweeps, after


@blueprint.get("/<sweep_id>")
def sweep(sweep_id: str) -> str:
    client = current().client
    parent = client.get(sweep_id)
    if not parent.is_sweep:
        where = f" (a trial of sweep {parent.parent_id})" if parent.parent_id else ""
        raise NotFound(f"job {sweep_id} is not a sweep{where}")
    results = client.sweep_results(sweep_id)
    definition = _definition(parent)
    names = _parameter_names(definition, results.trials)
    why = {t.id: _stopped_why(t.id) for t in results.trials if early_stopped(t)}
    rows = trial_rows(results, names=names, stopped_why=why)
    chart = sweep_chart(results, axes=_axes(definition, names))
    return render_template(
        "sweep.html",
        job=parent,
        results=results,
        sweep=definition,
        names=[one_line(n) for n in names],
        rows=rows,
        best=best_line(results),
        chart=chart,
        scatter=chart if isinstance(chart, ScatterChart) else None,
        parallel=chart if isinstance(chart, ParallelChart) else None,
        stopped=len(why),
    )


# ---- what the pages show, from records ----


def trial_rows(
    results: SweepResults, *, names: Sequence[str], stopped_why: Mapping[str, str]
) -> list[TrialRow]:
    """The table of `squall sweep`, a column per parameter: ranked trials first (rank shown only
    for a trial that reported the objective), then the others in trial order."""
    best = results.best.id if results.best is not None else None
    return [
        TrialRow(
            rank=rank if trial.value is not None else None,
            id=trial.id,
            state=state_words(trial),
            value=metric_words(trial),
            run_time=run_time(trial.run_seconds),
            gpu_hours=f"{trial.gpu_hours:,.2f}" if trial.gpu_hours is not None else "-",
            cost=dollars(trial.cost) if trial.cost is not None else "-",
            parameters=tuple(_cell(trial.parameters[n]) if n in trial.parameters else "-" for n in names),
            stopped=early_stopped(trial),
            stopped_why=stopped_why.get(trial.id, ""),
            best=trial.id == best,
        )
        for rank, trial in enumerate(results.trials, start=1)
    ]


def sweep_chart(results: SweepResults, *, axes: Sequence[PlotAxis]) -> ScatterChart | ParallelChart | None:
    """A scatter for one parameter, parallel coordinates for several; None without an objective."""
    if results.objective_metric is None or not axes:
        return None
    best = results.best.id if results.best is not None else None
    trials = [
        PlotTrial(
            name=t.id, parameters=t.parameters, value=t.value, stopped=early_stopped(t), best=t.id == best
        )
        for t in results.trials
    ]
    if len(axes) == 1:
        return scatter(trials, axes[0], objective=results.objective_metric)
    return parallel(trials, axes, objective=results.objective_metric)


def _definition(parent: Job) -> Sweep | None:
    try:
        return load_spec(parent.spec).sweep
    except SpecError:  # sweep_results has said so already; kept for a record that changed since
        return None


def _parameter_names(definition: Sweep | None, trials: Sequence[TrialResult]) -> list[str]:
    """The sweep's parameters in its spec's order, then any other a trial's record holds."""
    names = list(definition.parameters) if definition is not None else []
    for trial in trials:
        names += [n for n in trial.parameters if n not in names]
    return names


def _axes(definition: Sweep | None, names: Sequence[str]) -> list[PlotAxis]:
    axes: list[PlotAxis] = []
    for name in names:
        values = definition.parameters.get(name) if definition is not None else None
        if isinstance(values, ParameterRange):
            axes.append(PlotAxis(name, log=values.log, domain=(float(values.min), float(values.max))))
        elif isinstance(values, list) and any(isinstance(v, str | bool) for v in values):
            axes.append(PlotAxis(name, categories=tuple(dict.fromkeys(str(v) for v in values))))
        else:
            axes.append(PlotAxis(name))
    return axes


def _stopped_why(trial_id: str) -> str:
    """The message of the event that stopped a trial early (the median rule's numbers)."""
    events = current().client.events(trial_id)
    stop = next((e for e in reversed(events) if str(e.reason).startswith(Reason.EARLY_STOPPED)), None)
    return one_line(stop.message) if stop is not None and stop.message else ""


def _cell(value: Any) -> str:
    if isinstance(value, float) and not isinstance(value, bool):
        return f"{value:.6g}"
    return one_line(value)


def sweep_rows(jobs: Sequence[Job]) -> list[SweepRow]:
    """A row per sweep; an active sweep's trials are read to count those done, at most
    TRIALS_READ of them a request (an ended sweep's trials have all ended)."""
    budget = TRIALS_READ
    rows = []
    for job in jobs:
        count = not is_terminal(job.status) and len(job.trial_ids) <= budget
        if count:
            budget -= len(job.trial_ids)
        rows.append(_row(job, count=count))
    return rows


def _row(job: Job, *, count: bool) -> SweepRow:
    client = current().client
    try:
        objective = sweep_objective(job)
    except SpecError:
        objective = None
    done: int | None = None
    if is_terminal(job.status):
        done = len(job.trial_ids)  # a sweep ends once each of its trials has
    elif count:
        trials = (client.find(tid) for tid in job.trial_ids)
        done = sum(1 for t in trials if t is not None and is_terminal(t.status))
    best_value = ""
    if job.best_trial:
        trial = client.find(job.best_trial)
        if trial is not None:
            best_value = metric_words(trial_result(trial, objective, now=current().now()))
    return SweepRow(
        id=job.id,
        name=job.name,
        team=job.team,
        state=job.status.value,
        reason=one_line(job.reason),
        objective=f"{objective.metric} ({objective.goal})" if objective is not None else "",
        done=done,
        total=len(job.trial_ids),
        best_id=job.best_trial or "",
        best_value=best_value,
    )
