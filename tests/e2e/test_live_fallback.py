"""The live view shows the demo's story: us-west-2's launches fail and the capacity is bought in us-east-1.

The demo's scenario on the memory backend (seconds), viewed plain (the recorded view)
and through the rich view on a console that records it.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from squall.local.demo import demo_scenario
from squall.local.live import PlainLiveView, RichLiveView
from squall.local.scenario import Simulation, compile_scenario

pytestmark = pytest.mark.timeout(300)


def run_demo_scenario(view: PlainLiveView | RichLiveView) -> None:
    plan = compile_scenario(demo_scenario(), source="demo")
    result = Simulation(plan, backend="memory", view=view, pace=False).run()
    assert result.ok


def test_the_plain_view_shows_the_failed_launches_and_the_fallback_in_time_order() -> None:
    out = io.StringIO()
    run_demo_scenario(PlainLiveView(out=out, follow_jobs=True))
    lines = out.getvalue().splitlines()
    failed = [i for i, line in enumerate(lines) if "[launch failed]" in line]
    fallback = [i for i, line in enumerate(lines) if "[fallback]" in line]
    assert len(failed) == 1 and len(fallback) == 1, out.getvalue()
    assert re.search(
        r"t\+0:08:\d\d  \[launch failed\] +p3-usw2 \(us-west-2\): 4 launches failed, insufficient p3.8xlarge capacity$",
        lines[failed[0]],
    )
    assert failed[0] < fallback[0]
    text = lines[fallback[0]]
    assert "us-west-2 -> us-east-1, capacity bought in us-east-1 instead" in text
    assert "p3-use1 scaled up to" in text and "p3-usw2 given back to 4" in text
    # the burst then runs in us-east-1
    assert any("gan-dist-1" in line and "Admitted:us-east-1" in line for line in lines[fallback[0] :])


def test_the_rich_view_notes_the_fallback_and_counts_failed_launches_per_region() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    run_demo_scenario(RichLiveView(console=console, title="burst", follow_jobs=True))
    text = out.getvalue()
    last = text[text.rindex("Nodes per region") :]
    assert "failed launches" in last
    assert re.search(r"us-west-2[\s│]+0[\s│]+0[\s│]+0[\s│]+4[\s│]", last), last
    assert "fallback us-west-2 -> us-east-1, capacity bought in us-east-1 instead" in last
    assert "launch failed p3-usw2 (us-west-2): 4 launches failed" in last
