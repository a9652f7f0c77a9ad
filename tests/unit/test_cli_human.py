"""What a newcomer reads: one way to write a time, counts with their nouns, CPU jobs in CPU terms,
`squall list`'s columns, and why `squall logs --follow` of a queued job prints nothing yet."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from squall.cli import deployment, main
from squall.cli.follow.logs import LogFollower, print_logs
from squall.cli.follow.watch import event_line, watch_job
from squall.cli.human import age, job_needs, moment, moment_text
from squall.core.jobs import JobEvent, JobStatus, new_job, note, transition
from squall.core.spec import parse_spec, recorded
from squall.local.memory import InMemoryJobStore
from squall.local.model_service_store import InMemoryModelServiceStore
from squall.planner.admission import Waiting
from squall.planner.text import amounts, counted
from tests.unit.test_cli_hostile_output import SteppingClock, Streams

START = datetime(2026, 12, 2, 8, 13, 21, 345368, tzinfo=UTC)
TEAMS = {"research": "team-research"}
REGISTRY = "registry.example.com/squall"


def spec(**fields: object) -> dict[str, object]:
    data = {"name": "gan", "team": "research", "image": f"{REGISTRY}/tf-trainer:1.0"} | fields
    return recorded(parse_spec(data, teams=TEAMS, registries=[REGISTRY]))


def test_one_format_for_people_iso_8601_in_json() -> None:
    assert moment(START) == "2026-12-02 08:13:21 UTC"
    assert moment(START, milliseconds=True) == "2026-12-02 08:13:21.345 UTC"
    # another zone is written in UTC; a record's ISO text is read back the same way
    assert (
        moment(datetime(2026, 12, 2, 10, 13, 21, tzinfo=timezone(timedelta(hours=2))))
        == "2026-12-02 08:13:21 UTC"
    )
    assert moment_text("2026-12-02T08:13:21.345368+00:00") == "2026-12-02 08:13:21 UTC"
    assert moment_text("not a time\x1b[2J") == "not a time\\x1b[2J"
    event = JobEvent(
        job_id="gan-1",
        version=2,
        at=START,
        status=JobStatus.QUEUED,
        previous=JobStatus.QUEUED,
        reason="Queued",
    )
    assert event_line(event).startswith("2026-12-02 08:13:21 UTC QUEUED")


def test_ages_and_counts() -> None:
    assert [age(timedelta(seconds=s)) for s in (-5, 45, 60 * 12, 3600 * 5, 3600 * 47, 86400 * 3)] == [
        "0s",
        "45s",
        "12m",
        "5h",
        "47h",
        "3d",
    ]
    assert counted(1, "node") == "1 node"
    assert counted(3, "node") == "3 nodes"
    assert counted(0, "GPU") == "0 GPUs"
    assert counted(2, "copy", "copies") == "2 copies"


def test_a_cpu_job_is_described_by_its_cpus_and_memory() -> None:
    assert amounts(gpus=8, cpu_millis=4000, memory_bytes=2**34) == "8 GPUs"
    assert amounts(gpus=0, cpu_millis=4000, memory_bytes=2**34) == "4 CPUs and 16Gi of memory"
    assert amounts(gpus=0, cpu_millis=1000, memory_bytes=2**29) == "1 CPU and 512Mi of memory"
    assert amounts(gpus=0, cpu_millis=500, memory_bytes=2**30) == "500m CPU and 1Gi of memory"
    # the queue's message, as the scale check writes it on the job's record
    waiting = Waiting(
        job_id="etl-1",
        team="research",
        priority=0,
        gpus=0,
        replicas=2,
        position=3,
        team_position=1,
        reason="Queued",
        cpu_millis=4000,
        memory_bytes=2**34,
    )
    assert "needs 4 CPUs and 16Gi of memory over 2 replicas in one region" in waiting.message
    # and the job's own description, from its recorded spec
    job, _ = new_job(
        job_id="etl-1",
        name="etl",
        team="research",
        namespace="team-research",
        at=START,
        spec=spec(replicas={"worker": 2}, resources={"cpu": "2", "memory": "8Gi"}),
        replicas=2,
    )
    assert job_needs(job) == "4 CPUs and 16Gi of memory"


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryJobStore]:
    store = InMemoryJobStore()
    monkeypatch.setattr(deployment, "job_store", lambda: store)
    yield store


def test_list_has_a_header_with_team_and_age(
    jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    for job_id, team, ago in (
        ("gan-1", "research", timedelta(hours=3, minutes=30)),
        ("v-2", "vision", timedelta()),
    ):
        job, event = new_job(job_id=job_id, name="gan", team=team, namespace=f"team-{team}", at=now - ago)
        jobs.create(job, event)

    assert main(["list"]) == 0

    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "TEAM", "STATUS", "AGE", "REASON"]
    cells = {row.split()[0]: row.split() for row in rows}
    assert cells["gan-1"] == ["gan-1", "research", "QUEUED", "3h", "Submitted"]
    assert cells["v-2"][1:3] == ["vision", "QUEUED"]
    assert header.index("TEAM") == rows[0].index(rows[0].split()[1])  # the columns line up


def test_describe_and_watch_describe_a_cpu_job_in_cpus(
    jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job, event = new_job(
        job_id="etl-1",
        name="etl",
        team="research",
        namespace="team-research",
        at=START,
        spec=spec(replicas={"worker": 1}, resources={"cpu": "2", "memory": "8Gi"}),
        replicas=1,
    )
    jobs.create(job, event)
    monkeypatch.setattr(deployment, "service_store", InMemoryModelServiceStore)
    monkeypatch.setattr(deployment, "scale_state", lambda: _NoDecision())

    assert main(["describe", "etl-1"]) == 0
    out = capsys.readouterr().out
    assert "team research, namespace team-research, 2 CPUs and 8Gi of memory, retries 0/0" in out
    assert "  2026-12-02 08:13:21 UTC  QUEUED     Submitted" in out
    assert "GPU" not in out

    job, event = transition(job, to=JobStatus.CANCELLED, reason="CancelRequested", at=START)
    jobs.save(job, event)
    shown = io.StringIO()
    watch_job("etl-1", store=jobs, clock=SteppingClock(), out=shown, live=False)
    assert "1 replica (worker-0), 2 CPUs and 8Gi of memory" in shown.getvalue()


class _NoDecision:
    def latest_decision(self, *, now: datetime) -> None:
        return None


def test_logs_follow_says_why_a_queued_job_has_no_lines_once_per_change() -> None:
    # given a queued job: noted twice with the same place, then moved up, admitted and started
    store = InMemoryJobStore()
    job, event = new_job(job_id="gan-1", name="gan", team="research", namespace="team-research", at=START)
    store.create(job, event)
    state = {"job": job}

    def noted(reason: str, message: str) -> None:
        state["job"], event = note(state["job"], reason=reason, at=START, message=message)
        store.save(state["job"], event)

    def moved(to: JobStatus, reason: str) -> None:
        state["job"], event = transition(state["job"], to=to, reason=reason, at=START)
        store.save(state["job"], event)

    noted("Queued", "2nd in research, 2nd overall; needs 8 GPUs")
    clock = SteppingClock(
        steps=[
            lambda: noted("Queued", "2nd in research, 2nd overall; needs 8 GPUs"),  # the same again
            lambda: noted("Queued", "1st in research, 1st overall; needs 8 GPUs"),
            lambda: noted("Admitted:us-west-2", "admitted whole in us-west-2"),
            lambda: moved(JobStatus.RUNNING, "Started"),
            lambda: moved(JobStatus.SUCCEEDED, "Completed"),
        ]
    )
    follower = LogFollower(source=Streams(), job_id="gan-1", namespace="team-research", replicas=("chief-0",))
    said: list[str] = []

    # when
    print_logs(follower, out=io.StringIO(), follow=True, store=store, clock=clock, on_status=said.append)

    # then: each change once, then the state it left the queue for
    assert said == [
        "job gan-1 is QUEUED (Queued: 2nd in research, 2nd overall; needs 8 GPUs): its lines follow once it runs",
        "job gan-1 is QUEUED (Queued: 1st in research, 1st overall; needs 8 GPUs): its lines follow once it runs",
        "job gan-1 is QUEUED (Admitted:us-west-2: admitted whole in us-west-2): its lines follow once it runs",
        "job gan-1 is RUNNING (Started)",
    ]


def test_watch_counts_the_events_it_leaves_out_with_their_noun() -> None:
    store = InMemoryJobStore()
    job, event = new_job(job_id="gan-1", name="gan", team="research", namespace="team-research", at=START)
    store.create(job, event)
    for reason in ("Queued", "CancelRequested"):
        to = JobStatus.CANCELLED if reason == "CancelRequested" else JobStatus.QUEUED
        job, event = transition(job, to=to, reason=reason, at=START)
        store.save(job, event)
    shown = io.StringIO()

    watch_job("gan-1", store=store, clock=SteppingClock(), out=shown, live=False, events_shown=2)

    assert shown.getvalue().splitlines()[1] == "  (1 earlier event: squall describe gan-1)"
