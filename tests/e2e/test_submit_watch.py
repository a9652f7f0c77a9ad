"""`squall submit job.yaml --watch`: the job followed to its final state, the exit code its outcome."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from squall.cli import main
from squall.core.jobs import is_terminal
from squall.local.runtime import LocalRuntime
from tests.e2e.helpers_runtime import GROUPS

pytestmark = pytest.mark.timeout(240)

JOB = """
name: watched
team: research
image: registry.example.com/squall/tf-trainer:1.0
resources: {gpu: 1}
maxRuntime: MAX_RUNTIME
"""


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    with LocalRuntime.start(node_groups=GROUPS) as runtime:
        monkeypatch.setenv("SQUALL_TABLE_NAME", runtime.resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", runtime.resources.jobs_queue_url)
        yield runtime


def _run_in_background(runtime: LocalRuntime) -> threading.Thread:
    """The embedded default running on its own, as `squall local up` runs it, until every job is final."""

    def finished(rt: LocalRuntime) -> bool:
        jobs = rt.jobs()
        return bool(jobs) and all(is_terminal(job.status) for job in jobs)

    thread = threading.Thread(
        target=runtime.run,
        kwargs={"until": finished, "step": timedelta(seconds=5), "limit": timedelta(hours=3)},
        daemon=True,
    )
    thread.start()
    return thread


@pytest.mark.parametrize(("max_runtime", "code", "final"), [("2h", 0, "SUCCEEDED"), ("1m", 1, "FAILED")])
def test_submit_watch_follows_the_job_and_exits_by_its_outcome(
    local: LocalRuntime, capsys: pytest.CaptureFixture[str], max_runtime: str, code: int, final: str
) -> None:
    Path("job.yaml").write_text(JOB.replace("MAX_RUNTIME", max_runtime))
    thread = _run_in_background(local)
    try:
        assert main(["submit", "job.yaml", "--watch"]) == code
    finally:
        thread.join(timeout=120)
    out = capsys.readouterr().out
    job_id = out.splitlines()[0].removeprefix("submitted ")
    record = local.store.get(job_id)
    assert record is not None and record.status.value == final
    assert final in out
