"""Starting, stopping and reading `squall local up`'s process (local/server.py), from the CLI.

`up` refuses when one already runs (its state file names a live server) or the
port is taken, starts the server in a session of its own with its output in
`server.log`, and returns its state once the state file is written and the
endpoint answers (or says why it did not come up, with the log's last lines).
`up --groups FILE` hands the server a groups file (`squall simulate --groups`), which the
CLI has checked first (commands.py). `down` sends SIGTERM, waits, then SIGKILLs the server's process group and its real
pods' groups, and removes the state files; with nothing running it says so and
succeeds. `status` reads the state and status files; `environment` the exports
of the one running, for another shell.

A server is the one in the state file only while its pid AND the start time the
server recorded for itself match a live process: a pid that a stranger's program
has been given since, or one whose command line merely looks like ours, is never
signalled. The same holds for the real pods' process groups that `down` SIGKILLs
after the timeout: each only while its pid has the start time recorded beside it in
`status.json`. A state file written before the start time was recorded names a pid
that may still be the server or may be a stranger's: `down` and `up` touch neither
the process nor the file, and say how to tell and stop it by hand.

Imports nothing heavy: `squall local status` is quick.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from squall.local.server import (
    DEFAULT_PORT,
    LOG_FILE,
    STATE_FILE,
    STATUS_FILE,
    default_state_dir,
    private_dir,
    process_start,
)

__all__ = [
    "DEFAULT_PORT",
    "ControlError",
    "describe",
    "down",
    "environment",
    "exports",
    "running",
    "state_dir",
    "status",
    "up",
]

SERVER_MODULE = "squall.local.server"
LOG_TAIL_LINES = 20
ENV_COMMAND = 'eval "$(squall local env)"'
UP_COMMAND = 'eval "$(squall local up)"'


class ControlError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def state_dir(given: str | None) -> Path:
    return Path(given) if given else default_state_dir()


def exports(env: Mapping[str, str]) -> str:
    """`export` lines a shell can eval."""
    return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in env.items())


def read_state(directory: Path) -> dict[str, Any] | None:
    return _read_json(directory / STATE_FILE)


def running(directory: Path) -> dict[str, Any] | None:
    """The state of the server running for `directory`; None when none runs."""
    state = read_state(directory)
    return state if state is not None and _alive(state) else None


def environment(*, state_dir: Path) -> dict[str, str]:
    """The running server's environment (what `up` printed), for another shell."""
    state = running(state_dir)
    if state is None:
        raise ControlError(
            f"squall local is not running (state dir {state_dir}): start it with `{UP_COMMAND}`"
        )
    env = state.get("env")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ControlError(
            f"{state_dir / STATE_FILE}: it holds no environment; restart with `squall local down`"
        )
    return {str(k): v for k, v in env.items()}


def up(
    *,
    state_dir: Path,
    port: int,
    speed: float,
    real_pods: bool = True,
    images: Sequence[str] = (),
    timeout: float = 120.0,
    groups: Path | None = None,
) -> dict[str, Any]:
    """Start the server; its state (pid, port, endpoint, env, clusters) once it is ready.

    `groups`: a groups file to serve (its node groups and clusters), as an absolute path:
    the server reads it itself; None: the demo's node groups, in one cluster.
    """
    try:
        private_dir(state_dir)
    except OSError as exc:
        raise ControlError(
            f"--state-dir {state_dir}: cannot make it a private (0700) directory: {exc.strerror}", code=2
        ) from exc
    existing = read_state(state_dir)
    if existing is not None:
        _refuse_unrecognisable(existing, state_dir)
        if _alive(existing):
            raise ControlError(
                f"squall local is already running (pid {existing['pid']}, {existing.get('endpoint')}); "
                f"state in {state_dir}. `{ENV_COMMAND}` points this shell at it; stop it with "
                "`squall local down`, or use another --state-dir and --port"
            )
        _remove_state(state_dir)  # stale: its process is gone
    _check_port(port)
    command = [sys.executable, "-m", SERVER_MODULE, "--state-dir", str(state_dir), "--port", str(port)]
    command += ["--speed", repr(speed)]
    if not real_pods:
        command.append("--no-real-pods")
    for image in images:
        command += ["--real-image", image]
    if groups is not None:
        command += ["--groups", str(groups)]
    log_path = state_dir / LOG_FILE
    try:
        descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:  # another user's directory, say
        raise ControlError(
            f"--state-dir {state_dir}: cannot write {log_path}: {exc.strerror}", code=2
        ) from exc
    with open(descriptor, "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not stopped by the shell's Ctrl-C or hang-up
            close_fds=True,
        )
    child = {"pid": process.pid, "processStart": process_start(process.pid)}
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        if code is not None:
            raise ControlError(f"squall local did not start (exit {code}):\n{_tail(log_path)}")
        state = read_state(state_dir)
        if state is not None and state.get("pid") == process.pid and _answers(str(state.get("endpoint"))):
            return state
        if time.monotonic() > deadline:
            _stop_process(child, timeout=10.0, groups=())
            raise ControlError(
                f"squall local was not ready within {timeout:g} s; stopped it:\n{_tail(log_path)}"
            )
        time.sleep(0.2)


