"""What a run reports per job (`--jobs-out`) and per team, from plain records."""

from __future__ import annotations

import csv
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from squall.core.jobs import Job, JobEvent, JobStatus, new_job, note, transition
from squall.core.telemetry import RecordingMetrics
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.summary import (
    JOBS_CSV_COLUMNS,
    Invariants,
    JobRow,
    JobsOutError,
    Recorder,
    build_summary,
    check_jobs_out,
    gangs_released,
    job_rows,
    queue_waits_by_team,
    write_jobs_csv,
)

CLOCK = VirtualClock()
T0 = CLOCK.now()
HEADER = (
    "id,team,priority,gpus,replicas,submitted_s,started_s,finished_s,state,reason,cluster,"
    "starts_by_s,likely_start_s,cost"
)


def record(
    job_id: str,
    *,
    team: str = "research",
    submitted: float = 0,
    started: float | None = None,
    finished: float | None = None,
    status: JobStatus = JobStatus.SUCCEEDED,
    reason: str = "Completed",
    spec: dict[str, object] | None = None,
    gpus: int = 1,
    replicas: int = 1,
    trial_ids: tuple[str, ...] = (),
) -> Job:
    job, _ = new_job(job_id=job_id, name="j", team=team, namespace=f"team-{team}",
                     at=T0 + timedelta(seconds=submitted), spec={"priority": 50} if spec is None else spec,
                     gpus=gpus, replicas=replicas, trial_ids=trial_ids)  # fmt: skip
    if started is not None:
        job, _ = transition(job, to=JobStatus.RUNNING, reason="Started", at=T0 + timedelta(seconds=started))
    if finished is not None:
        job, _ = transition(job, to=status, reason=reason, at=T0 + timedelta(seconds=finished))
    return job


# ---- rows ------------------------------------------------------------------------------------------


def test_the_header_is_exactly_the_documented_one() -> None:
    assert ",".join(JOBS_CSV_COLUMNS) == HEADER


def test_a_row_per_record_in_submission_order_with_times_from_the_start() -> None:
    records = [
        replace(record("late", submitted=90, started=120.5, finished=3600.25, gpus=32, replicas=4,
                       spec={"priority": 90}), cluster="gpu-east", region="us-east-1"),
        record("queued", submitted=30, status=JobStatus.QUEUED),
        replace(record("first", submitted=30, started=60, finished=400, status=JobStatus.FAILED,
                       reason="DeadlineExceeded"), cluster="gpu-west", region="us-west-2"),
    ]  # fmt: skip
    rows = job_rows(records, start=T0)
    # the cluster column: where admission placed the job; empty while it waits in the queue
    assert [r.cells() for r in rows] == [
        ["first", "research", "50", "1", "1", "30", "60", "400", "FAILED", "DeadlineExceeded", "gpu-west",
         "", "", ""],
        ["queued", "research", "50", "1", "1", "30", "", "", "QUEUED", "Submitted", "", "", "", ""],
        ["late", "research", "90", "32", "4", "90", "120.5", "3600.25", "SUCCEEDED", "Completed", "gpu-east",
         "", "", ""],
    ]  # fmt: skip


def test_started_is_the_first_time_running_and_finished_empty_until_final() -> None:
    # given a job that ran, lost its node and waits again
    job = record("again", submitted=0, started=100)
    job, _ = transition(job, to=JobStatus.QUEUED, reason="NodeLost:retry 1/2", at=T0 + timedelta(seconds=500))
    job, _ = transition(job, to=JobStatus.RUNNING, reason="Started", at=T0 + timedelta(seconds=900))
    (row,) = job_rows([job], start=T0)
    assert (row.started_s, row.finished_s, row.state) == (100.0, None, "RUNNING")


def test_a_sweep_parent_has_one_row_with_no_gpus_and_its_trials_their_own() -> None:
    parent = record("hp", gpus=0, replicas=0, trial_ids=("hp-t000", "hp-t001"), started=10, finished=500,
                    reason="TrialsFinished")  # fmt: skip
    trials = [record(f"hp-t00{n}", gpus=2, started=10, finished=500) for n in range(2)]
    rows = job_rows([parent, *trials], start=T0)
    assert [(r.id, r.gpus, r.replicas) for r in rows] == [("hp", 0, 0), ("hp-t000", 2, 1), ("hp-t001", 2, 1)]
    assert sum(r.gpus for r in rows) == 4  # every GPU that ran, counted once


def test_a_record_without_a_valid_priority_leaves_the_cell_empty() -> None:
    rejected = record("rejected-1", spec={"priority": True}, status=JobStatus.REJECTED, gpus=0, replicas=0)
    (row,) = job_rows([rejected], start=T0)
    assert row.priority is None and row.cells()[2] == ""


