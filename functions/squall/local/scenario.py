"""Scenarios: a cloud, a cluster, arrivals and faults on a virtual clock, run against Squall.

A scenario file (YAML, see docs/simulator.md) names regions with their capacity
per instance type and boot time, node groups (or cdk.json's), job arrivals, faults
at given times, how fast the virtual clock runs, and when the run ends. It is read
into strict models (every error names its field), compiled into a `ScenarioPlan`, and a
`Simulation` drives the local runtime through it:

- Arrivals are sent to the jobs queue at their time, their pods told how long to
  run and whether to fail.
- Faults happen at their time: a node terminated, a spot instance reclaimed, an
  instance lost without notice, a region out of capacity, Auto Scaling or
  Kubernetes API throttling, a function invocation killed half way.
- The clock jumps from one interesting moment to the next (an arrival, a fault, a
  pod finishing, or whatever the runtime says it does next: a schedule, a debounced
  scale request, a retry, an instance finishing its boot) instead of ticking: a
  quiet hour costs a handful of steps.

The runtime owns its function invocations: a failed one is recorded, counted in
Lambda's metrics and retried (or not) by its trigger there; the simulation only
reads the failures for its notes and summary.

Trace replay (`squall simulate`) builds a ScenarioPlan from a CSV instead of a file.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from squall.core import documents
from squall.core.errors import RetryableError
from squall.core.jobs import JobStatus, is_terminal
from squall.core.settings import PolicySettings
from squall.core.spec import JobSpec, SpecError, derive_job_id, expand_sweep, parse_spec
from squall.local.clock import EPOCH, VirtualClock
from squall.local.fleet import RegionCapacity
from squall.local.runtime import DEFAULT_REGISTRIES, DEFAULT_TEAMS, LocalRuntime
from squall.local.summary import (
    Invariants,
    ObservedCluster,
    Recorder,
    build_summary,
    instances,
    invariants,
)
from squall.planner import NodeGroup
from squall.planner.offline import GroupsError, parse_groups

ZERO = timedelta(0)
# Steps at one instant before moving on: a scale check launches instances that the
# fleet must see at that same instant, and that in turn may let pods bind.
MAX_SETTLE_STEPS = 8
KubernetesMethod = Literal["list_jobs", "list_pods", "list_nodes", "get_node", "patch_node", "create"]
KUBERNETES_READS: tuple[KubernetesMethod, ...] = ("list_jobs", "list_pods", "list_nodes")


class ScenarioError(ValueError):
    """A scenario (or trace, or groups file) that cannot be run; `errors` name each field."""

    def __init__(self, errors: Sequence[str], *, source: str = "") -> None:
        self.errors = list(errors)
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + "; ".join(self.errors))


# ---- durations ----------------------------------------------------------------------------

_COMPACT = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")
_ISO = TypeAdapter(timedelta)


def parse_span(value: Any) -> timedelta:
    """A duration: seconds as a number, '90s', '4m', '1h30m', '2d', or ISO 8601 ('PT5M')."""
    if isinstance(value, timedelta):
        span = value
    elif isinstance(value, bool):
        raise ValueError("must be a duration such as 90s, 4m, 1h30m or PT5M")
    elif isinstance(value, int | float):
        span = timedelta(seconds=value)
    elif isinstance(value, str) and value.strip() and (match := _COMPACT.match(value.strip())):
        days, hours, minutes, seconds = match.groups()
        span = timedelta(
            days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0), seconds=float(seconds or 0)
        )
    elif isinstance(value, str) and value.strip().upper().startswith("P"):
        try:
            span = _ISO.validate_python(value.strip())
        except ValidationError as exc:
            raise ValueError(f"must be a duration such as 90s, 4m, 1h30m or PT5M, got {value!r}") from exc
    else:
        raise ValueError(f"must be a duration such as 90s, 4m, 1h30m or PT5M, got {value!r}")
    if span < ZERO:
        raise ValueError("must not be negative")
    return span


Span = Annotated[timedelta, BeforeValidator(parse_span)]


def format_span(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    return f"t+{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# ---- the scenario file ----------------------------------------------------------------------


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class RegionModel(StrictModel):
    """What a region can run: instances per instance type (absent: unlimited) and boot time."""

    capacity: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    boot_time: Span = timedelta(minutes=3)


class ClockModel(StrictModel):
    # Virtual seconds per wall-clock second; "max" runs as fast as the machine allows.
    speed: Annotated[float, Field(gt=0)] | Literal["max"] = "max"
    start: AwareDatetime = EPOCH


Expect = Literal["accepted", "rejected", "duplicate", "deadLetter"]


class ArrivalModel(StrictModel):
    """Jobs arriving on the queue: `count` copies, `every` apart, from `at` on."""

    at: Span
    spec: dict[str, Any] | None = None
    spec_file: str | None = None
    body: str | None = None  # a raw message body, e.g. one that is not JSON
    count: Annotated[int, Field(ge=1, le=100_000)] = 1
    every: Span = ZERO
    run_time: Span | None = None  # how long each pod runs; default: the scenario's defaultRunTime
    failure_probability: Annotated[float, Field(ge=0, le=1)] = 0.0
    deliver_twice: bool = False  # SQS hands the message over twice (at-least-once delivery)
    # Who sends it: a principal's unique id (AROA...), what SQS reports as the SenderId.
    sender: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_+=,.@:-]+$")] | None = (
        None
    )
    # What Squall should make of it: a job; REJECTED; ignored as a duplicate client id; dead-lettered.
    expect: Expect = "accepted"

    @model_validator(mode="after")
    def _one_source(self) -> ArrivalModel:
        given = [name for name in ("spec", "specFile", "body") if getattr(self, _snake(name)) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of spec, specFile and body (got {', '.join(given) or 'none'})"
            )
        return self


class _NodeSelector(StrictModel):
    """Which nodes a fault hits: busiest first (most GPUs held by running pods), then by name."""

    at: Span
    node: str | None = None
    group: str | None = None  # node group name (or its Auto Scaling group name)
    region: str | None = None
    count: Annotated[int, Field(ge=1)] = 1


class TerminateNode(_NodeSelector):
    """An instance terminated under Squall's feet (a failed host, someone's terminate call)."""

    type: Literal["terminateNode"]


class SpotReclaim(_NodeSelector):
    """EC2 takes spot instances back; their groups launch replacements."""

    type: Literal["spotReclaim"]


class InstanceLost(_NodeSelector):
    """Instances gone without any notice (a failed host): no drain; their groups replace them."""

    type: Literal["instanceLost"]


class RegionOutage(StrictModel):
    """A region can launch no more instances of these types (default: every type its groups use)."""

    type: Literal["regionOutage"]
    at: Span
    region: str
    instance_types: list[str] | None = None
    reclaim_running: bool = False  # the instances running there go too


class CapacityChange(StrictModel):
    """From now on a region can run this many instances of a type (capacity coming back, or shrinking)."""

    type: Literal["capacity"]
    at: Span
    region: str
    instance_type: str
    instances: Annotated[int, Field(ge=0)]


class Throttle(StrictModel):
    """The next `calls` calls to an API are throttled (Auto Scaling: every call; Kubernetes: per method)."""

    type: Literal["throttle"]
    at: Span
    api: Literal["autoscaling", "kubernetes"] = "autoscaling"
    calls: Annotated[int, Field(ge=1)] = 5
    methods: list[KubernetesMethod] = Field(default_factory=lambda: list(KUBERNETES_READS))


class FunctionDies(StrictModel):
    """The function making the (after+1)-th such Kubernetes call from now is killed at that call."""

    type: Literal["functionDies"]
    at: Span
    call: Literal["create", "delete_job_objects", "patch_node", "evict"] = "create"
    after: Annotated[int, Field(ge=0)] = 0


Fault = Annotated[
    TerminateNode | SpotReclaim | InstanceLost | RegionOutage | CapacityChange | Throttle | FunctionDies,
    Field(discriminator="type"),
]
FAULT_TYPES = (
    "terminateNode",
    "spotReclaim",
    "instanceLost",
    "regionOutage",
    "capacity",
    "throttle",
    "functionDies",
)


class EndModel(StrictModel):
    """When the run ends: every job final (and, for scaledDown, every group back at its minimum), or a time."""

    when: Literal["allFinished", "scaledDown", "time"] = "scaledDown"
    at: Span | None = None  # for when: time
    limit: Span = timedelta(hours=6)  # give up (and count what is unfinished as lost)

    @model_validator(mode="after")
    def _time_needs_at(self) -> EndModel:
        if (self.when == "time") != (self.at is not None):
            raise ValueError("at is required with when: time, and only then")
        return self


class ScenarioModel(StrictModel):
    name: str
    description: str = ""
    seed: int = 0
    clock: ClockModel = ClockModel()
    # team -> namespace, or {namespace, submitters: [unique ids]}; default: the local runtime's
    teams: dict[str, Any] | None = None
    registries: list[str] | None = None
    policy: dict[str, Any] = Field(default_factory=dict)  # cdk.json's policy keys
    regions: dict[str, RegionModel] = Field(default_factory=dict)
    # A list of node groups, or the path of a file holding them (cdk.json or {nodeGroups: [...]});
    # absent: ./cdk.json.
    node_groups: list[dict[str, Any]] | str | None = None
    default_run_time: Span = timedelta(minutes=3)
    arrivals: Annotated[list[ArrivalModel], Field(min_length=1)]
    faults: list[Fault] = Field(default_factory=list)
    end: EndModel = EndModel()


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _field_path(loc: Sequence[int | str]) -> str:
    path = ""
    for index, part in enumerate(loc):
        if isinstance(part, int):
            path += f"[{part}]"
        elif index > 0 and loc[index - 2 : index - 1] == ("faults",) and part in FAULT_TYPES:
            continue  # pydantic names the union member; the reader knows which fault it wrote
        else:
            path += ("." if path else "") + part
    return path or "(scenario)"


def validation_errors(exc: ValidationError) -> list[str]:
    errors = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        errors.append(f"{_field_path(error['loc'])}: {message}")
    return errors


# ---- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Submission:
    """One message for the jobs queue, and how its job's pods behave."""

    at: timedelta
    body: str
    expect: Expect = "accepted"
    job_id: str | None = None  # known in advance when the spec names its id
    spec: JobSpec | None = None  # else derived from the message id, as Squall derives it
    run_for: timedelta | None = None
    exit_code: int = 0
    deliver_twice: bool = False
    sender: str | None = None  # the SenderId SQS reports for it


