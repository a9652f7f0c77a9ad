"""cdk.json's account id and Kubernetes version take ASCII digits only (`\\d` took any script's)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
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
    context["clusters"][0]["kubernetesVersion"] = "1.\u0663\u0661"
    with pytest.raises(ConfigError, match=re.escape("clusters[0].kubernetesVersion")):
        SquallConfig.from_context(context)


@pytest.mark.parametrize(
    ("setting", "change"),
    [
        ("prefix", lambda c: c.__setitem__("prefix", "squall\n")),
        ("teams.research", lambda c: c.__setitem__("teams", {"research\n": "team-research"})),
        (
            "artifacts.buckets",
            lambda c: c.setdefault("artifacts", {}).__setitem__("buckets", ["my-bucket\n"]),
        ),
    ],
)
def test_a_name_with_a_trailing_newline_is_refused(
    context: dict[str, Any], setting: str, change: Callable[[dict[str, Any]], None]
) -> None:
    # `$` with match() takes a final newline: the names must be matched whole
    change(context)
    with pytest.raises(ConfigError, match=re.escape(setting)):
        SquallConfig.from_context(context)
