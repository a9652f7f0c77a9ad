"""TRACE.csv cells built to break the reader: each is a per-cell error naming its line and column, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from squall.cli import main
from squall.local.scenario import ScenarioError
from squall.local.trace import parse_trace

HEADER = "submit_s,team,gpus,replicas,run_s\n"
OPTIONAL = "submit_s,team,gpus,replicas,run_s,priority,cpu,memory\n"
NINES = "9" * 5000  # past int()'s 4,300-digit limit
CDK_JSON = Path(__file__).parents[3] / "cdk.json"  # the repository's node groups


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_trace(text, source="t.csv")
    return caught.value.errors


# ---- over-long digit strings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (f"0,research,{NINES},1,600,,,", "line 2, column gpus: expected a whole number 0..16, got '999"),
        (f"0,research,1,{NINES},600,,,", "line 2, column replicas: expected a whole number 1..65, got '999"),
        (
            f"0,research,1,1,600,{NINES},,",
            "line 2, column priority: expected a whole number 0..100, got '999",
        ),
        (
            f"{NINES},research,1,1,600,,,",
            "line 2, column submit_s: expected a number of seconds such as 30, 2.5 or 1e3, got '999",
        ),
        (
            f"0,research,1,1,{NINES},,,",
            "line 2, column run_s: expected a number of seconds such as 30, 2.5 or 1e3, got '999",
        ),
    ],
)
def test_a_number_of_thousands_of_digits_is_a_cell_error(row: str, error: str) -> None:
    (message,) = errors_of(OPTIONAL + row + "\n")
    assert message.startswith(error)
    assert message.endswith("... (5,000 characters, at most 64)")


def test_leading_zeros_do_not_get_past_the_length_bound() -> None:
    # int() counts leading zeros towards its digit limit too
    zeros = "0" * 5000 + "1"
    (message,) = errors_of(f"{HEADER}0,research,1,{zeros},600\n")
    assert message.startswith("line 2, column replicas: expected a whole number 1..65, got '000")
    assert message.endswith("(5,001 characters, at most 64)")


@pytest.mark.parametrize("column", ["cpu", "memory"])
def test_over_long_quantities_are_cell_errors(column: str) -> None:
    cells = {"cpu": "", "memory": ""} | {column: NINES}
    assert errors_of(f"{OPTIONAL}0,research,1,1,600,,{cells['cpu']},{cells['memory']}\n") == [
        f"line 2, column {column}: must be a Kubernetes quantity such as '500m', '8' or '60Gi' (at most 64 characters)"
    ]


def test_numbers_up_to_the_bound_are_still_read() -> None:
    (row,) = parse_trace(f"{HEADER}{'0' * 62}30,research,{'0' * 63}1,1,{'0' * 61}600\n")
    assert (row.submit_s, row.gpus, row.run_s) == (30.0, 1, 600.0)


def test_simulate_exits_2_with_the_cell_error_for_a_huge_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given the probe's trace: 5,000 nines of GPUs
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(f"{HEADER}0,research,{NINES},1,600\n")
    # when it is replayed against the repository's node groups
    code = main(["simulate", "--trace", "t.csv", "--groups", str(CDK_JSON)])
    # then exit 2 and the cell named, no traceback
    err = capsys.readouterr().err
    assert code == 2
    assert "line 2, column gpus: expected a whole number 0..16, got '999" in err
    assert "Traceback" not in err


# ---- line numbers are the file's own ------------------------------------------------------------------


def test_a_header_after_blank_lines_is_named_on_its_own_line() -> None:
    assert errors_of("\n\nsubmit_s,team,gpus,run_s\n0,research,1,60\n") == [
        "line 3: the header lacks replicas (expected submit_s,team,gpus,replicas,run_s, further columns allowed)"
    ]


def test_rows_after_a_late_header_keep_their_line_numbers() -> None:
    rows = parse_trace(f"\n  \n{HEADER}\n10,research,1,1,60\n0,research,1,1,60\n")
    assert [r.line for r in rows] == [6, 5]
    assert errors_of(f"\n\n{HEADER}\n0,research,x,1,60\n") == [
        "line 5, column gpus: expected a whole number 0..16, got 'x'"
    ]


def test_a_late_header_without_rows_names_the_line_after_it() -> None:
    assert errors_of(f"\n\n{HEADER}") == ["line 4: the trace has no jobs"]


def test_a_file_of_blank_lines_has_no_header() -> None:
    assert errors_of("\n\n  \n") == [
        "line 1: only blank lines; expected the header submit_s,team,gpus,replicas,run_s"
    ]


def test_a_header_the_csv_module_refuses_is_named_on_its_line() -> None:
    (message,) = errors_of('\n\n"submit_s\0,team,gpus,replicas,run_s\n' + "x" * 200_000 + '"\n')
    assert message.startswith("line 4: field larger than field limit")


# ---- one grammar for numbers: plain ASCII decimals ---------------------------------------------------

SECONDS = "expected a number of seconds such as 30, 2.5 or 1e3"


@pytest.mark.parametrize(
    "cell",
    [
        "\u0663",  # ARABIC-INDIC DIGIT THREE
        "\uff11",  # FULLWIDTH DIGIT ONE
        "1_000",
        "1\u066b5",  # ARABIC DECIMAL SEPARATOR
        "nan",
        "NaN",
        "inf",
        "-Infinity",
        "0x10",
        "1e",
        ".",
        "1.2.3",
        "30s",
    ],
)
@pytest.mark.parametrize("column", ["submit_s", "run_s"])
def test_seconds_that_are_not_plain_ascii_decimals_are_refused(column: str, cell: str) -> None:
    cells = {"submit_s": "0", "run_s": "60"} | {column: cell}
    assert errors_of(f"{HEADER}{cells['submit_s']},research,1,1,{cells['run_s']}\n") == [
        f"line 2, column {column}: {SECONDS}, got {cell!r}"
    ]


@pytest.mark.parametrize(
    ("cell", "seconds"),
    [("30", 30.0), ("2.5", 2.5), ("1e3", 1000.0), ("1E3", 1000.0), (".5", 0.5), ("5.", 5.0), ("+7", 7.0)],
)
def test_plain_decimal_seconds_are_read(cell: str, seconds: float) -> None:
    (row,) = parse_trace(f"{HEADER}{cell},research,1,1,{cell}\n")
    assert (row.submit_s, row.run_s) == (seconds, seconds)


@pytest.mark.parametrize("cell", ["1e400", "9" * 64])
def test_seconds_past_the_range_of_a_float_are_out_of_bounds(cell: str) -> None:
    # float() makes these infinite; the bounds refuse them as they refuse 1e300
    (message,) = errors_of(f"{HEADER}{cell},research,1,1,60\n")
    assert message.startswith(
        "line 2, column submit_s: expected a number at least 0 and at most 316224000 (ten years), got '"
    )
    assert "characters" not in message


@pytest.mark.parametrize("cell", ["\u0663", "\uff11", "1_0", "nan", "inf", "1e1", "0x1"])
def test_whole_numbers_share_the_grammar(cell: str) -> None:
    assert errors_of(f"{OPTIONAL}0,research,{cell},1,60,{cell},,\n") == [
        f"line 2, column gpus: expected a whole number 0..16, got {cell!r}",
        f"line 2, column priority: expected a whole number 0..100, got {cell!r}",
    ]
