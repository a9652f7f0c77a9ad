"""The scenario file's format: strict models whose every error names its field.

A scenario (YAML or JSON, see docs/simulator.md) names regions with their capacity per
instance type and boot time, its clusters (name and region; absent: one), node groups
(or a file holding them; each names its cluster when there are several), teams, policy, job
arrivals, faults at given times, the clock, and when the run ends. Node groups, teams
and policy are read by squall/planner/inputs.py, as cdk synth reads them; plan.py
compiles a checked model into a ScenarioPlan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from squall.core.settings import Duration
from squall.local.clock import EPOCH
from squall.planner.inputs import AWS_REGION, CLUSTER_NAME, CLUSTER_NAME_WORDS, parse_duration
from squall.planner.text import shown

ZERO = timedelta(0)
KubernetesMethod = Literal["list_jobs", "list_pods", "list_nodes", "get_node", "patch_node", "create"]
KUBERNETES_READS: tuple[KubernetesMethod, ...] = ("list_jobs", "list_pods", "list_nodes")
# The longest span a scenario may give (an arrival's or a fault's time, a duration, the run's
# limit): 10 years of virtual time, far more than any run simulates, and far enough from
# datetime's end (year 9999) that the clock's start plus a few of them stays a time.
MAX_SPAN = timedelta(days=3650)
MAX_SPAN_WORDS = "at most 10 years (3650 days)"
# The latest clock start: its spans added stay within datetime's range.
LATEST_START = datetime(9000, 1, 1, tzinfo=UTC)


def _within_max_span(span: timedelta) -> timedelta:
    if span > MAX_SPAN:
        raise ValueError(f"must be {MAX_SPAN_WORDS}, got {span.days} days")
    return span


# A duration in a scenario: seconds as a number, '90s', '4m', '1h30m', '2d', or ISO 8601 ('PT5M'),
# at most MAX_SPAN.
Span = Annotated[Duration, AfterValidator(_within_max_span)]
parse_span = parse_duration


def format_span(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    return f"t+{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ScenarioError(ValueError):
    """A scenario (or trace, or groups file) that cannot be run; `errors` name each field."""

    def __init__(self, errors: Sequence[str], *, source: str = "") -> None:
        self.errors = list(errors)
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + "; ".join(self.errors))


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class RegionModel(StrictModel):
    """What a region can run: instances per instance type (absent: unlimited) and boot time."""

    capacity: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    boot_time: Span = timedelta(minutes=3)


class ClusterModel(StrictModel):
    """One simulated cluster: its own API, nodes, scheduler and faults.

    Its name and region read as a node group's `cluster` and `region` do (planner/inputs.py).
    """

    name: str
    region: str

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not CLUSTER_NAME.fullmatch(name):
            raise ValueError(f"expected {CLUSTER_NAME_WORDS}, got {shown(name)}")
        return name

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        if not AWS_REGION.fullmatch(region):
            raise ValueError(f"expected an AWS region name such as us-west-2, got {shown(region)}")
        return region


class ClockModel(StrictModel):
    # Virtual seconds per wall-clock second; "max" runs as fast as the machine allows.
    speed: Annotated[float, Field(gt=0)] | Literal["max"] = "max"
    start: AwareDatetime = EPOCH

    @field_validator("start")
    @classmethod
    def _early_enough(cls, start: datetime) -> datetime:
        if start >= LATEST_START:
            raise ValueError(f"must be before {LATEST_START.date().isoformat()}, got {start.isoformat()}")
        return start


Expect = Literal["accepted", "rejected", "duplicate", "deadLetter"]


class OptimumModel(StrictModel):
    """Where one parameter of a simulated trainer's objective is best (local/cluster/metrics.py)."""

    optimum: StrictInt | StrictFloat | StrictBool | str
    width: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0  # in ln units with log
    log: bool = False
    penalty: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0  # a categorical value's miss


