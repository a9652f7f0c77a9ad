"""A real tpe sweep on the local runtime (issue 28): trials train, report, stop early, rank and serve.

The worker image's trainer runs each trial for real as a local process (as `squall local
up` runs it: tests/e2e/test_researcher_loop.py's runtime on a wall clock), printing its
squall-metric lines (train losses, eval/score every 50 steps) into the endpoint's log
group; reconcile reads them with FilterLogEvents into each trial's record, tpe chooses
each trial's learning rate when its slot comes, and median stopping stops a trial whose
eval/score falls below the median of the finished trials' at its step. Then `squall sweep`
ranks the trials and names the best, `squall describe` of the sweep shows it, and the best
trial's SavedModel is served and answers `squall predict`.

The sweep's seed is chosen so that its three random start-up trials (core/search.py draws
them from the seed and the trial's number alone, whatever the history) learn at 1.8e-4,
3.3e-7 and 1.25e-6: the first learns, the other two barely move in a few hundred steps, so
the third, judged against the first two once they are done, falls below their median.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from squall.cli import main
from squall.cli.client import Client
from squall.core.jobs import JobStatus, Reason
from squall.core.search import choose_parameters
from squall.core.spec import Sweep
from squall.local.runtime import LocalRuntime
from tests.e2e.test_researcher_loop import CODE, EXAMPLE, Driver, real_pods_runtime, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SWEEP_ID = "gan-tpe"
LATENT_DIM = 8  # the example's --latent-dim
STEPS = 600
SWEEP = {
    "strategy": "tpe",
    "seed": 5,
    "maxTrials": 4,
    "parallelism": 2,
    "parameters": {"learning_rate": {"min": 1e-7, "max": 3e-3, "log": True}},
    "objective": {"metric": "eval/score", "goal": "maximize"},
    "earlyStopping": {"rule": "median", "minSteps": 100, "minTrials": 2},
}


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """The quickstart's example as one replica, swept: a few hundred steps, evaluated every 50."""
    body = yaml.safe_load(EXAMPLE.read_text())
    args = list(body["args"])
    for flag, value in (
        ("--steps", STEPS),
        ("--log-every", 50),
        ("--checkpoint-every", STEPS),
        ("--image-every", STEPS),
    ):
        args[args.index(flag) + 1] = str(value)
    assert args[args.index("--latent-dim") + 1] == str(LATENT_DIM)
    body = {key: value for key, value in body.items() if key != "replicas"}
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump(
            body | {"id": SWEEP_ID, "args": [*args, "--eval-every", "50"], "retries": 0, "sweep": SWEEP}
        )
    )
    return path


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[LocalRuntime, Driver]]:
    with real_pods_runtime(tmp_path) as running:
        yield running


def test_the_start_up_trials_are_the_ones_this_test_is_built_on() -> None:
    # What the docstring promises, checked before minutes of training rely on it.
    sweep = Sweep.model_validate(SWEEP)
    rates = [choose_parameters(sweep, [], number=n)["learning_rate"] for n in range(3)]
    assert rates == pytest.approx([1.80e-4, 3.27e-7, 1.25e-6], rel=0.01)


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_tpe_sweep_reports_stops_early_ranks_and_serves_its_best_trial(
    local: tuple[LocalRuntime, Driver], spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, driver = local

    # when the sweep is submitted with the trainer's code, and waited for
    assert main(["submit", str(spec), "--code", CODE]) == 0, capsys.readouterr().out
    capsys.readouterr()
    sweep = Client().wait(SWEEP_ID, timeout=900, poll=2, wait_for_record=60)
    assert not driver.errors, driver.errors
    assert sweep.status is JobStatus.SUCCEEDED, (sweep.reason, sweep.errors)

    # then every trial reported its metrics from its own log stream
    trials = {tid: Client().get(tid) for tid in sweep.trial_ids}
    assert len(trials) == 4
    for trial in trials.values():
        assert trial.metrics is not None and trial.metrics.get("eval/score") is not None, trial.id
        assert trial.metrics.get("train/g_loss") is not None, trial.id
        assert trial.metrics.ignored == 0, trial.id
    completed = [t for t in trials.values() if t.reason == Reason.COMPLETED]
    for trial in completed:
        score = trial.metrics.get("eval/score") if trial.metrics else None
        assert score is not None and score.last.step == STEPS, trial.id

    # at least one was stopped early, before its last step, its record saying why
    stopped = [t for t in trials.values() if t.reason == Reason.EARLY_STOPPED]
    assert stopped, {t.id: (t.reason, t.spec.get("trialParameters")) for t in trials.values()}
    for trial in stopped:
        score = trial.metrics.get("eval/score") if trial.metrics else None
        assert trial.status is JobStatus.SUCCEEDED
        assert score is not None and 100 <= score.last.step < STEPS, trial.id
        history = run_json(capsys, "describe", trial.id)
        assert "median" in json.dumps(history), history

    # squall sweep ranks them by eval/score, best first, and names the best; describe agrees
    ranked = run_json(capsys, "sweep", SWEEP_ID)
    values = [t["value"] for t in ranked["trials"]]
    assert None not in values and values == sorted(values, reverse=True)
    assert ranked["best"] == ranked["trials"][0]["id"] == sweep.best_trial
    assert {t["id"] for t in ranked["trials"] if t["earlyStopped"]} == {t.id for t in stopped}
    assert main(["sweep", SWEEP_ID]) == 0
    table = capsys.readouterr().out
    assert f"best trial {sweep.best_trial}: eval/score" in table and "EarlyStopped" in table
    assert run_json(capsys, "describe", SWEEP_ID)["bestTrial"] == sweep.best_trial
    best = trials[sweep.best_trial]
    assert best.reason == Reason.COMPLETED

    # and the best trial's model is served, and answers
    code = main(["serve", best.id, "--wait", "--timeout", "600"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{best.id} SERVING" in out
    noise = np.random.default_rng(7).normal(size=(2, LATENT_DIM)).astype(np.float32)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"instances": noise.tolist()}))
    code = main(["predict", best.id, "--input", str(request)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    images = np.array(json.loads(captured.out)["predictions"], dtype=np.float32)
    assert images.shape == (2, 28, 28, 1) and np.isfinite(images).all()
    assert main(["unserve", best.id]) == 0
    until(lambda: not driver.call(lambda rt: rt.cluster.list_deployments(model_service=best.id)), seconds=120)
    assert not driver.errors, driver.errors
