"""`squall local up`'s long-running process: the embedded default, on a real-time clock.

Run as `python -m squall.local.server --state-dir D --port P [--speed N] [--groups FILE]`
(the `up` command starts it in a session of its own and waits for it). It runs
moto's server on 127.0.0.1:P with Squall's resources (local/aws.py), the
simulated clusters and fleet, and the real handlers (local/runtime.py), on
`WallClock(speed=N)`: the jobs queue is delivered, the debounced scale checks,
schedules, hooks and drains run as their time comes, and every cluster is advanced
every `TICK_SECONDS` of wall time. With real pods (the default here), the worker
image's pods run as local processes (local/processes.py), whichever cluster they
are in.

The node groups are the demo's (one cluster, `local`), or with `--groups FILE` a
groups file as `squall simulate --groups` reads it (local/trace.py
load_configuration): its node groups, its `clusters` (one simulated cluster per
entry, each group in the cluster it names; none named: one cluster), its policy,
its teams (namespaces and GPU quotas; anyone may submit locally) and its regions'
`capacity` (instances per type; unlimited where it says nothing). Nodes boot in
`BOOT_TIME` whatever the file's `bootTime` says: a researcher waits for a node in
seconds here.

The state directory holds:

- `local.json`: pid, the process's start time as the system counts it (what
  `down` and `status` recognise the process by: a pid alone may be reused by
  another program), port, endpoint, start time, speed, the groups file and the
  clusters (`[{name, region}]`) it serves, and the environment that
  points the CLI at it (what `up` and `local env` print, this session's credentials
  among it); written once everything is up, removed when the process stops;
- `status.json`: rewritten every `STATUS_SECONDS`: the clock, jobs by state,
  nodes, pods (in all and per cluster) and the real pods' processes, each with its pid and start time (what
  `status` shows; `down` kills a pod's process group only while its pid has that
  start time);
- `server.log`: the process's own output.

SIGTERM or SIGINT stops it: the real pods get SIGTERM (then SIGKILL), moto stops,
the state files go, and with them the local state: jobs, queues and logs live only
in this process's memory.

The directory is made 0700 and the files in it 0600: `local.json` holds the
credentials of the session, which are all that the local endpoint accepts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

STATE_FILE = "local.json"
STATUS_FILE = "status.json"
LOG_FILE = "server.log"
DEFAULT_PORT = 4580
TICK_SECONDS = 0.5
STATUS_SECONDS = 1.0
COUNT_LIMIT = 1000  # jobs counted per state in status.json; more reads as "1000+"
# Nodes join faster than on EC2: a researcher waits for a node in seconds, not minutes.
BOOT_TIME = timedelta(seconds=20)
GPU_PLUGIN_DELAY = timedelta(seconds=5)


def default_state_dir() -> Path:
    """$SQUALL_STATE_DIR, else $XDG_STATE_HOME/squall, else ~/.local/state/squall.

    Per user, not per directory: the port is the machine's, so there is one local
    Squall per user and `squall local down` finds it from anywhere.
    """
    if explicit := os.environ.get("SQUALL_STATE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "squall"


def cli_environment(resources: Any, *, teams: Mapping[str, str], registries: list[str]) -> dict[str, str]:
    """What points `squall submit/status/...` (and boto3) at the local endpoint, with its credentials.

    SQUALL_CLUSTER_NAME names the local log group's cluster (`squall`), however many
    clusters the server simulates: every real pod's output goes to that one group
    (`/aws/containerinsights/squall/application`, the endpoint's region), and `squall logs`
    with SQUALL_CLUSTER_NAME's one cluster reads that group for every placed job, whatever
    cluster its record names (cli/researcher.py log_cluster). SQUALL_CLUSTERS is left out on
    purpose: with it, `squall logs` would read each job's cluster's own group
    (`/aws/containerinsights/gpu-west/application`, ...), which the local runner never
    writes, and it would refuse SQUALL_CLUSTER_NAME's `squall` as a cluster it does not list.
    """
    from squall.local.aws import endpoint_credentials

    credentials = endpoint_credentials(resources.endpoint)
    if credentials is None:
        raise ValueError(f"{resources.endpoint} is not a local endpoint running in this process")
    return {
        "AWS_ENDPOINT_URL": resources.endpoint,
        **credentials.environment(),
        "SQUALL_TABLE_NAME": resources.table_name,
        "SQUALL_JOBS_QUEUE_URL": resources.jobs_queue_url,
        "SQUALL_ARTIFACTS_BUCKET": resources.artifacts_bucket,
        "SQUALL_CLUSTER_NAME": resources.cluster_name,
        # the runtime's teams and registries, so `validate` and `submit` check as it does
        "SQUALL_TEAMS": json.dumps(dict(teams), separators=(",", ":")),
        "SQUALL_ALLOWED_REGISTRIES": json.dumps(registries, separators=(",", ":")),
    }


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Atomically, readable by the owner only: a reader sees the old file or the new one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)


def private_dir(path: Path) -> None:
    """Make `path` (and its parents) if needed, and leave it 0700: it will hold credentials."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)


def process_start(pid: int) -> str | None:
    """When process `pid` started, as the system counts it; None when there is no such process.

    Another program that is later given the same pid has another start time, so a
    pid and its start time name one process.
    """
    try:  # Linux: field 22 of /proc/<pid>/stat, clock ticks since boot
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
    except (OSError, IndexError):
        return None
    try:  # macOS and other systems without /proc
        shown = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return shown or None


@dataclass(frozen=True)
class ServerOptions:
    state_dir: Path
    port: int = DEFAULT_PORT
    speed: float = 1.0
    real_pods: bool = True
    images: tuple[str, ...] = ()  # empty: processes.WORKER_IMAGES
    groups: Path | None = None  # a groups file (`squall simulate --groups`); None: the demo's groups


@dataclass(frozen=True)
class Served:
    """What the server runs: node groups, clusters, capacity, policy and teams."""

    node_groups: list[dict[str, Any]]
    clusters: list[Any]  # runtime.ClusterEntry; empty: the runtime's one default cluster
    capacity: dict[str, Any]  # region -> fleet.RegionCapacity
    policy: Any = None  # core.settings.PolicySettings; None: the runtime's default
    teams: dict[str, str] | None = None  # team -> namespace; None: the runtime's default teams
    quotas: dict[str, Any] | None = None  # team -> admission.TeamShare
    budgets: dict[str, float] | None = None  # team -> its monthly budget in dollars


def served(groups: Path | None) -> Served:
    """The demo's node groups (one cluster), or the groups file's; ScenarioError names what is wrong."""
    from squall.local.demo import node_groups
    from squall.local.fleet import RegionCapacity

    def capacity(regions: list[str], limits: Mapping[str, Any]) -> dict[str, Any]:
        return {
            region: RegionCapacity(
                instances=dict(limits[region].instances) if region in limits else {},
                boot_time=BOOT_TIME,
                gpu_plugin_delay=GPU_PLUGIN_DELAY,
            )
            for region in regions
        }

    if groups is None:
        default = node_groups()
        return Served(node_groups=default, clusters=[], capacity=capacity([g["region"] for g in default], {}))
    from squall.local.trace import load_configuration
    from squall.planner.inputs import team_budgets

    configuration = load_configuration(groups)
    regions = [g.region for g in configuration.groups] + [c.region for c in configuration.clusters]
    return Served(
        node_groups=configuration.node_groups,
        clusters=list(configuration.clusters),
        capacity=capacity(regions, configuration.capacity),
        policy=configuration.policy,
        # submitters are left out: locally, anyone may submit for any team
        teams={name: team.namespace for name, team in configuration.teams.items()} or None,
        quotas=configuration.quotas() or None,
        budgets=team_budgets(configuration.teams) or None,
    )


class ClustersRunner:
    """One ProcessRunner for the pods of every simulated cluster: it knows a pod by its node and uid.

    The runner tells pods apart by their uid, and each simulated cluster draws its
    objects' uids from a generator of its own, seeded alike: two clusters' first pods
    have the same uid, and the second would be taken for the first (never started, its
    exit the other's). A pod's node names its cluster (a node is its group's, and a group
    is one cluster's), so the runner is handed each pod with `<node>/<uid>` as its uid.
    """

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    @staticmethod
    def _scoped(pod: Mapping[str, Any]) -> dict[str, Any]:
        metadata = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName") or ""
        return {**pod, "metadata": {**metadata, "uid": f"{node}/{metadata.get('uid')}"}}

    def runs(self, pod: Mapping[str, Any]) -> bool:
        return bool(self.runner.runs(self._scoped(pod)))

    def start(self, pod: Mapping[str, Any]) -> bool:
        return bool(self.runner.start(self._scoped(pod)))

    def poll(self, pod: Mapping[str, Any]) -> int | None:
        code = self.runner.poll(self._scoped(pod))
        return None if code is None else int(code)

    def stop(self, pod: Mapping[str, Any]) -> None:
        self.runner.stop(self._scoped(pod))

    def ready(self, pod: Mapping[str, Any]) -> bool:
        return bool(self.runner.ready(self._scoped(pod)))

    def ports(self, pod: Mapping[str, Any]) -> Mapping[int, int] | None:
        found = self.runner.ports(self._scoped(pod))
        return None if found is None else dict(found)

    def running(self) -> list[dict[str, Any]]:
        return list(self.runner.running())

    def close(self, *, wait: float = 10.0) -> None:
        self.runner.close(wait=wait)


def serve(options: ServerOptions, *, stop: threading.Event | None = None) -> int:
    """Run until `stop` is set (SIGTERM/SIGINT set it when this is the main thread)."""
    from squall.local.aws import EndpointError
    from squall.local.clock import WallClock
    from squall.local.processes import WORKER_IMAGES, ProcessRunner
    from squall.local.runtime import DEFAULT_REGISTRIES, DEFAULT_TEAMS, LocalRuntime
    from squall.local.scenario import ScenarioError

    try:  # before anything starts: a groups file that cannot be served is said and nothing runs
        serving = served(options.groups)
    except ScenarioError as exc:
        print(f"squall local: {exc.source or options.groups}: cannot serve it", file=sys.stderr, flush=True)
        for error in exc.errors:
            print(f"  {error}", file=sys.stderr, flush=True)
        return 2

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    state_dir = options.state_dir
    private_dir(state_dir)
    clock = WallClock(speed=options.speed)
    teams = serving.teams or DEFAULT_TEAMS
    runner: ProcessRunner | None = None

    def make_runner(resources: Any) -> Any:
        nonlocal runner
        from squall.local.aws import client

        runner = ProcessRunner(
            endpoint=resources.endpoint,
            log_group=resources.log_group,
            work_dir=state_dir / "pods",
            logs_client=client("logs", resources.endpoint),
            images=options.images or WORKER_IMAGES,
        )
        return ClustersRunner(runner)

    started = datetime.now(UTC)
    try:
        with LocalRuntime.start(
            clock=clock,
            node_groups=serving.node_groups,
            clusters=serving.clusters or None,
            capacity=serving.capacity,
            policy=serving.policy,
            teams=teams,
            quotas=serving.quotas,
            budgets=serving.budgets,
            port=options.port,
            pod_runner=make_runner if options.real_pods else None,
            log_level=logging.WARNING,
        ) as local:
            environment = cli_environment(local.resources, teams=teams, registries=list(DEFAULT_REGISTRIES))
            state = {
                "pid": os.getpid(),
                "processStart": process_start(os.getpid()),
                "port": int(local.resources.endpoint.rsplit(":", 1)[1]),
                "endpoint": local.resources.endpoint,
                "startedAt": started.isoformat(),
                "speed": options.speed,
                "realPods": options.real_pods,
                "groups": str(options.groups) if options.groups is not None else None,
                "clusters": [{"name": c.name, "region": c.region} for c in local.clusters.values()],
                "stateDir": str(state_dir),
                "log": str(state_dir / LOG_FILE),
                "env": environment,
            }
            _write_status(local, runner, state_dir, started=started)
            write_json(state_dir / STATE_FILE, state)
            print(f"squall local: up on {local.resources.endpoint} (pid {os.getpid()})", flush=True)
            try:
                _loop(local, runner, state_dir, stop=stop, clock=clock, started=started)
            finally:
                (state_dir / STATE_FILE).unlink(missing_ok=True)
                print("squall local: stopping", flush=True)
    except EndpointError as exc:
        print(f"squall local: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        (state_dir / STATUS_FILE).unlink(missing_ok=True)
    print("squall local: stopped", flush=True)
    return 0


def _loop(
    local: Any, runner: Any, state_dir: Path, *, stop: threading.Event, clock: Any, started: datetime
) -> None:
    next_status = 0.0
    while not stop.is_set():
        local.settle()
        now = time.monotonic()
        if now >= next_status:
            _write_status(local, runner, state_dir, started=started)
            next_status = now + STATUS_SECONDS
        upcoming = [t for t in (local.next_event_time(), local.clusters_next_event_time()) if t is not None]
        wait = TICK_SECONDS
        if upcoming:
            wait = min(wait, clock.wall_seconds(min(upcoming) - clock.now()))
        stop.wait(max(wait, 0.01))
        local.advance_clusters()


def _write_status(local: Any, runner: Any, state_dir: Path, *, started: datetime) -> None:
    from squall.core.jobs import JobStatus

    jobs: dict[str, int | str] = {}
    try:
        for status in JobStatus:
            count = len(local.store.list_by_status(status, limit=COUNT_LIMIT + 1))
            if count:
                jobs[status.value] = f"{COUNT_LIMIT}+" if count > COUNT_LIMIT else count
    except Exception as exc:  # a status that cannot be counted does not stop the runtime
        jobs = {"error": str(exc)[:200]}
    stats = local.cluster_stats()
    write_json(
        state_dir / STATUS_FILE,
        {
            "pid": os.getpid(),
            "heartbeat": datetime.now(UTC).isoformat(),
            "startedAt": started.isoformat(),
            "clock": local.clock.now().isoformat(),
            "jobs": jobs,
            "nodes": stats["nodes"],
            "nodesReady": stats["nodes_ready"],
            "podsRunning": stats["pods_running"],
            "podsPending": stats["pods_pending"],
            "gpusInUse": stats["gpus_in_use"],
            "gpusAllocatable": stats["gpus_allocatable"],
            "clusters": [_cluster_status(cluster) for cluster in local.clusters.values()],
            "processes": runner.running() if runner is not None else [],
            "functionErrors": len(local.function_errors),
        },
    )


def _cluster_status(cluster: Any) -> dict[str, Any]:
    """One simulated cluster's counts, as status.json shows them."""
    stats = cluster.stats()
    return {
        "name": cluster.name,
        "region": cluster.region,
        "nodes": stats["nodes"],
        "nodesReady": stats["nodes_ready"],
        "podsRunning": stats["pods_running"],
        "podsPending": stats["pods_pending"],
        "gpusInUse": stats["gpus_in_use"],
        "gpusAllocatable": stats["gpus_allocatable"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m squall.local.server")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--no-real-pods", action="store_true")
    parser.add_argument("--real-image", action="append", default=[])
    parser.add_argument("--groups", type=Path, default=None)
    args = parser.parse_args(argv)
    return serve(
        ServerOptions(
            state_dir=args.state_dir,
            port=args.port,
            speed=args.speed,
            real_pods=not args.no_real_pods,
            images=tuple(args.real_image),
            groups=args.groups,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
