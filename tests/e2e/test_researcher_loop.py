"""The researcher's loop, end to end on the local runtime (issue 14).

`squall submit examples/local-distributed.yaml --code worker_images/tf_trainer --watch`
against the embedded default running on a wall clock with real pods, as `squall local
up` runs it: the code is packed and stored in the local S3, the two workers train for
real as local processes from the TF_CONFIG Squall rendered (mapped to loopback ports),
checkpointing to the local artifacts bucket; one worker is evicted mid-run (the Eviction
API, as a drain evicts), both stop at a checkpoint and are re-run by their Jobs, resume
from it and finish; the job SUCCEEDS. Then `squall logs` reads every replica's lines
from the local CloudWatch Logs once the pods are gone, and `squall tensorboard --once`
copies event files whose scalars TensorBoard's reader sees.

The runtime runs in a thread of this process (the eviction needs its cluster); every
call into the cluster goes through that thread. The CLI runs in this thread, talking
to the local endpoint as it talks to AWS.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from squall.cli import main
from squall.local.aws import client
from squall.local.clock import WallClock
from squall.local.demo import node_groups
from squall.local.fleet import RegionCapacity
from squall.local.processes import WORKER_IMAGES, ProcessRunner, default_image_env
from squall.local.runtime import DEFAULT_REGISTRIES, DEFAULT_TEAMS, LocalRuntime
from squall.local.server import BOOT_TIME, GPU_PLUGIN_DELAY, TICK_SECONDS, cli_environment
from tests.e2e.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "local-distributed.yaml"
CODE = "worker_images/tf_trainer"
JOB_ID = "gan-loop"
NAMESPACE = "team-research"
BUCKET = "squall-artifacts"
SPEED = 10.0  # cluster seconds per wall second: nodes boot in 2 s, a scale check every 6 s
# Enough steps that the eviction (after the first periodic checkpoint) lands mid-run.
STEPS = 400
CHECKPOINT_EVERY = 20


class Driver:
    """The embedded default running on its own, as local/server.py's loop runs it, in a thread.

    `call(fn)` runs `fn(local)` on that thread between steps (the simulated cluster is
    not shared between threads); `each_step` runs there after every step.
    """

    def __init__(self, local: LocalRuntime, clock: WallClock, *, runner: ProcessRunner | None = None) -> None:
        self.local = local
        self.clock = clock
        self.runner = runner  # the pods' processes, when they run for real
        self.each_step: Callable[[LocalRuntime], None] = lambda local: None
        self.errors: list[BaseException] = []
        self._calls: queue.Queue[tuple[Callable[[LocalRuntime], Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="squall-local", daemon=True)

    def __enter__(self) -> Driver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def call(self, fn: Callable[[LocalRuntime], Any], *, timeout: float = 60) -> Any:
        future: Future[Any] = Future()
        self._calls.put((fn, future))
        return future.result(timeout)

    def _loop(self) -> None:
        local = self.local
        while not self._stop.is_set():
            try:
                local.settle()
                self.each_step(local)
                while not self._calls.empty():
                    fn, future = self._calls.get_nowait()
                    try:
                        future.set_result(fn(local))
                    except Exception as exc:  # handed to the caller
                        future.set_exception(exc)
                upcoming = [t for t in (local.next_event_time(), local.cluster.next_event_time()) if t]
                wait = TICK_SECONDS
                if upcoming:
                    wait = min(wait, self.clock.wall_seconds(min(upcoming) - self.clock.now()))
                self._stop.wait(max(wait, 0.01))
                local.cluster.advance()
            except Exception as exc:  # the test reads it; the loop must not die silently
                self.errors.append(exc)
                self._stop.wait(TICK_SECONDS)


class Evictor:
    """Evicts worker 1's pod once, when the chief has pushed its first periodic checkpoint."""

    def __init__(self, endpoint: str) -> None:
        self.s3 = client("s3", endpoint)
        self.index = f"teams/research/checkpoints/{JOB_ID}/checkpoints/checkpoint"
        self.evicted: str | None = None
        self.checked_at = 0.0

    def __call__(self, local: LocalRuntime) -> None:
        if self.evicted is not None or time.monotonic() < self.checked_at + 0.5:
            return
        self.checked_at = time.monotonic()
        worker = [
            p
            for p in local.cluster.list_pods(job_id=JOB_ID)
            if p["metadata"]["labels"].get("squall.io/replica-type") == "worker"
            and p["metadata"]["labels"].get("squall.io/replica-index") == "1"
            and p["status"]["phase"] == "Running"
        ]
        if not worker or not self._checkpointed():
            return
        name = worker[0]["metadata"]["name"]
        assert local.cluster.evict(namespace=NAMESPACE, name=name)
        self.evicted = name

    def _checkpointed(self) -> bool:
        try:
            self.s3.head_object(Bucket=BUCKET, Key=self.index)
        except self.s3.exceptions.ClientError:
            return False
        return True


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """The example the quickstart submits, with an id to follow and a longer run to interrupt."""
    body = yaml.safe_load(EXAMPLE.read_text())
    args = list(body["args"])
    for flag, value in (("--steps", STEPS), ("--checkpoint-every", CHECKPOINT_EVERY), ("--log-every", 5)):
        args[args.index(flag) + 1] = str(value)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body | {"id": JOB_ID, "args": args}))
    return path


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[LocalRuntime, Driver]]:
    with real_pods_runtime(tmp_path) as running:
        yield running


