"""What a cold function process imports before its first call (in a fresh interpreter).

The generated ``kubernetes.client`` API classes import the model classes of every
operation they declare: 136 modules and most of a second of a cold start, for
responses the adapter reads as raw JSON anyway (benchmarks/bench_cold_start.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "functions"


def modules_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code`."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=FUNCTIONS_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout.splitlines()[-1])
    return modules


def client_models_and_apis(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(("kubernetes.client.models.", "kubernetes.client.api."))]


def test_importing_the_kubernetes_adapter_imports_no_client_model() -> None:
    modules = modules_after("import squall.adapters.kubernetes.cluster")

    assert "squall.adapters.kubernetes.cluster" in modules
    assert client_models_and_apis(modules) == []


def test_a_cluster_built_on_an_api_client_imports_no_client_model() -> None:
    # The composition root's path: an ApiClient with a token provider, the adapter on it.
    modules = modules_after(
        "from squall.adapters.kubernetes.cluster import KubernetesCluster\n"
        "from squall.adapters.kubernetes.eks_auth import build_api_client\n"
        "KubernetesCluster(build_api_client(host='https://127.0.0.1:1', token_provider=lambda: 't'))"
    )

    assert client_models_and_apis(modules) == []


def test_a_create_imports_only_the_model_of_the_kind_it_validates() -> None:
    # The manifest is checked against the API's schema before it is sent (nothing is
    # sent here: the schema refuses it first).
    modules = modules_after(
        "from squall.adapters.kubernetes.cluster import KubernetesCluster\n"
        "from squall.adapters.kubernetes.eks_auth import build_api_client\n"
        "from squall.core.errors import PermanentError\n"
        "cluster = KubernetesCluster(build_api_client(host='https://127.0.0.1:1'))\n"
        "try:\n"
        "    cluster.create({'apiVersion': 'v1', 'kind': 'Service',"
        " 'metadata': {'name': 's', 'namespace': 'n'}, 'spek': {}})\n"
        "except PermanentError:\n"
        "    pass\n"
    )

    models = client_models_and_apis(modules)
    assert "kubernetes.client.models.v1_service" in models
    assert "kubernetes.client.models.v1_job" not in models
    assert not [m for m in models if m.startswith("kubernetes.client.api.")]


def test_a_handlers_init_imports_what_its_first_call_builds_from_and_builds_nothing() -> None:
    # Lambda's init phase, which a SnapStart snapshot keeps: the adapters and boto3 are
    # imported; no settings, session, credentials or client exist before the first call.
    modules = modules_after(
        "import squall.handlers.submit\n"
        "import squall.runtime as runtime\n"
        "assert runtime._from_environment.cache_info().currsize == 0, 'services built at init'\n"
        "import boto3\n"
        "assert boto3.DEFAULT_SESSION is None, 'a boto3 session made at init'"
    )

    assert {"boto3", "squall.adapters.kubernetes.cluster", "squall.adapters.aws.job_store"} <= set(modules)
    assert client_models_and_apis(modules) == []


def test_an_after_restore_hook_seeds_the_random_state_again(tmp_path: Path) -> None:
    # given the runtimes' snapshot_restore_py, which records the hooks registered at init
    (tmp_path / "snapshot_restore_py.py").write_text(
        "hooks = []\ndef register_after_restore(func, *args, **kwargs):\n    hooks.append(func)\n"
    )
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import random, snapshot_restore_py\n"
        "import squall.handlers.scale\n"
        "(hook,) = snapshot_restore_py.hooks\n"
        # two environments restored from one snapshot start from the same random state
        "random.seed(7); restored = random.getstate()\n"
        "first = random.random()\n"
        "random.setstate(restored); hook(); again = random.random()\n"
        "print(first != again)\n"
    )
    # when the snapshot's process is resumed and the hook runs
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=FUNCTIONS_DIR, capture_output=True, text=True, check=False
    )
    # then the next random number is not the one every other environment draws
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
