"""A replay puts the fleet's overhead down to the teams that caused it: the summary's
overheadByTeam and overheadUnattributed (the simulated fleet, the scale check's meter, the ledger)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.cli import main
from tests.groups import gpu_group

GROUP = gpu_group("g5-usw2", "g5.12xlarge", max_size=2, priority=10, minSize=0, pricePerHour=5.67)
# research's job comes first, onto no node: the node booting for it is research's overhead,
# and so is that node kept warm after it. vision's comes long after that node is gone.
TRACE = (
    "submit_s,team,gpus,replicas,run_s\n"
    "0,research,4,1,1800\n"
    "7200,vision,4,1,600\n"
)


@pytest.mark.timeout(180)
def test_a_replay_splits_its_overhead_into_what_each_team_caused_and_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "trace.csv").write_text(TRACE)
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"nodeGroups": [GROUP], "policy": {"idleThreshold": "PT5M"}}))
    code = main(["simulate", "--trace", str(tmp_path / "trace.csv"), "--groups", str(groups), "--json"])
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["jobs"] == {"SUCCEEDED": 2}
    costs = summary["costs"]
    caused = costs["overheadByTeam"]
    # each team caused some: the node booting for its job, the node kept warm after it
    assert set(caused) == {"research", "vision"}
    assert all(dollars > 0 for dollars in caused.values())
    # and with what nobody caused, it is the summary's overhead, to the cent
    assert costs["overheadUnattributed"] >= 0
    assert round(sum(caused.values()) + costs["overheadUnattributed"], 2) == costs["overhead"]
    assert costs["jobs"] + costs["overhead"] == pytest.approx(costs["fleet"], abs=0.01)
