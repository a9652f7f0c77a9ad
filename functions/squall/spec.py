"""The job spec: the public contract of the jobs queue.

A queue message body is either a job spec or a command. Everything a user can ask
for is declared here, strictly: unknown fields are errors, every bound is explicit,
and every error names the field path and what is allowed. Users never write a pod
spec, so nothing here can ask for privileged containers, host paths or host
networking.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# registry/repository[:tag][@digest], no whitespace or shell metacharacters
IMAGE_REF = re.compile(r"^[a-z0-9.\-:/_]+(:[\w][\w.\-]{0,127})?(@sha256:[a-f0-9]{64})?$")
DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")

# Kubernetes object names derive from the job id: "<id>-<type>-<index>" must stay a
# DNS-1123 label (63 characters), and sweep trials append "-t<nnn>" to the parent id.
MAX_NAME_LENGTH = 36
MAX_ID_LENGTH = 45
MAX_TRIAL_ID_LENGTH = MAX_ID_LENGTH + 5

MAX_REPLICAS = {"chief": 1, "worker": 64, "ps": 16, "evaluator": 1}
MAX_CPU_MILLIS = 192_000
MAX_MEMORY_BYTES = 2 * 1024**4  # 2 TiB
MAX_GPUS = 16
# The operator may set another limit (cdk.json policy.maxRuntimeLimit); real multi-GPU
# training runs for weeks.
DEFAULT_MAX_RUNTIME_LIMIT = timedelta(days=30)
MAX_SWEEP_TRIALS = 100
RESERVED_ENV = ("TF_CONFIG", "SQUALL_")

TF_PORT = 2222


class SpecError(ValueError):
    """A job spec or command that cannot be accepted; `issues` lists every problem."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        super().__init__("; ".join(f"{i.field}: {i.message}" for i in issues))


@dataclass(frozen=True)
class Issue:
    """One validation problem: the field path as the user wrote it, and why."""

    field: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        str_strip_whitespace=False,
    )


def _dns_label(value: str, *, what: str, max_length: int) -> str:
    if len(value) > max_length:
        raise ValueError(f"{what} must be at most {max_length} characters, got {len(value)}")
    if not DNS_LABEL.match(value):
        raise ValueError(
            f"{what} must be a DNS-1123 label: lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return value


def parse_duration(value: str | int) -> timedelta:
    """'6h', '1h30m', '90s', '2d' or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as '6h', '30m' or '1h30m'")
    if isinstance(value, int):
        seconds = value
    else:
        match = DURATION.match(value.strip())
        if not value.strip() or not match:
            raise ValueError(f"must be a duration such as '6h', '30m' or '1h30m', got {value!r}")
        days, hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if seconds <= 0:
        raise ValueError("must be positive")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A duration in the spec's own grammar: 30d, 1h30m, 90s."""
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


class Resources(_Model):
    """Requests of one replica. cpu and memory are Kubernetes quantities."""

    cpu: str = "1"
    memory: str = "4Gi"
    gpu: Annotated[StrictInt, Field(ge=0, le=MAX_GPUS)] = 0

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> str:
        text = _quantity_text(value)
        millis = parse_cpu_millicores(text)
        if millis <= 0 or millis > MAX_CPU_MILLIS:
            raise ValueError(f"must be between 1m and {MAX_CPU_MILLIS // 1000} cores, got {text!r}")
        return text

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str:
        text = _quantity_text(value)
        size = parse_memory_bytes(text)
        if size < 1024**2 or size > MAX_MEMORY_BYTES:
            raise ValueError(f"must be between 1Mi and 2Ti, got {text!r}")
        return text

    @property
    def cpu_millis(self) -> int:
        return parse_cpu_millicores(self.cpu)

    @property
    def memory_bytes(self) -> int:
        return parse_memory_bytes(self.memory)


def _quantity_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("must be a Kubernetes quantity such as '500m', '8' or '60Gi'")
    return str(value)


class ReplicaGroup(_Model):
    count: Annotated[StrictInt, Field(ge=0)]
    resources: Resources | None = None


class Placement(_Model):
    regions: list[Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")]] = Field(
        default_factory=list, max_length=16
    )
    node_groups: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(
        default_factory=list, max_length=64
    )
    spot: Literal["allowed", "required", "never"] = "allowed"


SweepValue = StrictInt | float | str | bool


class Sweep(_Model):
    parameters: dict[str, list[SweepValue]] = Field(min_length=1, max_length=10)
    strategy: Literal["grid", "random"] = "grid"
    max_trials: Annotated[StrictInt, Field(ge=1, le=MAX_SWEEP_TRIALS)] = 16
    parallelism: Annotated[StrictInt, Field(ge=1, le=MAX_SWEEP_TRIALS)] = 4
    seed: StrictInt = 0

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, list[SweepValue]]) -> dict[str, list[SweepValue]]:
        for name, values in value.items():
            if not ENV_NAME.match(name) or len(name) > 64:
                raise ValueError(
                    f"parameter name {name!r} must be a letter or '_' followed by "
                    "letters, digits or '_' (at most 64)"
                )
            if not 1 <= len(values) <= 100:
                raise ValueError(f"parameter {name!r} needs 1 to 100 values")
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_parallelism(cls, data: Any) -> Any:
        # Default: 4 trials at once, or all of them when there are fewer.
        if isinstance(data, dict) and "parallelism" not in data:
            trials = data.get("maxTrials", data.get("max_trials", 16))
            if isinstance(trials, int) and not isinstance(trials, bool):
                data = {**data, "parallelism": max(1, min(4, trials))}
        return data

    @model_validator(mode="after")
    def _parallelism(self) -> Sweep:
        if self.parallelism > self.max_trials:
            raise ValueError("parallelism must not exceed maxTrials")
        return self


