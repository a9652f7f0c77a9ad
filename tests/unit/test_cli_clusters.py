"""The `squall` command with more than one cluster: which clusters the shell names, where a
job's logs are (its cluster's log group, in that cluster's region), where `describe`,
`watch` and `list` say it runs, and what `squall list --json` records carry for admission."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from squall.cli import deployment, main
from squall.cli.deployment import ClusterPlace
from squall.cli.errors import CommandError
from squall.cli.follow.watch import watch_job
from squall.core.jobs import Job, JobStatus, new_job, note, transition
from squall.core.spec import parse_spec, recorded
from squall.local.memory import InMemoryJobStore
from tests.unit.planner import test_offline_jobs as offline_jobs
from tests.unit.test_cli_hostile_output import SteppingClock, Streams, hostile_logs

START = datetime(2026, 12, 2, 8, 13, 21, tzinfo=UTC)
TEAMS = {"research": "team-research"}
REGISTRY = "registry.example.com/squall"
TWO = [{"name": "gpu-west", "region": "us-west-2"}, {"name": "gpu-east", "region": "us-east-1"}]


@pytest.fixture(autouse=True)
def no_clusters_named(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (deployment.CLUSTERS_ENV, deployment.CLUSTER_ENV):
        monkeypatch.delenv(name, raising=False)


def two_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(deployment.CLUSTERS_ENV, json.dumps(TWO))


def spec() -> dict[str, Any]:
    data = {
        "name": "gan",
        "team": "research",
        "image": f"{REGISTRY}/tf-trainer:1.0",
        "replicas": {"chief": 1},
    }
    return recorded(parse_spec(data, teams=TEAMS, registries=[REGISTRY]))


def queued(store: InMemoryJobStore, job_id: str = "gan-1") -> Job:
    job, event = new_job(
        job_id=job_id,
        name="gan",
        team="research",
        namespace="team-research",
        at=START,
        spec=spec(),
        replicas=1,
    )
    store.create(job, event)
    return job


def placed(store: InMemoryJobStore, job: Job, cluster: str, region: str, *, at: datetime = START) -> Job:
    """Admitted: the record says where (the scale check writes cluster and region with the reason)."""
    job, event = note(job, reason=f"Admitted:{region}", at=at, message=f"admitted whole in {region}")
    job = dataclasses.replace(job, cluster=cluster, region=region)
    store.save(job, event)
    return job


def moved(store: InMemoryJobStore, job: Job, to: JobStatus, reason: str, *, at: datetime = START) -> Job:
    job, event = transition(job, to=to, reason=reason, at=at)
    store.save(job, event)
    return job


# ---- which clusters the shell names ----


def test_without_squall_clusters_the_one_cluster_is_squall_cluster_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert deployment.clusters() == [ClusterPlace("squall")]
    monkeypatch.setenv(deployment.CLUSTER_ENV, "gpu-training")
    assert deployment.clusters() == [ClusterPlace("gpu-training")]


def test_squall_clusters_names_each_cluster_and_its_region_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    two_clusters(monkeypatch)
    assert deployment.clusters() == [
        ClusterPlace("gpu-west", "us-west-2"),
        ClusterPlace("gpu-east", "us-east-1"),
    ]
    # the old variable may stay set, naming one of them
    monkeypatch.setenv(deployment.CLUSTER_ENV, "gpu-east")
    assert [c.name for c in deployment.clusters()] == ["gpu-west", "gpu-east"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("[{", "SQUALL_CLUSTERS: line 1, column 3: not valid JSON"),
        ("{}", "SQUALL_CLUSTERS: expected a non-empty JSON list"),
        ("[]", "SQUALL_CLUSTERS: expected a non-empty JSON list"),
        ('["gpu-west"]', "SQUALL_CLUSTERS[0]: expected an object with name and region, got a string"),
        ('[{"region": "us-west-2"}]', "SQUALL_CLUSTERS[0].name: expected an EKS cluster name"),
        ('[{"name": "gpu-west", "region": "Oregon"}]', "SQUALL_CLUSTERS[0].region: expected an AWS region"),
        (
            '[{"name": "gpu-west"}]',
            "SQUALL_CLUSTERS[0].region: expected an AWS region such as us-east-1, got null",
        ),
        (json.dumps([TWO[0], TWO[0]]), "SQUALL_CLUSTERS[1].name: cluster gpu-west is listed twice"),
    ],
)
def test_a_squall_clusters_that_cannot_be_used_is_named_with_its_field(
    monkeypatch: pytest.MonkeyPatch, value: str, words: str
) -> None:
    monkeypatch.setenv(deployment.CLUSTERS_ENV, value)
    with pytest.raises(CommandError) as refused:
        deployment.clusters()
    assert str(refused.value).startswith(words)


def test_the_old_variable_naming_another_cluster_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    two_clusters(monkeypatch)
    monkeypatch.setenv(deployment.CLUSTER_ENV, "squall")
    with pytest.raises(
        CommandError, match="SQUALL_CLUSTER_NAME names cluster 'squall', which SQUALL_CLUSTERS"
    ):
        deployment.clusters()


# ---- squall logs: the job's cluster's log group, in its region ----


@dataclasses.dataclass
class LogWorld:
    store: InMemoryJobStore
    clients: list[tuple[str, str | None]]
    groups: list[str]
    source: Streams


@pytest.fixture
def logs_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[LogWorld]:
    """The logs command's store, clients and log group in memory; which client and group it asked for."""
    import squall.adapters.aws.logs as cloudwatch

    world = LogWorld(store=InMemoryJobStore(), clients=[], groups=[], source=hostile_logs())

    def client(service: str, region: str | None = None) -> str:
        world.clients.append((service, region))
        return f"{service} client in {region}"

    def reader(client: str, group: str) -> Streams:
        world.groups.append(group)
        world.source.group = group
        return world.source

    monkeypatch.setattr(deployment, "job_store", lambda: world.store)
    monkeypatch.setattr(deployment, "aws_client", client)
    monkeypatch.setattr(cloudwatch, "CloudWatchLogReader", reader)
    yield world


