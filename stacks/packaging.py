"""The Lambda asset, built without Docker.

The asset is the ``functions/`` directory (package ``squall``, minus the CLI and
the local runtime) plus the runtime dependencies from pyproject.toml, installed
with pip for the Lambda platform: ``--platform`` and ``--only-binary=:all:`` make
pip choose the manylinux wheels of the function's architecture and Python
version, whatever machine runs ``cdk deploy``. No container is started; the
Docker image named in the bundling options is a required placeholder that CDK
only uses if local bundling declines, which it never does (it raises instead).

The asset ships bytecode: ``/var/task`` is read-only, so without it every cold
start compiles the package from source (seconds before the first AWS call).
``compile_bytecode`` compiles it with an interpreter of exactly the runtime's
Python version (the builder's own may differ: ``bytecode_python`` finds one) as
unchecked-hash .pyc: CDK zips the asset with fixed timestamps, so a timestamp
.pyc would never match its source, and the asset never changes once deployed.
The source tree's own ``__pycache__`` (of whatever Python the developer runs) is
left out, as ASSET_EXCLUDES says.

When the ``aws:cdk:bundling-stacks`` context is ``[]`` (tests, ``python app.py``)
CDK skips bundling and stages the source directory as it is.
"""

from __future__ import annotations

import json
import os
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
    """pip could not install the functions' dependencies, or their bytecode could not be compiled."""


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
        what = (
            "compile the asset's bytecode" if "compileall" in command else "install the Lambda dependencies"
        )
        output = (result.stderr or result.stdout).strip()
        raise BundlingError(f"could not {what} (exit {result.returncode}):\n{output}")


def cache_tag(version: str = constants.PYTHON_VERSION) -> str:
    """The tag of the runtime's .pyc names (``cpython-312``): Python ignores .pyc of another."""
    return "cpython-" + version.replace(".", "")


def _interpreter_tag(python: str) -> str | None:
    """The cache tag of the interpreter at `python`, or None when it does not run."""
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print(sys.implementation.cache_tag)"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def python_candidates(version: str = constants.PYTHON_VERSION) -> list[str]:
    """Where an interpreter of `version` may be: SQUALL_BUNDLING_PYTHON, this one, PATH, pyenv."""
    named = os.environ.get(constants.BUNDLING_PYTHON_VARIABLE)
    if named:
        return [named]  # named on purpose: no other is tried in its place
    candidates = [sys.executable]
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += [str(p) for p in sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"))]
    return list(dict.fromkeys(candidates))


def bytecode_python(
    version: str = constants.PYTHON_VERSION, *, candidates: Sequence[str] | None = None
) -> str:
    """An interpreter of exactly the runtime's Python version, to compile the asset with.

    Raises BundlingError when there is none: .pyc of another version would ship
    dead weight that the runtime ignores, and every cold start would compile again.
    """
    tried = python_candidates(version) if candidates is None else list(candidates)
    wanted = cache_tag(version)
    found = {python: _interpreter_tag(python) for python in tried}
    for python, tag in found.items():
        if tag == wanted:
            return python
    seen = ", ".join(f"{python} ({tag or 'does not run'})" for python, tag in found.items()) or "none"
    raise BundlingError(
        f"the Lambda runtime is Python {version}: its bytecode must be compiled by CPython {version}, "
        f"and none was found (tried: {seen}). Install Python {version} (for example "
        f"`pyenv install {version}`) or name it in {constants.BUNDLING_PYTHON_VARIABLE}."
    )


def compile_command(*, python: str, target: str) -> list[str]:
    return [
        python,
        "-m",
        "compileall",
        "-q",
        "-j",
        "0",
        # The asset never changes once deployed, and CDK zips it with fixed timestamps,
        # which a timestamp .pyc would never match.
        "--invalidation-mode",
        "unchecked-hash",
        target,
    ]


def remove_runtime_provided(output: Path) -> None:
    """Drop what the runtime provides even when a dependency pulled it in, and what no
    function imports (UNUSED_DISTRIBUTIONS).

    aws-xray-sdk requires botocore; a bundled botocore would shadow the runtime's
    and pair the runtime's boto3 with a botocore it was not released with.
    """
    names = {n.replace("-", "_") for n in constants.RUNTIME_PROVIDED_DISTRIBUTIONS | constants.UNUSED_DISTRIBUTIONS}
    for path in sorted(output.iterdir()) if output.is_dir() else []:
        name = path.name.lower()
        module = name.split("-", 1)[0] if name.endswith(".dist-info") else name
        if path.is_dir() and module in names:
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
        python: Callable[[], str] = bytecode_python,
    ) -> None:
        self._source = source
        self._requirements = list(requirements)
        self._run = run
        self._python = python

    def try_bundle(self, output_dir: str, options: Any) -> bool:
        output = Path(output_dir)
        # First, so that a machine without the runtime's Python fails before pip's minutes.
        python = self._python()
        self._run(pip_command(target=output_dir, requirements=self._requirements))
        remove_runtime_provided(output)
        copy_sources(self._source, output)
        _run(compile_command(python=python, target=output_dir))
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
    python: Callable[[], str] = bytecode_python,
) -> lambda_.Code:
    """One asset for every function (same hash, bundled once per synthesis)."""
    requirements = runtime_requirements() if requirements is None else requirements
    return lambda_.Code.from_asset(
        str(source),
        # What the source holds that the asset must not (the excludes apply to the
        # source, never to the bundled output and its compiled .pyc).
        exclude=list(constants.ASSET_EXCLUDES),
        bundling=cdk.BundlingOptions(
            image=cdk.DockerImage.from_registry("scratch"),
            # jsii calls try_bundle(output_dir, options) with the options as one
            # object, not as the keyword arguments its type stub declares.
            local=PipBundling(source=source, requirements=requirements, run=run, python=python),  # type: ignore[arg-type]
        ),
    )