class ReplicaType(StrEnum):
    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"
    EVALUATOR = "evaluator"


@dataclass(frozen=True)
class Replica:
    """One pod of a job, after the replica counts are expanded."""

    type: str
    index: int
    resources: Resources


class JobSpec(_Model):
    # Set by Squall on sweep trials, never by users (rejected at the queue).
    # Declared first so that validating `id` can see them.
    parent_id: str | None = None
    trial_parameters: dict[str, SweepValue] | None = None

    name: str
    team: str
    id: str | None = None
    image: str
    command: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=64)
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=256)
    env: dict[str, Annotated[str, Field(max_length=32_768)]] = Field(
        default_factory=dict, max_length=100
    )
    resources: Resources = Field(default_factory=Resources)
    replicas: dict[ReplicaType, StrictInt | ReplicaGroup] | None = None
    placement: Placement = Field(default_factory=Placement)
    priority: Annotated[StrictInt, Field(ge=0, le=100)] = 50
    max_runtime: str = "24h"
    retries: Annotated[StrictInt, Field(ge=0, le=10)] = 2
    checkpoint_uri: str | None = None
    output_uri: str | None = None
    sweep: Sweep | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, what="name", max_length=MAX_NAME_LENGTH)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        # Trial ids are the parent's id plus "-t<nnn>"; only those may be longer.
        limit = MAX_TRIAL_ID_LENGTH if info.data.get("parent_id") else MAX_ID_LENGTH
        return _dns_label(value, what="id", max_length=limit)

    @field_validator("team")
    @classmethod
    def _team(cls, value: str, info: ValidationInfo) -> str:
        teams = _context(info, "teams")
        if teams is not None and value not in teams:
            allowed = ", ".join(sorted(teams)) or "(none configured)"
            raise ValueError(f"team {value!r} is not configured; allowed: {allowed}")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str, info: ValidationInfo) -> str:
        if len(value) > 512 or not IMAGE_REF.match(value):
            raise ValueError("must be a container image reference such as 'registry/repo:tag'")
        registries = _context(info, "registries")
        if registries is not None and not any(
            value.startswith(r.rstrip("/") + "/") for r in registries
        ):
            allowed = ", ".join(sorted(registries)) or "(none configured)"
            raise ValueError(f"image must come from an allowed registry: {allowed}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_NAME.match(key) or len(key) > 128:
                raise ValueError(f"env name {key!r} must match [A-Za-z_][A-Za-z0-9_]*")
            if key.startswith(RESERVED_ENV):
                raise ValueError(f"env name {key!r} is reserved: Squall sets TF_CONFIG and SQUALL_*")
        return value

    @field_validator("replicas")
    @classmethod
    def _replicas(
        cls, value: dict[ReplicaType, int | ReplicaGroup] | None
    ) -> dict[ReplicaType, int | ReplicaGroup] | None:
        if value is None:
            return None
        total = 0
        for kind, group in value.items():
            count = group if isinstance(group, int) else group.count
            limit = MAX_REPLICAS[kind.value]
            if not 0 <= count <= limit:
                raise ValueError(f"{kind.value} count must be between 0 and {limit}, got {count}")
            total += count
        if total == 0:
            raise ValueError("at least one replica is needed")
        if value.get(ReplicaType.PS) and not (
            _count(value.get(ReplicaType.WORKER)) or _count(value.get(ReplicaType.CHIEF))
        ):
            raise ValueError("ps replicas need a chief or workers to serve")
        return value

    @field_validator("max_runtime")
    @classmethod
    def _max_runtime(cls, value: str, info: ValidationInfo) -> str:
        limit = (info.context or {}).get("max_runtime_limit") or DEFAULT_MAX_RUNTIME_LIMIT
        if parse_duration(value) > limit:
            raise ValueError(f"must be at most {format_duration(limit)} (the configured maxRuntimeLimit)")
        return value

    @field_validator("checkpoint_uri", "output_uri")
    @classmethod
    def _uri(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?$", value):
            raise ValueError("must be an s3:// URI such as 's3://bucket/prefix'")
        return value

    # ---- derived views -------------------------------------------------

    @property
    def runtime_limit(self) -> timedelta:
        return parse_duration(self.max_runtime)

    @property
    def is_distributed(self) -> bool:
        return len(self.replica_list()) > 1

    def replica_list(self) -> list[Replica]:
        """Every pod of the job in TF_CONFIG order (chief, evaluator, ps, worker)."""
        if self.replicas is None:
            return [Replica(type=ReplicaType.WORKER.value, index=0, resources=self.resources)]
        replicas: list[Replica] = []
        for kind in sorted(self.replicas, key=lambda k: k.value):
            group = self.replicas[kind]
            count = _count(group)
            resources = (
                group.resources
                if isinstance(group, ReplicaGroup) and group.resources is not None
                else self.resources
            )
            replicas.extend(Replica(type=kind.value, index=i, resources=resources) for i in range(count))
        return replicas

    def total_gpus(self) -> int:
        return sum(r.resources.gpu for r in self.replica_list())


def _count(group: int | ReplicaGroup | None) -> int:
    if group is None:
        return 0
    return group if isinstance(group, int) else group.count


def _context(info: ValidationInfo, key: str) -> Collection[str] | None:
    context = info.context or {}
    value = context.get(key)
    return None if value is None else list(value)


class CancelCommand(_Model):
    action: Literal["cancel"]
    id: str
    reason: Annotated[str, Field(max_length=512)] = "requested by user"


def _issues(exc: ValidationError) -> list[Issue]:
    issues = []
    for error in exc.errors(include_url=False):
        path = ".".join(str(p) for p in error["loc"]) or "(body)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field; check the spelling against the job spec reference"
        issues.append(Issue(field=path, message=message))
    return issues


def parse_spec(
    data: Any,
    *,
    teams: Collection[str],
    registries: Collection[str],
    max_runtime_limit: timedelta = DEFAULT_MAX_RUNTIME_LIMIT,
) -> JobSpec:
    """Validate a job spec against the configured teams and registries.

    Raises SpecError listing every problem (never only the first).
    """
    if not isinstance(data, Mapping):
        raise SpecError([Issue(field="(body)", message="a job spec must be a JSON object")])
    for reserved in ("parentId", "parent_id", "trialParameters", "trial_parameters"):
        if reserved in data:
            raise SpecError([Issue(field=reserved, message="is set by Squall for sweep trials only")])
    try:
        return JobSpec.model_validate(
            data,
            context={"teams": teams, "registries": registries, "max_runtime_limit": max_runtime_limit},
        )
    except ValidationError as exc:
        raise SpecError(_issues(exc)) from exc


def parse_message(
    data: Any,
    *,
    teams: Collection[str],
    registries: Collection[str],
    max_runtime_limit: timedelta = DEFAULT_MAX_RUNTIME_LIMIT,
) -> JobSpec | CancelCommand:
    """A queue message body (already decoded JSON): a job spec or a command."""
    if isinstance(data, Mapping) and "action" in data:
        try:
            return CancelCommand.model_validate(data)
        except ValidationError as exc:
            raise SpecError(_issues(exc)) from exc
    return parse_spec(data, teams=teams, registries=registries, max_runtime_limit=max_runtime_limit)


def derive_job_id(spec: JobSpec, *, message_id: str) -> str:
    """The client's id, else the name plus a stable hash of the delivery's message id.

    SQS redelivers a message with the same message id, so a duplicate delivery
    maps to the same job and is recognised as a duplicate, not created twice.
    """
    if spec.id:
        return spec.id
    digest = hashlib.sha256(message_id.encode()).hexdigest()[:8]
    return f"{spec.name}-{digest}"


# ---- sweeps -------------------------------------------------------------


def expand_sweep(spec: JobSpec, *, job_id: str) -> list[tuple[str, JobSpec]]:
    """Trial ids and specs of a sweep, deterministic for a given spec.

    Each trial carries its values as `trial_parameters` (rendered as
    SQUALL_PARAM_<NAME> env vars) and as `--name=value` args, so a trainer can
    take them either way.
    """
    sweep = spec.sweep
    if sweep is None:
        return []
    names = list(sweep.parameters)
    grid = list(itertools.product(*(sweep.parameters[n] for n in names)))
    if sweep.strategy == "random":
        rng = random.Random(sweep.seed)
        combos = [grid[i] for i in sorted(rng.sample(range(len(grid)), min(len(grid), sweep.max_trials)))]
    else:
        combos = grid[: sweep.max_trials]
    trials = []
    for number, combo in enumerate(combos):
        values = dict(zip(names, combo, strict=True))
        trial_id = f"{job_id}-t{number:03d}"
        args = [*spec.args, *(f"--{k}={format_parameter(v)}" for k, v in values.items())]
        trial = spec.model_copy(
            update={
                "id": trial_id,
                "sweep": None,
                "parent_id": job_id,
                "trial_parameters": values,
                "args": args,
            }
        )
        trials.append((trial_id, trial))
    return trials


def format_parameter(value: SweepValue) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)
