"""The sweeps pages over the local runtime: a real sweep's trials ranked as `squall sweep` ranks
them, its chart with one mark per trial, the early-stopped ones marked; the list; hostile text
from records shown as text."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Any

import pytest

from squall.cli.sweeps import early_stopped
from squall.console.pages import sweeps
from squall.core.jobs import JobStatus, Reason, new_job, transition
from squall.core.metrics import merge
from squall.local.cluster.metrics import ParameterOptimum, SyntheticObjective
from tests.e2e.helpers_runtime import IMAGE
from tests.integration.console.conftest import Console

pytestmark = pytest.mark.timeout(300)

SWEEP = "lr-sweep"
TRIALS = 5
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


def sweep_spec(**sweep: Any) -> dict[str, Any]:
    return {
        "name": "lr-sweep",
        "id": SWEEP,
        "team": "research",
        "image": IMAGE,
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
        "maxRuntime": "2h",
        "sweep": {
            "parameters": {"lr": {"min": 0.0001, "max": 0.1, "log": True}},
            "strategy": "random",
            "seed": 3,
            "maxTrials": TRIALS,
            "parallelism": 2,
            "objective": {"metric": "eval/score", "goal": "maximize"},
            "earlyStopping": {"rule": "median", "minSteps": 300, "minTrials": 2},
            **sweep,
        },
    }


def run_sweep(console: Console) -> None:
    """The sweep submitted and run to its end: each trial's simulated trainer reports eval/score
    from a known objective of lr (best at 0.003), one hour a whole trial."""
    runtime = console.runtime
    runtime.simulated_metrics.set_objective(
        SWEEP,
        SyntheticObjective(
            parameters={"lr": ParameterOptimum(0.003, width=1.0, log=True)}, noise=0.0, seed=1
        ),
    )
    for cluster in runtime.clusters.values():
        for index in range(TRIALS):
            cluster.set_behaviour(f"{SWEEP}-t{index:03d}", run_for=timedelta(hours=1))
    console.sdk.submit(sweep_spec())
    done = console.sdk.wait(SWEEP, timeout=10 * 3600, poll=60, wait_for_record=60)
    assert done.status is JobStatus.SUCCEEDED, done.reason


def table_rows(page: str, table_class: str) -> list[str]:
    body = page.split(f'<table class="{table_class}">', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr class=\"trial[^\"]*\">.*?</tr>", body, flags=re.S)


def test_a_sweeps_page_ranks_its_trials_as_squall_sweep_does_and_charts_each_one(console: Console) -> None:
    # given: a real sweep, run on the local runtime to its end
    run_sweep(console)
    results = console.sdk.sweep_results(SWEEP)
    stopped = {t.id for t in results.trials if early_stopped(t)}
    assert stopped, "the median rule stopped no trial: the scenario no longer tests that"
    assert results.best is not None

    # when
    page = console.browser.text(f"/sweeps/{SWEEP}")

    # then: the trials in the CLI's order, the best named, the stopped ones marked with their reason
    rows = table_rows(page, "trials")
    shown = [re.search(r'href="/jobs/([^"]+)"', row).group(1) for row in rows]  # type: ignore[union-attr]
    assert shown == [t.id for t in results.trials]
    for row, trial in zip(rows, results.trials, strict=True):
        assert ("stopped" in row.split(">", 1)[0]) == (trial.id in stopped)
        if trial.id in stopped:
            assert "EarlyStopped" in row and "worse than the median" in row
    best_row = next(row for row in rows if 'class="trial best"' in row or "trial best" in row)
    assert f"/jobs/{results.best.id}" in best_row
    assert f"best trial {results.best.id}: eval/score" in page
    # a scatter of lr (a log range) against eval/score: one mark per trial, stopped ones drawn apart
    svg = page.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert "lr (log)" in svg
    marks = re.findall(r'class="trial-mark([^"]*)"', svg)
    assert len(marks) == TRIALS
    assert sum(1 for m in marks if "stopped" in m) == len(stopped)
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert sorted(t.split(" ")[0] for t in titles) == sorted(t.id for t in results.trials)
    assert "1.00e-04" in svg and "0.1" in svg  # the log axis's decades

    # and the list shows it with its objective, trials done and best value
    listed = console.browser.text("/sweeps")
    assert f'href="/sweeps/{SWEEP}"' in listed
    assert f"{TRIALS} / {TRIALS}" in listed and "eval/score (maximize)" in listed
    assert f'href="/jobs/{results.best.id}"' in listed


def record(
    console: Console, job_id: str, *, spec: dict[str, Any], team: str = "research", **fields: Any
) -> Any:
    store = console.runtime.store
    job, event = new_job(
        job_id=job_id,
        name=spec.get("name", "x"),
        team=team,
        namespace=team,
        spec=spec,
        at=console.runtime.clock.now(),
    )
    job = dataclasses.replace(job, **fields)
    store.create(job, event)
    return job


def recorded_sweep(console: Console, *, team: str = "research") -> list[str]:
    """A sweep of two parameters and one categorical, recorded as reconcile would leave it: three
    trials ended (one stopped early), the first trial's parameters hostile."""
    spec = sweep_spec(
        parameters={
            "lr": {"min": 0.0001, "max": 0.1, "log": True},
            "dropout": {"min": 0.0, "max": 0.5},
            "opt": ["adam", "sgd"],
        },
    )
    ids = [f"{SWEEP}-t{i:03d}" for i in range(3)]
    parent = record(console, SWEEP, spec=spec, team=team, trial_ids=tuple(ids))
    params = [
        {"lr": 0.001, "dropout": 0.1, "opt": HOSTILE, HOSTILE: 1},
        {"lr": 0.01, "dropout": 0.3, "opt": "adam", HOSTILE: 2},
        {"lr": 0.05, "dropout": 0.4, "opt": "sgd", HOSTILE: 3},
    ]
    now = console.runtime.clock.now()
    for trial_id, values, score, reason in zip(
        ids, params, (0.9, 0.6, 0.2), ("Completed", "Completed", Reason.EARLY_STOPPED), strict=True
    ):
        trial = record(console, trial_id, spec=spec | {"trialParameters": values}, team=team, parent_id=SWEEP)
        running, event = transition(trial, to=JobStatus.RUNNING, reason="Started", at=now)
        console.runtime.store.save(running, event)
        ended, event = transition(
            running,
            to=JobStatus.SUCCEEDED,
            reason=reason,
            at=now + timedelta(minutes=30),
            message="stopped: behind",
        )
        console.runtime.store.save(ended, event)
        lines = [f"squall-metric eval/score={score} step=300"]
        assert console.runtime.store.set_metrics(trial_id, merge(None, lines, cursor=None))
    running, event = transition(parent, to=JobStatus.RUNNING, reason="Started", at=now)
    console.runtime.store.save(dataclasses.replace(running, best_trial=ids[0]), event)
    return ids


