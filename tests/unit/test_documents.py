"""squall.core.documents: the one reader of every file Squall reads, and what it refuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from squall.core import documents
from squall.core.documents import ConfigError, DocumentError, Team, parse, read_teams


def error_of(data: bytes | str, *, source: str = "f.yaml") -> DocumentError:
    with pytest.raises(DocumentError) as raised:
        parse(data, source=source)
    return raised.value


# ---- JSON first, YAML otherwise -------------------------------------------------------


def test_json_is_read_as_json_so_that_1e3_is_a_number() -> None:
    assert parse('{"cpu": 1e3, "memory": 2.5E-1, "n": 7}', source="x.json") == {
        "cpu": 1000.0,
        "memory": 0.25,
        "n": 7,
    }
    # the same text is JSON whatever the file is called
    assert parse('{"cpu": 1e3}', source="x.yaml") == {"cpu": 1000.0}


def test_yaml_is_read_when_the_text_is_not_json() -> None:
    assert parse("name: x\nresources: {gpu: 1}\nlist: [a, b]\n") == {
        "name": "x",
        "resources": {"gpu": 1},
        "list": ["a", "b"],
    }


def test_yaml_is_read_with_the_c_loader() -> None:
    import yaml

    assert getattr(yaml, "__with_libyaml__", False), "the installed PyYAML has libyaml"
    assert issubclass(documents._yaml_loader(), yaml.CSafeLoader)


def test_a_byte_order_mark_and_an_empty_file_are_fine() -> None:
    assert parse(b"\xef\xbb\xbfa: 1") == {"a": 1}
    assert parse(b"") is None


def test_yaml_anchors_and_merge_keys_still_work() -> None:
    text = "base: &b {x: 1, y: 2}\nitem:\n  <<: *b\n  x: 3\n"
    assert parse(text) == {"base": {"x": 1, "y": 2}, "item": {"x": 3, "y": 2}}


# ---- what is refused, with the file, line and column -------------------------------------


@pytest.mark.parametrize(
    ("data", "line", "column", "words"),
    [
        (b"name: x\nteam: caf\xe9\n", 2, 10, "not UTF-8"),
        (b"\xff\xfea\x00", 1, 1, "UTF-16"),
        (b"a: !!int x\n", 1, 4, "'x' is not an integer"),
        (b"a: !!float x\n", 1, 4, "is not a number"),
        (b"a: !!bool maybe\n", 1, 4, "true or false"),
        (b"a: !!timestamp x\n", 1, 4, "not a timestamp"),
        (
            b"a: !!python/object/apply:os.system [ls]\n",
            1,
            4,
            "!!python/object/apply:os.system is not accepted",
        ),
        (b"a: !!binary aGVsbG8=\n", 1, 4, "!!binary is not accepted"),
        (b"a: !custom x\n", 1, 4, "!custom is not accepted"),
        (b"a: 1.0e+400\n", 1, 4, "not a finite number"),
        (b"a: .nan\n", 1, 4, "not a finite number"),
        (b"a: " + b"1" * 5000 + b"\n", 1, 4, "an integer of more than"),
        (b"a: 1\nb: 2\na: 3\n", 3, 1, "key 'a' appears twice"),
        (b"a: 1\n---\nb: 2\n", 2, 1, "single document"),
        (b"name: [unclosed\n", 2, 1, "not valid YAML or JSON"),
        (b"a: &a [1, *a]\n", 1, 4, "an alias refers to a node that contains it"),
        (b"a: \x01\n", 1, 4, "control characters"),
    ],
)
def test_yaml_problems_are_named_with_line_and_column(
    data: bytes, line: int, column: int, words: str
) -> None:
    error = error_of(data, source="spec.yaml")
    assert words in str(error)
    assert (error.line, error.column) == (line, column)
    assert str(error).startswith(f"spec.yaml: line {line}, column {column}: ")


@pytest.mark.parametrize(
    ("data", "line", "words"),
    [
        ('{\n  "a": ' + "1" * 5000 + "\n}", 2, "an integer of more than"),
        ('{\n  "a": NaN\n}', 2, "NaN is not a number"),
        ('{\n  "a": -Infinity\n}', 2, "-Infinity is not a number"),
        ('{\n  "a": 1e400\n}', 2, "'1e400' is out of range"),
        ('{"a": 1,\n "b": [}', 2, "not valid JSON"),
    ],
)
def test_json_problems_are_named_with_their_line(data: str, line: int, words: str) -> None:
    error = error_of(data, source="pods.json")
    assert words in str(error) and error.line == line


def test_a_duplicate_json_key_is_refused() -> None:
    assert "key 'team' appears twice" in str(error_of('{"team": "a", "name": "x", "team": "b"}'))


@pytest.mark.parametrize("depth", [documents.MAX_DEPTH + 1, 5_000, 100_000])
def test_documents_nested_too_deep_are_refused_without_recursion_errors(depth: int) -> None:
    for text in (
        "[" * depth + "]" * depth,
        '{"a":' * depth + "1" + "}" * depth,
        "a: " + "[" * depth + "]" * depth,
    ):
        assert "nested more than 100 levels deep" in str(error_of(text))


@pytest.mark.parametrize("depth", [documents.MAX_DEPTH + 1, 3_000])
def test_block_yaml_nested_too_deep_is_refused(depth: int) -> None:
    text = "".join("  " * i + "a:\n" for i in range(depth)) + "  " * depth + "1\n"
    assert "nested more than 100 levels deep" in str(error_of(text))


def test_nesting_up_to_the_bound_is_fine() -> None:
    depth = documents.MAX_DEPTH
    assert parse("[" * depth + "]" * depth, source="x.json") == _nested(depth)
    assert parse("a: " + "[" * (depth - 1) + "]" * (depth - 1)) == {"a": _nested(depth - 1)}


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_alias_bombs_are_refused_before_they_expand() -> None:
    levels = ["a: &a [x,x,x,x,x,x,x,x,x,x]"]
    for n in range(1, 9):
        previous = chr(ord("a") + n - 1)
        name = chr(ord("a") + n)
        levels.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 10) + "]")
    error = error_of("\n".join(levels) + "\n")
    assert "aliases expand it" in str(error)


def test_a_lone_surrogate_escape_is_refused_and_a_pair_is_kept() -> None:
    assert "lone surrogate" in str(error_of('{"name": "x\\ud800"}'))
    assert parse('{"name": "\\ud83d\\ude00"}') == {"name": "\N{GRINNING FACE}"}


def test_files_are_bounded_in_size(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"items": ["x" * 100] * 20}))
    with pytest.raises(DocumentError, match=r"big\.json: larger than 1,000 bytes, the most Squall reads"):
        documents.load(path, max_bytes=1_000)
    assert documents.load(path)["items"][0] == "x" * 100


def test_unreadable_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match=r"missing\.yaml: cannot read: No such file"):
        documents.load(tmp_path / "missing.yaml")
    with pytest.raises(DocumentError, match="cannot read: Is a directory"):
        documents.load(tmp_path)


def test_standard_input_is_read_for_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    class Stdin:
        buffer = io.BytesIO(b"a: 1\n")

    monkeypatch.setattr(sys, "stdin", Stdin())
    assert documents.load("-") == {"a": 1}


def test_read_text_bounds_and_decodes(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"submit_s,team\n0,caf\xe9\n")
    with pytest.raises(DocumentError, match=r"trace\.csv: line 2, column 6: not UTF-8"):
        documents.read_text(path)


def test_shown_values_stay_short_and_never_fail() -> None:
    assert documents.shown(10**5000).startswith("a number of about 5001 digits")
    assert documents.shown(["x"] * 10**6) == "a list of 1000000 items"
    assert len(documents.shown("x" * 10**6)) == documents.SHOWN_LENGTH


# ---- teams --------------------------------------------------------------------------------


def test_teams_are_a_namespace_or_an_object() -> None:
    teams = read_teams(
        {
            "research": "team-research",
            "vision": {
                "namespace": "team-vision",
                "submitters": ["arn:aws:iam::123456789012:role/vision-ci", "AROAEXAMPLEVISION1"],
                "gpuQuota": 64,
                "weight": 2,
            },
        }
    )
    assert teams == {
        "research": Team(namespace="team-research"),
        "vision": Team(
            namespace="team-vision",
            submitters=("arn:aws:iam::123456789012:role/vision-ci", "AROAEXAMPLEVISION1"),
            gpu_quota=64,
            weight=2.0,
        ),
    }


@pytest.mark.parametrize(
    ("teams", "problem"),
    [
        (
            {"a": {"namespace": "team-a", "colour": "blue"}},
            "teams.a.colour: unknown field (allowed: namespace",
        ),
        ({"a": {"submitters": ["AROAEXAMPLEVISION1"]}}, "teams.a.namespace: required"),
        ({"a": {"namespace": 7}}, "teams.a.namespace: expected a string"),
        ({"a": "Team_A"}, "teams.a: 'Team_A' is not a Kubernetes namespace"),
        ({"a": ["team-a"]}, "teams.a: expected a namespace or an object"),
        ({"a": {"namespace": "team-a", "submitters": []}}, "teams.a.submitters: expected a non-empty list"),
        ({"a": {"namespace": "team-a", "submitters": "AROAEXAMPLEVISION1"}}, "teams.a.submitters: expected"),
        (
            {"a": {"namespace": "team-a", "submitters": ["someone"]}},
            "teams.a.submitters[0]: 'someone' is not",
        ),
        ({"a": {"namespace": "team-a", "gpuQuota": -1}}, "teams.a.gpuQuota: expected a whole number"),
        ({"a": {"namespace": "team-a", "gpuQuota": True}}, "teams.a.gpuQuota: expected a whole number"),
        ({"a": {"namespace": "team-a", "weight": 0}}, "teams.a.weight: expected a positive number"),
        (["team-a"], "teams: expected an object"),
    ],
)
def test_team_problems_name_their_field(teams: object, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        read_teams(teams)
    assert any(problem in error for error in raised.value.errors), raised.value.errors


def test_a_scenario_names_submitters_by_unique_id_only() -> None:
    arn = {"a": {"namespace": "team-a", "submitters": ["arn:aws:iam::123456789012:role/ci"]}}
    assert read_teams(arn)["a"].submitters == ("arn:aws:iam::123456789012:role/ci",)
    with pytest.raises(ConfigError, match="is not a unique id"):
        read_teams(arn, unique_ids_only=True)
