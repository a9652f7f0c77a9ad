"""The Lambda asset ships bytecode of the runtime's Python version, compiled at bundling.

Without it every cold start compiles the package from source on a read-only
/var/task (seconds before the first AWS call; benchmarks/bench_cold_start.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from stacks import constants
from stacks.functions import RUNTIME
from stacks.packaging import BundlingError, PipBundling, bytecode_python, cache_tag, lambda_code

RUNTIME_TAG = cache_tag(constants.PYTHON_VERSION)


class FakePip:
    """Installs a dependency with a subpackage, as pip --no-compile would: sources only."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, command: Sequence[str]) -> None:
        self.commands.append(list(command))
        target = Path(command[command.index("--target") + 1])
        (target / "pydantic" / "v1").mkdir(parents=True, exist_ok=True)
        (target / "pydantic" / "__init__.py").write_text("VERSION = '2'\n")
        (target / "pydantic" / "v1" / "fields.py").write_text("FIELDS = ()\n")


@pytest.fixture(scope="module")
def runtime_python() -> str:
    try:
        return bytecode_python()
    except BundlingError as exc:
        pytest.skip(f"no Python {constants.PYTHON_VERSION} on this machine: {exc}")


def functions_tree(root: Path) -> Path:
    package = root / "squall"
    (package / "handlers").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "handlers" / "__init__.py").write_text("")
    (package / "handlers" / "submit.py").write_text("def handler(event, context):\n    return 'submitted'\n")
    # Bytecode the developer's own Python left in the source tree: stale, and of another version.
    for stale in (
        package / "__pycache__" / "__init__.cpython-311.pyc",
        package / "handlers" / "__pycache__" / "submit.cpython-312.pyc",
    ):
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.write_bytes(b"stale")
    return root


def sources_without_bytecode(asset: Path) -> list[str]:
    return [
        py.relative_to(asset).as_posix()
        for py in sorted(asset.rglob("*.py"))
        if not (py.parent / "__pycache__" / f"{py.stem}.{RUNTIME_TAG}.pyc").is_file()
    ]


def test_every_source_of_the_bundled_asset_has_bytecode_for_the_runtime(
    tmp_path: Path, runtime_python: str
) -> None:
    # given a package whose source tree holds stale bytecode, and pip's sources-only install
    source = functions_tree(tmp_path / "functions")
    output = tmp_path / "asset"
    output.mkdir()
    pip = FakePip()
    # when the asset is bundled
    PipBundling(source=source, requirements=["pydantic>=2"], run=pip).try_bundle(str(output), None)
    # then pip compiled nothing, and every .py has a .pyc of the runtime's version beside it
    assert "--no-compile" in pip.commands[0]
    assert len(list(output.rglob("*.py"))) == 5
    assert sources_without_bytecode(output) == []
    pycs = {p.name for p in output.rglob("*.pyc")}
    assert all(RUNTIME_TAG in name for name in pycs), pycs
    # and none of the source tree's own bytecode came along
    shipped = output / "squall" / "handlers" / "__pycache__" / f"submit.{RUNTIME_TAG}.pyc"
    assert shipped.read_bytes() != b"stale"
    assert not (output / "squall" / "__pycache__" / "__init__.cpython-311.pyc").exists()


def test_the_asset_bytecode_is_unchecked_hash_and_the_runtime_loads_it(
    tmp_path: Path, runtime_python: str
) -> None:
    # given a bundled asset
    source = functions_tree(tmp_path / "functions")
    output = tmp_path / "asset"
    output.mkdir()
    PipBundling(source=source, requirements=[], run=FakePip()).try_bundle(str(output), None)
    pyc = output / "squall" / "handlers" / "__pycache__" / f"submit.{RUNTIME_TAG}.pyc"
    # then its flags say unchecked hash (PEP 552: bit 0 hash-based, bit 1 check_source)
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01
    # and the runtime's Python imports the module from it, with no source to compile: the
    # source is gone and nothing may be written (a read-only /var/task)
    (output / "squall" / "handlers" / "submit.py").write_text("raise SystemExit('compiled from source')\n")
    result = subprocess.run(
        [runtime_python, "-B", "-c", "import squall.handlers.submit as s; print(s.handler(None, None))"],
        cwd=output,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout.strip()) == (0, "submitted"), result.stderr


def test_bundling_refuses_before_pip_when_no_interpreter_of_the_runtimes_version_exists(
    tmp_path: Path,
) -> None:
    # given a machine whose only Python is of another version than the runtime's
    source = functions_tree(tmp_path / "functions")
    pip = FakePip()

    def no_match() -> str:
        return bytecode_python("3.99", candidates=[sys.executable, str(tmp_path / "missing-python")])

    # when CDK asks the local bundler
    with pytest.raises(BundlingError) as info:
        PipBundling(source=source, requirements=["pydantic>=2"], run=pip, python=no_match).try_bundle(
            str(tmp_path / "asset"), None
        )
    # then it says what is missing and how to provide it, and pip never ran
    message = str(info.value)
    assert "Python 3.99" in message and constants.BUNDLING_PYTHON_VARIABLE in message
    assert sys.executable in message and "does not run" in message
    assert pip.commands == []


def test_an_interpreter_named_in_the_environment_is_the_only_one_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(constants.BUNDLING_PYTHON_VARIABLE, sys.executable)
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert bytecode_python(this) == sys.executable
    with pytest.raises(
        BundlingError, match=re.escape(f"tried: {sys.executable} ({sys.implementation.cache_tag})")
    ):
        bytecode_python("3.99")


@pytest.mark.slow
def test_cdk_keeps_the_compiled_bytecode_in_the_staged_asset(tmp_path: Path, runtime_python: str) -> None:
    # given a stack whose bundling is not skipped, with ASSET_EXCLUDES naming **/*.pyc
    source = functions_tree(tmp_path / "functions")
    app = cdk.App(outdir=str(tmp_path / "cdk.out"), context={"aws:cdk:bundling-stacks": ["**"]})
    stack = cdk.Stack(app, "Packaging")
    lambda_.Function(
        stack,
        "Fn",
        code=lambda_code(source=source, requirements=["pydantic>=2"], run=FakePip()),
        handler="squall.handlers.submit.handler",
        runtime=RUNTIME,
    )
    # when it is synthesised
    app.synth()
    # then the excludes applied to the source only: the asset CDK staged keeps the bytecode
    (asset,) = (tmp_path / "cdk.out").glob("asset.*")
    assert sources_without_bytecode(asset) == []
    assert not list(asset.rglob("*.cpython-311.pyc"))
