"""The trainer as separate processes: SIGTERM, and distributed jobs whose TF_CONFIG
comes from Squall's own manifest rendering (so these tests prove TensorFlow accepts
what Squall renders), with Service addresses rewritten to localhost ports."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf
from trainer import exits

from squall.core.manifests import render
from squall.core.spec import parse_spec
from tests.worker.harness import (
    METRIC_LINE,
    checkpoint_steps,
    free_ports,
    named,
    run_main,
    tiny_args,
)

pytestmark = pytest.mark.slow

NAMESPACE = "team-research"
REGISTRY = "registry.local"
SERVICE_ADDRESS = re.compile(rf"^(?P<service>[a-z0-9-]+)\.{NAMESPACE}\.svc:(?P<port>\d+)$")


@dataclass(frozen=True)
class Replica:
    """One rendered Job's container, ready to run on this machine."""

    name: str
    command: list[str]
    args: list[str]
    env: dict[str, str]

    @property
    def tf_config(self) -> dict[str, Any]:
        return json.loads(self.env["TF_CONFIG"])


def render_replicas(replicas: dict[str, Any], args: list[str]) -> dict[str, Replica]:
    """Squall's Jobs for a job spec, TF_CONFIG addresses rewritten to 127.0.0.1.

    Every address must be ``<Service name>.<namespace>.svc:<Service port>`` of a
    Service in the same rendering: that is what makes the cluster reachable on
    Kubernetes, and the rewrite below relies on it.
    """
    spec = parse_spec(
        {
            "name": "gan",
            "team": "research",
            "image": f"{REGISTRY}/tf-trainer:1.0",
            "command": ["python", "-m", "trainer"],
            "args": args,
            "replicas": replicas,
        },
        teams=["research"],
        registries=[REGISTRY],
    )
    manifests = render(spec, job_id="gan-1", namespace=NAMESPACE)
    services = {m["metadata"]["name"]: m["spec"] for m in manifests if m["kind"] == "Service"}
    jobs = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Job"}
    rendered = {}
    for name, job in jobs.items():
        (container,) = job["spec"]["template"]["spec"]["containers"]
        rendered[name] = Replica(
            name=name,
            command=container["command"],
            args=container.get("args", []),
            env={e["name"]: e["value"] for e in container["env"]},
        )
    addresses = sorted(
        {a for r in rendered.values() for hosts in r.tf_config["cluster"].values() for a in hosts}
    )
    for address in addresses:
        match = SERVICE_ADDRESS.match(address)
        assert match, f"{address} is not <service>.{NAMESPACE}.svc:<port>"
        service = services.get(match["service"])
        assert service is not None, f"no Service named after {address}"
        (port,) = service["ports"]
        assert port["port"] == int(match["port"]), f"{address}: the Service listens on {port['port']}"
        # ...and it reaches the pod of the Job of the same name, on the port TF listens on.
        job = jobs[match["service"]]
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert service["selector"].items() <= labels.items(), f"{address}: selector misses the pod"
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert port["targetPort"] in [p["containerPort"] for p in container.get("ports", [])]
    local = dict(zip(addresses, (f"127.0.0.1:{p}" for p in free_ports(len(addresses))), strict=True))
    for replica in rendered.values():
        replica.env["TF_CONFIG"] = json.dumps(
            {
                **replica.tf_config,
                "cluster": {k: [local[a] for a in v] for k, v in replica.tf_config["cluster"].items()},
            }
        )
    return rendered


def start_replicas(spawn: Any, replicas: dict[str, Replica], tmp_path: Path) -> dict[str, Any]:
    processes = {}
    for name, replica in replicas.items():
        assert replica.command == ["python", "-m", "trainer"]  # what spawn runs
        # Each pod has its own scratch disk; the model dir is shared (S3 on AWS).
        args = [*replica.args, "--work-dir", str(tmp_path / name)]
        processes[name] = spawn(args, env=replica.env, name=name)
    return processes


def test_sigterm_mid_run_leaves_a_checkpoint_a_rerun_resumes_from(spawn: Any, tmp_path: Path) -> None:
    args = ["--model-dir", str(tmp_path), *tiny_args(log_every=1, checkpoint_every=10**6, image_every=10**6)]
    trainer = spawn([*args, "--steps", str(10**6)])

    # given a run some steps in, with no periodic checkpoint yet
    seen = trainer.wait_for(lambda e: e["event"] == "step" and e["step"] >= 3)
    assert checkpoint_steps(tmp_path / "checkpoints") == []
    # when Kubernetes asks it to stop
    trainer.terminate()
    code = trainer.finish(timeout=120)

    # then it checkpoints the step it reached and exits for a re-run
    assert code == exits.RETRY, trainer.output()
    (saved,) = named(trainer.events(), "checkpoint saved")
    assert saved["reason"] == "preempted" and saved["step"] >= seen["step"]
    assert checkpoint_steps(tmp_path / "checkpoints") == [saved["step"]]
    assert not METRIC_LINE.search(trainer.output())  # no export, no metric: not finished
    # The losses it reported before the stop are out already (flushed as printed).
    assert f"step={seen['step']}" in "".join(line for line in trainer.lines if line.startswith("squall-metric"))
    # and the checkpoint is usable: the next run restores it and carries on
    rerun = run_main([*args, "--steps", str(saved["step"] + 1)])
    assert rerun.code == exits.OK, rerun.stdout
    assert named(rerun.events, "restored")[0]["step"] == saved["step"]
    assert rerun.steps() == [saved["step"] + 1]