@dataclass(frozen=True)
class ScenarioPlan:
    name: str
    node_groups: list[dict[str, Any]]
    groups: list[NodeGroup]
    capacity: dict[str, RegionCapacity]
    policy: PolicySettings
    teams: dict[str, str]
    registries: list[str]
    submissions: list[Submission]
    faults: list[Any] = field(default_factory=list)  # Fault models, by time
    end: EndModel = field(default_factory=EndModel)
    speed: float | None = None  # virtual seconds per wall second; None: as fast as possible
    start: datetime = EPOCH
    default_run_time: timedelta = timedelta(minutes=3)
    description: str = ""
    # team -> unique ids of the principals that may submit for it; a team left out is open to all.
    submitters: dict[str, tuple[str, ...]] = field(default_factory=dict)


def load_document(path: Path) -> Any:
    """A scenario, groups or spec file (YAML or JSON, see squall.core.documents)."""
    try:
        return documents.load(path)
    except documents.DocumentError as exc:
        where = f"line {exc.line}, column {exc.column}: " if exc.line is not None else ""
        raise ScenarioError([where + exc.message], source=str(path)) from exc


def load_scenario(path: str | Path) -> ScenarioPlan:
    """Read and check a scenario file; ScenarioError lists every problem with its field."""
    path = Path(path)
    return compile_scenario(load_document(path), base=path.parent, source=str(path))


