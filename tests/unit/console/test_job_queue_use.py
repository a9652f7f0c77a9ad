"""The queue page's pure pieces: each team's use against its quota and budget, and its arguments."""

from __future__ import annotations

import pytest

from squall.cli.errors import CommandError
from squall.console.pages.queue import TeamUse, offset_argument, team_argument, team_uses
from squall.planner.inputs import Team


def test_each_configured_or_named_team_gets_its_use_quota_and_budget() -> None:
    teams = {
        "research": Team("team-research", gpu_quota=16),
        "vision": Team("team-vision", monthly_budget=500.0),
    }
    rows = [{"team": "vision"}, {"team": "vision"}, {"team": "robots"}]
    uses = team_uses({"research": 12, "other": "x"}, rows, teams, {"vision": 123.5})
    assert uses == [
        TeamUse("other", gpus=0, quota=None, spent=0.0, budget=None, waiting=0),
        TeamUse("research", gpus=12, quota=16, spent=0.0, budget=None, waiting=0),
        TeamUse("robots", gpus=0, quota=None, spent=0.0, budget=None, waiting=1),
        TeamUse("vision", gpus=0, quota=None, spent=123.5, budget=500.0, waiting=2),
    ]
    # no budget anywhere: the spend is not read, and none is shown
    assert team_uses([], [], teams, None)[0].spent is None


def test_the_arguments_say_what_is_allowed() -> None:
    assert offset_argument(None, listed=10) == 0 and offset_argument("10", listed=10) == 10
    for bad in ("11", "-1", "1.5", "9" * 9):
        with pytest.raises(CommandError, match=r"^after: expected a row number from 0 to 10"):
            offset_argument(bad, listed=10)
    teams = {"research": Team("team-research")}
    assert team_argument("research", teams) == "research" and team_argument("", teams) is None
    with pytest.raises(CommandError, match=r"^team: expected one of the configured teams \(research\)"):
        team_argument("robots", teams)
