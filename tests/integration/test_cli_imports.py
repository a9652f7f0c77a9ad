"""`squall plan` starts without pydantic, boto3, botocore, kubernetes or yaml: checked in a fresh interpreter."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.test_cli_errors import DATA, GROUP, _suspended_jobs


def test_the_plan_command_imports_neither_pydantic_nor_aws_clients() -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from squall.cli import main\n"
        "code = main(['plan', '--nodes', sys.argv[1], '--pods', sys.argv[2], '--groups', sys.argv[3],"
        " '--now', '2024-05-01T12:00:00Z', '--json'])\n"
        "heavy = sorted(m for m in ('pydantic', 'boto3', 'botocore', 'kubernetes', 'yaml') if m in sys.modules)\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    groups = DATA.parent / "groups-for-import-check.json"
    try:
        groups.write_text(json.dumps({"nodeGroups": [GROUP]}))
        result = subprocess.run(
            [sys.executable, "-c", script, str(DATA / "nodes.json"), str(DATA / "pods.json"), str(groups)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        groups.unlink(missing_ok=True)
    assert result.stderr.strip().splitlines()[-1] == "0 []", result.stderr


def test_plan_with_jobs_imports_neither_pydantic_nor_aws_clients(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from squall.cli import main\n"
        "code = main(['plan', '--nodes', sys.argv[1], '--pods', sys.argv[2], '--groups', sys.argv[3],"
        " '--jobs', sys.argv[4], '--now', '2024-05-01T12:00:00Z', '--json'])\n"
        "heavy = sorted(m for m in ('pydantic', 'boto3', 'botocore', 'kubernetes', 'yaml') if m in sys.modules)\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    (tmp_path / "groups.json").write_text(json.dumps({"nodeGroups": [GROUP]}))
    (tmp_path / "jobs.json").write_text(json.dumps(_suspended_jobs("a")))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(DATA / "nodes.json"),
            str(DATA / "pods.json"),
            str(tmp_path / "groups.json"),
            str(tmp_path / "jobs.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,  # no cdk.json: the local default teams, which hold no quota
    )
    assert result.stderr.strip().splitlines()[-1] == "0 []", result.stderr
