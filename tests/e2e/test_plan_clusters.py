"""`squall plan` over two clusters, with the queue a researcher lists: submit to the local
runtime, `squall list --status QUEUED --json > queued.json`, then `squall plan --cluster
gpu-west=... --cluster gpu-east=... --queue queued.json` in a child process, as a user runs it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from squall.cli import main
from squall.local.runtime import LocalRuntime
from tests.e2e.helpers_cli import run_squall
from tests.unit.planner import test_offline_jobs as offline_jobs
from tests.unit.test_cli_clusters import busy_pod, plan_group

pytestmark = pytest.mark.timeout(300)

SPEC = """
name: {name}
team: research
image: registry.example.com/squall/tf-trainer:1.0
resources: {{cpu: "4", memory: 16Gi, gpu: 1}}
"""
PLAN_AT = "2026-01-05T12:00:00Z"


@pytest.fixture
def queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Path]:
    """Two jobs submitted to a local runtime with no node groups (so they stay queued), listed to queued.json."""
    monkeypatch.chdir(tmp_path)  # no cdk.json here: the local defaults apply
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    with LocalRuntime.start(node_groups=[]) as runtime:
        monkeypatch.setenv("SQUALL_TABLE_NAME", runtime.resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", runtime.resources.jobs_queue_url)
        ids = []
        for name in ("first", "second"):
            (tmp_path / f"{name}.yaml").write_text(SPEC.format(name=name))
            assert main(["submit", f"{name}.yaml", "--json"]) == 0
            ids.append(json.loads(capsys.readouterr().out)["jobId"])
            runtime.run(
                until=lambda rt, job_id=ids[-1]: rt.store.get(job_id) is not None,
                step=timedelta(seconds=5),
                limit=timedelta(minutes=1),
            )
        assert main(["list", "--status", "QUEUED", "--json"]) == 0
        records = json.loads(capsys.readouterr().out)
    assert sorted(r["id"] for r in records) == sorted(ids)
    assert all(r["queueShape"] and r["cluster"] is None for r in records)
    (tmp_path / "queued.json").write_text(json.dumps(records))
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    # gpu-west: its one node busy, its group at its max; gpu-east: a free node, room to grow
    files = {
        "west-nodes.json": {"items": [offline_jobs.node("p3-usw2", 0)]},
        "west-pods.json": {"items": [busy_pod("p3-usw2-node-0")]},
        "east-nodes.json": {"items": [offline_jobs.node("p3-use1", 0, region="us-east-1")]},
        "east-pods.json": {"items": []},
        "groups.json": {
            "nodeGroups": [
                plan_group("p3-usw2", cluster="gpu-west", region="us-west-2", max_size=1),
                plan_group("p3-use1", cluster="gpu-east", region="us-east-1"),
            ]
        },
    }
    for name, doc in files.items():
        (tmp_path / name).write_text(json.dumps(doc))
    yield tmp_path


def test_a_listed_queue_is_planned_across_two_clusters(queued: Path) -> None:
    first, second = json.loads((queued / "ids.json").read_text())

    result = run_squall(
        "plan",
        "--cluster",
        "gpu-west=west-nodes.json,west-pods.json",
        "--cluster",
        "gpu-east=east-nodes.json,east-pods.json",
        "--groups",
        "groups.json",
        "--queue",
        "queued.json",
        "--now",
        PLAN_AT,
        "--json",
        cwd=queued,
    )

    assert (result.returncode, result.stderr) == (0, "")
    planned = json.loads(result.stdout)
    # the first in line takes gpu-east's free node; the second waits, and gpu-east's group grows for it
    assert [(a["job"], a["region"]) for a in planned["admission"]["admitted"]] == [
        (first, "gpu-east/us-east-1")
    ]
    assert [w["job"] for w in planned["admission"]["waiting"]] == [second]
    assert [(u["group"], u["to"]) for u in planned["scaleUp"]] == [("p3-use1", 2)]


def test_plan_with_a_queue_starts_without_pydantic_or_aws_clients(queued: Path) -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from squall.cli import main\n"
        "code = main(['plan', '--cluster', 'gpu-west=west-nodes.json,west-pods.json',"
        " '--cluster', 'gpu-east=east-nodes.json,east-pods.json', '--groups', 'groups.json',"
        " '--queue', 'queued.json', '--now', '2026-01-05T12:00:00Z', '--json'])\n"
        "heavy = sorted(m for m in ('pydantic', 'boto3', 'botocore', 'kubernetes', 'yaml') if m in sys.modules)\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, cwd=queued
    )
    assert result.stderr.strip().splitlines()[-1] == "0 []", result.stderr
