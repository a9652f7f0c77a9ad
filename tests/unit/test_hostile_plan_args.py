"""`squall plan --now`: a time given is a time checked, in its own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli_errors import here, plan_args, run

__all__ = ["here"]  # the fixture, used by name


@pytest.mark.parametrize("now", ["", "  "])
def test_an_empty_now_is_refused_not_taken_for_the_present(
    here: Path, capsys: pytest.CaptureFixture[str], now: str
) -> None:
    code, err = run(plan_args(now), capsys)
    assert code == 2
    assert err.startswith("squall: --now: expected an ISO 8601 time with a timezone")


@pytest.mark.parametrize("now", ["9999-12-31T23:59:59+00:00", "1969-12-31T23:59:59Z"])
def test_a_now_out_of_range_is_named_as_written(
    here: Path, capsys: pytest.CaptureFixture[str], now: str
) -> None:
    code, err = run(plan_args(now), capsys)
    assert code == 2
    assert err == f"squall: --now: must be between 1970 and 9000, got {now!r}\n"
