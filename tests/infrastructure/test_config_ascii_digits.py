"""cdk.json's account id and Kubernetes version take ASCII digits only (`\\d` took any script's)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stacks.config import ConfigError, SquallConfig, load_cdk_json_context


@pytest.fixture
def context() -> dict[str, Any]:
    return copy.deepcopy(load_cdk_json_context())


def test_an_account_id_of_another_scripts_digits_is_refused(context: dict[str, Any]) -> None:
    context["account"] = "\u0661" * 12
    with pytest.raises(ConfigError, match="account"):
        SquallConfig.from_context(context)
    context["account"] = "123456789012"
    assert SquallConfig.from_context(context).account == "123456789012"


def test_a_kubernetes_version_of_another_scripts_digits_is_refused(context: dict[str, Any]) -> None:
    context["cluster"] = {**context.get("cluster", {}), "kubernetesVersion": "1.\u0663\u0661"}
    with pytest.raises(ConfigError, match="kubernetesVersion"):
        SquallConfig.from_context(context)
