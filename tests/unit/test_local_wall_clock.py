"""The wall clock of `squall local up`: real time, or `speed` times faster."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squall.local.clock import WallClock


def test_a_faster_clock_sleeps_its_share_of_a_delta() -> None:
    clock = WallClock(speed=30)
    assert clock.wall_seconds(timedelta(minutes=1)) == 2.0
    assert clock.wall_seconds(timedelta(seconds=-5)) == 0.0
    assert WallClock().wall_seconds(timedelta(seconds=3)) == 3.0


def test_its_time_never_runs_backwards() -> None:
    clock = WallClock(speed=1000)
    first = clock.now()
    assert clock.now() >= first >= clock.start


@pytest.mark.parametrize("speed", [0, -1, float("inf"), float("nan")])
def test_a_speed_must_be_positive_and_finite(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        WallClock(speed=speed)
