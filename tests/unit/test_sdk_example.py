"""examples/sdk_sweep.py, the SDK's notebook-style example: its sweep passes the checks the submit
function makes (the checked-out cdk.json's teams and registries), and its steps call the Client
as documented, through a fake Client that records them (a real sweep trains for minutes)."""

from __future__ import annotations

import importlib.util
import io
import types
from pathlib import Path
from typing import Any

import pytest

from squall.core.experiments import SweepResults, TrialResult
from squall.core.jobs import JobStatus

REPO = Path(__file__).resolve().parents[2]


def example() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("sdk_sweep", REPO / "examples" / "sdk_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trial(index: int, value: float | None, *, reason: str = "Completed") -> TrialResult:
    return TrialResult(
        id=f"gan-tpe-t{index:03d}",
        status=JobStatus.SUCCEEDED,
        reason=reason,
        parameters={"learning_rate": 0.001 * (index + 1), "batch_size": 16},
        value=value,
        step=None if value is None else 400,
        run_seconds=600.0,
        gpu_hours=0.0,
        cost=None,
    )


class FakeClient:
    """The Client's methods the example calls, answering from a script and recording each call."""

    def __init__(self, results: SweepResults) -> None:
        self.results = results
        self.calls: list[tuple[str, Any]] = []

    def submit(self, spec: dict[str, Any], *, code: str) -> str:
        self.calls.append(("submit", (spec["name"], code)))
        return "gan-tpe"

    def wait(self, job_id: str, **options: Any) -> Any:
        self.calls.append(("wait", job_id))
        return types.SimpleNamespace(status=JobStatus.SUCCEEDED, reason="TrialsFinished")

    def sweep_results(self, sweep_id: str) -> SweepResults:
        self.calls.append(("sweep_results", sweep_id))
        return self.results

    def serve(self, job_id: str, *, name: str) -> Any:
        self.calls.append(("serve", (job_id, name)))
        return types.SimpleNamespace(name=name)

    def wait_service(self, request: Any, *, out: Any) -> Any:
        self.calls.append(("wait_service", request.name))
        return types.SimpleNamespace(name=request.name, rest_url="http://127.0.0.1:8501", status=None)

    def predict(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("predict", (name, len(body["instances"]), len(body["instances"][0]))))
        return {"predictions": [[0.0]] * len(body["instances"])}


def ranked(*trials: TrialResult, unreported: bool = False) -> SweepResults:
    best = next((t for t in trials if t.value is not None), None)
    return SweepResults("gan-tpe", "eval/score", "maximize", trials, best, unreported)


def test_the_example_sweep_passes_the_submit_functions_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    from squall import Client

    monkeypatch.chdir(REPO)  # the checked-out cdk.json's teams and registries
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    spec, body = Client().check(example().SWEEP)
    assert spec.sweep is not None and spec.sweep.strategy == "tpe" and spec.sweep.objective is not None
    assert body == example().SWEEP


def test_the_example_submits_waits_ranks_serves_the_best_and_predicts() -> None:
    fake = FakeClient(
        ranked(trial(1, 0.9), trial(0, 0.4), trial(2, 0.2, reason="EarlyStopped"), trial(3, None))
    )
    out = io.StringIO()
    assert example().run(fake, code="worker_images/tf_trainer", out=out) == 0
    assert fake.calls == [
        ("submit", ("gan-tpe", "worker_images/tf_trainer")),
        ("wait", "gan-tpe"),
        ("sweep_results", "gan-tpe"),
        ("serve", ("gan-tpe-t001", "gan-best")),
        ("wait_service", "gan-best"),
        ("predict", ("gan-best", 2, 8)),
    ]
    lines = out.getvalue().splitlines()
    assert lines[2].startswith(" 1. gan-tpe-t001  SUCCEEDED Completed     0.9 (step 400)")
    assert "EarlyStopped" in lines[4] and lines[5].split()[4] == "-"
    assert lines[6] == "best: gan-tpe-t001 with eval/score 0.9: {'learning_rate': 0.002, 'batch_size': 16}"
    assert lines[-1] == "gan-best answered 2 predictions"


def test_the_example_says_plainly_when_no_trial_reported_the_objective() -> None:
    fake = FakeClient(ranked(trial(0, None), trial(1, None), unreported=True))
    out = io.StringIO()
    assert example().run(fake, code="code", out=out) == 1
    assert out.getvalue().splitlines()[-1] == "no trial reported eval/score: nothing to serve"
    assert [name for name, _ in fake.calls] == ["submit", "wait", "sweep_results"]
