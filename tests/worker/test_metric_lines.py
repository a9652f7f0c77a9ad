"""The trainer reports its losses and evaluations to Squall as `squall-metric` lines on stdout."""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import pytest
from trainer import exits
from trainer.logs import report_metrics

from tests.worker.harness import METRIC_LINE, Run, named, run_main, tiny_args

# The line as the issue-28 contract writes it: `squall-metric <name>=<value> ... [step=<N>]`.
NAME = r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,63}"
LINE = re.compile(rf"^squall-metric((?: {NAME}=\S+)+)$")


def metric_lines(stdout: str) -> list[tuple[int, dict[str, float]]]:
    """Every squall-metric line: (step, {name: value}); each must match the format and parse."""
    parsed = []
    for line in stdout.splitlines():
        if not line.startswith("squall-metric"):
            continue
        assert len(line) <= 1024, line
        match = LINE.match(line)
        assert match is not None, f"not a squall-metric line: {line!r}"
        pairs = dict(pair.split("=", 1) for pair in match.group(1).split())
        step = int(pairs.pop("step"))
        values = {name: float(value) for name, value in pairs.items()}
        assert step >= 0 and all(math.isfinite(v) for v in values.values()), line
        parsed.append((step, values))
    return parsed


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    model_dir = tmp_path_factory.mktemp("model")
    return run_main(
        ["--model-dir", str(model_dir), *tiny_args(steps=4, log_every=1, eval_every=2, image_every=10**6)]
    )


def test_losses_each_logged_step_and_an_evaluation_every_eval_every(run: Run) -> None:
    assert run.code == exits.OK, run.stdout

    lines = metric_lines(run.stdout)

    train = [(step, sorted(values)) for step, values in lines if "train/d_loss" in values]
    assert train == [(step, ["train/d_loss", "train/g_loss"]) for step in (1, 2, 3, 4)]
    evals = [(step, values) for step, values in lines if "eval/score" in values]
    assert [step for step, _ in evals] == [2, 4]  # every 2 steps, the last one after the export
    for step, values in evals:
        distance = values["eval/frechet_distance_8x8"]
        assert distance >= 0 and values["eval/score"] == pytest.approx(1 / (1 + distance), rel=1e-5)
        (logged,) = [e for e in named(run.events, "evaluated") if e["step"] == step]
        assert distance == pytest.approx(logged["value"], rel=1e-5)
    # The final evaluation is the one the old metric= line reports.
    final = METRIC_LINE.search(run.stdout)
    assert final is not None and float(final.group(1)) == pytest.approx(
        evals[-1][1]["eval/frechet_distance_8x8"], rel=1e-5
    )


def test_the_lines_parse_as_squall_parses_them(run: Run) -> None:
    metrics = pytest.importorskip("squall.core.metrics")
    assert run.code == exits.OK, run.stdout
    lines = [line for line in run.stdout.splitlines() if line.startswith(metrics.METRIC_PREFIX)]

    merged = metrics.merge(None, lines, cursor=None)

    assert merged.ignored == 0
    score = merged.get("eval/score")
    assert score is not None and [p.step for p in score.history] == [2, 4]
    loss = merged.get("train/g_loss")
    assert loss is not None and loss.last.step == 4


def test_report_metrics_prints_one_flushed_line_and_leaves_out_what_is_not_finite() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report_metrics({"train/loss": 0.25, "eval/score": math.nan, "x": math.inf}, step=7)
        report_metrics({"eval/score": math.nan}, step=8)  # nothing left: no line at all

    assert out.getvalue() == "squall-metric train/loss=0.25 step=7\n"
    assert metric_lines(out.getvalue()) == [(7, {"train/loss": 0.25})]


def test_eval_every_must_be_positive(tmp_path: Path) -> None:
    run = run_main(["--model-dir", str(tmp_path), "--eval-every", "0"])

    assert run.code == exits.USAGE
    assert "eval_every must be positive" in run.stdout
