"""Real pods: the simulated cluster runs the worker image's pods as local processes.

Tiny Python commands stand in for the trainer (TensorFlow is slow to start); the
pods are rendered by Squall from a job spec, so their environment, command and
failure policy are the ones production renders.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from squall.core.logstreams import parse_stream
from squall.core.manifests import render
from squall.core.spec import parse_spec
from squall.local.aws import LOG_GROUP
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.processes import WORKER_IMAGES, ProcessRunner, image_matches, map_tf_config
from tests.local_pod_processes import LocalProcesses, local_processes

NS = "team-research"
IMAGE = f"{WORKER_IMAGES[0]}:1.0"
NODE = {"cpu": "16", "memory": "64Gi", "pods": "58"}
REGION = {"topology.kubernetes.io/region": "us-west-2"}


class Harness:
    def __init__(self, processes: LocalProcesses) -> None:
        self.logs = processes.logs
        self.runner = processes.runner
        self.clock = VirtualClock()
        self.cluster = SimulatedCluster(clock=self.clock, runner=self.runner)
        self.cluster.add_node(name="ip-10-0-0-1", allocatable=NODE, labels=REGION)

    def submit(self, job_id: str, **spec: Any) -> list[dict[str, Any]]:
        body = {
            "name": "tiny",
            "team": "research",
            "image": IMAGE,
            "resources": {"cpu": "1", "memory": "1Gi"},
        }
        parsed = parse_spec(body | spec, teams=["research"], registries=[WORKER_IMAGES[0].split("/")[0]])
        objects = render(parsed, job_id=job_id, namespace=NS)
        for manifest in objects:
            self.cluster.create(manifest)
        jobs = [o for o in objects if o["kind"] == "Job"]
        for job in jobs:
            self.cluster.patch_job(
                namespace=NS, name=job["metadata"]["name"], patch={"spec": {"suspend": False}}
            )
        return jobs

    def until(self, what: Callable[[], Any], *, seconds: float = 30.0) -> Any:
        """Advance the cluster (a second of its time per round) until `what` gives something."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.cluster.advance()
            if found := what():
                return found
            time.sleep(0.05)
            self.clock.advance(timedelta(seconds=1))
        raise AssertionError(f"not within {seconds} s")

    def job_condition(self, job_id: str) -> str | None:
        for job in self.cluster.list_jobs(job_id=job_id):
            for condition in job["status"].get("conditions", []):
                if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
                    return str(condition["type"])
        return None

    def pods(self, job_id: str) -> list[dict[str, Any]]:
        return self.cluster.list_pods(job_id=job_id)

    def streams(self) -> list[str]:
        return [
            s["logStreamName"] for s in self.logs.describe_log_streams(logGroupName=LOG_GROUP)["logStreams"]
        ]

    def lines(self, stream: str) -> list[str]:
        events = self.logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=stream, startFromHead=True)
        return [json.loads(e["message"])["log"] for e in events["events"]]

    def lines_of(self, pod_name: str) -> list[str]:
        return [
            line
            for stream in self.streams()
            if (parsed := parse_stream(stream)) is not None and parsed.pod == pod_name
            for line in self.lines(stream)
        ]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    with local_processes(tmp_path / "pods") as processes:
        yield Harness(processes)


def py(code: str) -> list[str]:
    return ["python", "-c", code]


@pytest.mark.timeout(120)
def test_a_real_pod_runs_its_command_and_its_output_reaches_the_log_agents_stream(harness: Harness) -> None:
    harness.submit(
        "hello",
        command=py(
            "import os, sys; print('hello', os.environ['SQUALL_JOB_ID'], os.environ['HOSTNAME']);"
            "print('to stderr', file=sys.stderr); print(os.environ['AWS_ENDPOINT_URL'])"
        ),
    )
    assert harness.until(lambda: harness.job_condition("hello")) == "Complete"
    pod = harness.pods("hello")[0]
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    [stream] = harness.streams()
    parsed = parse_stream(stream)
    assert parsed is not None
    assert (parsed.host, parsed.pod, parsed.namespace, parsed.container) == (
        "ip-10-0-0-1",
        pod["metadata"]["name"],
        NS,
        "trainer",
    )
    assert len(parsed.container_id) == 64
    lines = harness.lines(stream)
    assert f"hello hello {pod['metadata']['name']}\n" in lines
    assert "to stderr\n" in lines
    assert any(line.startswith("http://127.0.0.1:") for line in lines)  # the local endpoint, not AWS


