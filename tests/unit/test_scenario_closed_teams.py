"""A scenario predicts what the submit function does with a team that names no submitters.

Once one team names submitters, a team that names none takes nobody's jobs (issue 25,
item 2): an arrival for it must say `expect: rejected`, as for any other refused sender.
"""

from __future__ import annotations

from typing import Any

import pytest

from squall.local.scenario import ScenarioError, compile_scenario
from tests.groups import gpu_group

GROUP = gpu_group("p3-usw2", "p3.2xlarge", max_size=4)
RESEARCHER = "AROAEXAMPLERESEARCH"
VISION = {"name": "seg", "id": "seg", "team": "vision", "image": "registry.example.com/squall/tf-trainer:1.0"}


def scenario(teams: dict[str, Any], **arrival: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "nodeGroups": [GROUP],
        "teams": teams,
        "arrivals": [{"at": 0, "spec": VISION} | arrival],
    }


MIXED = {"research": {"namespace": "team-research", "submitters": [RESEARCHER]}, "vision": "team-vision"}


@pytest.mark.parametrize("sender", [f"{RESEARCHER}:alice", None])
def test_an_arrival_for_a_team_that_names_no_submitters_while_another_does_must_expect_rejection(
    sender: str | None,
) -> None:
    with pytest.raises(ScenarioError) as caught:
        compile_scenario(scenario(MIXED, sender=sender))
    (error,) = caught.value.errors
    assert error.startswith("arrivals[0].sender: ")
    assert "may not submit for team vision (its submitters: none, while other teams name theirs)" in error
    # said so, the scenario compiles and sends nothing that would run
    plan = compile_scenario(scenario(MIXED, sender=sender, expect="rejected"))
    assert [s.job_id for s in plan.submissions] == [None]


def test_teams_that_all_name_submitters_or_none_do_take_what_they_did() -> None:
    every = MIXED | {"vision": {"namespace": "team-vision", "submitters": ["AROAEXAMPLEVISION"]}}
    assert [
        s.job_id for s in compile_scenario(scenario(every, sender="AROAEXAMPLEVISION:v")).submissions
    ] == ["seg"]
    with pytest.raises(ScenarioError, match="may not submit for team vision"):
        compile_scenario(scenario(every, sender=f"{RESEARCHER}:alice"))
    open_teams = {"research": "team-research", "vision": "team-vision"}
    assert [s.job_id for s in compile_scenario(scenario(open_teams, sender="AIDAANYONE")).submissions] == [
        "seg"
    ]
