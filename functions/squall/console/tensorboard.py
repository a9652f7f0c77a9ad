"""TensorBoard for a job, started from its console page: `squall tensorboard` in a process of its own.

The console runs the command itself (cli/researcher.py cmd_tensorboard: it copies the job's
event files from S3 while the job runs and serves them), one process per job, listening on a
free loopback port, with the console's environment (the same deployment and credentials).
What stops it from starting is said plainly: a job that names no s3:// checkpointUri or
outputUri (nothing to copy), no TensorBoard installed, a process that ended (its last lines).
The processes end with the console.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flask import Flask

from squall.core.jobs import Job

EXTENSION = "squall.tensorboards"
HOST = "127.0.0.1"
OUTPUT_TAIL = 2_000  # characters of a stopped process's output shown

Command = Callable[[str, int, Path], list[str]]


def squall_tensorboard(job_id: str, port: int, folder: Path) -> list[str]:
    """The command line: `squall tensorboard` as this Python runs it (the id after `--`)."""
    return [sys.executable, "-m", "squall.cli", "tensorboard", "--port", str(port), "--host", HOST,
            "--dir", str(folder / "files"), "--", job_id]  # fmt: skip


@dataclass
class Board:
    """One job's TensorBoard: running at `url`, or why it is not."""

    job_id: str
    url: str = ""
    error: str = ""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    output: Path | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


class TensorBoards:
    """The console's TensorBoard processes, one per job."""

    def __init__(self, *, folder: Path | None = None, command: Command = squall_tensorboard) -> None:
        self.folder = folder  # None: a temporary folder, made when the first one starts
        self.command = command
        self._boards: dict[str, Board] = {}
        self._lock = threading.Lock()

    def status(self, job_id: str) -> Board | None:
        """The job's board as it is now: a process that ended is said so, with its last output."""
        with self._lock:
            board = self._boards.get(job_id)
            if board is not None and board.process is not None and not board.running:
                code = board.process.returncode
                board.error = f"TensorBoard for job {job_id} stopped (exit {code}): {_tail(board.output)}"
                board.url, board.process = "", None
            return board

    def start(self, job: Job, *, store: Any) -> Board:
        """The job's running board, or a new one; a Board with `error` when it cannot start."""
        from squall.cli.follow.tensorboard import job_sources
        from squall.cli.researcher import trial_runs

        with self._lock:
            board = self._boards.get(job.id)
            if board is not None and board.running:
                return board
            if not job_sources(job, runs=trial_runs(store, job)):
                board = Board(
                    job.id,
                    error=f"job {job.id} names no s3:// checkpointUri or outputUri: "
                    "there are no TensorBoard files to copy",
                )
            elif importlib.util.find_spec("tensorboard") is None:
                board = Board(
                    job.id,
                    error="TensorBoard is not installed in the console's Python (pip install tensorboard)",
                )
            else:
                board = self._launch(job.id)
            self._boards[job.id] = board
            return board

    def _launch(self, job_id: str) -> Board:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="squall-console-tensorboard-"))
        folder = self.folder / _folder_name(job_id)
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        output = folder / "tensorboard.log"
        try:
            with output.open("wb") as sink:
                process = subprocess.Popen(  # our own command line, no shell
                    self.command(job_id, port, folder),
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env=dict(os.environ),
                    start_new_session=True,
                )
        except OSError as exc:
            return Board(job_id, error=f"cannot start TensorBoard for job {job_id}: {exc}")
        return Board(job_id, url=f"http://{HOST}:{port}/", process=process, output=output)

    def stop_all(self) -> None:
        with self._lock:
            for board in self._boards.values():
                if board.process is not None and board.process.poll() is None:
                    board.process.terminate()
                    try:
                        board.process.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        board.process.kill()


def _folder_name(job_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", job_id)[:100] or "job"


def _tail(output: Path | None) -> str:
    if output is None:
        return "no output"
    try:
        text = output.read_bytes()[-OUTPUT_TAIL:].decode("utf-8", errors="replace").strip()
    except OSError:
        return "no output"
    return text or "no output"


def boards(app: Flask) -> TensorBoards:
    """The app's TensorBoards, made on first use (and stopped when the console's process ends)."""
    found = app.extensions.get(EXTENSION)
    if found is None:
        found = app.extensions[EXTENSION] = TensorBoards()
        atexit.register(found.stop_all)
    board: TensorBoards = found
    return board