def test_several_parameters_make_parallel_coordinates_and_hostile_text_stays_text(console: Console) -> None:
    ids = recorded_sweep(console, team="research")
    page = console.browser.text(f"/sweeps/{SWEEP}")
    lines = re.findall(r'<polyline class="trial-line([^"]*)" points="([^"]*)"', page)
    assert len(lines) == 3
    assert sum(1 for classes, _ in lines if "stopped" in classes) == 1
    for _, points in lines:
        assert len(points.split()) == 5  # lr, dropout, opt, the hostile parameter, then eval/score
    assert re.findall(r'href="/jobs/([^"]+)"', page.split('<table class="trials">', 1)[1]) == ids
    assert "stopped: behind" in page
    # the hostile value and parameter name: escaped wherever shown, never markup
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page


def test_a_hostile_team_name_on_the_list_is_text(console: Console) -> None:
    recorded_sweep(console, team=HOSTILE)
    page = console.browser.text("/sweeps?state=RUNNING")
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "1 / 3" not in page and "3 / 3" in page  # every trial of the recorded sweep ended
    # ?team= keeps that team's sweeps only
    assert f'href="/sweeps/{SWEEP}"' not in console.browser.text("/sweeps?team=research")
    response = console.browser.get("/sweeps", query_string={"team": HOSTILE})
    assert response.status_code == 200 and f'href="/sweeps/{SWEEP}"' in response.get_data(as_text=True)