class ObjectiveModel(StrictModel):
    """The known objective a simulated job's trainer reports as squall-metric lines: a score that
    rises over its steps towards a quality set by how near its (trial's) parameters are to theirs."""

    parameters: Annotated[dict[str, OptimumModel], Field(max_length=64)] = Field(default_factory=dict)
    metric: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,63}$")] = "eval/score"
    goal: Literal["maximize", "minimize"] = "maximize"
    best: Annotated[float, Field(ge=0, le=1)] = 0.95
    floor: Annotated[float, Field(ge=0, le=1)] = 0.05
    steps: Annotated[int, Field(ge=1, le=10**9)] = 1000
    rise: Annotated[float, Field(gt=0, le=100)] = 0.25
    log_every: Annotated[int, Field(ge=1, le=10**9)] = 50
    eval_every: Annotated[int, Field(ge=1, le=10**9)] = 100
    noise: Annotated[float, Field(ge=0, le=1)] = 0.01
    seed: int = 0

    @model_validator(mode="after")
    def _floor_below_best(self) -> ObjectiveModel:
        if self.floor > self.best:
            raise ValueError(f"floor ({self.floor:g}) must not be above best ({self.best:g})")
        for name, optimum in self.parameters.items():
            number = optimum.optimum
            if optimum.log and (isinstance(number, bool | str) or number <= 0):
                raise ValueError(f"parameters.{name}.optimum: must be a positive number with log: true")
        return self


class ArrivalModel(StrictModel):
    """Jobs arriving on the queue: `count` copies, `every` apart, from `at` on."""

    at: Span
    spec: dict[str, Any] | None = None
    spec_file: str | None = None
    body: str | None = None  # a raw message body, e.g. one that is not JSON
    count: Annotated[int, Field(ge=1, le=100_000)] = 1
    every: Span = ZERO
    run_time: Span | None = None  # how long each pod runs; default: the scenario's defaultRunTime
    # How often the simulated job checkpoints (what a preemption keeps of its work); absent: never.
    checkpoint_every: Span | None = None
    # What its trainer (each trial's, for a sweep) reports as squall-metric lines; absent: nothing.
    objective: ObjectiveModel | None = None
    failure_probability: Annotated[float, Field(ge=0, le=1)] = 0.0
    deliver_twice: bool = False  # SQS hands the message over twice (at-least-once delivery)
    # Who sends it: a principal's unique id (AROA...), what SQS reports as the SenderId.
    sender: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_+=,.@:-]+$")] | None = (
        None
    )
    # What Squall should make of it: a job; REJECTED; ignored as a duplicate client id; dead-lettered.
    expect: Expect = "accepted"

    @model_validator(mode="after")
    def _last_within_max_span(self) -> ArrivalModel:
        if self.at + (self.count - 1) * self.every > MAX_SPAN:
            raise ValueError(
                f"every: the last of {self.count} arrivals {self.every.total_seconds():g} s apart from "
                f"at would come later than {MAX_SPAN_WORDS} after the start"
            )
        return self

    @field_validator("checkpoint_every")
    @classmethod
    def _checkpoints(cls, every: timedelta | None) -> timedelta | None:
        if every is not None and every <= ZERO:
            raise ValueError("must be positive (leave it out for a job that never checkpoints)")
        return every

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
    cluster: str | None = None  # the nodes of this cluster only
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
    cluster: str | None = None  # whose Kubernetes API (default: the first cluster's)


class ClusterOutage(StrictModel):
    """A cluster's API cannot be reached for a while: every call fails as a timeout or a 5xx does.

    Its nodes and pods go on running (only the control plane's API is gone); afterwards it answers again.
    """

    type: Literal["clusterOutage"]
    at: Span
    cluster: str
    duration: Span

    @field_validator("duration")
    @classmethod
    def _lasts(cls, duration: timedelta) -> timedelta:
        if duration <= ZERO:
            raise ValueError("must be positive")
        return duration


class FunctionDies(StrictModel):
    """The function making the (after+1)-th such Kubernetes call from now is killed at that call."""

    type: Literal["functionDies"]
    at: Span
    call: Literal["create", "delete_job_objects", "patch_node", "evict"] = "create"
    after: Annotated[int, Field(ge=0)] = 0
    cluster: str | None = None  # a call to this cluster (default: the first cluster)


Fault = Annotated[
    TerminateNode
    | SpotReclaim
    | InstanceLost
    | RegionOutage
    | CapacityChange
    | Throttle
    | ClusterOutage
    | FunctionDies,
    Field(discriminator="type"),
]
FAULT_TYPES = (
    "terminateNode",
    "spotReclaim",
    "instanceLost",
    "regionOutage",
    "capacity",
    "throttle",
    "clusterOutage",
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
    # team -> namespace, or {namespace, submitters: [unique ids], gpuQuota, weight, budget: {monthly}};
    # default: the local runtime's
    teams: dict[str, Any] | None = None
    registries: list[str] | None = None
    policy: dict[str, Any] = Field(default_factory=dict)  # cdk.json's policy keys
    regions: dict[str, RegionModel] = Field(default_factory=dict)
    # The clusters, in preference order; absent: one named "local" in the first group's region.
    # With more than one, every node group names its cluster.
    clusters: list[ClusterModel] | None = None
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
