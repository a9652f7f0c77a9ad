"""How the `squall` command writes times, ages and a job's resources for people.

One rule for every time a person reads: `2026-12-02 08:13:21 UTC` (`moment`), with
milliseconds where lines a second apart must keep their order (`squall logs
--timestamps`). `--json` keeps ISO 8601 (`datetime.isoformat`), for programs. A count
with its noun is planner/text.py's `counted` (`1 node`, `3 nodes`), which the planner's
queue messages use too. Money is dollars with cents (`$1,234.56`): a job's cost can be
a few cents.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from squall.cli.text import printable
from squall.planner.text import amounts, counted

if TYPE_CHECKING:
    from squall.core.jobs import Job
    from squall.core.spec import JobSpec


def moment(at: datetime, *, milliseconds: bool = False) -> str:
    """`2026-12-02 08:13:21 UTC` (`.345` before the zone with `milliseconds`); a naive time is taken as UTC."""
    utc = at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)
    text = utc.strftime("%Y-%m-%d %H:%M:%S")
    if milliseconds:
        text += f".{utc.microsecond // 1000:03d}"
    return f"{text} UTC"


def moment_text(value: object) -> str:
    """A time a record holds as ISO 8601 text (a scale-check decision's `at`), as `moment` writes it.

    Text that is not such a time is shown as it is, escaped: it came from a record.
    """
    if isinstance(value, str):
        try:
            return moment(datetime.fromisoformat(value))
        except ValueError:
            pass
    return printable(str(value), newlines=False)


def estimate(starts_by: datetime | str | None, likely_start: datetime | str | None) -> str:
    """When a queued job will start: `starts by <moment>, likely <moment>`; "" without an estimate.

    Either time may be a record's ISO 8601 text (a decision's waiting entry). The likely start is
    left out when it is no earlier than the latest: it would say nothing more.
    """
    latest, likely = _time(starts_by), _time(likely_start)
    parts = []
    if latest is not None:
        parts.append(f"starts by {_when(latest)}")
    if likely is not None and not (
        isinstance(latest, datetime) and isinstance(likely, datetime) and likely >= latest
    ):
        parts.append(f"likely {_when(likely)}")
    return ", ".join(parts)


def _time(value: datetime | str | None) -> datetime | str | None:
    """A time, read from ISO 8601 text where it is text; text that is no time stays as it is."""
    if not isinstance(value, str):
        return value
    try:
        read = datetime.fromisoformat(value)
    except ValueError:
        return value
    return read if read.tzinfo is not None else read.replace(tzinfo=UTC)


def _when(value: datetime | str) -> str:
    return moment(value) if isinstance(value, datetime) else moment_text(value)


def dollars(amount: float) -> str:
    """`$1,234.56`; a negative amount `-$3.00`."""
    return f"-${-amount:,.2f}" if amount < 0 else f"${amount:,.2f}"


def job_cost(job: Job) -> str:
    """What a job cost: `cost $12.34 so far ($3.06 an hour)` until it ends, then `cost $12.34`,
    with `, spot savings $4.00` when spot capacity saved any; "" while nothing is counted."""
    from squall.core.jobs import is_terminal

    if job.cost is None:
        return ""
    text = f"cost {dollars(job.cost)}"
    if not is_terminal(job.status):
        rate = f" ({dollars(job.cost_rate)} an hour)" if job.cost_rate else ""
        text += f" so far{rate}"
    if job.spot_savings:
        text += f", spot savings {dollars(job.spot_savings)}"
    return text


def age(elapsed: timedelta) -> str:
    """How long ago, in its largest whole unit as `kubectl get` writes it: `45s`, `12m`, `5h`, `3d`."""
    seconds = max(int(elapsed.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def spec_needs(spec: JobSpec) -> str:
    """What a job spec asks for over all its replicas: `8 GPUs`, or `4 CPUs and 16Gi of memory` without GPUs."""
    replicas = spec.replica_list()
    return amounts(
        gpus=sum(r.resources.gpu for r in replicas),
        cpu_millis=sum(r.resources.cpu_millis for r in replicas),
        memory_bytes=sum(r.resources.memory_bytes for r in replicas),
    )


def job_needs(job: Job) -> str:
    """`spec_needs` of a job's recorded spec; its GPUs when the record holds GPUs or no spec that loads."""
    if job.gpus or not job.spec:
        return counted(job.gpus, "GPU")
    from squall.core.spec import SpecError, load_spec

    try:
        return spec_needs(load_spec(job.spec))
    except SpecError:
        return counted(job.gpus, "GPU")


def placement(job: Job) -> str:
    """Where admission placed the job: `cluster gpu-east, us-east-1`; "" while it waits (or on an old record)."""
    if not job.cluster:
        return ""
    region = f", {printable(job.region, newlines=False)}" if job.region else ""
    return f"cluster {printable(job.cluster, newlines=False)}{region}"
