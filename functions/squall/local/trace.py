"""Trace replay: a team's job history against a node-group configuration, on the virtual clock.

TRACE.csv has the header ``submit_s,team,gpus,replicas,run_s`` (further columns are
ignored): seconds from the start of the trace, the team, GPUs per replica, replicas
(1 for a single-pod job; more make a distributed job of one chief and workers), and
how long the job ran. Every row becomes a job spec sent to the jobs queue at its
time; its pods run for ``run_s``. The run ends when every job is final and every
group is back at its minimum, and reports the same summary as a scenario.

Optional columns, read when the header has them (an empty cell takes the default):
``priority`` (a whole number 0..100, the spec's ``priority``; default the spec's
default), ``cpu`` and ``memory`` (per replica, Kubernetes quantities as a spec's
``resources`` takes them), ``max_runtime_s`` (the limit the job's user declared, in
seconds: the spec's ``maxRuntime``, rounded up to a whole second, positive and at most
the policy's maxRuntimeLimit). Without cpu and memory, requests per replica follow the GPUs:
3 CPUs and 12 GiB per GPU, 2 CPUs and 8 GiB for a replica without GPUs (what a
training pod typically asks for, and small enough for every common GPU instance type).
Without max_runtime_s, maxRuntime is twice run_s, at least an hour (never cut short). A
declared limit below run_s is kept: the job dies at its limit (DeadlineExceeded), as it
would in a cluster.

Numbers are plain ASCII decimals of at most 64 characters: whole numbers are digits with an
optional sign, seconds may also have a fraction and an exponent (30, 2.5, 1e3). Underscores,
other scripts' digits, NaN and infinity are refused, as every bad cell is, naming its line and
column; line numbers are the file's own, blank lines included.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from squall.core import documents
from squall.core.settings import PolicySettings
from squall.core.spec import DEFAULT_MAX_RUNTIME_LIMIT, QuantityViews, ReplicaResources, format_duration
from squall.local.fleet import RegionCapacity
from squall.local.runtime import DEFAULT_REGISTRIES, ClusterEntry
from squall.local.scenario import (
    ClusterModel,
    EndModel,
    PlannedSubmission,
    RegionModel,
    ScenarioError,
    ScenarioPlan,
    StrictModel,
    load_document,
    read_clusters,
    read_policy_settings,
    validation_errors,
)
from squall.planner import NodeGroup
from squall.planner.admission import TeamShare
from squall.planner.inputs import GroupsError, InputError, Team, read_node_groups, read_teams, team_shares

COLUMNS = ("submit_s", "team", "gpus", "replicas", "run_s")
OPTIONAL_COLUMNS = ("priority", "cpu", "memory", "max_runtime_s")
TEAM = re.compile(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$")
# One grammar for the trace's numbers: plain ASCII decimals. int() and float() also take
# underscores, other scripts' digits, "nan" and "inf", and int() refuses more than 4,300 digits.
WHOLE = re.compile(r"[+-]?[0-9]+")
REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
SECONDS_FORMS = "a number of seconds such as 30, 2.5 or 1e3"
MAX_NUMBER_LENGTH = 64  # characters in a numeric cell, as for a quantity
MIN_PRIORITY, MAX_PRIORITY = 0, 100
MAX_GPUS_PER_REPLICA = 16
MAX_REPLICAS = 65  # a chief and 64 workers
# The default policy's maxRuntimeLimit; a replay accepts rows up to the limit of its configuration.
DEFAULT_MAX_RUN = DEFAULT_MAX_RUNTIME_LIMIT
MAX_ERRORS_SHOWN = 20
MAX_ROWS = 1_000_000
MAX_SUBMIT_SECONDS = 10 * 366 * 24 * 3600
CPU_PER_GPU, MEMORY_GIB_PER_GPU = 3, 12
CPU_ONLY, MEMORY_GIB_CPU_ONLY = 2, 8
GPU_TAINT_KEY = "nvidia.com/gpu"


@dataclass(frozen=True)
class TraceRow(QuantityViews):
    line: int
    submit_s: float
    team: str
    gpus: int
    replicas: int
    run_s: float
    priority: int | None = None  # None: the spec's default
    cpu_request: str | None = None  # per replica, a Kubernetes quantity; None: by the GPUs
    memory_request: str | None = None
    max_runtime_s: float | None = None  # the declared limit; None: twice run_s, at least an hour

    @property
    def job_id(self) -> str:
        return f"{self.team}-{self.line:06d}"

    @property
    def cpu(self) -> str:
        """CPU per replica as the spec has it: the row's own, or 3 per GPU (2 without GPUs)."""
        if self.cpu_request is not None:
            return self.cpu_request
        return str(CPU_PER_GPU * self.gpus if self.gpus else CPU_ONLY)

    @property
    def memory(self) -> str:
        """Memory per replica as the spec has it: the row's own, or 12Gi per GPU (8Gi without GPUs)."""
        if self.memory_request is not None:
            return self.memory_request
        return f"{MEMORY_GIB_PER_GPU * self.gpus if self.gpus else MEMORY_GIB_CPU_ONLY}Gi"


