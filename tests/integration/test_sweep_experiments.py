"""Sweeps with an objective, run by reconcile (the job store on moto, the simulated cluster):
median stopping frees a trial's slot and costs it as any finished run, the best trial is
recorded, tpe chooses a waiting trial's parameters once, when its slot comes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from squall.adapters.aws.cost_ledger import DynamoCostLedger
from squall.adapters.aws.job_store import DynamoJobStore
from squall.core.jobs import JobStatus, Reason
from squall.core.spec import load_spec
from squall.local.aws import create_table
from squall.services.metrics import MetricsCollector
from squall.services.sweeps import SweepCheck
from tests.fakes.metric_lines import FakeMetricLines
from tests.integration.conftest import World
from tests.integration.test_cost_ledger_reconcile import count_costs, spot_group
from tests.integration.test_reconcile import reasons, submit

OBJECTIVE = {"metric": "eval/score", "goal": "maximize"}


def collecting(world: World) -> World:
    """The world with reconcile's metrics collector, reading what `report` prints."""
    world.reconciler.collector = MetricsCollector(store=world.store, lines=FakeMetricLines())
    return world


@pytest.fixture
def world(world: World) -> World:
    return collecting(world)


def report(world: World, job_id: str, *lines: str) -> None:
    """What a job's code prints; reconcile's collector reads it while the job runs."""
    collector = world.reconciler.collector
    assert collector is not None and isinstance(collector.lines, FakeMetricLines)
    collector.lines.print(job_id, *lines)


def job(world: World, job_id: str) -> Any:
    found = world.store.get(job_id)
    assert found is not None
    return found


def early_stopping_sweep(world: World, **sweep: Any) -> None:
    """Five trials, two at a time: t000 and t001 finish at 0.8 and 0.9, then t002 and t003 run
    (t003 reports 0.95; the tests say what t002 reports); t004 waits for a slot."""
    world.add_gpu_nodes(1)
    submit(
        world,
        "es",
        sweep={
            "parameters": {"lr": [1, 2, 3, 4, 5]},
            "maxTrials": 5,
            "parallelism": 2,
            "objective": OBJECTIVE,
            "earlyStopping": {"minSteps": 10, "minTrials": 2},
        }
        | sweep,
    )
    for trial, minutes in (("es-t000", 2), ("es-t001", 2), ("es-t002", 60), ("es-t003", 60), ("es-t004", 60)):
        world.cluster.set_behaviour(trial, run_for=timedelta(minutes=minutes))
    report(world, "es-t000", "squall-metric eval/score=0.8 step=10")
    report(world, "es-t001", "squall-metric eval/score=0.9 step=10")
    report(world, "es-t003", "squall-metric eval/score=0.95 step=10")


def test_a_trial_worse_than_the_median_is_stopped_its_objects_deleted_and_its_slot_reused(
    world: World,
) -> None:
    early_stopping_sweep(world)
    report(world, "es-t002", "squall-metric eval/score=0.1 step=10")

    world.run(minutes=8)

    stopped = job(world, "es-t002")
    assert stopped.status is JobStatus.SUCCEEDED and stopped.reason == Reason.EARLY_STOPPED
    assert world.store.events("es-t002")[-1].message == (
        "eval/score was 0.1 at step 10, worse than the median 0.85 of 2 finished trials at that step"
    )
    assert world.cluster.list_jobs(job_id="es-t002") == []
    # the better one runs on; the waiting one took the freed slot
    assert job(world, "es-t003").status is JobStatus.RUNNING
    assert job(world, "es-t004").reason != Reason.WAITING_FOR_TRIAL_SLOT
    assert job(world, "es-t004").status in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert reasons(world, "es-t002")[-1] == Reason.EARLY_STOPPED and world.metrics.total("JobsSucceeded") >= 3


def test_the_slot_is_given_in_the_same_run_that_stops_the_trial(world: World) -> None:
    early_stopping_sweep(world)
    world.run(minutes=6)
    assert job(world, "es-t002").status is JobStatus.RUNNING
    assert job(world, "es-t004").reason == Reason.WAITING_FOR_TRIAL_SLOT
    report(world, "es-t002", "squall-metric eval/score=0.1 step=10")

    world.reconciler.run()

    assert job(world, "es-t002").reason == Reason.EARLY_STOPPED
    assert job(world, "es-t004").reason == Reason.SUBMITTED


