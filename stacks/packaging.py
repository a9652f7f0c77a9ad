"""The Lambda asset, built without Docker.

The asset is the ``functions/`` directory (package ``squall``, minus the CLI and
the local runtime) plus the runtime dependencies from pyproject.toml, installed
with pip for the Lambda platform: ``--platform`` and ``--only-binary=:all:`` make
pip choose the manylinux wheels of the function's architecture and Python
version, whatever machine runs ``cdk deploy``. No container is started; the
Docker image named in the bundling options is a required placeholder that CDK
only uses if local bundling declines, which it never does (it raises instead).

When the ``aws:cdk:bundling-stacks`` context is ``[]`` (tests, ``python app.py``)
CDK skips bundling and stages the source directory as it is.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

from stacks import constants

Runner = Callable[[Sequence[str]], None]


class BundlingError(RuntimeError):
    """pip could not install the functions' dependencies for the Lambda platform."""


def runtime_requirements(pyproject: Path = constants.PYPROJECT) -> list[str]:
    """The package's dependencies, minus those the Lambda runtime already provides."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return [
        requirement
        for requirement in project["dependencies"]
        if _distribution(requirement) not in constants.RUNTIME_PROVIDED_DISTRIBUTIONS
    ]


def _distribution(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower().replace("_", "-")


def pip_command(*, target: str, requirements: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",  # .pyc of this interpreter would not match the runtime's
        "--platform",
        constants.PIP_PLATFORM,
        "--implementation",
        "cp",
        "--python-version",
        constants.PYTHON_VERSION,
        "--only-binary=:all:",
        "--target",
        target,
        *requirements,
    ]


def _run(command: Sequence[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundlingError(
            "pip could not install the Lambda dependencies "
            f"(exit {result.returncode}):\n{result.stderr.strip()}"
        )


def remove_runtime_provided(output: Path) -> None:
    """Drop what the runtime provides even when a dependency pulled it in.

    aws-xray-sdk requires botocore; a bundled botocore would shadow the runtime's
    and pair the runtime's boto3 with a botocore it was not released with.
    """
    for name in constants.RUNTIME_PROVIDED_DISTRIBUTIONS:
        module = name.replace("-", "_")
        for path in [output / module, *output.glob(f"{module}-*.dist-info")]:
            if path.is_dir():
                shutil.rmtree(path)


def _excluded(relative: str) -> bool:
    return any(fnmatch(relative, pattern) for pattern in constants.ASSET_EXCLUDES)


def copy_sources(source: Path, output: Path) -> None:
    """Copy the asset's sources, leaving out what ASSET_EXCLUDES names."""
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).as_posix()
        if _excluded(relative) or any(_excluded(p.as_posix()) for p in Path(relative).parents if p.name):
            continue
        destination = output / relative
        if path.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)


@jsii.implements(cdk.ILocalBundling)
class PipBundling:
    """Local bundling: pip for the Lambda platform, then the package sources on top."""

    def __init__(
        self,
        *,
        source: Path,
        requirements: Sequence[str],
        run: Runner = _run,
    ) -> None:
        self._source = source
        self._requirements = list(requirements)
        self._run = run

    def try_bundle(self, output_dir: str, options: Any) -> bool:
        output = Path(output_dir)
        self._run(pip_command(target=output_dir, requirements=self._requirements))
        remove_runtime_provided(output)
        copy_sources(self._source, output)
        return True


def staged_source(
    *,
    directory: Path,
    settings: Mapping[str, Mapping[str, Any]],
    source: Path = constants.FUNCTIONS_DIR,
) -> Path:
    """The asset's source: the package as the asset takes it, and one settings file per function.

    Written at synthesis into ``directory`` (inside the cloud assembly), so the
    files are in the asset whether it is bundled or staged as it is, and a change
    of settings is a change of the asset: every function starts cold with it.
    """
    if directory.exists():
        shutil.rmtree(directory)
    copy_sources(source, directory)
    settings_dir = directory / constants.SETTINGS_DIR
    settings_dir.mkdir(parents=True)
    for handler, values in sorted(settings.items()):
        (settings_dir / f"{handler}.json").write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
    return directory


def lambda_code(
    *,
    source: Path = constants.FUNCTIONS_DIR,
    requirements: Sequence[str] | None = None,
    run: Runner = _run,
) -> lambda_.Code:
    """One asset for every function (same hash, bundled once per synthesis)."""
    requirements = runtime_requirements() if requirements is None else requirements
    return lambda_.Code.from_asset(
        str(source),
        exclude=list(constants.ASSET_EXCLUDES),
        bundling=cdk.BundlingOptions(
            image=cdk.DockerImage.from_registry("scratch"),
            # jsii calls try_bundle(output_dir, options) with the options as one
            # object, not as the keyword arguments its type stub declares.
            local=PipBundling(source=source, requirements=requirements, run=run),  # type: ignore[arg-type]
        ),
    )