@pytest.mark.parametrize(("chunk", "most_read"), [(sweeps.CHUNK, sweeps.MOST_READ), (2, 5)])
def test_the_list_pages_with_a_next_page_cursor_and_shows_only_sweeps(
    console: Console, monkeypatch: pytest.MonkeyPatch, chunk: int, most_read: int
) -> None:
    # jobs read a request: as shipped, and so few that a page is cut by them before it fills
    monkeypatch.setattr(sweeps, "CHUNK", chunk)
    monkeypatch.setattr(sweeps, "MOST_READ", most_read)
    for index in range(7):
        record(console, f"s-{index}", spec=sweep_spec(), trial_ids=(f"s-{index}-t000",))
        record(console, f"plain-{index}", spec={"name": "plain"})
    http = console.browser.http
    context = http.application.extensions["squall"]
    http.application.extensions["squall"] = dataclasses.replace(context, page_size=3)
    shown: list[str] = []
    path, pages = "/sweeps?state=QUEUED", 0
    while path:
        page = console.browser.text(path)
        found = re.findall(r'href="/sweeps/([^"?]+)"', page)
        assert len(found) <= 3
        shown += found
        following = re.search(r'<a rel="next" href="([^"]+)"', page)
        path = following.group(1).replace("&amp;", "&") if following else ""
        pages += 1
        assert pages <= 10
    assert sorted(shown) == [f"s-{i}" for i in range(7)]  # each sweep once, no plain job
    assert pages >= 3 if chunk > 14 else pages >= 4


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("state=DONE", "state: expected one of QUEUED"),
        ("after=-1", "after: not a page cursor"),
        ("after=eyJzdGF0ZSI6IlJVTk5JTkcifQ", "after: not a page cursor"),
        ("team=" + "x" * 101, "team: expected printable text"),
    ],
)
def test_a_bad_query_parameter_is_a_400_naming_it(console: Console, query: str, named: str) -> None:
    response = console.browser.get(f"/sweeps?{query}")
    assert response.status_code == 400
    assert named in response.get_data(as_text=True)


def test_an_unknown_id_or_a_job_that_is_no_sweep_is_a_404_naming_it(console: Console) -> None:
    ids = recorded_sweep(console)
    response = console.browser.get("/sweeps/no-such-sweep")
    assert response.status_code == 404 and "no job no-such-sweep" in response.get_data(as_text=True)
    response = console.browser.get(f"/sweeps/{ids[0]}")
    assert response.status_code == 404
    assert f"job {ids[0]} is not a sweep (a trial of sweep {SWEEP})" in response.get_data(as_text=True)


def test_an_active_sweeps_trials_are_counted_within_the_requests_reads(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded_sweep(console)  # running, its 3 trials ended
    assert "3 / 3" in console.browser.text("/sweeps")
    monkeypatch.setattr(sweeps, "TRIALS_READ", 2)
    page = console.browser.text("/sweeps")
    assert "3 / 3" not in page and 'title="not counted on this page">?</span> / 3' in page


def test_every_state_is_listed_past_the_empty_ones(console: Console) -> None:
    recorded_sweep(console)
    store = console.runtime.store
    running = store.get(SWEEP)
    ended, event = transition(
        running, to=JobStatus.SUCCEEDED, reason="TrialsFinished", at=console.runtime.clock.now()
    )
    store.save(ended, event)
    # RUNNING and QUEUED, read first, hold no sweep (nor any job): the page goes on to SUCCEEDED
    page = console.browser.text("/sweeps")
    assert f'href="/sweeps/{SWEEP}"' in page and "SUCCEEDED" in page