def test_an_early_stopped_trial_is_costed_as_any_finished_run(world: World, jobs_table: Any) -> None:
    ledger = DynamoCostLedger(jobs_table, "jobs")
    count_costs(world, ledger, [spot_group()])
    early_stopping_sweep(world)
    report(world, "es-t002", "squall-metric eval/score=0.1 step=10")

    world.run(minutes=8)

    stopped = job(world, "es-t002")
    assert stopped.reason == Reason.EARLY_STOPPED
    assert stopped.started_at is not None and stopped.finished_at is not None
    hours = (stopped.finished_at - stopped.started_at).total_seconds() / 3600
    assert hours > 0 and stopped.cost == pytest.approx(1.0 * hours, abs=1e-6)  # 1 GPU of a $4/h 4-GPU node
    assert stopped.cost_rate is None
    (row,) = ledger.team_months(since=stopped.submitted_at)
    finished = [job(world, t) for t in ("es-t000", "es-t001", "es-t002")]
    assert row.jobs == 3 and row.dollars == pytest.approx(sum(j.cost for j in finished), abs=1e-6)


def test_without_early_stopping_a_bad_trial_runs_to_its_end(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(
        world,
        "ns",
        sweep={"parameters": {"lr": [1, 2, 3]}, "maxTrials": 3, "parallelism": 3, "objective": OBJECTIVE},
    )
    for trial in ("ns-t000", "ns-t001"):
        world.cluster.set_behaviour(trial, run_for=timedelta(minutes=2))
        report(world, trial, "squall-metric eval/score=0.9 step=10")
    world.cluster.set_behaviour("ns-t002", run_for=timedelta(minutes=30))
    report(world, "ns-t002", "squall-metric eval/score=0.1 step=10")

    world.run(minutes=8)

    assert job(world, "ns-t002").status is JobStatus.RUNNING


def test_the_best_trial_is_recorded_as_it_changes_and_named_when_the_sweep_ends(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(
        world,
        "bt",
        sweep={"parameters": {"lr": [1, 2, 3]}, "maxTrials": 3, "parallelism": 3, "objective": OBJECTIVE},
    )
    for trial in ("bt-t000", "bt-t001", "bt-t002"):
        world.cluster.set_behaviour(trial, run_for=timedelta(minutes=10))
    report(world, "bt-t000", "squall-metric eval/score=0.5 step=100")
    world.run(minutes=3)
    assert job(world, "bt").best_trial == "bt-t000"

    report(world, "bt-t002", "squall-metric eval/score=0.7 step=100")
    report(world, "bt-t001", "squall-metric eval/score=0.6 step=100")
    world.run(minutes=1)
    assert job(world, "bt").best_trial == "bt-t002"
    world.run(minutes=1)  # the same best: nothing more written
    notes = [e for e in world.store.events("bt") if e.reason == Reason.BEST_TRIAL]
    assert [e.message for e in notes] == [
        "best trial bt-t000: eval/score 0.5 at step 100",
        "best trial bt-t002: eval/score 0.7 at step 100",
    ]

    world.run(minutes=10)

    parent = job(world, "bt")
    assert parent.status is JobStatus.SUCCEEDED and parent.best_trial == "bt-t002"
    assert world.store.events("bt")[-1].message == (
        "3/3 trials succeeded; best trial bt-t002: eval/score 0.7 at step 100"
    )


def test_a_sweep_whose_objective_no_trial_reported_says_so_plainly(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "nr", sweep={"parameters": {"lr": [1, 2]}, "maxTrials": 2, "objective": OBJECTIVE})
    for trial in ("nr-t000", "nr-t001"):
        world.cluster.set_behaviour(trial, run_for=timedelta(minutes=2))
        report(world, trial, "squall-metric train/loss=0.2 step=10")

    world.run(minutes=6)

    parent = job(world, "nr")
    assert parent.status is JobStatus.SUCCEEDED and parent.best_trial is None
    assert world.store.events("nr")[-1].message == (
        "2/2 trials succeeded; no trial reported the objective metric eval/score"
    )


# ---- tpe ----------------------------------------------------------------------

TPE = {
    "parameters": {"lr": {"min": 1e-4, "max": 1.0, "log": True}, "layers": {"min": 1, "max": 8}},
    "strategy": "tpe",
    "objective": OBJECTIVE,
    "maxTrials": 4,
    "parallelism": 2,
    "seed": 7,
}


def tpe_world(world: World) -> None:
    world.add_gpu_nodes(1)
    submit(world, "tp", sweep=TPE)
    for number in range(4):
        world.cluster.set_behaviour(f"tp-t{number:03d}", run_for=timedelta(minutes=2))


def parameters(world: World, trial_id: str) -> Any:
    return load_spec(job(world, trial_id).spec).trial_parameters


def test_tpe_chooses_the_first_trials_at_intake_and_the_rest_when_their_slots_come(world: World) -> None:
    tpe_world(world)
    first = [parameters(world, f"tp-t{n:03d}") for n in range(4)]
    assert first[0] is not None and first[1] is not None and first[0] != first[1]
    assert first[2:] == [None, None]
    assert load_spec(job(world, "tp-t000").spec).args == [
        f"--lr={first[0]['lr']}",
        f"--layers={first[0]['layers']}",
    ]
    report(world, "tp-t000", "squall-metric eval/score=0.3 step=10")
    report(world, "tp-t001", "squall-metric eval/score=0.6 step=10")

    world.run(minutes=5)

    chosen = parameters(world, "tp-t002")
    assert chosen is not None and set(chosen) == {"lr", "layers"}
    assert 1e-4 <= chosen["lr"] <= 1.0 and isinstance(chosen["layers"], int) and 1 <= chosen["layers"] <= 8
    assert load_spec(job(world, "tp-t002").spec).args == [
        f"--lr={chosen['lr']}",
        f"--layers={chosen['layers']}",
    ]
    assert any("parameters lr=" in e.message for e in world.store.events("tp-t002"))
    # the pods run with them
    (pod,) = world.cluster.list_pods(job_id="tp-t002")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["SQUALL_PARAM_LR"] == str(chosen["lr"])


def test_the_same_seed_and_history_choose_the_same_parameters(jobs_table: Any) -> None:
    chosen = []
    for table in ("jobs-a", "jobs-b"):
        create_table(jobs_table, table)
        world = collecting(World.over(DynamoJobStore(jobs_table, table)))
        tpe_world(world)
        report(world, "tp-t000", "squall-metric eval/score=0.3 step=10")
        report(world, "tp-t001", "squall-metric eval/score=0.6 step=10")
        world.run(minutes=5)
        chosen.append([parameters(world, f"tp-t{n:03d}") for n in range(4)])

    assert chosen[0] == chosen[1]
    assert None not in chosen[0]


def test_a_retried_run_neither_chooses_nor_starts_a_trial_twice(world: World) -> None:
    tpe_world(world)
    stale = job(world, "tp-t003")  # as a run that read it while it waited, and was retried later, has it
    assert stale.reason == Reason.WAITING_FOR_TRIAL_SLOT
    report(world, "tp-t000", "squall-metric eval/score=0.3 step=10")
    world.run(minutes=8)
    started = job(world, "tp-t003")
    chosen = parameters(world, "tp-t003")
    assert started.reason != Reason.WAITING_FOR_TRIAL_SLOT and chosen is not None
    parent = job(world, "tp")
    trials = [job(world, t) for t in parent.trial_ids[:3]] + [stale]
    check = SweepCheck(
        store=world.store,
        intake=world.new_intake(),
        clock=world.clock,
        record=lambda *args, **changes: None,
        isolated=lambda _job, step: step() is None,
    )

    check._start_trial(stale, sweep=load_spec(parent.spec).sweep, trials=trials, index=3)

    assert job(world, "tp-t003").version == started.version
    assert parameters(world, "tp-t003") == chosen
    assert check.intake.waiting == []  # no scale check asked for it again


def test_a_redelivered_tpe_sweep_keeps_its_first_trials_parameters(world: World) -> None:
    tpe_world(world)
    first = [parameters(world, f"tp-t{n:03d}") for n in range(2)]

    submit(world, "tp", sweep=TPE)  # the same message again

    assert [parameters(world, f"tp-t{n:03d}") for n in range(2)] == first
    assert [job(world, f"tp-t{n:03d}").version for n in range(2)] == [1, 1]
