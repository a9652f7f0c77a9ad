"""One synthesis per test session, shared by every infrastructure test.

Synthesis starts jsii and takes tens of seconds, so the session synthesises three
apps once: ``full`` (the cdk.json defaults plus every optional feature: VPC
placement, groups Squall creates, a spot group, an alarm e-mail, team
submitters) in process, for assertions; ``large`` (ten node groups in three
regions, a real-size certificate, a dozen teams), in process; and ``default``,
the plain ``python app.py`` run, which is what a platform team gets before
changing anything. None bundles the Lambda asset.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # app.py and stacks/ live at the repository root
    sys.path.insert(0, str(REPO_ROOT))

from .scenario import AppRun, Synthesis, full_context, large_context  # noqa: E402


@pytest.fixture(scope="session")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesis]:
    from app import create_app

    outdir = tmp_path_factory.mktemp("cdk-full")
    app, stacks = create_app(context={**full_context(), "aws:cdk:bundling-stacks": []}, outdir=str(outdir))
    app.synth()
    yield Synthesis(app=app, stacks=stacks, outdir=outdir)


@pytest.fixture(scope="session")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesis]:
    """Ten node groups in three regions, a real-size certificate, a dozen teams with submitters."""
    from app import create_app
    from tests.certificates import cluster_ca

    outdir = tmp_path_factory.mktemp("cdk-large")
    context = {**large_context(cluster_ca()), "aws:cdk:bundling-stacks": []}
    app, stacks = create_app(context=context, outdir=str(outdir))
    app.synth()
    yield Synthesis(app=app, stacks=stacks, outdir=outdir)


@pytest.fixture(scope="session")
def default_app(tmp_path_factory: pytest.TempPathFactory) -> AppRun:
    """`python app.py` exactly as documented, from a scratch directory."""
    workdir = tmp_path_factory.mktemp("cdk-default")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "app.py")],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return AppRun(result.returncode, result.stdout + result.stderr, workdir / "cdk.out")


@pytest.fixture(scope="session")
def templates(full: Synthesis, default_app: AppRun, large: Synthesis) -> dict[str, Path]:
    """Every synthesised template of the three apps, by a readable name."""
    found = {f"full/{p.name}": p for p in sorted(full.outdir.glob("*.template.json"))}
    found.update({f"default/{p.name}": p for p in sorted(default_app.outdir.glob("*.template.json"))})
    found.update({f"large/{p.name}": p for p in sorted(large.outdir.glob("*.template.json"))})
    return found
