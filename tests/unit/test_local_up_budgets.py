"""`squall local up --groups FILE`: a groups file's team budgets reach the local runtime's admission."""

from __future__ import annotations

from pathlib import Path

from squall.local.server import served

GROUPS = """
teams:
  research: team-research
  vision: {namespace: team-vision, budget: {monthly: 500}}
nodeGroups:
  - {name: p3-usw2, region: us-west-2, asgName: squall-p3-usw2, instanceType: p3.2xlarge,
     allocatable: {cpu: 7800m, memory: 55Gi, nvidia.com/gpu: 1, pods: 58}, maxSize: 4, pricePerHour: 3.06}
"""


def test_a_groups_files_budgets_are_served(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(GROUPS)
    assert served(path).budgets == {"vision": 500.0}


def test_no_budget_no_budgets(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(GROUPS.replace(", budget: {monthly: 500}", ""))
    assert served(path).budgets is None
