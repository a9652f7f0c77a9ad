"""`squall sweep`, `describe` and `tensorboard` of a sweep against the local endpoint: trials
ranked by what they reported, the best named, runs named by their parameters, hostile text escaped."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.cli import main
from squall.core.jobs import Job, JobStatus, Reason, transition
from squall.core.metrics import merge
from tests.outputs_helpers import START, LocalAws, local_aws, move, record_job, spec_record

pytestmark = pytest.mark.timeout(120)

BUCKET = "squall-artifacts"
SWEEP = "sw-1a2b3c4d"
# window title, clipboard write (OSC 52), an 8-bit CSI, a right-to-left override
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;cHduZWQ=\x07\x9b2J\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
TRIALS = (  # parameters, eval/score reported, reason it ended
    ({"lr": 0.1, "opt": "adam"}, [0.3, 0.5], "Completed"),
    ({"lr": 0.01, "opt": HOSTILE}, [0.6, 0.9], "Completed"),
    ({"lr": 0.001, "opt": "sgd"}, [0.1], Reason.EARLY_STOPPED),
)


def trial_id(index: int) -> str:
    return f"{SWEEP}-t{index:03d}"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LocalAws]:
    with local_aws(monkeypatch, tmp_path) as local:
        with contextlib.suppress(local.s3.exceptions.BucketAlreadyOwnedByYou):
            local.s3.create_bucket(
                Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
            )
        sweep = {
            "parameters": {"lr": [0.1, 0.01, 0.001], "opt": ["adam", "sgd"]},
            "strategy": "random",
            "maxTrials": 3,
            "parallelism": 3,
            "objective": {"metric": "eval/score", "goal": "maximize"},
        }
        spec = spec_record(checkpointUri=f"s3://{BUCKET}/checkpoints", sweep=sweep)
        parent = record_job(local.store, SWEEP, spec=spec, trial_ids=tuple(trial_id(i) for i in range(3)))
        for index, (parameters, scores, reason) in enumerate(TRIALS):
            record = record_job(
                local.store, trial_id(index), spec=spec | {"trialParameters": parameters}, parent_id=SWEEP
            )
            record = move(local.store, record, JobStatus.RUNNING, "Started", at=START)
            move(local.store, record, JobStatus.SUCCEEDED, reason, at=START + timedelta(minutes=30 + index))
            lines = [f"squall-metric eval/score={s} step={(n + 1) * 100}" for n, s in enumerate(scores)]
            assert local.store.set_metrics(trial_id(index), merge(None, lines, cursor=None))
        keep_best(local.store, parent, trial_id(1))
        yield local


def keep_best(store: Any, parent: Job, best: str) -> None:
    """The sweep's record as reconcile leaves it: running, its best trial so far named."""
    running, event = transition(parent, to=JobStatus.RUNNING, reason="Started", at=START)
    store.save(dataclasses.replace(running, best_trial=best), event)


def test_sweep_ranks_the_trials_and_names_the_best(aws: LocalAws, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", SWEEP]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"sweep {SWEEP}: 3 trials, objective eval/score (maximize)"
    assert lines[1].split() == [
        "RANK",
        "TRIAL",
        "STATE",
        "EVAL/SCORE",
        "RUN",
        "TIME",
        "GPU-HOURS",
        "COST",
        "PARAMETERS",
    ]
    ranked = [line.split()[:4] for line in lines[2:5]]
    assert ranked == [
        ["1", trial_id(1), "SUCCEEDED", "0.9"],
        ["2", trial_id(0), "SUCCEEDED", "0.5"],
        ["3", trial_id(2), "EarlyStopped", "0.1"],
    ]
    assert lines[5].startswith(
        f"best trial {trial_id(1)}: eval/score 0.9 (step 200), SUCCEEDED; lr=0.01, opt="
    )
    # the hostile value, escaped wherever it is shown
    assert "opt=\\x1b]0;owned\\x07\\x1b]52;c;cHduZWQ=\\x07\\x9b2J\\u202e" in lines[5]
    for raw in RAW:
        assert raw not in "\n".join(lines)


def test_sweep_json_has_every_trial_whole(aws: LocalAws, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", SWEEP, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["best"] == trial_id(1) and body["unreported"] is False
    assert [(t["id"], t["rank"], t["earlyStopped"]) for t in body["trials"]] == [
        (trial_id(1), 1, False),
        (trial_id(0), 2, False),
        (trial_id(2), 3, True),
    ]
    assert body["trials"][0]["parameters"] == {"lr": 0.01, "opt": HOSTILE}  # JSON escapes it
    assert body["trials"][0]["runSeconds"] == 31 * 60


def test_sweep_of_what_is_no_sweep_says_so(aws: LocalAws, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", trial_id(0)]) == 1
    assert f"job {trial_id(0)} is not a sweep (a trial of sweep {SWEEP})" in capsys.readouterr().err
    assert main(["sweep", "nope"]) == 1
    assert "no job nope" in capsys.readouterr().err


def test_describe_shows_a_sweeps_best_trial_and_a_trials_metrics(
    aws: LocalAws, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["describe", SWEEP]) == 0
    out = capsys.readouterr().out
    assert (
        f"  best trial {trial_id(1)}: eval/score 0.9 (step 200), SUCCEEDED; lr=0.01, opt=\\x1b]0;owned" in out
    )
    assert f"(squall sweep {SWEEP})" in out
    assert main(["describe", trial_id(0)]) == 0
    assert "  metric eval/score: last 0.5 at step 200, min 0.3 at step 100, max 0.5 at step 200" in (
        capsys.readouterr().out
    )
    assert main(["describe", SWEEP, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bestTrial"] == trial_id(1)
    assert main(["describe", trial_id(2), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["series"]["eval/score"]["last"] == {
        "step": 100,
        "value": 0.1,
    }


def test_tensorboard_names_each_trials_run_by_its_parameters(
    aws: LocalAws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for index in range(3):
        aws.s3.put_object(
            Bucket=BUCKET, Key=f"checkpoints/{trial_id(index)}/logs/events.out.tfevents.{index}", Body=b"x"
        )
    board = tmp_path / "board"
    assert main(["tensorboard", SWEEP, "--once", "--dir", str(board)]) == 0
    runs = sorted(p.name for p in board.iterdir() if not p.name.startswith("."))
    assert runs == [
        "t000_lr=0.1_opt=adam",
        "t001_lr=0.01_opt=__0_owned___52_c_cHduZWQ=__2J_",
        "t002_lr=0.001_opt=sgd",
    ]
    assert (board / runs[1] / "logs" / "events.out.tfevents.1").read_bytes() == b"x"
    for raw in RAW:
        assert raw not in capsys.readouterr().out
