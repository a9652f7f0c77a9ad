"""The replay summary's overhead per team that caused it: the summary's overhead (the fleet's
cost less the jobs') split in the proportions the run's cost ledger put down to each team."""

from __future__ import annotations

from squall.core.costs import GroupOverhead
from squall.local.summary import overhead_split


def test_the_overhead_is_split_as_the_ledger_attributed_it_and_adds_up_to_the_cent() -> None:
    rows = [
        GroupOverhead(group="p3", month="2026-04", dollars=2.0, team="research"),
        GroupOverhead(group="g5", month="2026-04", dollars=1.0, team="research"),
        GroupOverhead(group="p3", month="2026-04", dollars=1.0, team="vision"),
        GroupOverhead(group="p3", month="2026-04", dollars=2.0),
    ]
    # the ledger counted $6 at its checks: research 1/2, vision 1/6, a third nobody's
    assert overhead_split(10.01, rows) == {
        "overheadByTeam": {"research": 5.0, "vision": 1.67},
        "overheadUnattributed": 3.34,
    }


def test_with_nothing_counted_or_no_overhead_all_of_it_is_unattributed() -> None:
    assert overhead_split(4.5, []) == {"overheadByTeam": {}, "overheadUnattributed": 4.5}
    caused = [GroupOverhead(group="p3", month="2026-04", dollars=2.0, team="research")]
    assert overhead_split(0.0, caused) == {"overheadByTeam": {}, "overheadUnattributed": 0.0}