def compile_scenario(document: Any, *, base: Path = Path("."), source: str = "") -> ScenarioPlan:
    if not isinstance(document, dict):
        raise ScenarioError(
            [
                f"(scenario): expected an object with name, arrivals and the rest, got {documents.kind(document)}"
            ],
            source=source,
        )
    try:
        model = ScenarioModel.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(validation_errors(exc), source=source) from exc
    errors: list[str] = []
    try:
        policy = PolicySettings.model_validate(model.policy)
    except ValidationError as exc:
        errors.extend(f"policy.{error}" for error in validation_errors(exc))
        policy = PolicySettings()
    raw_groups = _node_groups(model.node_groups, base=base, errors=errors)
    groups = _parse_groups(raw_groups, errors)
    try:
        entries = documents.read_teams(model.teams or DEFAULT_TEAMS, unique_ids_only=True)
    except documents.ConfigError as exc:
        errors.extend(exc.errors)
        entries = {}
    teams = {name: entry.namespace for name, entry in entries.items()}
    submitters = {name: entry.submitters for name, entry in entries.items() if entry.submitters is not None}
    registries = list(model.registries or DEFAULT_REGISTRIES)
    capacity = {
        region: RegionCapacity(instances=dict(r.capacity), boot_time=r.boot_time)
        for region, r in model.regions.items()
    }
    _check_places(model, groups, errors)
    rng = random.Random(model.seed)
    submissions = _submissions(
        model,
        base=base,
        rules=_Rules(
            teams=teams,
            registries=registries,
            submitters=submitters,
            max_runtime_limit=policy.max_runtime_limit,
        ),
        rng=rng,
        errors=errors,
    )
    if errors:
        raise ScenarioError(errors, source=source)
    return ScenarioPlan(
        name=model.name,
        description=model.description,
        node_groups=raw_groups,
        groups=groups,
        capacity=capacity,
        policy=policy,
        teams=teams,
        registries=registries,
        submissions=sorted(submissions, key=lambda s: s.at),
        faults=sorted(model.faults, key=lambda f: f.at),
        end=model.end,
        speed=None if model.clock.speed == "max" else float(model.clock.speed),
        start=model.clock.start,
        default_run_time=model.default_run_time,
        submitters=submitters,
    )