# ---- parsing -----------------------------------------------------------------------------------


def read_trace(path: str | Path, *, max_run: timedelta = DEFAULT_MAX_RUN) -> list[TraceRow]:
    """The rows of TRACE.csv; `max_run`: the configuration's maxRuntimeLimit, the longest run_s accepted."""
    path = Path(path)
    try:
        text = documents.read_text(path)
    except documents.DocumentError as exc:
        where = f"line {exc.line}, column {exc.column}: " if exc.line is not None else ""
        raise ScenarioError([where + exc.message], source=str(path)) from exc
    return parse_trace(text, source=str(path), max_run=max_run)


def parse_trace(text: str, *, source: str = "trace", max_run: timedelta = DEFAULT_MAX_RUN) -> list[TraceRow]:
    """Rows of a trace; ScenarioError names the line and column of every problem.

    run_s may be at most `max_run` (the policy's maxRuntimeLimit): a job that ran longer
    could not be submitted with a maxRuntime that lets it finish.
    """
    limit = f" (the policy's maxRuntimeLimit, {format_duration(max_run)})"
    max_seconds = max_run.total_seconds()
    reader = csv.reader(io.StringIO(text))
    header = _header(reader, source=source)
    header_line = reader.line_num
    names = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ScenarioError(
            [
                f"line {header_line}: the header lacks {', '.join(missing)} "
                f"(expected {','.join(COLUMNS)}, further columns allowed)"
            ],
            source=source,
        )
    index = {c: names.index(c) for c in (*COLUMNS, *OPTIONAL_COLUMNS) if c in names}
    rows: list[TraceRow] = []
    errors: list[str] = []
    for record in _records(reader, errors):
        line = reader.line_num
        if _blank(record):
            continue
        if len(rows) >= MAX_ROWS:
            errors.append(f"line {line}: a trace may hold at most {MAX_ROWS:,} jobs")
            break
        if len(record) < len(names):
            errors.append(f"line {line}: {len(record)} columns, the header has {len(names)}")
            continue
        cells = {c: record[i].strip() for c, i in index.items()}
        problems: list[str] = []
        submit_s = _number(
            cells["submit_s"],
            "submit_s",
            line,
            problems,
            minimum=0.0,
            maximum=MAX_SUBMIT_SECONDS,
            why=" (ten years)",
        )
        run_s = _number(
            cells["run_s"],
            "run_s",
            line,
            problems,
            minimum=0.0,
            positive=True,
            maximum=max_seconds,
            why=limit,
            always_name_maximum=True,
        )
        gpus = _whole(cells["gpus"], "gpus", line, problems, 0, MAX_GPUS_PER_REPLICA)
        replicas = _whole(cells["replicas"], "replicas", line, problems, 1, MAX_REPLICAS)
        if not TEAM.fullmatch(cells["team"]):
            problems.append(
                f"line {line}, column team: {documents.shown(cells['team'])} is not a team name "
                "(lowercase letters, digits and '-', at most 32, starting with a letter)"
            )
        priority = (
            _whole(cells["priority"], "priority", line, problems, MIN_PRIORITY, MAX_PRIORITY)
            if cells.get("priority")
            else None
        )
        cpu = _quantity(cells.get("cpu", ""), "cpu", line, problems)
        memory = _quantity(cells.get("memory", ""), "memory", line, problems)
        declared = (
            _number(
                cells["max_runtime_s"],
                "max_runtime_s",
                line,
                problems,
                minimum=0.0,
                positive=True,
                maximum=max_seconds,
                why=limit,
                always_name_maximum=True,
            )
            if cells.get("max_runtime_s")
            else None
        )
        errors.extend(problems)
        if not problems:
            rows.append(
                TraceRow(
                    line,
                    float(submit_s),
                    cells["team"],
                    int(gpus),
                    int(replicas),
                    float(run_s),
                    priority=priority,
                    cpu_request=cpu,
                    memory_request=memory,
                    max_runtime_s=declared,
                )
            )
    if not rows and not errors:
        errors.append(f"line {header_line + 1}: the trace has no jobs")
    if errors:
        shown = errors[:MAX_ERRORS_SHOWN]
        if len(errors) > MAX_ERRORS_SHOWN:
            shown.append(f"... and {len(errors) - MAX_ERRORS_SHOWN} more")
        raise ScenarioError(shown, source=source)
    return sorted(rows, key=lambda r: (r.submit_s, r.line))


