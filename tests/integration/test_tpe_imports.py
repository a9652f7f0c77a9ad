"""Optuna (and numpy with it) is imported only when a tpe sweep chooses a trial's parameters:
the functions' cold start and every other sweep never pay for it (a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.test_cold_imports import FUNCTIONS_DIR, modules_after

pytestmark = pytest.mark.timeout(120)

HEAVY = ("optuna", "numpy", "sqlalchemy")


def heavy(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def test_the_handlers_that_run_sweeps_import_no_optuna() -> None:
    modules = modules_after("import squall.handlers.reconcile, squall.handlers.submit")

    assert "squall.services.sweeps" in modules and "squall.core.search" in modules
    assert heavy(modules) == []


def test_a_grid_or_random_sweep_expands_without_optuna() -> None:
    modules = modules_after(
        "from squall.core.spec import expand_sweep, parse_spec\n"
        "spec = parse_spec({'name': 'a', 'team': 't', 'image': 'r/x:1', 'sweep': {'strategy': 'random',"
        " 'parameters': {'lr': {'min': 1e-4, 'max': 1.0, 'log': True}}}}, teams=['t'], registries=['r'])\n"
        "assert len(expand_sweep(spec, job_id='a-1')) == 16"
    )

    assert heavy(modules) == []


def test_a_tpe_choice_imports_optuna_and_logs_nothing() -> None:
    script = (
        "from squall.core.search import choose_parameters\n"
        "from squall.core.spec import Sweep\n"
        "sweep = Sweep.model_validate({'strategy': 'tpe', 'objective': {'metric': 'm', 'goal': 'minimize'},"
        " 'parameters': {'lr': {'min': 1e-4, 'max': 1.0, 'log': True}}})\n"
        "print(choose_parameters(sweep, [], number=0))\n"
        "import sys; print('optuna' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-W", "default", "-c", script],
        cwd=FUNCTIONS_DIR,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "True"
    # Optuna's own handler would say "A new study created in memory ..." on stderr; warnings too.
    assert result.stderr == ""