@dataclass(frozen=True)
class _Rules:
    """What the intake of the scenario's runtime checks a spec against."""

    teams: dict[str, str]
    registries: list[str]
    submitters: dict[str, tuple[str, ...]]
    max_runtime_limit: timedelta

    def may_send(self, team: str, sender: str | None) -> bool:
        allowed = self.submitters.get(team)
        return allowed is None or (sender is not None and sender.split(":", 1)[0] in allowed)


def _node_groups(
    value: list[dict[str, Any]] | str | None, *, base: Path, errors: list[str]
) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return value
    path = Path("cdk.json") if value is None else base / value
    if not path.exists():
        errors.append(f"nodeGroups: {path} does not exist (give a list, or a file with nodeGroups)")
        return []
    document = load_document(path)
    holder = document.get("context", document) if isinstance(document, dict) else {}
    found = holder.get("nodeGroups") if isinstance(holder, dict) else None
    if not isinstance(found, list):
        errors.append(f"nodeGroups: {path} has no nodeGroups list")
        return []
    return found


def _parse_groups(raw: list[dict[str, Any]], errors: list[str]) -> list[NodeGroup]:
    if not raw:
        if not any(e.startswith("nodeGroups") for e in errors):
            errors.append("nodeGroups: at least one node group is needed")
        return []
    try:
        groups, _ = parse_groups(raw)
    except GroupsError as exc:
        errors.extend(str(e) for e in exc.errors)
        return []
    return groups


def _check_places(model: ScenarioModel, groups: list[NodeGroup], errors: list[str]) -> None:
    """Faults and regions must name regions and groups the scenario has."""
    regions = {g.region for g in groups}
    names = {g.name for g in groups} | {g.asg_name for g in groups if g.asg_name}
    if groups:
        for name in model.regions:
            if name not in regions:
                errors.append(f"regions.{name}: no node group is in this region")
        for index, fault in enumerate(model.faults):
            region: str | None = getattr(fault, "region", None)
            if region is not None and region not in regions:
                errors.append(f"faults[{index}].region: no node group is in {region}")
            group = getattr(fault, "group", None)
            if group is not None and group not in names:
                errors.append(f"faults[{index}].group: no node group {group}")


