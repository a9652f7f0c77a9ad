"""Every module-level pattern of the core, the planner and the deployment's settings means ASCII.

tests/unit/test_ascii_patterns.py holds the spec's and the planner inputs' patterns to
ASCII; this walks every compiled pattern at module level in squall.core, squall.planner,
the identity adapter (which reuses planner/inputs' principals), the local scenario's
models and stacks/config.py. Python's `\\d`, `\\w`, `\\s` and `\\b` match any script's
digits, letters and spaces, a negated class `[^...]` any character it does not name,
and re.IGNORECASE without re.ASCII lets `[a-z]` match the Kelvin sign and the long s:
a pattern doing any of these says re.ASCII, or is on the allow-list below on purpose.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import squall.core
import squall.planner
from squall.core.spec import limits, model
from tests.unit.test_ascii_patterns import NON_ASCII_DIGITS, UNICODE_CLASS

EXTRA_MODULES = ("stacks.config", "squall.adapters.aws.identity", "squall.local.scenario.models")

# Patterns that take Unicode on purpose (each says why).
UNICODE_BY_DESIGN: dict[re.Pattern[str], str] = {
    # An S3 key may hold any non-space character: `\S` means any script's.
    limits.S3_URI: "an S3 key is any non-space text",
    # The code archive's key prefix likewise: `[^\s/]` is any character but a space or "/".
    model.CODE_URI: "an S3 key prefix is any non-space text",
}
# Patterns whose `.` takes any character on purpose: they read a name, they do not check one.
ANY_CHARACTER_BY_DESIGN: dict[str, str] = {
    # The log agent's stream name starts with the node's host name, whatever it holds;
    # the pod, namespace, container and id after it are ASCII classes.
    "squall.core.logstreams._STREAM": "the host part of a stream name is read as it is",
    # Whether an (already IMAGE_REF-checked, ASCII) tag is a floating one: "latest" and anything after.
    "stacks.config._FLOATING_TAG": "only decides whether a checked tag floats",
}

NEGATED_CLASS = re.compile(r"(?<!\\)(?:\\\\)*\[\^")


def _modules() -> Iterator[ModuleType]:
    for package in (squall.core, squall.planner):
        yield package
        for found in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            yield importlib.import_module(found.name)
    for name in EXTRA_MODULES:
        yield importlib.import_module(name)


def _patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Each module-level pattern once, named where it is compiled (a re-export is the same object)."""
    seen: dict[int, tuple[str, re.Pattern[str]]] = {}
    for module in sorted(_modules(), key=lambda m: m.__name__):
        source = Path(str(module.__file__)).read_text(encoding="utf-8")
        for name, value in vars(module).items():
            if not (isinstance(value, re.Pattern) and isinstance(value.pattern, str)):
                continue
            found = (f"{module.__name__}.{name}", value)
            if id(value) not in seen or re.search(rf"^{name}\s*=\s*re\.compile\(", source, re.MULTILINE):
                seen[id(value)] = found
    return sorted(seen.values(), key=lambda found: found[0])


PATTERNS = _patterns()
IDS = [name for name, _ in PATTERNS]
CHECKED = [(name, pattern) for name, pattern in PATTERNS if pattern not in UNICODE_BY_DESIGN]


def test_the_walk_reaches_every_module_asked_about() -> None:
    names = set(IDS)
    for expected in (
        "squall.planner.kube._FRACTION",
        "squall.planner.kube._INSTANCE_ID",
        "stacks.config._TEAM_NAME",
        "stacks.config._BUCKET_NAME",
        "stacks.config._NAME",
        "squall.core.logstreams._STREAM",
        "squall.planner.quantity._QUANTITY",
    ):
        assert expected in names, expected
    # the identity adapter's principals are planner/inputs' very patterns, checked once
    from squall.adapters.aws import identity
    from squall.planner import inputs

    assert identity.PRINCIPAL_ARN is inputs.IAM_PRINCIPAL_ARN
    assert identity.UNIQUE_ID is inputs.IAM_UNIQUE_ID
    assert len(PATTERNS) >= 25, IDS
    assert set(UNICODE_BY_DESIGN) <= {pattern for _, pattern in PATTERNS}
    assert set(ANY_CHARACTER_BY_DESIGN) <= names


