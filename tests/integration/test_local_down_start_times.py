"""`squall local down` signals only processes it can tell are its own: a state file
that predates the start-time record is neither trusted nor forgotten, and a real pod's
process group is SIGKILLed only while its pid still has the start time recorded in
status.json.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from squall.cli import main
from squall.local import control
from squall.local.server import STATE_FILE, STATUS_FILE, private_dir, process_start, write_json

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "state"
    private_dir(directory)
    monkeypatch.setenv("SQUALL_STATE_DIR", str(directory))
    return directory


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Harmless processes in sessions of their own, killed (if still there) afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def sleeper(spawn: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(["sleep", "120"], start_new_session=True)
    spawn.append(process)
    return process


# ---- a state file from before the start time was recorded ----


def test_down_keeps_a_state_whose_pid_may_still_be_the_server(
    state_dir: Path, spawn: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    server = sleeper(spawn)  # stands in for a server started by an older squall
    write_json(
        state_dir / STATE_FILE,
        {
            "pid": server.pid,
            "port": 1,
            "endpoint": "http://127.0.0.1:1",
            "env": {"AWS_SECRET_ACCESS_KEY": "s"},
        },
    )
    before = (state_dir / STATE_FILE).read_text()
    code = main(["local", "down", "--state-dir", str(state_dir), "--timeout", "1"])
    err = capsys.readouterr().err
    assert code != 0
    assert server.poll() is None  # not signalled
    assert (state_dir / STATE_FILE).read_text() == before  # its credentials kept
    assert "which is gone" not in err and "not running" not in err
    assert "predates" in err and f"pid {server.pid}" in err
    assert f"kill {server.pid}" in err and "does not answer" in err


def test_up_does_not_discard_such_a_state_either(
    state_dir: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    server = sleeper(spawn)
    write_json(state_dir / STATE_FILE, {"pid": server.pid, "endpoint": "http://127.0.0.1:1"})
    with pytest.raises(control.ControlError, match="predates"):
        control.up(state_dir=state_dir, port=1, speed=1.0, timeout=1)
    assert server.poll() is None
    assert (state_dir / STATE_FILE).exists()


def test_the_message_says_when_the_recorded_endpoint_still_answers(
    state_dir: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    import http.server
    import threading

    server = sleeper(spawn)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{httpd.server_address[1]}"
        write_json(state_dir / STATE_FILE, {"pid": server.pid, "endpoint": endpoint})
        with pytest.raises(control.ControlError, match=f"{endpoint} still answers"):
            control.down(state_dir=state_dir, timeout=1)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert server.poll() is None


def test_a_state_recording_no_start_time_is_kept_too(
    state_dir: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    server = sleeper(spawn)  # a server that could not read its own start time
    write_json(
        state_dir / STATE_FILE, {"pid": server.pid, "processStart": None, "endpoint": "http://127.0.0.1:1"}
    )
    with pytest.raises(control.ControlError, match="records no start time"):
        control.down(state_dir=state_dir, timeout=1)
    assert server.poll() is None
    assert (state_dir / STATE_FILE).exists()


def test_such_a_state_whose_pid_is_gone_is_removed(state_dir: Path) -> None:
    process = subprocess.Popen(["true"])
    process.wait()
    write_json(state_dir / STATE_FILE, {"pid": process.pid, "endpoint": "http://127.0.0.1:1"})
    assert "which is gone" in control.down(state_dir=state_dir, timeout=1)
    assert not (state_dir / STATE_FILE).exists()


# ---- the real pods' process groups ----


def test_down_kills_only_the_pod_groups_whose_start_time_matches(
    state_dir: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    # A server that ignores SIGTERM, so that `down` comes to the SIGKILLs after its timeout.
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    spawn.append(server)
    assert server.stdout is not None and server.stdout.readline() == b"ready\n"
    pod = sleeper(spawn)  # one of its pods, as recorded
    stranger = sleeper(spawn)  # a pid the status file names, with another start time: not a pod of ours
    write_json(
        state_dir / STATE_FILE,
        {"pid": server.pid, "processStart": process_start(server.pid), "endpoint": "http://127.0.0.1:1"},
    )
    write_json(
        state_dir / STATUS_FILE,
        {
            "processes": [
                {"namespace": "n", "pod": "p-0", "pid": pod.pid, "processStart": process_start(pod.pid)},
                {"namespace": "n", "pod": "p-1", "pid": stranger.pid, "processStart": "1"},
            ]
        },
    )
    said = control.down(state_dir=state_dir, timeout=0.5)
    assert "killed after the timeout" in said
    for killed in (server, pod):
        killed.wait(5)  # ended (control may have reaped it: these are this test's children)
        assert process_start(killed.pid) is None
    time.sleep(0.2)
    assert stranger.poll() is None  # never signalled


@pytest.mark.timeout(120)
def test_the_runner_records_each_pods_start_time_beside_its_pid(tmp_path: Path) -> None:
    from datetime import timedelta

    from squall.core.manifests import render
    from squall.core.spec import parse_spec
    from squall.local.clock import VirtualClock
    from squall.local.cluster import SimulatedCluster
    from squall.local.processes import WORKER_IMAGES
    from tests.local_pod_processes import local_processes

    with local_processes(tmp_path / "pods") as processes:
        clock = VirtualClock()
        cluster = SimulatedCluster(clock=clock, runner=processes.runner)
        cluster.add_node(
            name="ip-10-0-0-1",
            allocatable={"cpu": "16", "memory": "64Gi", "pods": "58"},
            labels={"topology.kubernetes.io/region": "us-west-2"},
        )
        body = {
            "name": "tiny",
            "team": "research",
            "image": f"{WORKER_IMAGES[0]}:1.0",
            "resources": {"cpu": "1", "memory": "1Gi"},
            "command": ["python", "-c", "import time; time.sleep(60)"],
        }
        parsed = parse_spec(body, teams=["research"], registries=[WORKER_IMAGES[0].split("/")[0]])
        for manifest in render(parsed, job_id="sleepy", namespace="team-research"):
            cluster.create(manifest)
            if manifest["kind"] == "Job":
                name = manifest["metadata"]["name"]
                cluster.patch_job(namespace="team-research", name=name, patch={"spec": {"suspend": False}})
        deadline = time.monotonic() + 30
        while not (running := processes.runner.running()) and time.monotonic() < deadline:
            cluster.advance()
            time.sleep(0.05)
            clock.advance(timedelta(seconds=1))
        [pod] = running
        assert pod["processStart"] is not None
        assert pod["processStart"] == process_start(pod["pid"])
