"""The launcher's ``pip install -r requirements.txt`` is quiet unless it does something or
fails: no "Requirement already satisfied" line per package the image has (40% of the
quickstart's ``squall logs``), pip's own lines when it installs or fails, and one
summary event either way."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from trainer import logs
from trainer.launch import LaunchError, install_requirements, run_pip

from tests.worker.test_launch import wheel

pytestmark = pytest.mark.timeout(300)

SATISFIED = "Requirement already satisfied"


def summary(stdout: str) -> dict[str, Any]:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    (found,) = [e for e in events if e["event"] == "requirements installed"]
    return found


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing from the network
    logs.configure()
    directory = tmp_path / "code"
    directory.mkdir()
    return directory


def test_requirements_the_image_already_has_print_one_summary_and_nothing_else(
    code: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # given: what the quickstart's requirements.txt names, all of it in the image already
    (code / "requirements.txt").write_text("numpy\npytest\n")

    # when
    install_requirements(code, code.parent / "packages", {})

    # then
    out, err = capfd.readouterr()
    assert SATISFIED not in err
    assert err.strip() == ""
    found = summary(out)
    assert (found["installed"], found["packages"]) == (0, [])
    assert found["already_satisfied"] >= 2  # the two, and what they depend on


def test_what_pip_installs_is_shown_without_what_it_skipped(
    code: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    wheel(code / "wheels")
    (code / "requirements.txt").write_text("./wheels/demo_pkg-1.0-py3-none-any.whl\nnumpy\n")

    install_requirements(code, code.parent / "packages", {})

    out, err = capfd.readouterr()
    assert "Successfully installed demo-pkg-1.0" in err
    assert SATISFIED not in err
    found = summary(out)
    assert (found["installed"], found["already_satisfied"], found["packages"]) == (1, 1, ["demo-pkg-1.0"])


def test_a_failed_install_shows_why(code: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (code / "requirements.txt").write_text("numpy\n./missing-0.1-py3-none-any.whl\n")

    with pytest.raises(LaunchError, match=r"pip install -r requirements.txt failed \(exit 1\)"):
        install_requirements(code, code.parent / "packages", {})

    _, err = capfd.readouterr()
    assert "missing-0.1-py3-none-any.whl" in err  # pip's own error, as it wrote it
    assert SATISFIED not in err


def pip_saying(*lines: str, exit_code: int = 0) -> list[str]:
    """A stand-in for pip that prints these lines and exits."""
    return [sys.executable, "-c", f"print({chr(10).join(lines)!r}); raise SystemExit({exit_code})"]


def test_pips_lines_are_filtered_and_counted(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pip = run_pip(
        pip_saying(
            "Looking in links: /opt/wheels",
            "Requirement already satisfied: numpy in /usr/lib (2.0)",
            "Processing ./a-1.whl",
            "Requirement already satisfied: scipy in /usr/lib (1.0)",
            "Successfully installed a-1 b-2.0",
        ),
        cwd=tmp_path,
    )

    assert (pip.returncode, pip.installed, pip.satisfied) == (0, ("a-1", "b-2.0"), 2)
    _, err = capfd.readouterr()
    assert err.splitlines() == [
        "Looking in links: /opt/wheels",
        "Processing ./a-1.whl",
        "Successfully installed a-1 b-2.0",
    ]


def test_pips_preamble_is_shown_only_when_it_goes_on(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    quiet = run_pip(
        pip_saying("Looking in indexes: /srv/index", "Requirement already satisfied: numpy"),
        cwd=tmp_path,
    )
    assert (quiet.returncode, quiet.satisfied, capfd.readouterr().err) == (0, 1, "")

    failed = run_pip(pip_saying("Looking in links: /opt/wheels", exit_code=1), cwd=tmp_path)
    assert (failed.returncode, capfd.readouterr().err) == (1, "Looking in links: /opt/wheels\n")