@contextmanager
def real_pods_runtime(tmp_path: Path) -> Iterator[tuple[LocalRuntime, Driver]]:
    """The local runtime on a wall clock, its pods run as local processes, the CLI's environment set."""
    clock = WallClock(speed=SPEED)
    groups = node_groups()
    capacity = {
        g["region"]: RegionCapacity(instances={}, boot_time=BOOT_TIME, gpu_plugin_delay=GPU_PLUGIN_DELAY)
        for g in groups
    }

    made: list[ProcessRunner] = []

    def runner(resources: Any) -> ProcessRunner:
        made.append(
            ProcessRunner(
                endpoint=resources.endpoint,
                log_group=resources.log_group,
                work_dir=tmp_path / "pods",
                logs_client=client("logs", resources.endpoint),
                images=WORKER_IMAGES,
                # The venv has the worker image's pinned requirements: no pip in the pods.
                image_env=default_image_env({"SQUALL_SKIP_REQUIREMENTS": "1"})
                | {"TF_CPP_MIN_LOG_LEVEL": "2"},
            )
        )
        return made[-1]

    with LocalRuntime.start(clock=clock, node_groups=groups, capacity=capacity, pod_runner=runner) as runtime:
        environment = cli_environment(
            runtime.resources, teams=DEFAULT_TEAMS, registries=list(DEFAULT_REGISTRIES)
        )
        # Undone before the runtime stops: the endpoint puts back the environment it found,
        # and a monkeypatch undone after it would put the endpoint's address back instead.
        with pytest.MonkeyPatch.context() as patched:
            for key, value in environment.items():
                patched.setenv(key, value)
            patched.chdir(ROOT)
            with Driver(runtime, clock, runner=made[0]) as driver:
                yield runtime, driver


def events(text: str, label: str) -> list[dict[str, Any]]:
    """The trainer's JSON-lines events among `squall logs` lines of replica `label`."""
    prefix = f"[{label}] "
    return [json.loads(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix + "{")]


def test_code_in_logs_and_tensorboard_out_surviving_an_eviction(
    local: tuple[LocalRuntime, Driver],
    spec: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime, driver = local
    evictor = Evictor(runtime.resources.endpoint)
    driver.each_step = evictor

    # when: the quickstart's submit, followed to the end
    code = main(["submit", str(spec), "--code", CODE, "--watch"])
    out = capsys.readouterr().out

    # then the job succeeded, and a worker was evicted on the way
    assert code == 0, out
    assert not driver.errors, driver.errors
    assert evictor.evicted is not None, "the run ended before the first checkpoint was seen"
    record = runtime.store.get(JOB_ID)
    assert record is not None and record.status.value == "SUCCEEDED"
    assert record.spec["codeUri"].startswith(f"s3://{BUCKET}/code/research/")
    reasons = [event.reason for event in runtime.events(JOB_ID)]
    assert any(reason.startswith("NodeLost:retry 1/") for reason in reasons), reasons

    # checkpoints, event files and the SavedModel are in the local S3
    s3 = boto3.client("s3")
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="teams/research/")
        for o in page.get("Contents", [])
    ]
    base = f"teams/research/checkpoints/{JOB_ID}/"
    assert f"{base}checkpoints/checkpoint" in keys
    assert any(k.startswith(f"{base}checkpoints/ckpt-{STEPS}.") for k in keys), keys
    assert any(k.startswith(f"{base}logs/") and ".tfevents." in k for k in keys), keys
    assert f"teams/research/models/{JOB_ID}/saved_model.pb" in keys

    # squall logs: every replica's lines, after the pods are gone too. A deleted pod's object
    # goes at once, its process only once stopped: wait until every process has exited and
    # its last lines are shipped (the chief's success stops the other worker's Job).
    assert driver.runner is not None
    runner = driver.runner
    until(
        lambda: not driver.call(lambda rt: rt.cluster.list_pods(job_id=JOB_ID)) and not runner.running(),
        seconds=120,
    )
    assert main(["logs", JOB_ID]) == 0
    logs = capsys.readouterr().out
    for label in ("worker-0", "worker-1"):
        replica = events(logs, label)
        restored = [e for e in replica if e["event"] == "restored"]
        # the re-run of each worker resumed from the checkpoint written at the eviction
        assert restored and restored[-1]["step"] > 0, [e["event"] for e in replica]
        assert [e["step"] for e in replica if e["event"] == "done"][-1] == STEPS
        stopped = [e for e in replica if e["event"] == "stopped early"]
        assert len(stopped) == 1 and stopped[0]["step"] == restored[-1]["step"]
    assert main(["logs", JOB_ID, "--replica", "worker-1"]) == 0
    only = capsys.readouterr().out.splitlines()
    assert only and all(line.startswith("[worker-1] ") for line in only)

    # squall tensorboard --once: the event files, with scalars TensorBoard's reader sees
    board = tmp_path / "board"
    assert main(["tensorboard", JOB_ID, "--once", "--dir", str(board)]) == 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(board / "logs"))
    accumulator.Reload()
    scalars = [
        tag
        for tag in accumulator.Tags()["tensors"]
        if accumulator.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
    ]
    assert {"loss/generator", "loss/discriminator"} <= set(scalars)
    steps = [e.step for e in accumulator.Tensors("loss/generator")]
    assert max(steps) == STEPS and min(steps) < int(restored[-1]["step"])  # both runs' scalars
    assert accumulator.SummaryMetadata("samples").plugin_data.plugin_name == "images"  # the sample grids
