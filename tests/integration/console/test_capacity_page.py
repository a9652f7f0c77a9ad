"""The capacity page over the local runtime: a burst that us-west-2 cannot take is bought in
us-east-1, and the page shows both regions, the nodes chart, the scale-ups and the fallback."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from squall.cli import deployment
from squall.local.fleet import RegionCapacity
from squall.local.runtime import LocalRuntime
from tests.e2e.helpers_runtime import GROUPS, gan_job
from tests.integration.console.conftest import Console, console_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def short_of_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    """The console over a runtime whose us-west-2 has no p3.8xlarge, run where cdk.json names the groups."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"nodeGroups": GROUPS}}))
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    none_in_usw2 = {"us-west-2": RegionCapacity(instances={"p3.8xlarge": 0})}
    with LocalRuntime.start(node_groups=GROUPS, capacity=none_in_usw2) as runtime:
        monkeypatch.setenv("SQUALL_TABLE_NAME", runtime.resources.table_name)
        monkeypatch.setenv("SQUALL_JOBS_QUEUE_URL", runtime.resources.jobs_queue_url)
        yield console_for(runtime)


def burst(console: Console) -> None:
    """Two 4-GPU jobs, run until both are admitted (in us-east-1, the fallback)."""
    for job_id in ("gan-1", "gan-2"):
        console.runtime.cluster.set_behaviour(job_id, run_for=timedelta(hours=2))
        console.runtime.send(gan_job(job_id))
    for _ in range(20):
        console.step(30)


def test_a_burst_that_falls_back_shows_regions_chart_scale_ups_and_the_fallback(
    short_of_gpus: Console,
) -> None:
    burst(short_of_gpus)
    page = short_of_gpus.browser.text("/capacity?hours=2")
    # both regions, named by the configuration's groups
    assert "us-west-2" in page and "us-east-1" in page
    # the nodes chart: one polyline per region, the us-east-1 one drawn from 0 to 2 nodes
    assert "Nodes per region and cluster" in page
    assert len(re.findall(r"<polyline points=\"[-0-9., ]+\"", page)) >= 2
    assert "<title>us-east-1</title>" in page
    nodes_chart = page[
        page.index('aria-label="nodes per region and cluster"') : page.index("GPUs per region and cluster")
    ]
    # us-west-2: 0, asked 2, given back to 0; us-east-1: 0 then 2 (the y axis's 0 is at 218, 2 at 10)
    assert re.search(r'points="56.0,218.0 56.0,10.0 [^"]*,218.0"[^>]*><title>us-west-2</title>', nodes_chart)
    assert re.search(
        r'points="[0-9.]+,218.0 [0-9.]+,10.0 [^"]*628.0,10.0"[^>]*><title>us-east-1</title>', nodes_chart
    )
    # GPUs per node from cdk.json: 2 nodes of 4 GPUs, the top of the GPU chart's axis
    gpus_chart = page[page.index('aria-label="GPUs per region and cluster"') : page.index("Scale-ups")]
    assert 'fill="#57606a">8</text>' in gpus_chart and "<title>us-east-1</title>" in gpus_chart
    # the scale-ups, with their reasons: p3-usw2 first, then p3-use1 instead
    scale_ups = page[page.index("capacity-scale-ups") : page.index("Fallbacks")]
    assert "p3-usw2" in scale_ups and "p3-use1" in scale_ups and "0 → 2" in scale_ups
    assert "2 pending pod(s) need 2 new p3.8xlarge node(s)" in scale_ups
    # the fallback: tried p3-usw2 in us-west-2, bought p3-use1 in us-east-1, because of capacity
    fallbacks = page[page.index("capacity-fallbacks") :]
    row = re.search(
        r"<tr><td>[^<]+</td><td>p3-usw2 \(us-west-2\)</td><td>p3-use1 \(us-east-1\)</td><td>([^<]+)</td>",
        fallbacks,
    )
    assert row is not None and "insufficient capacity" in row.group(1)
    # both jobs were admitted in us-east-1
    admitted = page[page.index("capacity-admitted") :]
    assert re.search(r"<td>us-east-1</td><td class=\"number\">2</td><td class=\"number\">8</td>", admitted)


def test_the_window_is_validated(short_of_gpus: Console) -> None:
    for bad in ("0", "x", "-3", "1.5", "100000"):
        response = short_of_gpus.browser.get(f"/capacity?hours={bad}")
        assert response.status_code == 400, bad
        assert "hours: expected a whole number of hours from 1 to 336" in response.get_data(as_text=True)


def test_no_record_yet_says_so(short_of_gpus: Console) -> None:
    page = short_of_gpus.browser.text("/capacity")
    assert "0 decision records" in page and "No scale-up in this window." in page
    assert "<polyline" not in page


def test_a_hostile_group_and_reason_are_shown_as_text(short_of_gpus: Console) -> None:
    hostile = "<script>alert(1)</script>"
    deployment.scale_state().record_decision(
        at=short_of_gpus.runtime.clock.now(),
        trigger="schedule",
        dry_run=False,
        plan={
            "scaleUp": [
                {"group": hostile, "from": 0, "to": 1, "reasons": [f"spilled over from {hostile}: {hostile}"]}
            ],
            "admission": {"admitted": [{"job": "j", "region": hostile, "gpus": 1}], "waitingTotal": 0},
            "unreachableClusters": [hostile],
        },
        acted={"scaledUp": [{"group": hostile, "to": 1}]},
    )
    page = short_of_gpus.browser.text("/capacity")
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;") >= 5  # group, reason, fallback's tried and why, site, cluster
