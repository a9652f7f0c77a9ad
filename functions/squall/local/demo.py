"""`squall demo`: the burst story, through the real handlers, on the embedded default.

Two EKS clusters, one per region, as GPU fleets are run: gpu-west in us-west-2
(preferred) and gpu-east in us-east-1, each simulated on its own (its API, nodes and
scheduler). One researcher iterates on one GPU; eight minutes in, a 60-GPU
experiment lands (five distributed TensorFlow jobs of 12 GPUs); us-west-2 runs out
of p3.8xlarge after four instances and the rest of the burst spills into gpu-east;
each job's objects are in exactly one cluster, the jobs finish and every group
scales back to zero. An invalid spec, a body that is not JSON, a message delivered
twice and a client id used twice ride along. At the end the story says where the
jobs ran: per cluster, the jobs admission placed there (the records' `cluster`) and
the cluster's peaks (the summary's `clusters`).

The story is the scenario in scenarios/burst.yaml (a test keeps the two equal); it
is spelled out here too so that `squall demo` works from any directory. On a
terminal it runs at 300x with the live view; elsewhere it prints plain lines and
runs as fast as it can. At the end the CloudWatch dashboard is rendered from the
metrics the functions emitted, to PNG and HTML (and created on the local endpoint).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from squall.core.jobs import JobStatus
from squall.local.live import RichLiveView, make_view
from squall.local.render import DashboardFiles, write_dashboard
from squall.local.runtime import LocalRuntime
from squall.local.scenario import ScenarioPlan, Simulation, SimulationResult, compile_scenario
from squall.local.summary import JobRow

IMAGE = "registry.example.com/squall/tf-trainer:1.0"
DASHBOARD_DIR = Path("out/dashboard")


def single_gpu_job(number: int) -> dict[str, Any]:
    """The researcher iterating on one GPU."""
    return {
        "name": "resnet-tune",
        "id": f"resnet-tune-{number}",
        "team": "research",
        "image": IMAGE,
        "command": ["python", "-m", "trainer"],
        "args": ["--epochs", "3", "--lr", str(round(0.1 / number, 3))],
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": 1},
        "maxRuntime": "1h",
    }


def distributed_job() -> dict[str, Any]:
    """The 12-GPU experiment: a chief, 11 workers and a parameter server."""
    return {
        "name": "gan-sweep",
        "id": "gan-dist",
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


# The demo's clusters, in preference order: one per region.
CLUSTERS = [{"name": "gpu-west", "region": "us-west-2"}, {"name": "gpu-east", "region": "us-east-1"}]


def node_groups() -> list[dict[str, Any]]:
    """Two regions; us-west-2 is preferred (priority 10), us-east-1 is the fallback.

    As one cluster's groups (they name none): `squall local up`'s default. The demo puts
    each region's groups in that region's cluster (`demo_scenario`).
    """
    v100 = {"squall.io/accelerator": "v100"}
    return [
        {"name": "p3-usw2", "region": "us-west-2", "asgName": "squall-p3-usw2", "instanceType": "p3.8xlarge",
         "allocatable": P3, "labels": v100, "taints": GPU_TAINTS,
         "priority": 10, "minSize": 0, "maxSize": 10, "pricePerHour": 12.24},
        {"name": "p3-use1", "region": "us-east-1", "asgName": "squall-p3-use1", "instanceType": "p3.8xlarge",
         "allocatable": P3, "labels": v100, "taints": GPU_TAINTS,
         "priority": 20, "minSize": 0, "maxSize": 20, "pricePerHour": 12.24},
        {"name": "m5-usw2", "region": "us-west-2", "asgName": "squall-m5-usw2", "instanceType": "m5.4xlarge",
         "allocatable": M5, "priority": 10, "minSize": 0, "maxSize": 10, "pricePerHour": 0.768},
        {"name": "m5-use1", "region": "us-east-1", "asgName": "squall-m5-use1", "instanceType": "m5.4xlarge",
         "allocatable": M5, "priority": 20, "minSize": 0, "maxSize": 10, "pricePerHour": 0.768},
    ]  # fmt: skip


def demo_scenario() -> dict[str, Any]:
    """scenarios/burst.yaml, as data."""
    second = single_gpu_job(2)
    in_cluster = {c["region"]: c["name"] for c in CLUSTERS}
    return {
        "name": "burst",
        "description": "one GPU, then 60 GPUs; us-west-2's cluster runs out, the burst spills into us-east-1's; "
        "back to zero",
        "clock": {"speed": 300},
        "policy": {"idleThreshold": "PT5M", "bootGrace": "PT2M"},
        "clusters": [dict(c) for c in CLUSTERS],
        # us-west-2 runs out of p3.8xlarge after four instances; us-east-1 has plenty.
        "regions": {
            "us-west-2": {"capacity": {"p3.8xlarge": 4}, "bootTime": "3m"},
            "us-east-1": {"capacity": {"p3.8xlarge": 40}, "bootTime": "3m"},
        },
        "nodeGroups": [group | {"cluster": in_cluster[group["region"]]} for group in node_groups()],
        "arrivals": [
            {"at": "0s", "spec": single_gpu_job(1), "runTime": "4m"},
            {"at": "0s", "spec": second, "runTime": "4m", "deliverTwice": True},
            {
                "at": "0s",
                "spec": second | {"args": ["--note", "same client id, another message"]},
                "expect": "duplicate",
            },
            {"at": "0s", "spec": invalid_job(), "expect": "rejected"},
            {"at": "0s", "body": "{this is not json", "expect": "deadLetter"},
            {"at": "8m", "count": 5, "spec": distributed_job(), "runTime": "20m"},
            {"at": "8m", "spec": single_gpu_job(3), "runTime": "4m"},
        ],
        "end": {"when": "scaledDown", "limit": "3h"},
    }


@dataclass
class DemoResult:
    summary: dict[str, Any]
    ok: bool
    dashboard: DashboardFiles | None = None
    jobs: list[JobRow] = field(default_factory=list)  # every job record at the end (its cluster among it)


def run_demo(
    *,
    out: TextIO = sys.stdout,
    as_json: bool = False,
    backend: str = "moto",
    dashboard_dir: Path | None = DASHBOARD_DIR,
) -> DemoResult:
    plan = compile_scenario(demo_scenario(), source="demo")
    say: Callable[[str], None] = (lambda _line: None) if as_json else (lambda line: print(line, file=out))
    say(f"Squall demo: the real handlers on {_where(backend)} and two simulated EKS clusters.")
    say("Clusters: gpu-west in us-west-2 (preferred; its region has room for four p3.8xlarge)")
    say("and gpu-east in us-east-1, each with a p3.8xlarge group (4 GPUs) and a CPU group.")
    say("Every group starts at zero.\n")
    view = None if as_json else make_view(out, title="Squall demo: the burst", follow_jobs=True)
    extra: dict[str, Any] = {}
    drawn: list[DashboardFiles] = []

    def before(local: LocalRuntime) -> None:
        if local.backend.resources is not None and not isinstance(view, RichLiveView):
            say(f"  local AWS endpoint {local.resources.endpoint}")

    def after(local: LocalRuntime, result: SimulationResult) -> None:
        for job in local.jobs():
            if job.status is JobStatus.REJECTED:
                say(f"\n  {job.id} rejected:")
                for error in job.errors:
                    say(f"    {error['field']}: {error['message']}")
        extra.update(
            {
                "kubernetesJobs": local.cluster_stats()["jobs_created"],
                "deadLetters": len(local.dead_letters()),
                "duplicatesIgnored": int(local.metrics.total("JobsDuplicate")),
                "redeliveries": local.deliveries.redelivered,
                "nodesAtEnd": len(local.fleet.running_nodes()) if local.fleet is not None else 0,
            }
        )
        if dashboard_dir is not None:
            drawn.append(_dashboard(local, plan, dashboard_dir, say))

    simulation = Simulation(plan, backend=backend, view=view, pace=isinstance(view, RichLiveView))
    result = simulation.run(before=before, after=after)
    summary = _ordered(result.summary | extra)
    say("")
    for line in where_jobs_ran(plan, summary, result.jobs):
        say(f"  {line}")
    say("\n  " + json.dumps(summary))
    if as_json:
        print(json.dumps(summary), file=out)
    return DemoResult(summary=summary, ok=result.ok, dashboard=drawn[0] if drawn else None, jobs=result.jobs)


def where_jobs_ran(plan: ScenarioPlan, summary: dict[str, Any], jobs: Sequence[JobRow]) -> list[str]:
    """Per cluster, in preference order: the jobs placed there (records' `cluster`) and its peaks."""
    placed = Counter(job.cluster for job in jobs if job.cluster)
    peaks = summary.get("clusters", {})
    lines = ["where the jobs ran:"]
    for entry in plan.clusters:
        peak = peaks.get(entry.name, {})
        count = placed[entry.name]
        lines.append(
            f"  {entry.name} ({entry.region}): {count} job{'' if count == 1 else 's'}, "
            f"at most {peak.get('peakNodes', 0)} nodes and {peak.get('peakGpusBusy', 0)} GPUs busy"
        )
    used = [e for e in plan.clusters if placed[e.name]]
    if len(used) > 1:
        first, rest = used[0], used[1:]
        into = ", ".join(f"{e.name} ({e.region})" for e in rest)
        twice = summary.get("invariants", {}).get("jobsInTwoClusters")
        lines.append(
            f"the burst spilled from {first.name} ({first.region}) into {into}; "
            + (
                "each job's objects were in one cluster only"
                if twice == 0
                else f"{twice} job(s) had objects in two clusters"
            )
        )
    return lines


def _dashboard(
    local: LocalRuntime, plan: ScenarioPlan, directory: Path, say: Callable[[str], None]
) -> DashboardFiles:
    endpoint = local.backend.resources.endpoint if local.backend.resources is not None else None
    files = write_dashboard(
        directory,
        groups=plan.groups,
        points=local.metrics.points,
        start=plan.start,
        end=local.clock.now(),
        endpoint=endpoint,
        teams=local.services.settings.team_shares(),
    )
    say(f"\n  dashboard: {files.png} and {files.html} (body {files.body})")
    if files.created is not None:
        say(f"  and created on the local endpoint: {files.created}")
    return files


def _where(backend: str) -> str:
    return "a local AWS endpoint (moto)" if backend == "moto" else "in-memory AWS stand-ins"


KEY_ORDER = (
    "jobs", "kubernetesJobs", "deadLetters", "duplicatesIgnored", "redeliveries", "queueWaitSeconds", "gpuHours",
    "cost", "peakNodes", "scaleUps", "fallbacks", "scaleDowns", "gangsReleased", "drains", "hooksCompleted", "nodesAtEnd",
    "invariants", "functionErrors", "virtualSeconds", "wallSeconds", "finished",
)  # fmt: skip


def _ordered(summary: dict[str, Any]) -> dict[str, Any]:
    return {key: summary[key] for key in KEY_ORDER if key in summary} | {
        key: value for key, value in summary.items() if key not in KEY_ORDER
    }
