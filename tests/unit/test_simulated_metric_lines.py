"""Simulated trainers print squall-metric lines from a known objective of their parameters."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from squall.core.jobs import Job, JobStatus
from squall.core.metrics import merge, parse_metric_line
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCheckpoints, SimulatedCluster
from squall.local.cluster.metrics import (
    ParameterOptimum,
    SimulatedMetricLines,
    SyntheticObjective,
    trial_parameters,
)
from squall.local.metric_lines import SimulatedFirst, local_metric_lines
from squall.services.metrics import NoMetricLines
from tests.fakes.metric_lines import FakeMetricLines
from tests.job_records import job_record
from tests.unit.local.sim import CPU_NODE, NS, job_manifest, only_pod

pytestmark = pytest.mark.timeout(20)

OBJECTIVE = SyntheticObjective(
    parameters={
        "lr": ParameterOptimum(optimum=0.01, width=1.0, log=True),
        "dropout": ParameterOptimum(optimum=0.2, width=0.2),
        "optimizer": ParameterOptimum(optimum="adam", penalty=1.5),
    },
    steps=1000,
    log_every=100,
    eval_every=200,
    noise=0.0,
)


def trial(job_id: str, clock: VirtualClock, *, parent: str = "sweep-1", **params: object) -> Job:
    return job_record(
        job_id,
        status=JobStatus.RUNNING,
        reason="Started",
        at=clock.now(),
        parent_id=parent,
        spec={"name": "mnist", "trialParameters": params},
    )


def running(
    clock: VirtualClock, job_id: str, *, run_for: timedelta, checkpoints: SimulatedCheckpoints | None = None
) -> SimulatedCluster:
    cluster = SimulatedCluster(clock=clock, checkpoints=checkpoints)
    cluster.add_node(name="n1", allocatable=CPU_NODE)
    cluster.set_behaviour(job_id, run_for=run_for, checkpoint_every=timedelta(minutes=10))
    cluster.create(job_manifest(job_id, deadline=None))
    cluster.advance()
    assert only_pod(cluster, job_id)["status"]["phase"] == "Running"
    return cluster


# ---- the objective -------------------------------------------------------------------------


def test_quality_is_best_at_the_optimum_and_falls_with_each_parameters_distance() -> None:
    at_optimum = OBJECTIVE.quality({"lr": 0.01, "dropout": 0.2, "optimizer": "adam"})
    one_width_off = OBJECTIVE.quality({"lr": 0.01 * math.e, "dropout": 0.2, "optimizer": "adam"})
    wrong_category = OBJECTIVE.quality({"lr": 0.01, "dropout": 0.2, "optimizer": "sgd"})

    assert at_optimum == pytest.approx(OBJECTIVE.best)
    assert one_width_off == pytest.approx(0.05 + 0.9 * math.exp(-0.5))
    assert wrong_category == pytest.approx(0.05 + 0.9 * math.exp(-(1.5**2) / 2))
    # A value that is no number where a number is expected is far off, never an error.
    assert OBJECTIVE.quality({"lr": "fast", "dropout": -1}) < 0.1
    assert OBJECTIVE.quality({}) == pytest.approx(OBJECTIVE.best)  # parameters it does not know


def test_the_score_rises_towards_the_quality_and_noise_is_seeded_per_job_and_step() -> None:
    noisy = SyntheticObjective(parameters=OBJECTIVE.parameters, noise=0.02, seed=7)
    params = {"lr": 0.003, "dropout": 0.3, "optimizer": "adam"}

    curve = [OBJECTIVE.curve(params, step) for step in (0, 100, 500, 1000)]

    assert curve == sorted(curve) and curve[0] == 0 and curve[-1] < OBJECTIVE.quality(params)
    assert noisy.value(params, 500, key="a") == noisy.value(params, 500, key="a")
    assert noisy.value(params, 500, key="a") != noisy.value(params, 500, key="b")
    minimized = SyntheticObjective(parameters=OBJECTIVE.parameters, goal="minimize", noise=0.0)
    assert minimized.value(params, 500, key="a") == pytest.approx(1 - OBJECTIVE.curve(params, 500))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"steps": 0}, "steps must be positive"),
        ({"floor": 0.9, "best": 0.5}, "floor <= best"),
        ({"goal": "up"}, "allowed are maximize, minimize"),
    ],
)
def test_a_bad_objective_names_its_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SyntheticObjective(**fields)  # type: ignore[arg-type]


def test_a_log_parameter_needs_a_positive_optimum() -> None:
    with pytest.raises(ValueError, match="optimum must be positive with log"):
        ParameterOptimum(optimum=0.0, log=True)


def test_logged_steps_every_log_every_and_the_last_one() -> None:
    odd = SyntheticObjective(steps=250, log_every=100, eval_every=100)

    assert list(odd.logged_steps(after=-1, upto=250)) == [100, 200, 250]
    assert list(odd.logged_steps(after=200, upto=250)) == [250]
    assert list(odd.logged_steps(after=250, upto=250)) == []
    assert list(odd.logged_steps(after=-1, upto=99)) == []


# ---- the reader over a simulated cluster ------------------------------------------------------


def test_a_running_trial_prints_the_lines_its_steps_so_far_hold_and_they_parse() -> None:
    clock = VirtualClock()
    cluster = running(clock, "sweep-1-t000", run_for=timedelta(hours=1))
    reader = SimulatedMetricLines({"local": cluster})
    reader.set_objective("sweep-1", OBJECTIVE)  # every trial of the sweep
    job = trial("sweep-1-t000", clock, lr=0.01, dropout=0.2, optimizer="adam")
    # given it ran 42% of its run time: steps 0..420 of 1000
    clock.advance(timedelta(minutes=25, seconds=12))
    cluster.advance()

    page = reader.read(job, cursor=None, limit=100)

    assert [parse_metric_line(line).step for line in page.lines] == [100, 200, 300, 400]  # type: ignore[union-attr]
    assert page.cursor == "400"
    metrics = merge(None, page.lines, cursor=page.cursor)
    assert metrics.ignored == 0
    score = metrics.get("eval/score")
    assert score is not None and [p.step for p in score.history] == [200, 400]
    assert score.last.value == pytest.approx(OBJECTIVE.curve(trial_parameters(job), 400), abs=1e-5)
    # and nothing new until it goes further
    assert reader.read(job, cursor=page.cursor, limit=100).lines == ()


def test_a_page_is_at_most_limit_lines_and_the_cursor_resumes_after_them() -> None:
    clock = VirtualClock()
    cluster = running(clock, "sweep-1-t001", run_for=timedelta(hours=1))
    reader = SimulatedMetricLines({"local": cluster})
    reader.set_objective("sweep-1", OBJECTIVE)
    job = trial("sweep-1-t001", clock, lr=0.1)
    clock.advance(timedelta(hours=2))  # done: every step up to 1000
    cluster.advance()
    assert only_pod(cluster, "sweep-1-t001")["status"]["phase"] == "Succeeded"

    first = reader.read(job, cursor=None, limit=3)
    rest = reader.read(job, cursor=first.cursor, limit=100)

    steps = [parse_metric_line(line).step for line in first.lines + rest.lines]  # type: ignore[union-attr]
    assert len(first.lines) == 3 and steps == list(range(100, 1001, 100))
    assert "eval/score=" in rest.lines[-1]  # the last step is always evaluated
    assert reader.read(job, cursor=None, limit=0).lines == ()


def test_a_run_resumed_from_its_checkpoint_goes_on_from_its_steps() -> None:
    clock = VirtualClock()
    checkpoints = SimulatedCheckpoints(clock)
    cluster = running(clock, "sweep-1-t002", run_for=timedelta(minutes=100), checkpoints=checkpoints)
    reader = SimulatedMetricLines({"local": cluster})
    reader.set_objective("sweep-1", OBJECTIVE)
    job = trial("sweep-1-t002", clock)
    # given 35 minutes (a checkpoint at 30), then preempted: its objects deleted
    clock.advance(timedelta(minutes=35))
    cluster.advance()
    before = reader.read(job, cursor=None, limit=100)
    cluster.delete_job_objects(namespace=NS, job_id="sweep-1-t002")
    cluster.advance()
    assert before.cursor == "300"
    # when it runs again elsewhere, from its checkpoint at 30 minutes, for 20 more minutes
    other = running(clock, "sweep-1-t002", run_for=timedelta(minutes=100), checkpoints=checkpoints)
    reader = SimulatedMetricLines({"a": cluster, "b": other})
    reader.set_objective("sweep-1", OBJECTIVE)
    clock.advance(timedelta(minutes=20))
    other.advance()

    after = reader.read(job, cursor=before.cursor, limit=100)

    assert [parse_metric_line(line).step for line in after.lines] == [400, 500]  # type: ignore[union-attr]


def test_a_job_without_an_objective_or_with_garbage_prints_nothing_and_never_raises() -> None:
    clock = VirtualClock()
    cluster = running(clock, "plain", run_for=timedelta(minutes=10))
    reader = SimulatedMetricLines({"local": cluster})
    clock.advance(timedelta(minutes=5))
    cluster.advance()
    plain = job_record("plain", status=JobStatus.RUNNING, reason="Started", at=clock.now())

    assert reader.read(plain, cursor=None, limit=10).lines == ()
    # With a default objective, any job reports; a cursor it did not write starts from the start.
    reader.default = OBJECTIVE
    garbage = job_record(
        "plain", status=JobStatus.RUNNING, reason="Started", at=clock.now(), spec={"trialParameters": [1]}
    )
    page = reader.read(garbage, cursor="not-a-step" * 1000, limit=10)
    assert [parse_metric_line(line).step for line in page.lines] == [100, 200, 300, 400, 500]  # type: ignore[union-attr]
    assert trial_parameters(garbage) == {}


def test_median_stopping_sees_trials_ordered_by_their_parameters_at_a_given_step() -> None:
    # The point of the objective: at step N the better parameters lead, before the end.
    params = [{"lr": lr} for lr in (0.01, 0.03, 0.1, 0.3)]
    at_300 = [OBJECTIVE.curve(p, 300) for p in params]
    at_end = [OBJECTIVE.curve(p, 1000) for p in params]

    assert at_300 == sorted(at_300, reverse=True) and at_end == sorted(at_end, reverse=True)


def test_the_local_runtime_reads_simulated_lines_for_jobs_with_an_objective_and_logs_for_the_rest() -> None:
    clock = VirtualClock()
    cluster = running(clock, "sweep-1-t000", run_for=timedelta(hours=1))
    simulated = SimulatedMetricLines({"local": cluster})
    simulated.set_objective("sweep-1", OBJECTIVE)
    logged = FakeMetricLines()
    logged.print("real-pod-job", "squall-metric eval/score=0.5 step=10")
    lines = local_metric_lines(real_pods=False, resources=None, clusters={}, simulated=simulated)
    both = SimulatedFirst(simulated=simulated, logged=logged)
    clock.advance(timedelta(minutes=30))
    cluster.advance()
    a_trial = trial("sweep-1-t000", clock)
    a_real_job = job_record("real-pod-job", status=JobStatus.RUNNING, reason="Started", at=clock.now())

    assert len(lines.read(a_trial, cursor=None, limit=100).lines) == 5  # steps 100..500
    assert lines.read(a_real_job, cursor=None, limit=100).lines == ()  # no log group: nothing
    assert both.read(a_real_job, cursor=None, limit=100).lines == ("squall-metric eval/score=0.5 step=10",)
    assert logged.read_ids() == ["real-pod-job"]  # the trial's lines were never asked of the logs
    assert isinstance(local_metric_lines(real_pods=False, resources=None, clusters={}), NoMetricLines)