def test_logs_read_the_log_group_of_the_jobs_cluster_in_its_region(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given two clusters and a job admission placed in the second
    two_clusters(monkeypatch)
    job = placed(logs_world.store, queued(logs_world.store), "gpu-east", "us-east-1")
    moved(logs_world.store, job, JobStatus.RUNNING, "Started")

    # when
    assert main(["logs", "gan-1"]) == 0

    # then: gpu-east's group, read in us-east-1
    assert logs_world.clients == [("logs", "us-east-1")]
    assert logs_world.groups == ["/aws/containerinsights/gpu-east/application"]
    assert capsys.readouterr().out.count("[chief-0]") == 2


def test_logs_of_a_job_not_placed_yet_say_it_has_none_yet(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    two_clusters(monkeypatch)
    queued(logs_world.store)

    assert main(["logs", "gan-1"]) == 0

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "squall: job gan-1 is QUEUED (Submitted): not placed in a cluster yet, so it has no logs yet\n"
    )
    assert logs_world.clients == []  # no log group is read: no cluster has its pods


def test_logs_follow_waits_for_the_placement_then_reads_that_cluster(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a queued job that admission places in gpu-west while it is followed, which then runs and ends
    import squall.cli.follow.clock as clocks

    two_clusters(monkeypatch)
    store = logs_world.store
    state = {"job": queued(store)}

    def admit() -> None:
        state["job"] = placed(store, state["job"], "gpu-west", "us-west-2", at=START + timedelta(seconds=4))

    def run_and_end() -> None:
        state["job"] = moved(store, state["job"], JobStatus.RUNNING, "Started")
        state["job"] = moved(store, state["job"], JobStatus.SUCCEEDED, "Completed")

    monkeypatch.setattr(clocks, "RealClock", lambda: SteppingClock(now_at=START, steps=[admit, run_and_end]))

    # when
    assert main(["logs", "gan-1", "--follow"]) == 0

    # then: why it waited, once, and the lines of gpu-west's group in us-west-2
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == (
        "squall: job gan-1 is QUEUED (Submitted): its lines follow once it runs"
    )
    assert logs_world.clients == [("logs", "us-west-2")]
    assert logs_world.groups == ["/aws/containerinsights/gpu-west/application"]
    assert captured.out.count("[chief-0]") == 2


def test_logs_of_a_job_cancelled_in_the_queue_say_it_has_none(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    moved(logs_world.store, queued(logs_world.store), JobStatus.CANCELLED, "CancelRequested")

    assert main(["logs", "gan-1", "--follow"]) == 0

    assert "it was never placed in a cluster, so it has no logs" in capsys.readouterr().err
    assert logs_world.clients == []


def test_with_one_cluster_a_job_that_ran_is_read_there_as_before(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given SQUALL_CLUSTER_NAME's one cluster and a record from before jobs recorded their cluster
    monkeypatch.setenv(deployment.CLUSTER_ENV, "gpu-training")
    moved(logs_world.store, queued(logs_world.store), JobStatus.RUNNING, "Started")

    assert main(["logs", "gan-1"]) == 0

    assert logs_world.clients == [("logs", None)]  # boto3's default region, as before
    assert logs_world.groups == ["/aws/containerinsights/gpu-training/application"]
    assert capsys.readouterr().out.count("[chief-0]") == 2


def test_logs_say_what_to_set_when_the_jobs_cluster_is_not_named(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a shell whose SQUALL_CLUSTERS names only gpu-west, and a job placed in gpu-east
    monkeypatch.setenv(deployment.CLUSTERS_ENV, json.dumps(TWO[:1]))
    placed(logs_world.store, queued(logs_world.store), "gpu-east", "us-east-1")

    assert main(["logs", "gan-1"]) == 1

    err = capsys.readouterr().err
    assert "job gan-1 is in cluster gpu-east, which this shell's clusters (gpu-west) do not include" in err
    assert "set SQUALL_CLUSTERS" in err
    assert logs_world.clients == []


def test_with_squall_cluster_name_a_placed_job_is_read_in_that_one_cluster(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given the one-cluster variable (a deployment of one cluster, or the local runtime's), and a
    # job placed in a cluster its configuration names otherwise
    monkeypatch.setenv(deployment.CLUSTER_ENV, "gpu-training")
    placed(logs_world.store, queued(logs_world.store), "local", "us-west-2")

    assert main(["logs", "gan-1"]) == 0

    assert logs_world.groups == ["/aws/containerinsights/gpu-training/application"]
    assert logs_world.clients == [("logs", None)]
    assert capsys.readouterr().out.count("[chief-0]") == 2


def test_a_missing_log_group_of_the_one_cluster_says_what_the_record_names(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from squall.core.errors import NotFoundError

    class Missing(Streams):
        def streams(self) -> Any:
            raise NotFoundError(f"list the streams of {self.group}")

    logs_world.source = Missing()
    placed(logs_world.store, queued(logs_world.store), "gpu-training", "us-west-2")

    assert main(["logs", "gan-1"]) == 1

    err = capsys.readouterr().err
    assert "/aws/containerinsights/squall/application: no such log group. Is the cluster's log agent" in err
    assert (
        "is SQUALL_CLUSTER_NAME (squall) the cluster's name? (the job's record names cluster gpu-training)"
        in err
    )


def test_an_old_record_with_several_clusters_names_the_groups_it_may_be_in(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    two_clusters(monkeypatch)
    moved(logs_world.store, queued(logs_world.store), JobStatus.RUNNING, "Started")

    assert main(["logs", "gan-1"]) == 1

    err = capsys.readouterr().err
    assert "job gan-1's record names no cluster" in err
    assert "/aws/containerinsights/gpu-west/application (us-west-2)" in err
    assert "/aws/containerinsights/gpu-east/application (us-east-1)" in err


def test_a_missing_log_group_is_named_with_its_region(
    logs_world: LogWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from squall.core.errors import NotFoundError

    class Missing(Streams):
        def streams(self) -> Any:
            raise NotFoundError(f"list the streams of {self.group}")

    logs_world.source = Missing()
    two_clusters(monkeypatch)
    placed(logs_world.store, queued(logs_world.store), "gpu-east", "us-east-1")

    assert main(["logs", "gan-1"]) == 1

    err = capsys.readouterr().err
    assert "/aws/containerinsights/gpu-east/application: no such log group in us-east-1" in err
    assert "is SQUALL_CLUSTERS (gpu-east) the cluster's name?" in err


# ---- describe, watch and list say where a job runs ----


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryJobStore]:
    from squall.local.memory import InMemoryScaleState
    from squall.local.model_service_store import InMemoryModelServiceStore

    store = InMemoryJobStore()
    monkeypatch.setattr(deployment, "job_store", lambda: store)
    monkeypatch.setattr(deployment, "scale_state", InMemoryScaleState)
    monkeypatch.setattr(deployment, "service_store", InMemoryModelServiceStore)
    yield store


def test_describe_says_where_a_placed_job_runs(
    jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job = queued(jobs)
    assert main(["describe", "gan-1"]) == 0
    assert "cluster " not in capsys.readouterr().out  # waiting: no cluster yet

    moved(jobs, placed(jobs, job, "gpu-east", "us-east-1"), JobStatus.RUNNING, "Started")
    assert main(["describe", "gan-1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "  cluster gpu-east, us-east-1"


def test_watch_says_where_the_job_was_placed_when_it_is(jobs: InMemoryJobStore) -> None:
    # given a queued job admitted to gpu-east while watched, then run to its end
    state = {"job": queued(jobs)}

    def admit() -> None:
        state["job"] = placed(jobs, state["job"], "gpu-east", "us-east-1")

    def end() -> None:
        state["job"] = moved(jobs, state["job"], JobStatus.RUNNING, "Started")
        state["job"] = moved(jobs, state["job"], JobStatus.SUCCEEDED, "Completed")

    shown = io.StringIO()

    # when
    watch_job("gan-1", store=jobs, clock=SteppingClock(steps=[admit, end]), out=shown, live=False)

    # then: the header had no cluster; the placement is said once, after the event that made it
    lines = shown.getvalue().splitlines()
    assert "cluster" not in lines[0]
    assert lines.count("  placed in cluster gpu-east, us-east-1") == 1
    assert lines.index("  placed in cluster gpu-east, us-east-1") == 3
    assert "Admitted:us-east-1" in lines[2]

    # and a job placed before the watch starts has it in its header
    shown = io.StringIO()
    watch_job("gan-1", store=jobs, clock=SteppingClock(), out=shown, live=False)
    assert (
        "namespace team-research, cluster gpu-east, us-east-1, 1 replica" in shown.getvalue().splitlines()[0]
    )


def test_list_has_a_cluster_column_once_a_job_is_placed(
    jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    queued(jobs, "gan-1")
    assert main(["list"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["ID", "TEAM", "STATUS", "AGE", "REASON"]

    placed(jobs, queued(jobs, "gan-2"), "gpu-east", "us-east-1")
    assert main(["list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "TEAM", "STATUS", "AGE", "CLUSTER", "REASON"]
    cells = {row.split()[0]: row.split() for row in rows}
    assert cells["gan-1"][4] == "-"
    assert cells["gan-2"][4] == "gpu-east/us-east-1"


def test_list_json_records_carry_what_admission_reads_and_where_it_placed(
    jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    job = dataclasses.replace(queued(jobs), priority=5, requeued=True, queue_shape='[{"n":1,"pod":{}}]')
    job, event = note(job, reason="Queued", at=START)
    jobs.save(job, event)
    placed(jobs, queued(jobs, "gan-2"), "gpu-east", "us-east-1")

    assert main(["list", "--status", "QUEUED", "--json"]) == 0

    records = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    first = {
        k: records["gan-1"][k]
        for k in ("namespace", "priority", "requeued", "queueShape", "cluster", "region")
    }
    assert first == {
        "namespace": "team-research",
        "priority": 5,
        "requeued": True,
        "queueShape": '[{"n":1,"pod":{}}]',
        "cluster": None,
        "region": None,
    }
    assert records["gan-1"]["version"] == 2 and records["gan-1"]["objectsCreated"] is False
    assert (records["gan-2"]["cluster"], records["gan-2"]["region"]) == ("gpu-east", "us-east-1")
    # describe --json is the same record and more
    assert main(["describe", "gan-2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cluster"] == "gpu-east"


# ---- squall plan: one snapshot per cluster, the queue from `squall list --status QUEUED --json` ----

PLAN_AT = "2026-01-05T12:00:00Z"


def plan_group(name: str, *, cluster: str | None, region: str, max_size: int = 4) -> dict[str, Any]:
    doc = offline_jobs.group(name, region=region, instances=1, max_size=max_size)
    return doc | ({"cluster": cluster} if cluster else {})


def busy_pod(node: str) -> dict[str, Any]:
    """A running pod that takes the node's one GPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"busy-{node}",
            "namespace": "team-vision",
            "creationTimestamp": "2026-01-05T09:05:00Z",
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {"phase": "Running"},
    }


def queued_job(store: InMemoryJobStore, job_id: str, *, minutes: int, **fields: Any) -> Job:
    """A job as intake records it now: QUEUED with its queue shape, no objects anywhere."""
    from squall.core.queue import queue_shape
    from squall.core.spec import load_spec
    from tests.job_bodies import job_body

    body = recorded(parse_spec(job_body(job_id, "research"), teams=TEAMS, registries=[REGISTRY]))
    shape = queue_shape(load_spec(body), job_id=job_id, namespace="team-research")
    job, event = new_job(
        job_id=job_id,
        name=job_id,
        team="research",
        namespace="team-research",
        at=datetime(2026, 1, 5, 11, minutes, tzinfo=UTC),
        spec=body,
        replicas=1,
        gpus=1,
        priority=50,
        queue_shape=shape,
        **fields,
    )
    store.create(job, event)
    return job


@pytest.fixture
def plan_files(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> Any:
    """Two clusters' snapshots (gpu-west's one node busy, gpu-east's free), their groups, and the queue file."""
    monkeypatch.chdir(tmp_path)  # no cdk.json: the local defaults (no quota)
    for name in ("SQUALL_TEAMS", "SQUALL_ALLOWED_REGISTRIES"):
        monkeypatch.delenv(name, raising=False)
    west, east = offline_jobs.node("p3-usw2", 0), offline_jobs.node("p3-use1", 0, region="us-east-1")
    files = {
        "west-nodes.json": {"items": [west]},
        "west-pods.json": {"items": [busy_pod("p3-usw2-node-0")]},
        "east-nodes.json": {"items": [east]},
        "east-pods.json": {"items": []},
        "groups.json": {
            "nodeGroups": [
                plan_group("p3-usw2", cluster="gpu-west", region="us-west-2", max_size=1),
                plan_group("p3-use1", cluster="gpu-east", region="us-east-1"),
            ]
        },
    }
    for name, doc in files.items():
        (tmp_path / name).write_text(json.dumps(doc))
    queued_job(jobs, "a", minutes=1)
    queued_job(jobs, "b", minutes=2)
    assert main(["list", "--status", "QUEUED", "--json"]) == 0
    (tmp_path / "queued.json").write_text(capsys.readouterr().out)
    return tmp_path


TWO_SNAPSHOTS = [
    "--cluster",
    "gpu-west=west-nodes.json,west-pods.json",
    "--cluster",
    "gpu-east=east-nodes.json,east-pods.json",
]


def plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(["plan", *argv, "--groups", "groups.json", "--now", PLAN_AT, "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, json.loads(captured.out) if code == 0 else None, captured.err


def test_plan_admits_the_listed_queue_across_clusters_and_buys_where_it_can(
    plan_files: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # when: gpu-west's only node is busy and its group at its max; gpu-east has a free node
    code, result, err = plan(capsys, *TWO_SNAPSHOTS, "--queue", "queued.json")

    # then: a takes gpu-east's free node; b waits, and gpu-east's group grows for it
    assert (code, err) == (0, "")
    assert [(a["job"], a["region"]) for a in result["admission"]["admitted"]] == [("a", "gpu-east/us-east-1")]
    assert [w["job"] for w in result["admission"]["waiting"]] == ["b"]
    assert [(u["group"], u["to"]) for u in result["scaleUp"]] == [("p3-use1", 2)]


def test_plan_finishes_a_placed_job_where_it_was_placed(
    plan_files: Any, jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # given: a job admission placed in gpu-west whose objects are not created yet, listed with the rest
    job = queued_job(jobs, "early", minutes=0)
    placed(jobs, job, "gpu-west", "us-west-2")
    assert main(["list", "--status", "QUEUED", "--json"]) == 0
    (plan_files / "queued.json").write_text(capsys.readouterr().out)

    code, result, _ = plan(capsys, *TWO_SNAPSHOTS, "--queue", "queued.json")

    # then: its admission is finished in gpu-west (where it was placed, though gpu-east has the free
    # node), and the free node goes to the first in line, a
    assert code == 0
    assert [(a["job"], a["region"]) for a in result["admission"]["admitted"]] == [
        ("early", "gpu-west/us-west-2"),
        ("a", "gpu-east/us-east-1"),
    ]
    assert [w["job"] for w in result["admission"]["waiting"]] == ["b"]


def test_plan_leaves_out_records_that_are_not_in_the_queue(
    plan_files: Any, jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # given: `squall list --json` of every status: one job running (placed, objects created)
    running = placed(jobs, queued_job(jobs, "r", minutes=3), "gpu-east", "us-east-1")
    moved(jobs, dataclasses.replace(running, objects_created=True), JobStatus.RUNNING, "Started")
    assert main(["list", "--json"]) == 0
    (plan_files / "every.json").write_text(capsys.readouterr().out)

    code, result, err = plan(capsys, *TWO_SNAPSHOTS, "--queue", "every.json")

    assert code == 0
    assert (
        err == "squall: every.json: 1 record not in the queue left out (not QUEUED, a sweep's parent, "
        "a trial waiting for its slot, or placed with its objects created)\n"
    )
    assert sorted(w["job"] for w in result["admission"]["waiting"]) == ["b"]


def test_plan_with_todays_flags_and_a_queue_plans_one_cluster_unqualified(
    plan_files: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = json.loads((plan_files / "groups.json").read_text())
    groups["nodeGroups"] = groups["nodeGroups"][1:]  # gpu-east's group, which names its cluster
    (plan_files / "groups.json").write_text(json.dumps(groups))

    code, result, _ = plan(
        capsys, "--nodes", "east-nodes.json", "--pods", "east-pods.json", "--queue", "queued.json"
    )

    assert code == 0
    assert [(a["job"], a["region"]) for a in result["admission"]["admitted"]] == [("a", "us-east-1")]
    # and one --cluster reads the same
    code, named, _ = plan(
        capsys, "--cluster", "gpu-east=east-nodes.json,east-pods.json", "--queue", "queued.json"
    )
    assert named == result


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["--cluster", "gpu-west"],
            "squall: --cluster: expected NAME=nodes.json,pods.json[,jobs.json], got 'gpu-west'",
        ),
        (
            ["--cluster", "gpu.west=a,b"],
            "squall: --cluster 'gpu.west': expected a cluster's name (a letter or digit",
        ),
        (
            ["--cluster", "gpu-west=west-nodes.json"],
            "squall: --cluster gpu-west: expected gpu-west=nodes.json,pods.json",
        ),
        (
            [*TWO_SNAPSHOTS[:2], "--cluster", "gpu-west=east-nodes.json,east-pods.json"],
            "squall: --cluster gpu-west: given twice",
        ),
        (
            [*TWO_SNAPSHOTS, "--nodes", "west-nodes.json"],
            "squall: --nodes with --cluster: give every cluster's snapshot",
        ),
        (
            [*TWO_SNAPSHOTS, "--jobs", "jobs.json"],
            "squall: --jobs with --cluster: give every cluster's snapshot",
        ),
        (
            ["--queue", "queued.json"],
            "squall: the cluster's snapshot is needed: --nodes and --pods for one cluster",
        ),
        (
            ["--cluster", "gpu-west=west-nodes.json,missing.json", TWO_SNAPSHOTS[2], TWO_SNAPSHOTS[3]],
            "squall: missing.json",
        ),
    ],
)
def test_plan_arguments_that_cannot_be_used_are_named(
    plan_files: Any, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    code, _, err = plan(capsys, *argv)
    assert code == 2
    assert err.startswith(words), err


def test_a_bad_snapshot_is_named_by_its_clusters_file(
    plan_files: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    east = json.loads((plan_files / "east-nodes.json").read_text())
    east["items"][0]["status"]["allocatable"]["cpu"] = "lots"
    (plan_files / "east-nodes.json").write_text(json.dumps(east))

    code, _, err = plan(capsys, *TWO_SNAPSHOTS)

    assert code == 2
    assert err.startswith("squall: east-nodes.json: ") and "cpu" in err


def test_a_group_of_no_given_cluster_is_named(plan_files: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan(capsys, *TWO_SNAPSHOTS[:2], "--cluster", "gpu-north=east-nodes.json,east-pods.json")
    assert code == 2
    assert err.startswith("squall: groups.json: ") and "nodeGroups[1].cluster: gpu-east is none" in err


def record_edit(path: Any, index: int, **changes: Any) -> None:
    records = json.loads(path.read_text())
    records[index].update(changes)
    path.write_text(json.dumps(records))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"queueShape": '[{"n": 0, "pod": {}}]'}, ".queueShape: [0].n: expected a count from 1 to 82"),
        ({"queueShape": "not json"}, ".queueShape: not JSON"),
        ({"queueShape": 7}, ".queueShape: expected a string (compact JSON), got a number"),
        (
            {"submittedAt": "yesterday"},
            ".submittedAt: expected an ISO 8601 time with a timezone, got 'yesterday'",
        ),
        ({"priority": "high"}, ".priority: expected a whole number from 0 to 100, got 'high'"),
        ({"requeued": "yes"}, ".requeued: expected true or false, got 'yes'"),
        ({"team": None}, ".team: expected a non-empty string, got None"),
        ({"cluster": "gpu-east"}, ": cluster and region: a placed job has both, a waiting one neither"),
        ({"id": "b"}, "queued.json: [1].id: job b is listed twice"),
    ],
)
def test_a_queue_record_that_cannot_be_read_is_named_with_its_file_and_field(
    plan_files: Any, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], words: str
) -> None:
    records = json.loads((plan_files / "queued.json").read_text())
    first = [r["id"] for r in records].index("a")
    record_edit(plan_files / "queued.json", first, **changes)

    code, _, err = plan(capsys, *TWO_SNAPSHOTS, "--queue", "queued.json")

    assert code == 2
    assert err.startswith(
        "squall: queued.json: [" if "id" in changes else f"squall: queued.json: [{first}] (job a)"
    )
    assert words in err, err


def test_a_placed_record_in_no_given_cluster_is_named(
    plan_files: Any, jobs: InMemoryJobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    placed(jobs, queued_job(jobs, "early", minutes=0), "gpu-north", "eu-west-1")
    assert main(["list", "--status", "QUEUED", "--json"]) == 0
    (plan_files / "queued.json").write_text(capsys.readouterr().out)

    code, _, err = plan(capsys, *TWO_SNAPSHOTS, "--queue", "queued.json")

    assert code == 2
    assert err == (
        "squall: queued.json: [0] (job early).cluster: placed in cluster gpu-north, which no --cluster gives "
        "(gpu-west, gpu-east)\n"
    )


def test_a_queue_file_that_is_no_list_of_records_is_refused(
    plan_files: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    (plan_files / "queued.json").write_text(json.dumps({"items": []}))
    code, _, err = plan(capsys, *TWO_SNAPSHOTS, "--queue", "queued.json")
    assert code == 2
    assert err.startswith(
        "squall: queued.json: expected the list of job records `squall list --status QUEUED --json`"
    )


def test_queue_says_in_which_cluster_a_check_admitted_a_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from squall.local.memory import InMemoryScaleState

    # given the latest check admitted one job in a cluster's region (a site), and one where there is one cluster
    state = InMemoryScaleState()
    monkeypatch.setattr(deployment, "scale_state", lambda: state)
    admitted = [
        {"job": "a", "team": "research", "gpus": 8, "region": "gpu-east/us-east-1"},
        {"job": "b", "team": "research", "gpus": 1, "region": "us-west-2"},
    ]
    state.record_decision(
        at=START,
        trigger="schedule",
        dry_run=False,
        plan={"admission": {"waiting": [], "waitingTotal": 0, "admitted": admitted}},
        acted={},
    )

    assert main(["queue"]) == 0

    out = capsys.readouterr().out.splitlines()
    assert "admitted in that check: a (research, 8 GPUs) in cluster gpu-east, us-east-1" in out
    assert "admitted in that check: b (research, 1 GPU) in us-west-2" in out


# ---- model services: where each runs; predict sends to the endpoint its record names ----


def test_services_and_describe_say_which_cluster_a_model_service_runs_in(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from squall.core.serving import ServiceStatus, transition_service
    from squall.local.model_service_store import InMemoryModelServiceStore
    from tests.serving_records import first_record

    services = InMemoryModelServiceStore()
    monkeypatch.setattr(deployment, "service_store", lambda: services)
    monkeypatch.setattr(deployment, "job_store", InMemoryJobStore)
    for name, cluster in (("gan", "gpu-east"), ("old", None)):
        service, event = first_record(name, at=START, message_id=f"m-{name}")
        services.create(service, event)
        service, event = transition_service(
            service,
            to=ServiceStatus.SERVING,
            reason="Ready",
            at=START + timedelta(minutes=1),
            ready_replicas=1,
            rest_url=f"http://{name}.example:8501",
            cluster=cluster,
        )
        services.save(service, event)

    assert main(["services"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:6] == ["NAME", "STATUS", "REASON", "JOB", "CLUSTER", "READY"]
    assert {row.split()[0]: row.split()[4] for row in rows} == {"gan": "gpu-east", "old": "-"}

    assert main(["describe", "gan"]) == 0
    assert ", cluster gpu-east, model " in capsys.readouterr().out
    assert main(["services", "--json"]) == 0
    assert {s["name"]: s["cluster"] for s in json.loads(capsys.readouterr().out)} == {
        "gan": "gpu-east",
        "old": None,
    }