def _header(reader: Any, *, source: str) -> list[str]:
    """The first record that is not blank; its line is the reader's line_num."""
    try:
        for record in reader:
            if not _blank(record):
                return list(record)
    except csv.Error as exc:
        raise ScenarioError([f"line {reader.line_num}: {exc}"], source=source) from None
    what = "only blank lines" if reader.line_num else "empty file"
    raise ScenarioError([f"line 1: {what}; expected the header " + ",".join(COLUMNS)], source=source)


def _blank(record: Sequence[str]) -> bool:
    return all(not cell.strip() for cell in record)


def _too_long(cell: str) -> str:
    """A note for a numeric cell longer than any number the trace takes ('' when it is not)."""
    if len(cell) <= MAX_NUMBER_LENGTH:
        return ""
    return f" ({len(cell):,} characters, at most {MAX_NUMBER_LENGTH})"


def _records(reader: Any, errors: list[str]) -> Iterator[list[str]]:
    """The reader's records; a line the csv module cannot read ends the trace with an error naming it."""
    try:
        yield from reader
    except csv.Error as exc:
        errors.append(f"line {reader.line_num}: {exc}")


def _number(
    cell: str,
    column: str,
    line: int,
    problems: list[str],
    *,
    minimum: float,
    positive: bool = False,
    maximum: float = math.inf,
    why: str = "",
    always_name_maximum: bool = False,
) -> float:
    if len(cell) > MAX_NUMBER_LENGTH or not REAL.fullmatch(cell):
        problems.append(
            f"line {line}, column {column}: expected {SECONDS_FORMS}, got {documents.shown(cell)}{_too_long(cell)}"
        )
        return 0.0
    value = float(cell)  # finite unless the exponent is out of range, which the bounds below refuse
    if not math.isfinite(value) or value < minimum or (positive and value <= 0) or value > maximum:
        bound = "a positive number" if positive else f"a number at least {minimum:g}"
        named = math.isfinite(maximum) and (always_name_maximum or not value <= maximum)
        limit = f" and at most {maximum:.0f}{why}" if named else ""
        problems.append(f"line {line}, column {column}: expected {bound}{limit}, got {documents.shown(cell)}")
    return value