def down(*, state_dir: Path, timeout: float = 30.0) -> str:
    """Stop the server; what happened, in words. Idempotent."""
    state = read_state(state_dir)
    if state is None:
        return "squall local is not running"
    _refuse_unrecognisable(state, state_dir)
    pid = state.get("pid")
    if not isinstance(pid, int) or not _alive(state):
        _remove_state(state_dir)
        return f"squall local is not running (removed the state of pid {pid}, which is gone)"
    status = _read_json(state_dir / STATUS_FILE) or {}
    groups = [
        (p["pid"], p["processStart"])
        for p in status.get("processes", [])
        if isinstance(p, dict) and _valid_pid(p.get("pid")) and isinstance(p.get("processStart"), str)
    ]
    killed = _stop_process(state, timeout=timeout, groups=groups)
    _remove_state(state_dir)
    return (
        f"squall local stopped (pid {pid}{', killed after the timeout' if killed else ''}); "
        "its jobs, queues and logs are gone"
    )


def status(*, state_dir: Path) -> dict[str, Any]:
    state = read_state(state_dir)
    if state is None or not _alive(state):
        return {"running": False, "stateDir": str(state_dir)}
    shown: dict[str, Any] = {
        "running": True,
        "pid": state["pid"],
        "port": state.get("port"),
        "endpoint": state.get("endpoint"),
        "stateDir": str(state_dir),
        "speed": state.get("speed"),
        "realPods": state.get("realPods"),
        "groups": state.get("groups"),
        "clusters": state.get("clusters"),
        "log": state.get("log"),
    }
    with contextlib.suppress(KeyError, TypeError, ValueError):
        started = datetime.fromisoformat(state["startedAt"])
        shown["uptimeSeconds"] = int((datetime.now(UTC) - started).total_seconds())
    live = _read_json(state_dir / STATUS_FILE) or {}
    # status.json's clusters (with their counts) replace local.json's (names and regions)
    for key in ("clock", "heartbeat", "jobs", "nodes", "nodesReady", "podsRunning", "podsPending",
                "gpusInUse", "gpusAllocatable", "clusters", "processes", "functionErrors"):  # fmt: skip
        if key in live:
            shown[key] = live[key]
    return shown


def describe(shown: Mapping[str, Any]) -> str:
    if not shown["running"]:
        return f"squall local is not running (state dir {shown['stateDir']})"
    uptime = int(shown.get("uptimeSeconds", 0))
    lines = [
        f"squall local is running: pid {shown['pid']}, {shown['endpoint']} (port {shown['port']}), "
        f"up {uptime // 3600}:{uptime // 60 % 60:02d}:{uptime % 60:02d}, speed {shown.get('speed')}x, "
        f"real pods {'on' if shown.get('realPods') else 'off'}",
    ]
    jobs = shown.get("jobs") or {}
    lines.append("jobs: " + (", ".join(f"{k} {v}" for k, v in jobs.items()) or "none"))
    if "nodes" in shown:
        lines.append(
            f"nodes: {shown['nodes']} ({shown.get('nodesReady', 0)} ready), GPUs in use "
            f"{shown.get('gpusInUse', 0)}/{shown.get('gpusAllocatable', 0)}; pods running "
            f"{shown.get('podsRunning', 0)}, pending {shown.get('podsPending', 0)}"
        )
    clusters = [c for c in shown.get("clusters") or () if isinstance(c, dict)]
    if clusters:
        lines.append(
            f"cluster{'s' if len(clusters) > 1 else ''}: "
            + "; ".join(_cluster_line(c) for c in clusters)
            + (f" (groups {shown['groups']})" if shown.get("groups") else "")
        )
    processes = shown.get("processes") or []
    if processes:
        lines.append(
            "processes: " + ", ".join(f"{p['namespace']}/{p['pod']} (pid {p['pid']})" for p in processes)
        )
    lines.append(f"state: {shown['stateDir']}; log: {shown.get('log')}")
    return "\n".join(lines)