@pytest.mark.timeout(420)
def test_two_workers_from_squalls_tf_config_train_together(spawn: Any, tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    replicas = render_replicas(
        {"worker": {"count": 2}},
        ["--model-dir", str(model_dir), *tiny_args(steps=3, log_every=1, checkpoint_every=2)],
    )
    assert sorted(replicas) == ["gan-1-worker-0", "gan-1-worker-1"]

    processes = start_replicas(spawn, replicas, tmp_path)
    codes = {name: p.finish(timeout=360) for name, p in processes.items()}

    chief, other = processes["gan-1-worker-0"], processes["gan-1-worker-1"]
    assert codes == {"gan-1-worker-0": exits.OK, "gan-1-worker-1": exits.OK}, chief.output() + other.output()
    for process in (chief, other):
        (training,) = named(process.events(), "training")
        assert (training["mode"], training["replicas"]) == ("collective", 2)
    assert named(chief.events(), "training")[0]["chief"] is True
    assert named(other.events(), "training")[0]["chief"] is False
    # Losses are all-reduced across both workers: identical step by step. Two
    # workers training alone on their own shards would disagree at once.
    losses = [
        [(e["step"], e["d_loss"], e["g_loss"]) for e in named(p.events(), "step")] for p in (chief, other)
    ]
    assert [s for s, _, _ in losses[0]] == [1, 2, 3]
    assert losses[0] == losses[1]
    # Only the chief (worker 0, as there is no chief replica) writes the model dir
    # and reports the sweep metric.
    assert checkpoint_steps(model_dir / "checkpoints") == [2, 3]
    assert (model_dir / "saved_model" / "saved_model.pb").exists()
    assert METRIC_LINE.search(chief.output())
    assert not METRIC_LINE.search(other.output())
    # So does each squall-metric line: Squall reads every pod's stream, one report a step.
    reported = [line for line in "".join(chief.lines).splitlines() if line.startswith("squall-metric train/")]
    assert [line.rsplit("step=", 1)[1] for line in reported] == ["1", "2", "3"]
    assert "squall-metric" not in "".join(other.lines)


@pytest.mark.timeout(420)
def test_sigterm_to_one_worker_stops_both_at_the_same_checkpointed_step(spawn: Any, tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    replicas = render_replicas(
        {"worker": {"count": 2}},
        [
            "--model-dir",
            str(model_dir),
            *tiny_args(steps=10**6, log_every=1, checkpoint_every=10**6, image_every=10**6),
        ],
    )
    processes = start_replicas(spawn, replicas, tmp_path)
    chief, evicted = processes["gan-1-worker-0"], processes["gan-1-worker-1"]

    # when the node of the non-chief worker is drained mid-run
    evicted.wait_for(lambda e: e["event"] == "step" and e["step"] >= 2)
    evicted.terminate()
    codes = [chief.finish(timeout=300), evicted.finish(timeout=300)]

    # then both agree on the step, the chief checkpoints it, and both exit for a re-run
    assert codes == [exits.RETRY, exits.RETRY], chief.output() + evicted.output()
    (saved,) = named(chief.events(), "checkpoint saved")
    assert saved["reason"] == "peer preempted"
    stopped = [named(p.events(), "stopped early")[0] for p in (chief, evicted)]
    assert [(e["step"], e["reason"]) for e in stopped] == [
        (saved["step"], "peer preempted"),
        (saved["step"], "preempted"),
    ]
    assert checkpoint_steps(model_dir / "checkpoints") == [saved["step"]]
    reader = tf.train.load_checkpoint(str(model_dir / "checkpoints"))
    assert reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == saved["step"]


@pytest.mark.timeout(420)
def test_parameter_server_job_from_squalls_tf_config(spawn: Any, tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    replicas = render_replicas(
        {"chief": 1, "ps": {"count": 1}, "worker": {"count": 1}},
        ["--model-dir", str(model_dir), *tiny_args(steps=4, log_every=2, checkpoint_every=2)],
    )
    assert sorted(replicas) == ["gan-1-chief-0", "gan-1-ps-0", "gan-1-worker-0"]

    processes = start_replicas(spawn, replicas, tmp_path)
    for name, task in (("gan-1-ps-0", "ps"), ("gan-1-worker-0", "worker")):
        serving = processes[name].wait_for(lambda e: e["event"] == "serving")
        assert (serving["task"], serving["index"]) == (task, 0)
    chief = processes["gan-1-chief-0"]
    code = chief.finish(timeout=360)

    assert code == exits.OK, chief.output()
    (training,) = named(chief.events(), "training")
    assert training["mode"] == "coordinator"
    assert [e["step"] for e in named(chief.events(), "step")] == [2, 4]
    assert checkpoint_steps(model_dir / "checkpoints") == [2, 4]
    assert (model_dir / "saved_model" / "saved_model.pb").exists()
    assert METRIC_LINE.search(chief.output())
    # ps and worker serve on until Squall deletes their Jobs, the chief being done.
    assert processes["gan-1-ps-0"].process.poll() is None
    assert processes["gan-1-worker-0"].process.poll() is None
