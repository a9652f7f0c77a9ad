"""`squall sweep`'s table and lines, `describe`'s metrics, and TensorBoard's run names: from
sweep and trial records, with hostile text shown escaped and never raw."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

from squall.cli.follow.tensorboard import job_sources, run_name, safe_relative
from squall.cli.sweeps import best_line, metric_lines, metrics_dict, results_dict, sweep_lines
from squall.core.experiments import SweepResults, rank_trials
from squall.core.jobs import Job, JobStatus, Reason
from squall.core.metrics import merge
from tests.job_records import job_record

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
# window title, clipboard write (OSC 52), an 8-bit CSI, a right-to-left override
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def sweep(*, objective: dict[str, Any] | None = None, trials: int = 3) -> Job:
    spec: dict[str, Any] = {
        "name": "mnist",
        "team": "research",
        "image": "registry.example.com/squall/tf-trainer:1.0",
        "sweep": {"parameters": {"lr": [0.1, 0.01, 0.001]}, "maxTrials": trials, "parallelism": trials},
    }
    if objective is not None:
        spec["sweep"]["objective"] = objective
    return job_record(
        "sw",
        status=JobStatus.RUNNING,
        reason="Started",
        at=AT,
        spec=spec,
        trial_ids=tuple(f"sw-t{i:03d}" for i in range(trials)),
    )


def trial(
    index: int,
    *,
    scores: list[float] | None,
    parameters: dict[str, Any],
    status: JobStatus = JobStatus.SUCCEEDED,
    reason: str = "Completed",
    cost: float | None = None,
) -> Job:
    metrics = None
    if scores is not None:
        lines = [f"squall-metric eval/score={s} step={(n + 1) * 100}" for n, s in enumerate(scores)]
        metrics = merge(None, lines, cursor=None)
    return job_record(
        f"sw-t{index:03d}",
        status=status,
        reason=reason,
        at=AT,
        parent_id="sw",
        spec={"trialParameters": parameters},
        gpus=2,
        started_at=AT,
        finished_at=AT + timedelta(hours=1, minutes=2, seconds=3),
        metrics=metrics,
        cost=cost,
    )


def ranked(*trials: Job, objective: dict[str, Any] | None = None) -> SweepResults:
    objective = objective if objective is not None else {"metric": "eval/score", "goal": "maximize"}
    return rank_trials(sweep(objective=objective, trials=len(trials)), trials, now=AT + timedelta(hours=2))


def test_the_table_ranks_by_the_objective_and_names_the_best() -> None:
    results = ranked(
        trial(0, scores=[0.2, 0.5], parameters={"lr": 0.1}, cost=6.5),
        trial(1, scores=[0.3, 0.9], parameters={"lr": 0.01}, cost=6.5),
        trial(2, scores=[0.1], parameters={"lr": 0.001}, reason=Reason.EARLY_STOPPED, cost=1.25),
    )
    heading, header, rows, best = sweep_lines(results)
    assert heading == "sweep sw: 3 trials, objective eval/score (maximize)"
    assert header == ["RANK", "TRIAL", "STATE", "EVAL/SCORE", "RUN TIME", "GPU-HOURS", "COST", "PARAMETERS"]
    assert rows == [
        ["1", "sw-t001", "SUCCEEDED", "0.9 (step 200)", "1:02:03", "2.07", "$6.50", "lr=0.01"],
        ["2", "sw-t000", "SUCCEEDED", "0.5 (step 200)", "1:02:03", "2.07", "$6.50", "lr=0.1"],
        ["3", "sw-t002", "EarlyStopped", "0.1 (step 100)", "1:02:03", "2.07", "$1.25", "lr=0.001"],
    ]
    assert best == "best trial sw-t001: eval/score 0.9 (step 200), SUCCEEDED; lr=0.01"
    body = results_dict(results)
    assert body["best"] == "sw-t001" and body["objective"] == {"metric": "eval/score", "goal": "maximize"}
    assert [(t["rank"], t["id"], t["earlyStopped"]) for t in body["trials"]] == [
        (1, "sw-t001", False),
        (2, "sw-t000", False),
        (3, "sw-t002", True),
    ]


def test_a_sweep_whose_objective_no_trial_reported_says_so_plainly() -> None:
    results = ranked(
        trial(0, scores=None, parameters={"lr": 0.1}), trial(1, scores=None, parameters={"lr": 0.01})
    )
    _, _, rows, best = sweep_lines(results)
    assert best.startswith("no trial reported eval/score (yet)")
    assert "squall-metric eval/score=<value>" in best
    assert [row[0] for row in rows] == ["-", "-"] and [row[3] for row in rows] == ["-", "-"]
    assert results_dict(results)["unreported"] is True


def test_only_failed_trials_reported_and_no_objective_are_said() -> None:
    failed = ranked(trial(0, scores=[0.4], parameters={"lr": 0.1}, status=JobStatus.FAILED, reason="Error"))
    assert best_line(failed) == "no best trial: only failed or cancelled trials reported eval/score"
    none = rank_trials(sweep(trials=1), [trial(0, scores=[0.4], parameters={"lr": 0.1})], now=AT)
    assert sweep_lines(none)[0] == "sweep sw: 1 trial, no objective"
    assert best_line(none).startswith("no objective")


def test_hostile_parameters_and_reasons_are_shown_escaped() -> None:
    results = ranked(
        trial(
            0, scores=[0.5], parameters={"opt": HOSTILE}, reason=f"Error{HOSTILE}", status=JobStatus.FAILED
        ),
        trial(1, scores=[0.7], parameters={"opt": f"adam\n{HOSTILE}"}),
    )
    heading, _, rows, best = sweep_lines(results)
    for line in [heading, *("  ".join(row) for row in rows), best]:
        for raw in (*RAW, "\n"):
            assert raw not in line
    assert "opt=adam\\x0a\\x1b]0;owned\\x07" in best
    assert rows[1][-1].startswith("opt=\\x1b]0;owned\\x07")


def test_a_long_parameter_list_is_cut_in_the_table_but_whole_in_json() -> None:
    parameters = {f"p{i}": "x" * 20 for i in range(10)}
    results = ranked(trial(0, scores=[0.5], parameters=parameters))
    assert len(sweep_lines(results)[2][0][-1]) == 80
    assert results_dict(results)["trials"][0]["parameters"] == parameters


def test_describe_shows_each_metric_and_the_lines_ignored() -> None:
    job = job_record(
        "j",
        status=JobStatus.RUNNING,
        reason="Started",
        at=AT,
        metrics=merge(
            None,
            [
                "squall-metric train/loss=0.5 step=1",
                "squall-metric train/loss=0.2 step=2",
                "squall-metric x=nan",
            ],
            cursor=None,
        ),
    )
    assert metric_lines(job) == [
        "  metric train/loss: last 0.2 at step 2, min 0.2 at step 2, max 0.5 at step 1",
        "  1 metric line ignored (malformed, not a finite number, too long, or past the names kept)",
    ]
    assert metrics_dict(job) == {
        "series": {
            "train/loss": {
                "last": {"step": 2, "value": 0.2},
                "min": {"step": 2, "value": 0.2},
                "max": {"step": 1, "value": 0.5},
            }
        },
        "ignored": 1,
    }
    assert metric_lines(job_record("k", status=JobStatus.QUEUED, reason="Submitted", at=AT)) == []


def test_tensorboard_names_a_trials_run_by_its_parameters() -> None:
    assert (
        run_name("sw-t003", sweep_id="sw", parameters={"lr": 0.001, "batch": 64}) == "t003_lr=0.001_batch=64"
    )
    parent = sweep(objective=None, trials=2)
    parent = dataclasses.replace(parent, spec={**parent.spec, "checkpointUri": "s3://b/ck"})
    runs = {"sw-t000": run_name("sw-t000", sweep_id="sw", parameters={"lr": 0.1})}
    assert [(s.prefix, str(s.local)) for s in job_sources(parent, runs=runs)] == [
        ("ck/sw-t000/", "t000_lr=0.1"),
        ("ck/sw-t001/", "sw-t001"),  # no parameters known: its id
    ]


def test_hostile_parameter_values_make_one_safe_folder_each() -> None:
    names = {
        run_name("sw-t000", sweep_id="sw", parameters={"a": "../../etc"}),
        run_name("sw-t001", sweep_id="sw", parameters={"a": f"x/y\\z\0{HOSTILE}"}),
        run_name("sw-t002", sweep_id="sw", parameters={"a": "." * 300}),
        run_name("sw-t003", sweep_id="sw", parameters={"../": "\u00e9" * 300}),
    }
    assert len(names) == 4
    for name in names:
        assert safe_relative(name) == PurePosixPath(name)
        assert name.isascii() and name.isprintable() and len(name) <= 200
        assert not name.startswith(".") and "/" not in name