# ---- helpers ----


def _cluster_line(cluster: Mapping[str, Any]) -> str:
    """`gpu-west (us-west-2): 2 nodes (2 ready), GPUs in use 4/8, pods running 1, pending 0`."""
    where = f"{cluster.get('name')} ({cluster.get('region')})"
    if "nodes" not in cluster:  # local.json's entry: the server has not counted yet
        return where
    return (
        f"{where}: {cluster['nodes']} node{'' if cluster['nodes'] == 1 else 's'} "
        f"({cluster.get('nodesReady', 0)} ready), GPUs in use {cluster.get('gpusInUse', 0)}/"
        f"{cluster.get('gpusAllocatable', 0)}, pods running {cluster.get('podsRunning', 0)}, "
        f"pending {cluster.get('podsPending', 0)}"
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _remove_state(directory: Path) -> None:
    for name in (STATE_FILE, STATUS_FILE):
        (directory / name).unlink(missing_ok=True)


def _check_port(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ControlError(
                f"port {port} on 127.0.0.1 is taken ({exc.strerror}): stop what listens there, "
                "or choose another with --port"
            ) from None


def _answers(endpoint: str) -> bool:
    """The endpoint answers HTTP (any status)."""
    try:
        with urllib.request.urlopen(f"{endpoint}/", timeout=2):  # unsigned: the gate answers 403
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def _valid_pid(pid: object) -> TypeGuard[int]:
    return not isinstance(pid, bool) and isinstance(pid, int) and pid > 0


def _alive(state: Mapping[str, Any]) -> bool:
    """Whether the process `state` names runs: its pid, started when the server recorded (not a zombie)."""
    pid, started = state.get("pid"), state.get("processStart")
    if not _valid_pid(pid) or not isinstance(started, str):
        return False
    return _started_at(pid, started)


def _started_at(pid: int, started: str | None) -> bool:
    """Process `pid` runs (not a zombie) and, unless `started` is None, started at `started`."""
    with contextlib.suppress(ChildProcessError, OSError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # our own child (tests): reap it if it has exited
        if reaped == pid:
            return False
    current = process_start(pid)
    if current is None or (started is not None and current != started):
        return False  # gone, or another process since
    with contextlib.suppress(OSError, IndexError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _refuse_unrecognisable(state: Mapping[str, Any], directory: Path) -> None:
    """Raise when `state` records no start time (it predates that record) and its pid runs: it may be
    the server still.

    Such a pid cannot be told from a stranger's that was given it since: it is neither
    signalled nor forgotten (the state file holds the session's credentials, and while
    that server runs its port is taken), and the message says how to settle it by hand.
    """
    pid = state.get("pid")
    if isinstance(state.get("processStart"), str) or not _valid_pid(pid) or not _started_at(pid, None):
        return
    path = directory / STATE_FILE
    why = (
        "records no start time for its process"
        if "processStart" in state
        else "predates the process start time that squall local now records"
    )
    endpoint = state.get("endpoint")
    if isinstance(endpoint, str) and endpoint.startswith("http://127.0.0.1:") and _answers(endpoint):
        seen = f"its endpoint {endpoint} still answers, so the server most likely still runs"
    elif isinstance(endpoint, str):
        seen = f"its endpoint {endpoint} does not answer"
    else:
        seen = "it records no endpoint"
    raise ControlError(
        f"{path} {why}, so whether pid {pid} is still Squall's server cannot be told: it may be, or "
        f"another program may have been given that pid since; {seen}. Nothing was signalled or removed. "
        f"See what it is with `ps -o pid,lstart,args -p {pid}`: if it is `python -m squall.local.server`, "
        f"stop it with `kill {pid}` (it removes {path} itself as it stops); if it is not, remove {path}"
    )


def _stop_process(state: Mapping[str, Any], *, timeout: float, groups: Sequence[tuple[int, str]]) -> bool:
    """SIGTERM, wait up to `timeout`, then SIGKILL its group and `groups`; True if it came to that.

    `groups` are (pid, start time) of the real pods' process leaders: a group is
    killed only while its pid still has that start time, never a stranger's since.
    """
    pid = int(state["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(state):
            return False
        time.sleep(0.1)
    if not _alive(state):
        return False
    ours = [pid] + [group for group, started in groups if _started_at(group, started)]
    for group in ours:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for _ in range(50):
        if not _alive(state):
            break
        time.sleep(0.1)
    return True


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return "  (no log)"
    return "\n".join(f"  {line}" for line in lines) or "  (the log is empty)"
