"""`squall demo`: a handful of jobs through the real handlers, on the embedded default.

A single-GPU job, a distributed TensorFlow job (chief, workers, a parameter
server), an invalid spec, a body that is not JSON, one message delivered twice and
a client id used twice. The view prints each job's state changes as they happen on
the virtual clock; `--json` ends with one summary object.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TextIO

from squall.jobs import JobStatus, is_terminal
from squall.local.clock import VirtualClock
from squall.local.cluster import SimulatedCluster
from squall.local.fleet import RegionCapacity
from squall.local.runtime import LocalRuntime
from squall.settings import PolicySettings

IMAGE = "registry.example.com/squall/tf-trainer:1.0"



def single_gpu_job(number: int) -> dict[str, Any]:
    """The researcher iterating on one GPU."""
    return {
        "name": "resnet-tune",
        "id": f"resnet-tune-{number}",
        "team": "research",
        "image": IMAGE,
        "command": ["python", "-m", "trainer"],
        "args": ["--epochs", "3", "--lr", str(0.1 / number)],
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
        "maxRuntime": "1h",
    }


def distributed_job(number: int) -> dict[str, Any]:
    """One of five 12-GPU experiments: a chief, 11 workers and a parameter server."""
    return {
        "name": "gan-sweep",
        "id": f"gan-dist-{number}",
        "team": "vision",
        "image": IMAGE,
        "resources": {"cpu": "8", "memory": "48Gi", "gpu": 1},
        "replicas": {
            "chief": 1,
            "worker": {"count": 11},
            "ps": {"count": 1, "resources": {"cpu": "4", "memory": "8Gi", "gpu": 0}},
        },
        "retries": 2,
    }


def invalid_job() -> dict[str, Any]:
    return {
        "name": "Bad_Name!",
        "team": "marketing",
        "image": "docker.io/someone/miner:latest",
        "resources": {"gpu": -1, "memory": "lots"},
        "privileged": True,
    }


P3 = {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58}
M5 = {"cpu": "15890m", "memory": "57Gi", "pods": 58}
GPU_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def node_groups() -> list[dict[str, Any]]:
    """Two regions; us-west-2 is preferred (priority 10), us-east-1 is the fallback."""
    return [
        {"name": "p3-usw2", "region": "us-west-2", "asgName": "squall-p3-usw2", "instanceType": "p3.8xlarge",
         "allocatable": P3, "labels": {"squall.io/accelerator": "v100"}, "taints": GPU_TAINTS,
         "priority": 10, "minSize": 0, "maxSize": 10, "pricePerHour": 12.24},
        {"name": "p3-use1", "region": "us-east-1", "asgName": "squall-p3-use1", "instanceType": "p3.8xlarge",
         "allocatable": P3, "labels": {"squall.io/accelerator": "v100"}, "taints": GPU_TAINTS,
         "priority": 20, "minSize": 0, "maxSize": 20, "pricePerHour": 12.24},
        {"name": "m5-usw2", "region": "us-west-2", "asgName": "squall-m5-usw2", "instanceType": "m5.4xlarge",
         "allocatable": M5, "priority": 10, "minSize": 0, "maxSize": 10, "pricePerHour": 0.768},
        {"name": "m5-use1", "region": "us-east-1", "asgName": "squall-m5-use1", "instanceType": "m5.4xlarge",
         "allocatable": M5, "priority": 20, "minSize": 0, "maxSize": 10, "pricePerHour": 0.768},
    ]


# us-west-2 runs out of p3.8xlarge after four instances; us-east-1 has plenty.
CAPACITY = {
    "us-west-2": RegionCapacity(instances={"p3.8xlarge": 4}, boot_time=timedelta(minutes=3)),
    "us-east-1": RegionCapacity(instances={"p3.8xlarge": 40}, boot_time=timedelta(minutes=3)),
}


@dataclass
class DemoResult:
    summary: dict[str, Any]
    ok: bool


def run_demo(*, out: TextIO = sys.stdout, as_json: bool = False, backend: str = "moto") -> DemoResult:
    started = time.monotonic()
    clock = VirtualClock()
    cluster = SimulatedCluster(clock=clock, default_run_for=timedelta(minutes=3))
    for number in range(1, 4):
        cluster.set_behaviour(f"resnet-tune-{number}", run_for=timedelta(minutes=4))
    for number in range(1, 6):
        cluster.set_behaviour(f"gan-dist-{number}", run_for=timedelta(minutes=20))

    say: Callable[[str], None] = (lambda _line: None) if as_json else (lambda line: print(line, file=out))
    say("Squall demo: the real handlers on a local AWS endpoint (moto) and a simulated cluster.")
    say("Node groups: p3.8xlarge (4 GPUs) in us-west-2 (preferred, room for 4) and us-east-1;")
    say("CPU groups beside them. Every group starts at zero.\n")
    with LocalRuntime.start(
        clock=clock,
        cluster=cluster,
        node_groups=node_groups(),
        capacity=CAPACITY,
        policy=PolicySettings.model_validate({"idleThreshold": "PT5M", "bootGrace": "PT2M"}),
        log_level=logging.CRITICAL,
        backend=backend,
    ) as local:
        if local.backend.resources is not None:
            say(f"  local AWS endpoint {local.resources.endpoint}")
        view = ProgressView(say)
        # A researcher iterating on one GPU: one job, then the next when it is done.
        local.send(single_gpu_job(1))
        local.send(invalid_job())
        local.send("{this is not json")
        twice = local.send(single_gpu_job(2) | {"id": "resnet-tune-2"})
        local.deliver_twice.add(twice)
        local.send(single_gpu_job(2) | {"args": ["--note", "same client id, another message"]})
        burst_sent = False

        def on_step(rt: LocalRuntime) -> None:
            nonlocal burst_sent
            view.show(rt)
            if not burst_sent and rt.clock.elapsed >= timedelta(minutes=8):
                say("  -- the 60-GPU experiment lands: five 12-GPU distributed jobs --")
                for number in range(1, 6):
                    rt.send(distributed_job(number))
                rt.send(single_gpu_job(3))
                burst_sent = True

        finished = local.run(
            until=lambda rt: burst_sent and view.all_finished and view.gpu_nodes(rt) == 0,
            step=timedelta(seconds=10),
            limit=timedelta(hours=3),
            on_step=on_step,
        )
        for job in local.jobs():
            if job.status is JobStatus.REJECTED:
                say(f"\n  {job.id} rejected:")
                for error in job.errors:
                    say(f"    {error['field']}: {error['message']}")
        summary = {
            "jobs": dict(sorted(local.job_counts().items())),
            "kubernetesJobs": cluster.stats()["jobs_created"],
            "deadLetters": len(local.dead_letters()),
            "duplicatesIgnored": int(local.metrics.total("JobsDuplicate")),
            "redeliveries": local.deliveries.redelivered,
            "peakNodes": dict(sorted(view.peak_nodes.items())),
            "scaleUps": int(local.metrics.total("ScaleUps")),
            "fallbacks": int(local.metrics.total("Fallbacks")),
            "scaleDowns": int(local.metrics.total("ScaleDowns")),
            "nodesAtEnd": len(cluster.list_nodes()),
            "virtualSeconds": int(clock.elapsed.total_seconds()),
            "wallSeconds": round(time.monotonic() - started, 2),
            "finished": finished,
        }
    say("\n  " + json.dumps(summary))
    if as_json:
        print(json.dumps(summary), file=out)
    return DemoResult(summary=summary, ok=finished)


class ProgressView:
    """Prints each job's state changes and each change in the node count, with virtual time."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.seen: dict[str, str] = {}
        self.nodes_line = ""
        self.peak_nodes: dict[str, int] = {}
        self.all_finished = False

    @staticmethod
    def gpu_nodes(rt: LocalRuntime) -> int:
        return sum(1 for n in rt.cluster.list_nodes() if int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) > 0)

    def stamp(self, rt: LocalRuntime) -> str:
        elapsed = int(rt.clock.elapsed.total_seconds())
        return f"t+{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}"

    def show(self, rt: LocalRuntime) -> None:
        jobs = rt.jobs()
        self.all_finished = bool(jobs) and all(is_terminal(j.status) for j in jobs)
        for job in sorted(jobs, key=lambda j: j.submitted_at):
            label = f"{job.status.value} ({job.reason})"
            if self.seen.get(job.id) != label:
                self.seen[job.id] = label
                self.say(f"  {self.stamp(rt)}  {job.id:<24} {label}")
        regions: Counter[str] = Counter()
        gpus: Counter[str] = Counter()
        for node in rt.cluster.list_nodes():
            region = node["metadata"]["labels"].get("topology.kubernetes.io/region", "?")
            regions[region] += 1
            gpus[region] += int(node["status"]["allocatable"].get("nvidia.com/gpu", "0"))
        for region, count in regions.items():
            self.peak_nodes[region] = max(self.peak_nodes.get(region, 0), count)
        line = ", ".join(f"{r} {regions[r]} nodes/{gpus[r]} GPUs" for r in sorted(regions)) or "no nodes"
        if line != self.nodes_line:
            self.nodes_line = line
            self.say(f"  {self.stamp(rt)}  {'[cluster]':<24} {line}")
