"""Lambda packaging without Docker: pip for the Lambda platform, sources on top."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from stacks import constants
from stacks.functions import ARCHITECTURE, RUNTIME
from stacks.packaging import PipBundling, lambda_code, pip_command, runtime_requirements


class FakePip:
    """Stands in for pip: records the command and installs two fake distributions."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, command: Sequence[str]) -> None:
        self.commands.append(list(command))
        target = Path(command[command.index("--target") + 1])
        for package in ("pydantic", "botocore"):
            (target / package).mkdir(parents=True, exist_ok=True)
            (target / package / "__init__.py").write_text("")
        (target / "botocore-1.0.dist-info").mkdir(exist_ok=True)


def this_python() -> str:
    """Compiles the bytecode where a test is about something else (any version will do)."""
    return sys.executable


def test_requirements_are_the_package_dependencies_minus_the_runtimes_boto3() -> None:
    requirements = runtime_requirements()
    names = {r.split(">")[0].split("[")[0].split("=")[0].lower() for r in requirements}
    assert {"pydantic", "pydantic-settings", "kubernetes", "aws-lambda-powertools", "pyyaml"} <= names
    assert "boto3" not in names


def test_pip_targets_the_functions_platform_and_python() -> None:
    command = pip_command(target="/out", requirements=["pydantic>=2"])
    assert command[command.index("--platform") + 1] == "manylinux2014_aarch64"
    assert command[command.index("--python-version") + 1] == "3.12"
    assert "--only-binary=:all:" in command
    assert command[command.index("--target") + 1] == "/out"
    assert command[-1] == "pydantic>=2"
    # The platform and Python pip builds for are the ones the functions run on.
    machine = {"arm64": "aarch64", "x86_64": "x86_64"}[ARCHITECTURE.name]
    assert constants.PIP_PLATFORM.endswith(machine)
    assert RUNTIME.name == f"python{constants.PYTHON_VERSION}"


def _functions_tree(root: Path) -> Path:
    package = root / "squall"
    (package / "handlers").mkdir(parents=True)
    (package / "local").mkdir()
    (package / "__pycache__").mkdir()
    (package / "__init__.py").write_text("")
    (package / "handlers" / "submit.py").write_text("def handler(event, context): ...\n")
    (package / "local" / "demo.py").write_text("")
    (package / "cli" / "follow").mkdir(parents=True)
    (package / "cli" / "__init__.py").write_text("")
    (package / "cli" / "follow" / "logs.py").write_text("")
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    (root / "squall.egg-info").mkdir()
    return root


def test_local_bundling_installs_then_copies_the_package_without_cli_and_local(tmp_path: Path) -> None:
    # given a functions directory and a pip that installs botocore as a dependency
    source = _functions_tree(tmp_path / "functions")
    output = tmp_path / "out"
    output.mkdir()
    pip = FakePip()
    # when CDK asks the local bundler
    bundled = PipBundling(
        source=source, requirements=["pydantic>=2"], run=pip, python=this_python
    ).try_bundle(str(output), None)
    # then
    assert bundled is True
    assert len(pip.commands) == 1
    assert (output / "squall" / "handlers" / "submit.py").is_file()
    assert (output / "pydantic" / "__init__.py").is_file()
    for absent in (
        "squall/local",
        "squall/cli",
        # the source tree's stale bytecode (the asset's own is compiled at bundling)
        "squall/__pycache__/x.cpython-311.pyc",
        "squall.egg-info",
        "botocore",
        "botocore-1.0.dist-info",
    ):
        assert not (output / absent).exists(), absent


@pytest.mark.slow
def test_cdk_bundles_locally_without_docker(tmp_path: Path) -> None:
    # given a stack whose bundling is not skipped
    source = _functions_tree(tmp_path / "functions")
    pip = FakePip()
    app = cdk.App(outdir=str(tmp_path / "cdk.out"), context={"aws:cdk:bundling-stacks": ["**"]})
    stack = cdk.Stack(app, "Packaging")
    lambda_.Function(
        stack,
        "Fn",
        code=lambda_code(source=source, requirements=["pydantic>=2"], run=pip, python=this_python),
        handler="squall.handlers.submit.handler",
        runtime=RUNTIME,
    )
    # when it is synthesised (there is no Docker on this machine)
    app.synth()
    # then pip ran once and the staged asset holds dependencies and sources
    assert len(pip.commands) == 1
    (asset,) = (tmp_path / "cdk.out").glob("asset.*")
    assert (asset / "squall" / "handlers" / "submit.py").is_file()
    assert (asset / "pydantic").is_dir()
    assert not (asset / "squall" / "cli").exists()


def test_the_staged_source_holds_the_package_and_each_functions_settings(tmp_path: Path) -> None:
    from stacks.packaging import staged_source

    # given a functions directory, and a staging directory left over from an earlier synthesis
    source = _functions_tree(tmp_path / "functions")
    staging = tmp_path / "cdk.out" / ".squall-asset-x"
    (staging / "squall" / "gone.py").parent.mkdir(parents=True)
    (staging / "squall" / "gone.py").write_text("")
    # when the asset's source is staged
    staged = staged_source(
        directory=staging,
        settings={"scale": {"node_groups": [{"name": "g"}]}, "submit": {"teams": {}}},
        source=source,
    )
    # then it is the package as the asset takes it, plus one JSON file per function
    assert (staged / "squall" / "handlers" / "submit.py").is_file()
    assert not (staged / "squall" / "local").exists() and not (staged / "squall" / "cli").exists()
    assert not (staged / "squall" / "gone.py").exists(), "nothing of an earlier synthesis remains"
    settings = staged / constants.SETTINGS_DIR
    assert sorted(p.name for p in settings.iterdir()) == ["scale.json", "submit.json"]
    assert json.loads((settings / "scale.json").read_text()) == {"node_groups": [{"name": "g"}]}