@pytest.mark.timeout(120)
def test_a_real_pods_exit_code_decides_its_phase_and_fails_the_job(harness: Harness) -> None:
    harness.submit("broken", command=py("import sys; print('giving up'); sys.exit(3)"))
    assert harness.until(lambda: harness.job_condition("broken")) == "Failed"
    pod = harness.pods("broken")[0]
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert harness.lines_of(pod["metadata"]["name"]) == ["giving up\n"]


@pytest.mark.timeout(120)
def test_a_command_that_does_not_exist_exits_127_and_says_why(harness: Harness) -> None:
    # As a container runtime does: the pod fails with 127, and its log names the command.
    harness.submit("missing", command=["squall-no-such-command", "--flag"])
    assert harness.until(lambda: harness.job_condition("missing")) == "Failed"
    pod = harness.pods("missing")[0]
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 127
    (line,) = harness.lines_of(pod["metadata"]["name"])
    assert line.startswith("cannot run 'squall-no-such-command': ")
    assert harness.runner.failed_starts == 1


SIGTERM_AWARE = (
    "import signal, sys, time\n"
    "def stop(*_):\n"
    "    print('got SIGTERM, saving a checkpoint', flush=True); sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('training', flush=True)\n"
    "time.sleep(60)\n"
    "print('finished without a signal', flush=True)\n"
)


@pytest.mark.timeout(120)
def test_an_eviction_sends_sigterm_to_the_process(harness: Harness) -> None:
    harness.submit("evicted", command=py(SIGTERM_AWARE))
    pod = harness.until(
        lambda: next((p for p in harness.pods("evicted") if p["status"]["phase"] == "Running"), None)
    )
    name = pod["metadata"]["name"]
    harness.until(lambda: "training\n" in harness.lines_of(name))
    assert harness.cluster.evict(namespace=NS, name=name)
    # The process answers SIGTERM in its grace period; what it wrote still reaches its stream.
    lines = harness.until(lambda: (got := harness.lines_of(name)) and "got SIGTERM" in "".join(got) and got)
    assert "finished without a signal\n" not in lines
    # The disrupted pod is counted as a retry: a new pod (a new process) takes its place.
    replacement = harness.until(
        lambda: next((p for p in harness.pods("evicted") if p["metadata"]["name"] != name), None)
    )
    assert replacement["metadata"]["name"] != name


