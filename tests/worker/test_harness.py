"""The subprocess harness itself: what a trainer printed is never lost to it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.worker.harness import TrainerProcess

# Prints an event and a metric line in one write, so that both reach the reader's
# buffer together, then waits for SIGTERM and exits as the trainer does.
STOPPABLE = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
os.write(1, b'{"event": "step", "step": 3}\\nsquall-metric loss=1 step=3\\n')
time.sleep(120)
"""


def test_lines_read_ahead_with_the_awaited_event_are_kept_at_the_finish(tmp_path: Path) -> None:
    process = TrainerProcess(
        args=["-c", STOPPABLE],
        env=dict(os.environ),
        stderr=tmp_path / "stderr",
        program=(sys.executable,),
    )
    try:
        assert process.wait_for(lambda e: e["event"] == "step") == {"event": "step", "step": 3}
        process.terminate()
        assert process.finish(timeout=60) == 143
    finally:
        process.kill()

    assert "squall-metric loss=1 step=3\n" in process.lines