@pytest.mark.parametrize(("name", "pattern"), CHECKED, ids=[n for n, _ in CHECKED])
def test_a_pattern_with_a_unicode_aware_class_says_ascii(name: str, pattern: re.Pattern[str]) -> None:
    if pattern.flags & re.ASCII:
        return
    text = pattern.pattern
    assert not UNICODE_CLASS.search(text), f"{name} = {text!r} uses \\d/\\w/\\s/\\b without re.ASCII"
    assert not NEGATED_CLASS.search(text), f"{name} = {text!r} has a negated class without re.ASCII"
    assert not pattern.flags & re.IGNORECASE, f"{name} = {text!r} ignores case without re.ASCII"


@pytest.mark.parametrize(("name", "pattern"), CHECKED, ids=[n for n, _ in CHECKED])
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_nothing_a_pattern_matches_leaves_ascii(
    name: str, pattern: re.Pattern[str], data: st.DataObject
) -> None:
    # given any text the pattern matches whole
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    # then it is ASCII (but where a `.` reads any text on purpose)
    if name not in ANY_CHARACTER_BY_DESIGN:
        assert text.isascii(), f"{name} matched {text!r}"
    # and another script's digit in place of an ASCII one is not matched as one
    digits = [i for i, c in enumerate(text) if "0" <= c <= "9"]
    if digits and name not in ANY_CHARACTER_BY_DESIGN:
        at = data.draw(st.sampled_from(digits))
        other = data.draw(st.sampled_from(NON_ASCII_DIGITS))
        assert pattern.fullmatch(text[:at] + other + text[at + 1 :]) is None, name


@pytest.mark.parametrize("digit", NON_ASCII_DIGITS)
def test_a_fraction_of_another_scripts_digits_is_not_cut_as_digits(digit: str) -> None:
    # planner/kube.py cuts a fraction past microseconds before fromisoformat reads it:
    # only ASCII digits are a fraction's
    from squall.planner import kube

    fraction = kube._FRACTION
    assert fraction.sub(r"\1", "12:00:00.1234567Z") == "12:00:00.123456Z"
    assert fraction.sub(r"\1", f"12:00:00.123456{digit}Z") == f"12:00:00.123456{digit}Z"
    assert fraction.search(f"12:00:00.{digit * 6}7Z") is None


# ---- a pattern ending in `$` is matched whole ---------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("vpc.vpcId[0]", {"vpcId": "vpc-0123abcd\n", "subnetIds": ["subnet-0123abcd"]}),
        ("vpc.subnetIds[0]", {"vpcId": "vpc-0123abcd", "subnetIds": ["subnet-0123abcd\n"]}),
        (
            "vpc.securityGroupIds[0]",
            {
                "vpcId": "vpc-0123abcd",
                "subnetIds": ["subnet-0123abcd"],
                "securityGroupIds": ["sg-0123abcd\n"],
            },
        ),
    ],
)
def test_an_aws_resource_id_with_a_trailing_newline_is_refused(setting: str, value: dict[str, Any]) -> None:
    # stacks/config.py checks ids with `^...$`: with match(), "$" also takes a final newline
    from stacks.config import ConfigError, SquallConfig, load_cdk_json_context

    context = copy.deepcopy(load_cdk_json_context())
    context["vpc"] = value
    with pytest.raises(ConfigError) as refused:
        SquallConfig.from_context(context)
    assert any(problem.startswith(f"{setting}:") for problem in refused.value.problems), refused.value


def test_aws_resource_ids_without_a_newline_still_pass() -> None:
    from stacks.config import SquallConfig, load_cdk_json_context

    context = copy.deepcopy(load_cdk_json_context())
    context["vpc"] = {
        "vpcId": "vpc-0123abcd",
        "subnetIds": ["subnet-0123456789abcdef0"],
        "securityGroupIds": ["sg-0123abcd"],
    }
    vpc = SquallConfig.from_context(context).vpc
    assert vpc is not None and vpc.subnet_ids == ("subnet-0123456789abcdef0",)