@pytest.mark.timeout(120)
def test_a_process_that_ignores_sigterm_is_killed_after_its_grace_period(harness: Harness) -> None:
    harness.submit("stubborn", command=py("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                                          "print('up', flush=True); time.sleep(120)"))  # fmt: skip
    pod = harness.until(
        lambda: next((p for p in harness.pods("stubborn") if p["status"]["phase"] == "Running"), None)
    )
    harness.until(lambda: "up\n" in harness.lines_of(pod["metadata"]["name"]))
    [process] = list(harness.runner._running.values())
    process.grace = 0.5  # the pod's terminationGracePeriodSeconds, shortened for the test
    harness.cluster.delete_job_objects(namespace=NS, job_id="stubborn")
    assert process.popen.wait(30) == -9  # SIGKILL


@pytest.mark.timeout(120)
def test_pods_of_other_images_keep_their_simulated_run_time(harness: Harness) -> None:
    parsed = parse_spec(
        {"name": "sim", "team": "research", "image": "registry.example.com/squall/other:1",
         "resources": {"cpu": "1", "memory": "1Gi"}},
        teams=["research"], registries=["registry.example.com/squall"],
    )  # fmt: skip
    for manifest in render(parsed, job_id="sim", namespace=NS):
        harness.cluster.create(manifest)
    harness.cluster.patch_job(namespace=NS, name=render(parsed, job_id="sim", namespace=NS)[0]["metadata"]["name"],
                              patch={"spec": {"suspend": False}})  # fmt: skip
    harness.cluster.advance()
    assert harness.pods("sim")[0]["status"]["phase"] == "Running"
    assert harness.runner.started == 0
    harness.clock.advance(timedelta(seconds=61))  # the cluster's default run time
    harness.cluster.advance()
    assert harness.job_condition("sim") == "Complete"


@pytest.mark.timeout(120)
def test_the_replicas_of_a_distributed_job_get_loopback_addresses_shared_by_its_pods(
    harness: Harness,
) -> None:
    harness.submit(
        "dist",
        replicas={"chief": 1, "worker": 1},
        command=py("import os; print(os.environ['TF_CONFIG'])"),
    )
    assert harness.until(lambda: harness.job_condition("dist") if len(harness.pods("dist")) == 2 and all(
        p["status"]["phase"] == "Succeeded" for p in harness.pods("dist")) else None) == "Complete"  # fmt: skip
    configs = [json.loads(harness.lines_of(p["metadata"]["name"])[0]) for p in harness.pods("dist")]
    clusters = [c["cluster"] for c in configs]
    assert clusters[0] == clusters[1]
    addresses = clusters[0]["chief"] + clusters[0]["worker"]
    assert all(a.startswith("127.0.0.1:") for a in addresses) and len(set(addresses)) == 2
    assert sorted(c["task"]["type"] for c in configs) == ["chief", "worker"]


def test_map_tf_config_keeps_one_port_per_address() -> None:
    config = {
        "cluster": {
            "chief": ["j-chief-0.ns.svc:2222"],
            "worker": ["j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    ports: dict[str, int] = {}
    counter = iter(range(5000, 6000))
    first = json.loads(map_tf_config(json.dumps(config), ports, lambda: next(counter)))
    second = json.loads(
        map_tf_config(
            json.dumps(config | {"task": {"type": "chief", "index": 0}}), ports, lambda: next(counter)
        )
    )
    assert (
        first["cluster"]
        == second["cluster"]
        == {
            "chief": ["127.0.0.1:5000"],
            "worker": ["127.0.0.1:5001", "127.0.0.1:5002"],
        }
    )
    assert first["task"] == {"type": "worker", "index": 1} and first["environment"] == "cloud"
    assert map_tf_config("not json", ports, lambda: 1) == "not json"
    assert map_tf_config('{"cluster": 3}', ports, lambda: 1) == '{"cluster": 3}'


def test_image_matching() -> None:
    repository = "123456789012.dkr.ecr.us-west-2.amazonaws.com/squall/tf-trainer"
    assert image_matches(f"{repository}:1.0", [repository])
    assert image_matches(f"{repository}@sha256:" + "a" * 64, [repository])
    assert image_matches(repository, [repository])
    assert not image_matches(f"{repository}-evil:1.0", [repository])
    assert not image_matches(f"{repository}:2.0", [f"{repository}:1.0"])
    assert image_matches("localhost:5000/tf-trainer:1", ["localhost:5000/tf-trainer"])
    assert not image_matches("localhost:5000/other", ["localhost:5000"])


def test_the_python_of_the_command_is_this_interpreter(tmp_path: Path) -> None:
    runner = ProcessRunner(
        endpoint="http://127.0.0.1:1", log_group=LOG_GROUP, work_dir=tmp_path, logs_client=None
    )
    try:
        assert runner._argv({"command": ["python", "-m", "trainer"], "args": ["--steps", "2"]}) == [
            sys.executable, "-m", "trainer", "--steps", "2"
        ]  # fmt: skip
        assert runner._argv({}) == [sys.executable, "-m", "trainer"]
    finally:
        runner.close(wait=1)


@pytest.mark.slow  # trains TensorFlow in two real processes
@pytest.mark.timeout(600)
def test_a_two_worker_trainer_job_trains_for_real_from_squalls_tf_config(
    harness: Harness, tmp_path: Path
) -> None:
    pytest.importorskip("tensorflow")
    from tests.worker.harness import tiny_args

    model_dir = tmp_path / "model"
    harness.submit(
        "gan",
        replicas={"worker": 2},
        command=["python", "-m", "trainer"],
        args=["--model-dir", str(model_dir), *tiny_args(steps=3, log_every=1, checkpoint_every=2)],
        env={"TF_CPP_MIN_LOG_LEVEL": "2"},
    )

    def both_finished() -> bool:
        jobs = harness.cluster.list_jobs(job_id="gan")
        return (
            len(jobs) == 2
            and all(
                c["type"] in ("Complete", "Failed") and c["status"] == "True"
                for j in jobs
                for c in j["status"].get("conditions", [])
                if c["type"] != "Suspended"
            )
            and all(len(j["status"].get("conditions", [])) > 1 for j in jobs)
        )

    harness.until(both_finished, seconds=540)
    pods = harness.pods("gan")
    assert sorted(p["status"]["phase"] for p in pods) == ["Succeeded", "Succeeded"], (
        [j["status"] for j in harness.cluster.list_jobs(job_id="gan")],
        [(p["metadata"]["name"], p["status"]["phase"]) for p in pods],
        [harness.lines_of(p["metadata"]["name"])[-3:] for p in pods],
    )
    for pod in pods:
        events = [
            json.loads(line) for line in harness.lines_of(pod["metadata"]["name"]) if line.startswith("{")
        ]
        training = [e for e in events if e.get("event") == "training"]
        assert training and (training[0]["mode"], training[0]["replicas"]) == ("collective", 2)
        assert [e["step"] for e in events if e.get("event") == "step"] == [1, 2, 3]
    assert (model_dir / "saved_model" / "saved_model.pb").exists()