def _submissions(
    model: ScenarioModel, *, base: Path, rules: _Rules, rng: random.Random, errors: list[str]
) -> list[Submission]:
    submissions: list[Submission] = []
    accepted_ids: set[str] = set()
    for index, arrival in enumerate(model.arrivals):
        where = f"arrivals[{index}]"
        if arrival.body is not None:
            bodies: list[tuple[str, JobSpec | None]] = [(arrival.body, None)] * arrival.count
            if arrival.expect == "accepted":
                errors.append(f"{where}.expect: a raw body cannot be expected to make a job")
            submissions.extend(_copies(arrival, bodies, model, rng))
            continue
        if arrival.expect == "deadLetter":
            errors.append(f"{where}.expect: only a raw body can end in the dead-letter queue")
            continue
        data = (
            arrival.spec if arrival.spec is not None else _spec_file(base, arrival.spec_file, where, errors)
        )
        if data is None:
            continue
        spec = _check_spec(data, arrival=arrival, where=where, rules=rules, errors=errors)
        copies: list[tuple[str, JobSpec | None]] = []
        for number in range(1, arrival.count + 1):
            copy = dict(data)
            if spec is not None and spec.id and arrival.count > 1:
                copy["id"] = f"{spec.id}-{number}"
            parsed = spec.model_copy(update={"id": copy["id"]}) if spec is not None and spec.id else spec
            copies.append((json.dumps(copy), parsed))
            if parsed is not None and parsed.id:
                _check_id(parsed.id, arrival.expect, accepted_ids, where, errors)
        submissions.extend(_copies(arrival, copies, model, rng))
    return submissions


def _copies(
    arrival: ArrivalModel, bodies: list[tuple[str, JobSpec | None]], model: ScenarioModel, rng: random.Random
) -> Iterator[Submission]:
    for number, (body, spec) in enumerate(bodies):
        fails = arrival.failure_probability > 0 and rng.random() < arrival.failure_probability
        yield Submission(
            at=arrival.at + number * arrival.every,
            body=body,
            expect=arrival.expect,
            job_id=spec.id if spec is not None and spec.id else None,
            spec=spec,
            run_for=arrival.run_time or model.default_run_time,
            exit_code=1 if fails else 0,
            deliver_twice=arrival.deliver_twice,
            sender=arrival.sender,
        )


def _spec_file(base: Path, name: str | None, where: str, errors: list[str]) -> dict[str, Any] | None:
    path = base / str(name)
    if not path.exists():
        errors.append(f"{where}.specFile: {path} does not exist")
        return None
    document = load_document(path)
    if not isinstance(document, dict):
        errors.append(f"{where}.specFile: {path} does not hold a job spec (a mapping)")
        return None
    return document


def _check_spec(
    data: dict[str, Any], *, arrival: ArrivalModel, where: str, rules: _Rules, errors: list[str]
) -> JobSpec | None:
    """The spec, when Squall will accept it; the arrival's `expect` must agree with what Squall will do."""
    expect = arrival.expect
    try:
        spec = parse_spec(
            data,
            teams=list(rules.teams),
            registries=rules.registries,
            max_runtime_limit=rules.max_runtime_limit,
        )
    except SpecError as exc:
        if expect != "rejected":
            errors.extend(f"{where}.spec.{issue.field}: {issue.message}" for issue in exc.issues)
        return None
    if not rules.may_send(spec.team, arrival.sender):
        if expect != "rejected":
            sender = arrival.sender or "an arrival without a sender (the runtime's default principal)"
            errors.append(
                f"{where}.sender: {sender} may not submit for team {spec.team} (its submitters: "
                f"{', '.join(rules.submitters[spec.team]) or 'none'}); Squall will reject it (expect: rejected?)"
            )
        return None
    if expect == "rejected":
        errors.append(f"{where}.expect: the spec is valid, Squall will not reject it")
    return spec


def _check_id(job_id: str, expect: Expect, accepted: set[str], where: str, errors: list[str]) -> None:
    if expect == "duplicate":
        if job_id not in accepted:
            errors.append(f"{where}.spec.id: a duplicate must reuse the id of an earlier accepted arrival")
    elif expect == "accepted":
        if job_id in accepted:
            errors.append(f"{where}.spec.id: {job_id} is used by an earlier arrival (expect: duplicate?)")
        accepted.add(job_id)


# ---- running it -----------------------------------------------------------------------------------


class View(Protocol):
    """What the simulation shows while it runs (live.py has the terminal views)."""

    def update(self, local: LocalRuntime, recorder: Recorder) -> None: ...

    def note(self, at: timedelta, text: str) -> None: ...

    def close(self, local: LocalRuntime, recorder: Recorder) -> None: ...