def _whole(cell: str, column: str, line: int, problems: list[str], low: int, high: int) -> int:
    if len(cell) > MAX_NUMBER_LENGTH or not WHOLE.fullmatch(cell):
        problems.append(
            f"line {line}, column {column}: expected a whole number {low}..{high}, "
            f"got {documents.shown(cell)}{_too_long(cell)}"
        )
        return low
    value = int(cell)
    if not low <= value <= high:
        problems.append(
            f"line {line}, column {column}: expected a whole number {low}..{high}, got {documents.shown(value)}"
        )
    return value


def _quantity(cell: str, column: str, line: int, problems: list[str]) -> str | None:
    """A replica's cpu or memory as the spec checks it; None for an empty cell (the default)."""
    if not cell:
        return None
    try:
        ReplicaResources.model_validate({column: cell})
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        problems.append(f"line {line}, column {column}: {message}")
        return None
    return cell


# ---- rows into jobs -------------------------------------------------------------------------------


def job_spec(row: TraceRow, *, registry: str, max_run: timedelta = DEFAULT_MAX_RUN) -> dict[str, Any]:
    """The job spec a trace row stands for; its maxRuntime at most `max_run` (the policy's limit)."""
    most = int(max_run.total_seconds())
    if row.max_runtime_s is not None:
        max_runtime = min(most, math.ceil(row.max_runtime_s))
    else:
        # Twice the recorded run time (at least an hour), so the deadline never cuts a replayed job.
        max_runtime = min(most, max(3600, math.ceil(2 * row.run_s)))
    spec: dict[str, Any] = {
        "name": "replay",
        "id": row.job_id,
        "team": row.team,
        "image": f"{registry}/trainer:replay",
        "resources": {"cpu": row.cpu, "memory": row.memory, "gpu": row.gpus},
        "maxRuntime": f"{max_runtime}s",
    }
    if row.priority is not None:
        spec["priority"] = row.priority
    if row.replicas > 1:
        spec["replicas"] = {"chief": 1, "worker": {"count": row.replicas - 1}}
    return spec


def unplaceable(rows: Sequence[TraceRow], groups: Sequence[NodeGroup]) -> list[str]:
    """Rows that can never run: a replica fits no node, or the gang fits no single region (of one cluster)."""
    problems = []
    for row in rows:
        per_node = {g.name: _replicas_per_node(row, g) for g in groups}
        if not any(per_node.values()):
            biggest = max((g.allocatable.gpu for g in groups), default=0)
            problems.append(
                f"line {row.line}, column {_binding_column(row, groups)}: a replica of {row.gpus} GPUs, "
                f"{row.cpu} CPUs and {row.memory} fits no node group (the largest has {biggest} GPUs per node)"
            )
            continue
        # A job's replicas all run in one region (the gang's pod affinity), of one cluster.
        room: dict[tuple[str, str], int] = {}
        for group in groups:
            site = (group.cluster, group.region)
            room[site] = room.get(site, 0) + per_node[group.name] * group.max_size
        if max(room.values()) < row.replicas:
            where = "region" if len({c for c, _ in room}) <= 1 else "cluster and region"
            problems.append(
                f"line {row.line}, column replicas: {row.replicas} replicas of {row.gpus} GPUs must run in one "
                f"{where}, and the most any {where}'s groups can hold at their max sizes is {max(room.values())}"
            )
    return problems


def over_quota(rows: Sequence[TraceRow], teams: Mapping[str, Team]) -> list[str]:
    """Rows that would wait forever: the job needs more GPUs than its team's gpuQuota."""
    problems = []
    for row in rows:
        team = teams.get(row.team)
        quota = team.gpu_quota if team is not None else None
        if quota is not None and row.gpus * row.replicas > quota:
            problems.append(
                f"line {row.line}, column gpus: the job needs {row.gpus * row.replicas} GPUs "
                f"({row.replicas} x {row.gpus}), more than team {row.team}'s gpuQuota of {quota}: "
                "it would wait forever"
            )
    return problems