def test_the_csv_quotes_what_needs_it_and_reads_back_the_same(tmp_path: Path) -> None:
    row = JobRow(id="a", team="research", priority=50, gpus=8, replicas=2, submitted_s=0.0, started_s=None,
                 finished_s=None, state="QUEUED", reason='Queued: 3rd, "7th"\noverall')  # fmt: skip
    out = tmp_path / "jobs.csv"
    write_jobs_csv(out, [row])
    with out.open(newline="") as f:
        read = list(csv.reader(f))
    assert read == [list(JOBS_CSV_COLUMNS), row.cells()]
    assert out.read_text().splitlines()[0] == HEADER


def test_writing_replaces_the_file_whole_and_leaves_no_temporary_behind(tmp_path: Path) -> None:
    out = tmp_path / "jobs.csv"
    out.write_text("old\n")
    write_jobs_csv(out, job_rows([record("a", started=1, finished=2)], start=T0))
    assert out.read_text().splitlines() == [HEADER, "a,research,50,1,1,0,1,2,SUCCEEDED,Completed,,,,"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.csv"]


def test_no_rows_is_a_file_with_the_header(tmp_path: Path) -> None:
    write_jobs_csv(tmp_path / "jobs.csv", [])
    assert (tmp_path / "jobs.csv").read_bytes() == (HEADER + "\n").encode()


def test_a_path_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    with pytest.raises(JobsOutError, match="is not an existing directory"):
        check_jobs_out(tmp_path / "missing" / "jobs.csv")
    with pytest.raises(JobsOutError, match="is a directory"):
        check_jobs_out(tmp_path)
    with pytest.raises(JobsOutError, match="is a directory"):
        write_jobs_csv(tmp_path, [])
    with pytest.raises(JobsOutError, match="cannot write in"):
        write_jobs_csv(tmp_path / "missing" / "jobs.csv", [])


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only folder")
def test_a_read_only_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(JobsOutError, match="cannot write in"):
            check_jobs_out(folder / "jobs.csv")
    finally:
        folder.chmod(0o700)


# ---- the summary's new keys --------------------------------------------------------------------------


def test_queue_waits_by_team_over_the_records_that_started() -> None:
    records = [
        record("a", team="research", submitted=0, started=10),
        record("b", team="research", submitted=0, started=30),
        record("c", team="research", submitted=0, started=100),
        record("d", team="vision", submitted=50, started=80),
        record("e", team="vision", status=JobStatus.QUEUED),
        record("f", team="idle", status=JobStatus.QUEUED),
        record("hp", team="sweeps", gpus=0, replicas=0, trial_ids=("hp-t000",), started=5),
    ]
    assert queue_waits_by_team(records) == {
        "research": {"p50": 30.0, "p90": 100.0, "p99": 100.0, "max": 100.0},
        "vision": {"p50": 30.0, "p90": 30.0, "p99": 30.0, "max": 30.0},
    }


def test_gangs_released_counts_the_events_of_distributed_jobs() -> None:
    gang = record("gang", replicas=4, gpus=16, finished=None, status=JobStatus.QUEUED)
    history: list[JobEvent] = []
    current = gang
    for reason in ("GangReleased:us-west-2", "WaitingForCapacity", "GangReleased:us-east-1"):
        current, event = note(current, reason=reason, at=T0 + timedelta(seconds=60))
        history.append(event)
    single = record("single")
    read: list[str] = []

    def events(job_id: str) -> list[JobEvent]:
        read.append(job_id)
        return history if job_id == "gang" else []

    assert gangs_released([gang, single], events=events) == 2
    assert read == ["gang"]  # one history read per distributed job, none for single pods


def test_the_summary_keeps_its_keys_and_gains_the_new_ones() -> None:
    clock = VirtualClock()
    recorder = Recorder(clock=clock, cluster=SimulatedCluster(clock=clock), fleet=None, groups=[])
    checks = Invariants(
        lost_jobs=[], duplicate_kubernetes_jobs=0, busy_nodes_terminated=[], hooks_left_open=0
    )
    records = [record("a", started=20), record("b", team="vision", started=40)]
    summary = build_summary(
        jobs=records,
        metrics=RecordingMetrics(clock),
        recorder=recorder,
        fleet=None,
        checks=checks,
        gangs_released=3,
    )
    assert list(summary) == ["jobs", "queueWaitSeconds", "estimates", "gpuHours", "cost", "costs", "peakNodes",
                             "clusters", "scaleUps", "fallbacks", "scaleDowns", "gangsReleased", "drains",
                             "hooksCompleted", "invariants"]  # fmt: skip
    assert summary["gangsReleased"] == 3
    assert summary["clusters"] == {"local": {"peakNodes": 0, "peakGpusBusy": 0}}
    assert list(summary["invariants"]) == ["lostJobs", "duplicateKubernetesJobs", "busyNodesTerminated",
                                           "hooksLeftOpen", "jobsInTwoClusters"]  # fmt: skip
    assert summary["queueWaitSeconds"] == {
        "p50": 20.0,
        "p90": 40.0,
        "p99": 40.0,
        "max": 40.0,
        "byTeam": {"research": {"p50": 20.0, "p90": 20.0, "p99": 20.0, "max": 20.0},
                   "vision": {"p50": 40.0, "p90": 40.0, "p99": 40.0, "max": 40.0}},
    }  # fmt: skip
