"""The trainer's report to Squall of each checkpoint it saves.

Squall's preemption stops the running jobs that lose the least work, and learns how
much each would lose from when its latest checkpoint was saved. The chief writes
`checkpoints/squall-checkpoint.json` beside the checkpoints after each one, and the
mirror uploads it after the checkpoint's shards and index, so Squall reads it under
`<checkpointUri>/<job id>/` with the same access it has to the job's other files: the
pod needs no permission, API or endpoint of Squall's. Code of your own reports the same
way by writing this file (the fields below) after each checkpoint it completes.

    {"step": 1200, "savedAt": "2026-05-01T12:34:56Z", "checkpoint": "ckpt-1200", "reason": "periodic"}
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from trainer.storage import REPORT_FILE


def write_report(
    directory: Path, *, step: int, checkpoint: str, reason: str, at: datetime | None = None
) -> Path:
    """Write the report of the checkpoint just saved into `directory` (the checkpoints' own).

    Written to a temporary name and renamed, so a reader (or an upload) never sees half of it.
    """
    saved_at = (at or datetime.now(UTC)).astimezone(UTC)
    body = {
        "step": step,
        "savedAt": saved_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "checkpoint": checkpoint,
        "reason": reason,
    }
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / REPORT_FILE
    partial = directory / f".{REPORT_FILE}.partial"
    partial.write_text(json.dumps(body, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(target)
    return target