@dataclass
class SimulationResult:
    summary: dict[str, Any]
    finished: bool  # the end condition held before the limit
    checks: Invariants
    function_errors: list[tuple[datetime, str]]  # (when, function): failed or killed invocations
    notes: list[str]

    @property
    def ok(self) -> bool:
        return self.finished and self.checks.hold


class Simulation:
    """Drives a LocalRuntime through a ScenarioPlan on a virtual clock, jumping between events."""

    def __init__(
        self,
        plan: ScenarioPlan,
        *,
        backend: str = "moto",
        view: View | None = None,
        pace: bool = True,
        log_level: int | None = None,
        lists: str = "shared",
    ) -> None:
        """`lists`: SimulatedCluster's list mode; tests pass "checked" to prove sharing safe."""
        self.plan = plan
        self.backend = backend
        self.lists = lists
        self.view = view
        self.pace = pace and plan.speed is not None
        self.log_level = log_level
        self.notes: list[str] = []
        self.expected_ids: list[str] = []  # accepted submissions: each must end in a final state
        self._open: set[str] = set()  # of those, the ones not yet seen final
        self._errors_noted = 0  # the runtime's function errors already told as notes

    def run(
        self,
        *,
        before: Callable[[LocalRuntime], None] | None = None,
        after: Callable[[LocalRuntime, SimulationResult], None] | None = None,
    ) -> SimulationResult:
        """Run the plan to its end; `before` and `after` see the runtime while it is up."""
        plan = self.plan
        started = time.monotonic()
        clock = VirtualClock(plan.start)
        # Squall's functions only read what they list: shared objects spare a copy of
        # every node and pod per scale check (SimulatedCluster's `lists`).
        cluster = ObservedCluster(clock=clock, default_run_for=plan.default_run_time, lists=self.lists)
        with LocalRuntime.start(
            clock=clock,
            cluster=cluster,
            teams=plan.teams,
            registries=plan.registries,
            policy=plan.policy,
            node_groups=plan.node_groups,
            capacity=plan.capacity,
            log_level=self.log_level if self.log_level is not None else logging.CRITICAL,
            backend=self.backend,
            submitters=plan.submitters,
        ) as local:
            recorder = Recorder(clock=clock, cluster=cluster, fleet=local.fleet, groups=plan.groups)
            if before is not None:
                before(local)
            try:
                finished = self._loop(local, cluster, recorder)
            finally:
                # A live view owns the terminal until it is closed, whatever happened.
                if self.view is not None:
                    self.view.close(local, recorder)
            jobs = local.jobs()
            checks = invariants(
                jobs=jobs,
                expected_ids=self.expected_ids,
                cluster=cluster,
                fleet=local.fleet,
                recorder=recorder,
            )
            summary = build_summary(
                jobs=jobs, metrics=local.metrics, recorder=recorder, fleet=local.fleet, checks=checks
            ) | {
                "virtualSeconds": int(clock.elapsed.total_seconds()),
                "wallSeconds": round(time.monotonic() - started, 2),
                "functionErrors": dict(sorted(Counter(e.function for e in local.function_errors).items())),
                "finished": finished,
            }
            result = SimulationResult(
                summary=summary,
                finished=finished,
                checks=checks,
                function_errors=[(e.at, e.function) for e in local.function_errors],
                notes=self.notes,
            )
            if after is not None:
                after(local, result)
        return result

    # ---- the loop --------------------------------------------------------------------------

    def _loop(self, local: LocalRuntime, cluster: ObservedCluster, recorder: Recorder) -> bool:
        plan = self.plan
        clock = local.clock
        deadline = plan.start + plan.end.limit
        submissions, faults = list(plan.submissions), list(plan.faults)
        next_submission = next_fault = 0
        wall_start = time.monotonic()
        recorder.observe()
        while True:
            elapsed = clock.now() - plan.start
            while next_submission < len(submissions) and submissions[next_submission].at <= elapsed:
                self._send(local, cluster, submissions[next_submission])
                next_submission += 1
            while next_fault < len(faults) and faults[next_fault].at <= elapsed:
                self._fault(local, cluster, recorder, faults[next_fault])
                next_fault += 1
            self._settle(local)
            recorder.observe()
            if self.view is not None:
                self.view.update(local, recorder)
            all_sent = next_submission == len(submissions)
            if self._ended(local, all_sent=all_sent):
                return True
            if clock.now() >= deadline:
                self._note(
                    clock.now() - plan.start, "the time limit is reached; what is unfinished counts as lost"
                )
                return False
            # Jump to the next moment anything happens. Pod endings in between only
            # touch the cluster (kube-scheduler binds what they free at once), so they
            # are played without stepping Squall's functions.
            upcoming = min(
                [
                    deadline,
                    *([runtime_event] if (runtime_event := local.next_event_time()) is not None else []),
                    *([plan.start + submissions[next_submission].at] if not all_sent else []),
                    *([plan.start + faults[next_fault].at] if next_fault < len(faults) else []),
                    *([plan.start + plan.end.at] if plan.end.at is not None else []),
                ]
            )
            upcoming = max(upcoming, clock.now() + timedelta(seconds=1))
            while (pod_event := cluster.next_event_time()) is not None and clock.now() < pod_event < upcoming:
                self._move(clock, pod_event, wall_start)
                cluster.advance()
                recorder.observe()
            self._move(clock, upcoming, wall_start)
            cluster.advance()
            recorder.observe()

    def _move(self, clock: VirtualClock, to: datetime, wall_start: float) -> None:
        if self.pace and self.plan.speed:
            due = wall_start + (to - self.plan.start).total_seconds() / self.plan.speed
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        clock.advance_to(to)

    def _settle(self, local: LocalRuntime) -> None:
        """Step the runtime at this instant until what it did needs nothing more at this instant.

        A failed invocation counts as activity: a failed SQS batch is visible again
        at once (visibility timeout 0), and the next step delivers it again.
        """
        for _ in range(MAX_SETTLE_STEPS):
            before = self._activity(local)
            local.step(ZERO)
            self._note_errors(local)
            if self._activity(local) == before:
                return

    def _note_errors(self, local: LocalRuntime) -> None:
        for error in local.function_errors[self._errors_noted :]:
            what = f"was killed half way ({error.error})" if error.killed else f"failed: {error.error}"
            self._note(error.at - self.plan.start, f"the {error.function} function {what}")
        self._errors_noted = len(local.function_errors)

    @staticmethod
    def _activity(local: LocalRuntime) -> tuple[int, ...]:
        """What changes when a step did something that may need another step at this instant."""
        fleet = local.fleet
        if fleet is None:
            return (len(local.scale_results), len(local.function_errors))
        return (
            len(local.scale_results),
            len(local.function_errors),
            len(local.lifecycle_results),
            len(fleet.outbox),
            fleet.nodes_added,
            fleet.nodes_removed,
        )

    def _ended(self, local: LocalRuntime, *, all_sent: bool) -> bool:
        end = self.plan.end
        if end.when == "time":
            return end.at is not None and local.clock.elapsed >= end.at
        if not all_sent or not self._all_final(local):
            return False
        if end.when == "allFinished" or local.fleet is None:
            return True
        launched: dict[str, int] = {}
        for instance in instances(local.fleet):
            if instance.launched:
                launched[instance.group] = launched.get(instance.group, 0) + 1
        return all(launched.get(g.asg_name or g.name, 0) <= g.min_size for g in self.plan.groups)

    def _all_final(self, local: LocalRuntime) -> bool:
        store = local.store
        if store.list_by_status(JobStatus.QUEUED, limit=1) or store.list_by_status(
            JobStatus.RUNNING, limit=1
        ):
            return False
        for job_id in list(self._open):
            job = store.get(job_id)
            if job is not None and is_terminal(job.status):
                self._open.discard(job_id)
        # An accepted job with no record yet is still on its way, or lost: wait for the limit.
        return not self._open

    # ---- arrivals and faults ------------------------------------------------------------------

    def _send(self, local: LocalRuntime, cluster: ObservedCluster, submission: Submission) -> None:
        message_id = local.send(submission.body, sender=submission.sender)
        if submission.deliver_twice:
            local.deliver_twice.add(message_id)
        if submission.expect != "accepted":
            return
        job_id = submission.job_id
        if job_id is None and submission.spec is not None:
            job_id = derive_job_id(submission.spec, message_id=message_id)
        if job_id is None:
            return
        self.expected_ids.append(job_id)
        self._open.add(job_id)
        spec = submission.spec
        pods_of = (
            [trial for trial, _ in expand_sweep(spec, job_id=job_id)]
            if spec is not None and spec.sweep
            else [job_id]
        )
        for pod_job in pods_of:
            cluster.set_behaviour(pod_job, run_for=submission.run_for, exit_code=submission.exit_code)

    def _fault(self, local: LocalRuntime, cluster: ObservedCluster, recorder: Recorder, fault: Any) -> None:
        fleet = local.fleet
        at = local.clock.elapsed
        if isinstance(fault, TerminateNode | SpotReclaim | InstanceLost):
            if fleet is None:
                return
            victims = self._pick_nodes(local, fault)
            for node in victims:
                instance_id = fleet.instance_of(node)
                if instance_id is None:
                    continue
                recorder.reclaimed_nodes.add(node)
                if isinstance(fault, InstanceLost):
                    fleet.lose(instance_id)
                else:
                    fleet.reclaim(instance_id)
            what = {
                SpotReclaim: "spot reclaim",
                TerminateNode: "node terminated",
                InstanceLost: "instance lost without notice",
            }[type(fault)]
            self._note(at, f"{what}: {', '.join(victims) or 'no node matched'}")
        elif isinstance(fault, RegionOutage):
            if fleet is None:
                return
            types = fault.instance_types or sorted(
                {g.instance_type for g in self.plan.groups if g.region == fault.region}
            )
            for instance_type in types:
                fleet.set_capacity(region=fault.region, instance_type=instance_type, instances=0)
            self._note(at, f"{fault.region} has no more {', '.join(types)} capacity")
            if fault.reclaim_running:
                nodes = [n for n, (_, region) in fleet.running_nodes().items() if region == fault.region]
                for node in nodes:
                    if (instance_id := fleet.instance_of(node)) is not None:
                        recorder.reclaimed_nodes.add(node)
                        fleet.reclaim(instance_id)
                self._note(at, f"{fault.region}: {len(nodes)} running instances lost")
        elif isinstance(fault, CapacityChange):
            if fleet is not None:
                fleet.set_capacity(
                    region=fault.region, instance_type=fault.instance_type, instances=fault.instances
                )
            self._note(at, f"{fault.region} can run {fault.instances} {fault.instance_type} from now on")
        elif isinstance(fault, Throttle):
            if fault.api == "autoscaling":
                if fleet is not None:
                    fleet.throttle(fault.calls)
            else:
                for method in fault.methods:
                    cluster.fail_calls(
                        method,
                        RetryableError(f"{method}: 429 Too Many Requests (throttled)"),
                        times=fault.calls,
                    )
            self._note(at, f"{fault.api} API throttled for the next {fault.calls} calls")
        elif isinstance(fault, FunctionDies):
            cluster.kill_at(fault.call, after=fault.after)
            self._note(
                at, f"the function making Kubernetes call {fault.call} #{fault.after + 1} will be killed"
            )

    def _pick_nodes(self, local: LocalRuntime, fault: _NodeSelector) -> list[str]:
        fleet = local.fleet
        if fleet is None:
            return []
        group_names = {
            g.asg_name or g.name for g in self.plan.groups if fault.group in (None, g.name, g.asg_name)
        }
        candidates = [
            node
            for node, (group, region) in fleet.running_nodes().items()
            if group in group_names
            and (fault.region is None or region == fault.region)
            and (fault.node is None or node == fault.node)
        ]
        busy = {node: _gpus_held(local.cluster.list_pods(node_name=node)) for node in candidates}
        return sorted(candidates, key=lambda n: (-busy[n], n))[: fault.count]

    def _note(self, at: timedelta, text: str) -> None:
        self.notes.append(f"{format_span(at)}  {text}")
        if self.view is not None:
            self.view.note(at, text)


def _gpus_held(pods: list[dict[str, Any]]) -> int:
    held = 0
    for pod in pods:
        if pod.get("status", {}).get("phase") not in ("Pending", "Running"):
            continue
        for container in pod.get("spec", {}).get("containers", []):
            held += int((container.get("resources", {}).get("requests") or {}).get("nvidia.com/gpu", 0) or 0)
    return held
