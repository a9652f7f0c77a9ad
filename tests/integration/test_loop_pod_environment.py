"""A real pod's environment: the worker image's ENV beneath what Squall rendered (local/processes.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from squall.local.aws import LOG_GROUP
from squall.local.processes import IMAGE_ENV, ProcessRunner, default_image_env


def environment(tmp_path: Path, rendered: list[dict[str, str]], **options: Any) -> dict[str, str]:
    runner = ProcessRunner(
        endpoint="http://127.0.0.1:1", log_group=LOG_GROUP, work_dir=tmp_path, logs_client=None, **options
    )
    try:
        return runner._environment({"env": rendered}, pod_name="p", directory=tmp_path, ports={})
    finally:
        runner.close(wait=1)


def test_the_images_env_is_there_and_the_pods_own_env_wins(tmp_path: Path) -> None:
    env = environment(tmp_path, [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "3"}], image_env=IMAGE_ENV)
    assert env["PIP_DISABLE_PIP_VERSION_CHECK"] == "1" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "3"  # a container's env wins over its image's
    assert "SQUALL_SKIP_REQUIREMENTS" not in env


def test_the_launchers_requirements_switch_reaches_every_pod_from_the_runners_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job's spec cannot set SQUALL_* (reserved): the local operator sets it for every pod.
    assert default_image_env({"SQUALL_SKIP_REQUIREMENTS": "1", "SQUALL_OTHER": "x"}) == IMAGE_ENV | {
        "SQUALL_SKIP_REQUIREMENTS": "1"
    }
    monkeypatch.delenv("SQUALL_SKIP_REQUIREMENTS", raising=False)
    assert "SQUALL_SKIP_REQUIREMENTS" not in environment(tmp_path, [])
    monkeypatch.setenv("SQUALL_SKIP_REQUIREMENTS", "1")
    env = environment(tmp_path, [])
    assert env["SQUALL_SKIP_REQUIREMENTS"] == "1" and env["PYTHONDONTWRITEBYTECODE"] == "1"
