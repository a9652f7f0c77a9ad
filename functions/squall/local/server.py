"""`squall local up`'s long-running process: the embedded default, on a real-time clock.

Run as `python -m squall.local.server --state-dir D --port P [--speed N]` (the
`up` command starts it in a session of its own and waits for it). It runs
moto's server on 127.0.0.1:P with Squall's resources (local/aws.py), the
simulated cluster and fleet of the demo's node groups, and the real handlers
(local/runtime.py), on `WallClock(speed=N)`: the jobs queue is delivered, the
debounced scale checks, schedules, hooks and drains run as their time comes, and
the cluster is advanced every `TICK_SECONDS` of wall time. With real pods (the
default here), the worker image's pods run as local processes
(local/processes.py).

The state directory holds:

- `local.json`: pid, the process's start time as the system counts it (what
  `down` and `status` recognise the process by: a pid alone may be reused by
  another program), port, endpoint, start time, speed and the environment that
  points the CLI at it (what `up` and `local env` print, this session's credentials
  among it); written once everything is up, removed when the process stops;
- `status.json`: rewritten every `STATUS_SECONDS`: the clock, jobs by state,
  nodes, pods and the real pods' processes, each with its pid and start time (what
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
    """What points `squall submit/status/...` (and boto3) at the local endpoint, with its credentials."""
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


def serve(options: ServerOptions, *, stop: threading.Event | None = None) -> int:
    """Run until `stop` is set (SIGTERM/SIGINT set it when this is the main thread)."""
    from squall.local.aws import EndpointError
    from squall.local.clock import WallClock
    from squall.local.demo import node_groups
    from squall.local.fleet import RegionCapacity
    from squall.local.processes import WORKER_IMAGES, ProcessRunner
    from squall.local.runtime import DEFAULT_REGISTRIES, DEFAULT_TEAMS, LocalRuntime

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    state_dir = options.state_dir
    private_dir(state_dir)
    clock = WallClock(speed=options.speed)
    groups = node_groups()
    capacity = {
        g["region"]: RegionCapacity(instances={}, boot_time=BOOT_TIME, gpu_plugin_delay=GPU_PLUGIN_DELAY)
        for g in groups
    }
    runner: ProcessRunner | None = None

    def make_runner(resources: Any) -> ProcessRunner:
        nonlocal runner
        from squall.local.aws import client

        runner = ProcessRunner(
            endpoint=resources.endpoint,
            log_group=resources.log_group,
            work_dir=state_dir / "pods",
            logs_client=client("logs", resources.endpoint),
            images=options.images or WORKER_IMAGES,
        )
        return runner

    started = datetime.now(UTC)
    try:
        with LocalRuntime.start(
            clock=clock,
            node_groups=groups,
            capacity=capacity,
            port=options.port,
            pod_runner=make_runner if options.real_pods else None,
            log_level=logging.WARNING,
        ) as local:
            environment = cli_environment(
                local.resources, teams=DEFAULT_TEAMS, registries=list(DEFAULT_REGISTRIES)
            )
            state = {
                "pid": os.getpid(),
                "processStart": process_start(os.getpid()),
                "port": int(local.resources.endpoint.rsplit(":", 1)[1]),
                "endpoint": local.resources.endpoint,
                "startedAt": started.isoformat(),
                "speed": options.speed,
                "realPods": options.real_pods,
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
            "processes": runner.running() if runner is not None else [],
            "functionErrors": len(local.function_errors),
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m squall.local.server")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--no-real-pods", action="store_true")
    parser.add_argument("--real-image", action="append", default=[])
    args = parser.parse_args(argv)
    return serve(
        ServerOptions(
            state_dir=args.state_dir,
            port=args.port,
            speed=args.speed,
            real_pods=not args.no_real_pods,
            images=tuple(args.real_image),
        )
    )


if __name__ == "__main__":
    sys.exit(main())
