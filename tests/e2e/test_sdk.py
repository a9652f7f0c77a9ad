"""The Python SDK (`from squall import Client`) against the local runtime, on its virtual clock.

The Client's clock steps the runtime: `wait` and `logs(follow=True)` run to their end without
real sleeping. What the Client refuses, it refuses as the `squall` command does (the same
CommandError and message), and it says so before anything is sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from squall.cli import main
from squall.cli.errors import EXIT_FAILED, EXIT_USAGE, CommandError, NotFound, WaitTimeout
from squall.core.jobs import JobStatus
from squall.core.metrics import merge
from squall.local.runtime import LocalRuntime
from tests.e2e.helpers_runtime import GROUPS, IMAGE

pytestmark = pytest.mark.timeout(240)

BUCKET = "squall-artifacts"
JOB: dict[str, Any] = {
    "name": "sdk-job",
    "team": "research",
    "image": IMAGE,
    "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
    "maxRuntime": "2h",
}


class RuntimeClock:
    """The Client's clock: the runtime's virtual time, moved on by stepping the runtime."""

    def __init__(self, runtime: LocalRuntime) -> None:
        self.runtime = runtime
        self.slept = 0.0

    def now(self) -> datetime:
        return self.runtime.clock.now()

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.runtime.step(timedelta(seconds=seconds))


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    with LocalRuntime.start(node_groups=GROUPS) as runtime:
        monkeypatch.setenv("SQUALL_TABLE_NAME", runtime.resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", runtime.resources.jobs_queue_url)
        monkeypatch.setenv("SQUALL_ARTIFACTS_BUCKET", BUCKET)
        s3 = boto3.client("s3")
        if BUCKET not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=BUCKET)
        yield runtime


def client(runtime: LocalRuntime) -> Any:
    from squall import Client

    return Client(clock=RuntimeClock(runtime))


def test_submit_wait_and_get_a_job_on_virtual_time(local: LocalRuntime) -> None:
    sdk = client(local)
    # when: a spec as a mapping, waited for on the runtime's clock
    job_id = sdk.submit(JOB)
    job = sdk.wait(job_id, timeout=4 * 3600, poll=30, wait_for_record=60)
    # then
    assert job.status is JobStatus.SUCCEEDED
    assert sdk.get(job_id) == local.store.get(job_id)
    assert [e.status for e in sdk.events(job_id)][-1] is JobStatus.SUCCEEDED
    assert job_id in {j.id for j in sdk.jobs("SUCCEEDED")}
    assert sdk.clock.slept >= 30  # it waited on the virtual clock


def test_a_spec_file_and_code_go_up_as_the_command_sends_them(local: LocalRuntime, tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(json.dumps({**JOB, "command": ["python", "train.py"]}))
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('training')\n")
    sdk = client(local)
    sent = sdk.send(tmp_path / "job.json", code=code)
    assert sent.code is not None and sent.code.uploaded and sent.code.files == 1
    assert sent.code.uri.startswith(f"s3://{BUCKET}/")
    local.run(until=lambda rt: rt.store.get(sent.job_id) is not None, limit=timedelta(minutes=1))
    assert sdk.get(sent.job_id).spec["codeUri"] == sent.code.uri
    # the same content again: not uploaded twice
    assert sdk.send(tmp_path / "job.json", code=code).code.uploaded is False  # type: ignore[union-attr]


def test_a_bad_spec_is_refused_as_the_command_refuses_it_and_nothing_is_sent(
    local: LocalRuntime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {**JOB, "resources": {"gpu": "many"}, "colour": "blue"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(CommandError) as refused:
        client(local).submit(bad)
    assert refused.value.code == EXIT_USAGE
    assert "resources.gpu:" in str(refused.value) and "colour: unknown field" in str(refused.value)
    assert main(["submit", "bad.json"]) == EXIT_USAGE
    # the command's lines are the SDK's, bar the source each names
    said = capsys.readouterr().err
    assert str(refused.value).replace("spec:", "bad.json:") in said
    local.run(until=lambda rt: False, limit=timedelta(seconds=30))
    assert local.jobs() == []


def test_a_missing_job_is_not_found_and_a_slow_one_times_out(local: LocalRuntime) -> None:
    sdk = client(local)
    with pytest.raises(NotFound, match="no job nope") as missing:
        sdk.get("nope")
    assert missing.value.code == EXIT_FAILED
    with pytest.raises(NotFound):
        sdk.cancel("nope")
    job_id = sdk.submit({**JOB, "maxRuntime": "3h"})
    with pytest.raises(WaitTimeout, match=f"job {job_id} is still"):
        sdk.wait(job_id, timeout=60, poll=10, wait_for_record=60)


def test_cancel_through_the_client(local: LocalRuntime) -> None:
    sdk = client(local)
    job_id = sdk.submit(JOB)
    local.run(until=lambda rt: rt.store.get(job_id) is not None, limit=timedelta(minutes=1))
    sdk.cancel(job_id, reason="not needed")
    assert sdk.wait(job_id, timeout=600, poll=5).status is JobStatus.CANCELLED


def test_sweep_results_rank_the_trials_by_what_they_reported(local: LocalRuntime) -> None:
    sdk = client(local)
    sweep = {
        **JOB,
        "id": "sdk-sweep",
        "sweep": {
            "parameters": {"lr": [0.1, 0.01, 0.001]},
            "strategy": "grid",
            "maxTrials": 3,
            "parallelism": 3,
            "objective": {"metric": "eval/score", "goal": "maximize"},
        },
    }
    sdk.submit(sweep)
    sdk.wait("sdk-sweep", timeout=6 * 3600, poll=60, wait_for_record=60)
    unreported = sdk.sweep_results("sdk-sweep")
    assert unreported.unreported and unreported.best is None
    # given: what each trial printed, as reconcile keeps it
    for trial_id, score in (("sdk-sweep-t000", 0.5), ("sdk-sweep-t001", 0.9), ("sdk-sweep-t002", 0.7)):
        lines = [f"squall-metric eval/score={score / 2} step=10", f"squall-metric eval/score={score} step=20"]
        assert local.store.set_metrics(trial_id, merge(None, lines, cursor=None))
    results = sdk.sweep_results("sdk-sweep")
    assert [t.id for t in results.trials] == ["sdk-sweep-t001", "sdk-sweep-t002", "sdk-sweep-t000"]
    assert results.best is not None and results.best.id == "sdk-sweep-t001"
    assert results.best.value == 0.9 and results.best.step == 20
    assert results.best.parameters == {"lr": 0.01}
    with pytest.raises(
        CommandError, match="job sdk-sweep-t000 is not a sweep \\(a trial of sweep sdk-sweep\\)"
    ):
        sdk.sweep_results("sdk-sweep-t000")


def test_the_command_is_built_on_the_client(
    local: LocalRuntime, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from squall.cli.client import Client

    # given: every Client method the job commands use, counted as it runs
    used: list[str] = []
    for name in ("send", "get", "find", "events", "jobs", "cancel"):
        method = getattr(Client, name)

        def counted(self: Any, *args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            used.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(Client, name, counted)
    Path("job.json").write_text(json.dumps(JOB))
    # when
    assert main(["submit", "job.json", "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["jobId"]
    local.run(until=lambda rt: rt.store.get(job_id) is not None, limit=timedelta(minutes=1))
    for argv in (["status", job_id], ["list"], ["describe", job_id], ["cancel", job_id]):
        assert main(argv) == 0
    # then
    assert used[0] == "send" and {"get", "jobs", "find", "events", "cancel"} <= set(used)
