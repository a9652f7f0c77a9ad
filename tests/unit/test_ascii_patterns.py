"""Every pattern of the spec and the configuration that means ASCII refuses other scripts.

Python's `\\d` and `\\w` (and pydantic's Rust regex) match any script's digits and letters:
"us-west-\\u0662" passed as a region and was rendered into a node affinity the API server
refuses, and "\\u0661h" passed as a maxRuntime. The property: nothing a pattern matches
holds a character outside ASCII, except where a pattern is meant to take Unicode text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from squall.core.spec import SpecError, bounds, limits, model, parse_duration, parse_spec
from squall.planner import inputs

# Patterns that take Unicode on purpose: an S3 key may hold any non-space character.
UNICODE_BY_DESIGN = {"S3_URI", "CODE_URI"}
MODULES: tuple[ModuleType, ...] = (limits, model, bounds, inputs)


def _patterns() -> list[tuple[str, re.Pattern[str]]]:
    found = [
        (f"{module.__name__}.{name}", value)
        for module in MODULES
        for name, value in vars(module).items()
        if isinstance(value, re.Pattern) and name not in UNICODE_BY_DESIGN
    ]
    assert len(found) >= 15, found  # the walk found the patterns it is about
    return found


UNICODE_CLASS = re.compile(r"(?<!\\)(?:\\\\)*\\[dDwWsSbB]")
NON_ASCII_DIGITS = ["\u0661", "\u0662", "\u06f3", "\u0967", "\uff11", "\U0001d7d9"]


@pytest.mark.parametrize(("name", "pattern"), _patterns(), ids=[n for n, _ in _patterns()])
def test_pattern_is_ascii_only(name: str, pattern: re.Pattern[str]) -> None:
    # given a pattern that means ASCII and uses a class that is Unicode-aware by default
    if not UNICODE_CLASS.search(pattern.pattern):
        return
    # then it says so: with re.ASCII, `\d`, `\w`, `\s` and `\b` read as ASCII classes
    assert pattern.flags & re.ASCII, f"{name} = {pattern.pattern!r} has no re.ASCII"


@pytest.mark.parametrize(("name", "pattern"), _patterns(), ids=[n for n, _ in _patterns()])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_nothing_a_pattern_matches_leaves_ascii(
    name: str, pattern: re.Pattern[str], data: st.DataObject
) -> None:
    # given any text the pattern matches whole
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    # then it is ASCII, and a non-ASCII digit put in for any ASCII one is refused
    assert text.isascii(), f"{name} matched {text!r}"
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    if digits:
        at = data.draw(st.sampled_from(digits))
        other = data.draw(st.sampled_from(NON_ASCII_DIGITS))
        assert pattern.fullmatch(text[:at] + other + text[at + 1 :]) is None, name


BASE = {"name": "digits", "team": "research", "image": "registry.example.com/squall/tf:1"}


def _spec(**fields: object) -> None:
    parse_spec({**BASE, **fields}, teams=["research"], registries=["registry.example.com"])


@pytest.mark.parametrize("digit", NON_ASCII_DIGITS)
def test_a_region_with_another_scripts_digit_is_refused(digit: str) -> None:
    with pytest.raises(SpecError) as refused:
        _spec(placement={"regions": [f"us-west-{digit}"]})
    assert [issue.field for issue in refused.value.issues] == ["placement.regions[0]"]
    assert "us-west-2" in refused.value.issues[0].message


@pytest.mark.parametrize("text", ["\u0661h", "1\u0660m", "\uff12d", "\u0663\u0660s"])
def test_a_duration_with_another_scripts_digits_is_refused(text: str) -> None:
    with pytest.raises(SpecError) as refused:
        _spec(maxRuntime=text)
    assert [issue.field for issue in refused.value.issues] == ["maxRuntime"]
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_ascii_regions_and_durations_still_pass() -> None:
    _spec(placement={"regions": ["us-west-2", "eu-central-1"]}, maxRuntime="1h30m")


@pytest.mark.parametrize("text", ["1\u0660", "\u0661h", "PT\u0661M", "\u0661:00:00", "P\uff11D"])
def test_configured_durations_refuse_other_scripts(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        inputs.parse_duration(text)


def test_a_node_group_region_with_another_scripts_digit_is_refused() -> None:
    group = {
        "name": "gpu",
        "region": "us-west-\u0662",
        "instanceType": "g5.xlarge",
        "maxSize": 2,
    }
    with pytest.raises(inputs.InputError) as refused:
        inputs.read_node_groups([group])
    assert any("region" in error for error in refused.value.errors)


def _schema_patterns(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            yield from _schema_patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schema_patterns(value)


def test_pydantic_patterns_name_ascii_classes() -> None:
    # pydantic's `pattern=` runs on Rust's regex, where `\d`, `\w`, `\s` and `\b` are
    # Unicode too: a pattern that means ASCII writes its classes out ([0-9], [A-Za-z]).
    from squall.core import asg_events, settings
    from squall.core.spec import commands
    from squall.local.scenario import models as scenario

    patterns = {
        pattern
        for module in (asg_events, settings, commands, model, scenario)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
        for pattern in _schema_patterns(value.model_json_schema())
    }
    assert patterns  # the walk reaches them (asg_events' instance ids, the scenario's senders)
    assert [p for p in patterns if UNICODE_CLASS.search(p)] == []
