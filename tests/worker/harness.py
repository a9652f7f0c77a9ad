"""Helpers for the TensorFlow trainer's tests (worker_images/tf_trainer).

The trainer is its own image, not part of the squall package: the tests import it
from its folder, and run it as ``python -m trainer`` subprocesses where a separate
process is the point (signals, several workers).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRAINER_ROOT = Path(__file__).resolve().parents[2] / "worker_images" / "tf_trainer"
sys.path.insert(0, str(TRAINER_ROOT))

# The smallest model that still exercises every layer: seconds per run on a CPU.
TINY = {
    "--batch-size": "16",
    "--width": "4",
    "--latent-dim": "8",
    "--md-kernels": "4",
    "--md-dim": "4",
    "--eval-samples": "64",
}


def tiny_args(**overrides: Any) -> list[str]:
    """Flags for a tiny run; overrides like ``steps=4`` become ``--steps 4``."""
    flags = dict(TINY)
    flags.update({"--" + k.replace("_", "-"): str(v) for k, v in overrides.items()})
    return [token for pair in flags.items() for token in pair]


def parse_events(stdout: str) -> list[dict[str, Any]]:
    """The trainer's JSON-lines log events (stdout carries nothing else but metric=)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


METRIC_LINE = re.compile(r"^metric=frechet_distance_8x8 value=(\S+)$", re.MULTILINE)


@dataclass
class Run:
    """The outcome of one in-process ``trainer.cli.main``."""

    code: int
    stdout: str

    @property
    def events(self) -> list[dict[str, Any]]:
        return parse_events(self.stdout)

    def steps(self) -> list[int]:
        return [e["step"] for e in named(self.events, "step")]


def run_main(args: list[str], environ: dict[str, str] | None = None) -> Run:
    """Run the trainer in this process (TensorFlow is imported once for all tests)."""
    from trainer.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args, environ or {})
    return Run(code=code, stdout=out.getvalue())


def checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the checkpoints in a directory (CheckpointManager numbers them by step)."""
    return sorted(int(p.name.split("-")[1].split(".")[0]) for p in directory.glob("ckpt-*.index"))


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class TrainerProcess:
    """A ``python -m trainer`` subprocess whose stdout is read line by line."""

    args: Sequence[str]
    env: dict[str, str]
    stderr: Path
    name: str = "trainer"
    program: Sequence[str] = (sys.executable, "-m", "trainer")
    process: subprocess.Popen[str] = field(init=False)
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # stderr (TensorFlow's C++ logs) goes to a file: a pipe nobody reads while
        # the test waits on stdout could fill up and stall the trainer.
        with self.stderr.open("w") as stderr:
            self.process = subprocess.Popen(
                [*self.program, *self.args],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    def wait_for(self, predicate: Any) -> dict[str, Any]:
        """Read events until one satisfies ``predicate``; fail if the process ends first."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("{"):
                event = json.loads(line)
                if predicate(event):
                    return event
        self.process.wait()
        raise AssertionError(f"{self.name} exited {self.process.returncode} first:\n{self.output()}")

    def finish(self, timeout: float) -> int:
        """Wait for the exit and keep the rest of stdout.

        The rest is read through the same file object ``wait_for`` iterated:
        its read-ahead buffer may already hold lines printed before the exit.
        ``communicate(timeout=...)`` would read the pipe's descriptor directly
        and lose them.
        """
        assert self.process.stdout is not None
        stdout = self.process.stdout
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.append(stdout.read()), daemon=True)
        reader.start()
        code = self.process.wait(timeout=timeout)
        reader.join(timeout=timeout)
        assert rest, f"{self.name} exited {code} but its stdout stayed open"
        self.lines.append(rest[0])
        return code

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def events(self) -> list[dict[str, Any]]:
        return parse_events("".join(self.lines))

    def output(self) -> str:
        stderr = self.stderr.read_text(errors="replace") if self.stderr.exists() else ""
        return f"{''.join(self.lines)}\n--- {self.name} stderr (tail) ---\n{stderr[-4000:]}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
