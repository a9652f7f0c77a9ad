"""`from squall import Client` loads the SDK on first use only: a Lambda handler importing the
package never loads the CLI (the asset leaves it out). Checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(script: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_functions_import_the_package_without_the_sdk() -> None:
    script = (
        "import sys\n"
        "import squall, squall.handlers.submit\n"
        "print(sorted(m for m in sys.modules if m == 'squall.cli' or m.startswith('squall.cli.')))\n"
    )
    assert _run(script) == "[]"


def test_the_client_is_exported_on_first_use() -> None:
    script = (
        "import squall\n"
        "from squall import Client, CommandError, NotFound\n"
        "from squall.cli.client import Client as Same\n"
        "print(Client is Same, issubclass(NotFound, CommandError), 'Client' in squall.__all__)\n"
    )
    assert _run(script) == "True True True"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import squall

    with pytest.raises(AttributeError, match="no attribute 'Clinet'"):
        squall.Clinet  # noqa: B018  (the typo is the point)
