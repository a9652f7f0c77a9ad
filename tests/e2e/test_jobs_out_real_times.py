"""--jobs-out and the replay summary use a job's real start and end, not when reconcile noticed them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from squall.cli import main
from squall.local.summary import percentile
from tests.e2e.test_jobs_out import GROUP, read_csv, summary_of


@pytest.mark.timeout(120)
def test_rows_run_exactly_their_run_time_even_a_run_shorter_than_a_reconcile_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a trace whose second job runs 20 s, less than a reconcile period
    (tmp_path / "trace.csv").write_text(
        "submit_s,team,gpus,replicas,run_s,priority\n0,research,1,1,600,90\n30,research,1,1,20,\n45,vision,2,2,300,\n"
    )
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"nodeGroups": [GROUP], "policy": {"idleThreshold": "PT5M"}}))
    out = tmp_path / "jobs.csv"
    # when it is replayed
    code = main(
        [
            "simulate",
            "--trace",
            str(tmp_path / "trace.csv"),
            "--groups",
            str(groups),
            "--json",
            "--jobs-out",
            str(out),
        ]
    )
    summary = summary_of(capsys.readouterr().out)
    assert code == 0, summary
    # then each row's run is its run time to the second: its containers' start to its Job's end
    run_s = {"research-000002": 600, "research-000003": 20, "vision-000004": 300}
    rows = read_csv(out)
    assert [r["id"] for r in rows] == list(run_s)
    for row in rows:
        assert row["state"] == "SUCCEEDED" and row["started_s"], row
        assert float(row["finished_s"]) - float(row["started_s"]) == run_s[row["id"]], row
    # and the summary's waits are the rows' start minus submission
    waits = [float(r["started_s"]) - float(r["submitted_s"]) for r in rows]
    assert summary["queueWaitSeconds"]["max"] == max(waits)
    assert summary["queueWaitSeconds"]["p50"] == percentile(waits, 0.5)