def _replicas_per_node(row: TraceRow, group: NodeGroup) -> int:
    """How many of the row's replicas one node of the group holds."""
    allocatable = group.allocatable
    if not _may_run_on(row, group):
        return 0
    fits = [allocatable.cpu // row.cpu_millis, allocatable.memory // row.memory_bytes]
    if row.gpus:
        fits.append(allocatable.gpu // row.gpus)
    if allocatable.pods:
        fits.append(allocatable.pods)
    return max(0, min(fits))


def _may_run_on(row: TraceRow, group: NodeGroup) -> bool:
    """A replica without GPUs does not tolerate the GPU taint."""
    return row.gpus > 0 or not any(t.key == GPU_TAINT_KEY and t.effect == "NoSchedule" for t in group.taints)


def _binding_column(row: TraceRow, groups: Sequence[NodeGroup]) -> str:
    """The column whose request no node group allowed for it can hold (gpus when only all of them together fail)."""
    allowed = [g for g in groups if _may_run_on(row, g)]
    if any(g.allocatable.gpu >= row.gpus for g in allowed):
        if row.cpu_request is not None and not any(g.allocatable.cpu >= row.cpu_millis for g in allowed):
            return "cpu"
        if row.memory_request is not None and not any(
            g.allocatable.memory >= row.memory_bytes for g in allowed
        ):
            return "memory"
    return "gpus"


# ---- the node groups to replay against ----------------------------------------------------------


class GroupsFile(StrictModel):
    """GROUPS.yaml: node groups (as in cdk.json), and optionally clusters, policy, region capacity and teams."""

    node_groups: list[dict[str, Any]]
    # The clusters, in preference order; absent: one. With more, every group names its cluster.
    clusters: list[ClusterModel] | None = None
    policy: dict[str, Any] = Field(default_factory=dict)
    regions: dict[str, RegionModel] = Field(default_factory=dict)
    # team -> namespace, or {namespace, gpuQuota, weight, submitters} as in cdk.json
    # (submitters are not checked in a replay: a trace names no senders).
    teams: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Configuration:
    node_groups: list[dict[str, Any]]
    groups: list[NodeGroup]
    policy: PolicySettings
    capacity: dict[str, RegionCapacity]
    source: str
    # The configured teams: a trace's team among them runs in its namespace, held to its
    # GPU quota and weight; any other team runs in team-<name>, with no quota.
    teams: dict[str, Team] = field(default_factory=dict)
    clusters: list[ClusterEntry] = field(default_factory=list)  # empty: the runtime's default one

    def quotas(self) -> dict[str, TeamShare]:
        return team_shares(self.teams)


def load_configuration(path: str | Path | None) -> Configuration:
    """GROUPS.yaml, a cdk.json, or (no path) ./cdk.json: its node groups and policy."""
    file = Path(path) if path is not None else Path("cdk.json")
    if not file.exists():
        raise ScenarioError(
            [f"{file} does not exist" + ("" if path is not None else " (give --groups GROUPS.yaml)")],
            source=str(file),
        )
    document = load_document(file)
    if isinstance(document, dict) and isinstance(document.get("context"), dict):
        context = document["context"]
        document = {
            "nodeGroups": context.get("nodeGroups", []),
            "policy": context.get("policy", {}),
            "teams": context.get("teams", {}),
        } | _cdk_clusters(context)
    if not isinstance(document, dict):
        raise ScenarioError(
            [
                f"(groups): expected an object with nodeGroups (and policy, regions), got {documents.kind(document)}"
            ],
            source=str(file),
        )
    try:
        model = GroupsFile.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(validation_errors(exc), source=str(file)) from exc
    errors: list[str] = []
    try:
        groups, _ = read_node_groups(list(model.node_groups))
    except GroupsError as exc:
        errors.extend(exc.errors)
        groups = []
    policy = read_policy_settings(model.policy, errors)
    try:
        teams = read_teams(model.teams)
    except InputError as exc:
        errors.extend(exc.errors)
        teams = {}
    if not groups and not errors:
        errors.append("nodeGroups: at least one node group is needed")
    named = [(c.name, c.region) for c in model.clusters] if model.clusters is not None else None
    if named is not None and not named:
        errors.append("clusters: give at least one cluster, or leave clusters out for one")
    clusters = read_clusters(named, list(model.node_groups), errors)
    if errors:
        raise ScenarioError(errors, source=str(file))
    return Configuration(
        node_groups=list(model.node_groups),
        groups=groups,
        policy=policy,
        capacity={
            r: RegionCapacity(instances=dict(m.capacity), boot_time=m.boot_time)
            for r, m in model.regions.items()
        },
        source=str(file),
        teams=teams,
        clusters=clusters,
    )


def _cdk_clusters(context: dict[str, Any]) -> dict[str, Any]:
    """A cdk.json's clusters as a groups file has them ({name, region} each), or its one `cluster`.

    Only name and region matter to a replay. A cluster without a region is where the CDK app
    puts it (stacks/config.py): in `homeRegion`; in a context without one (which cdk synth
    refuses), in the first group's region.
    """
    found = context.get("clusters")
    if found is None and isinstance(context.get("cluster"), dict):
        found = [context["cluster"]] if context["cluster"].get("name") else None
    if not isinstance(found, list):
        return {} if found is None else {"clusters": found}  # not a list: the model says so
    home = context.get("homeRegion")
    if not isinstance(home, str) or not home:
        groups = context.get("nodeGroups")
        home = (
            groups[0].get("region")
            if isinstance(groups, list) and groups and isinstance(groups[0], dict)
            else None
        )
    return {
        "clusters": [
            {"name": c.get("name"), "region": c.get("region") or home} if isinstance(c, dict) else c
            for c in found
        ]
    }


def trace_plan(rows: Sequence[TraceRow], config: Configuration, *, name: str = "trace") -> ScenarioPlan:
    """A ScenarioPlan that sends every row at its time; ScenarioError if some row can never run."""
    problems = unplaceable(rows, config.groups) + over_quota(rows, config.teams)
    if problems:
        shown = problems[:MAX_ERRORS_SHOWN] + (
            [f"... and {len(problems) - MAX_ERRORS_SHOWN} more"] if len(problems) > MAX_ERRORS_SHOWN else []
        )
        raise ScenarioError(shown, source=name)
    registry = DEFAULT_REGISTRIES[0]
    submissions = [
        PlannedSubmission(
            at=timedelta(seconds=row.submit_s),
            body=json.dumps(job_spec(row, registry=registry, max_run=config.policy.max_runtime_limit)),
            job_id=row.job_id,
            run_for=timedelta(seconds=row.run_s),
        )
        for row in rows
    ]
    return ScenarioPlan(
        name=name,
        node_groups=config.node_groups,
        groups=config.groups,
        capacity=config.capacity,
        policy=config.policy,
        teams={
            team: config.teams[team].namespace if team in config.teams else f"team-{team}"
            for team in sorted({row.team for row in rows} | set(config.teams))
        },
        quotas=config.quotas(),
        clusters=config.clusters,
        registries=[registry],
        submissions=submissions,
        end=EndModel(when="scaledDown", limit=give_up_after(rows, config.groups)),
    )


def give_up_after(rows: Sequence[TraceRow], groups: Sequence[NodeGroup]) -> timedelta:
    """Long enough to run every job one after another on the largest fleet the groups allow, and then some."""
    gpu_seconds = sum(r.gpus * r.replicas * r.run_s for r in rows)
    fleet_gpus = max(1, sum(g.allocatable.gpu * g.max_size for g in groups))
    last = max(r.submit_s for r in rows)
    longest = max(r.run_s for r in rows)
    return timedelta(seconds=last + 3 * gpu_seconds / fleet_gpus + longest) + timedelta(hours=6)
