"""The job spec's models: strict (unknown fields are errors), frozen, every bound explicit.

Users never write a pod spec, so nothing here can ask for privileged containers,
host paths or host networking.
"""

from __future__ import annotations

import decimal
import functools
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    StrictInt,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from squall.core.spec import limits
from squall.core.spec.durations import format_duration, parse_duration
from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes

# A code archive (squall submit --code): its name is the sha256 of its bytes, which the
# worker's entrypoint checks before it unpacks anything.
# Its folders may hold any non-space character (\s stays Unicode-aware on purpose).
CODE_URI = re.compile(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/(?:[^\s/]+/)*[0-9a-f]{64}\.tar\.gz")


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        str_strip_whitespace=False,
    )


F = TypeVar("F", bound=Callable[..., Any])


def _checked(fn: F) -> F:
    """A validator whose unexpected exception becomes a field error, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ValueError, AssertionError):
            raise
        except Exception as exc:
            raise ValueError(f"could not be checked ({type(exc).__name__})") from exc

    return wrapper  # type: ignore[return-value]


def _field_error(loc: tuple[str | int, ...], message: str) -> ValidationError:
    """An error at a field path, raised from a model validator (pydantic prefixes the model's path)."""
    return ValidationError.from_exception_data(
        "JobSpec", [{"type": "value_error", "loc": loc, "input": None, "ctx": {"error": message}}]
    )


def _dns_label(value: str, *, what: str, max_length: int) -> str:
    if len(value) > max_length:
        raise ValueError(f"{what} must be at most {max_length} characters, got {len(value)}")
    if not limits.DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{what} must be a DNS-1123 label: lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return value


def between(low: int, high: int) -> PlainValidator:
    """A whole number from `low` to `high`, refused in the spec's words naming both bounds.

    Used as ``Annotated[int, between(0, 100)]``: strict (no booleans, strings or floats),
    as StrictInt with Field(ge, le) was, whose errors named one bound in pydantic's words.
    """

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be a whole number from {low} to {high}")
        if not low <= value <= high:
            # A huge int is not printed: str() of one is slow, and refused past 4,300 digits.
            shown = str(value) if value.bit_length() <= 64 else "a number beyond that"
            raise ValueError(f"must be from {low} to {high}, got {shown}")
        return value

    return PlainValidator(check)


class _CpuAndMemory(Protocol):
    @property
    def cpu(self) -> str: ...

    @property
    def memory(self) -> str: ...


class QuantityViews:
    """A replica's ``cpu`` and ``memory`` requests (Kubernetes quantities) in millicores and bytes.

    Mixed into whatever holds the two quantities: a spec's replica resources, a trace row.
    """

    @property
    def cpu_millis(self: _CpuAndMemory) -> int:
        return parse_cpu_millicores(self.cpu)

    @property
    def memory_bytes(self: _CpuAndMemory) -> int:
        return parse_memory_bytes(self.memory)


class ReplicaResources(_Model, QuantityViews):
    """Requests of one replica. cpu and memory are Kubernetes quantities."""

    cpu: str = "1"
    memory: str = "4Gi"
    gpu: Annotated[int, between(0, limits.MAX_GPUS)] = 0

    @field_validator("cpu", mode="before")
    @classmethod
    @_checked
    def _cpu(cls, value: Any) -> str:
        text = _quantity_text(value)
        millis = parse_cpu_millicores(text)
        if millis <= 0 or millis > limits.MAX_CPU_MILLIS:
            raise ValueError(f"must be between 1m and {limits.MAX_CPU_MILLIS // 1000} cores, got {text!r}")
        return text

    @field_validator("memory", mode="before")
    @classmethod
    @_checked
    def _memory(cls, value: Any) -> str:
        text = _quantity_text(value)
        size = parse_memory_bytes(text)
        if size < 1024**2 or size > limits.MAX_MEMORY_BYTES:
            raise ValueError(f"must be between 1Mi and 2Ti, got {text!r}")
        return text


def _quantity_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("must be a Kubernetes quantity such as '500m', '8' or '60Gi'")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if isinstance(value, int) and value.bit_length() > 256:  # str() of a huge int is refused
        raise ValueError(
            "must be a Kubernetes quantity such as '500m', '8' or '60Gi' (at most 64 characters)"
        )
    text = str(value)
    if len(text) > 64:
        raise ValueError(
            "must be a Kubernetes quantity such as '500m', '8' or '60Gi' (at most 64 characters)"
        )
    if text != text.strip():
        # Kubernetes would be handed the text verbatim.
        raise ValueError(f"must not have spaces around it, got {text!r}")
    return text


class ReplicaGroup(_Model):
    """A replica type's count, and optionally its own resources; a bare count is allowed too."""

    count: StrictInt
    resources: ReplicaResources | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_count(cls, data: Any) -> Any:
        if isinstance(data, int) and not isinstance(data, bool):
            return {"count": data}
        if not isinstance(data, Mapping | ReplicaGroup):
            raise ValueError("must be a count such as 4, or an object such as {count: 4, resources: {...}}")
        return data

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Recorded as the user wrote it most often: a bare count.
        return self.count if self.resources is None else handler(self)


class Placement(_Model):
    regions: list[Annotated[str, AfterValidator(lambda v: _region(v))]] = Field(
        default_factory=list, max_length=16
    )
    node_groups: list[Annotated[str, AfterValidator(lambda v: _node_group(v))]] = Field(
        default_factory=list, max_length=64
    )
    spot: Literal["allowed", "required", "never"] = "allowed"


def _region(value: str) -> str:
    if len(value) > 32 or not limits.REGION.fullmatch(value):
        raise ValueError("must be an AWS region name such as 'us-west-2'")
    return value


def _node_group(value: str) -> str:
    # Rendered as a label value in the pods' node affinity.
    if len(value) > 63 or not limits.LABEL_VALUE.fullmatch(value):
        raise ValueError(
            "must be a node group name: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


def _sweep_value(value: Any) -> bool | int | float | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if (
            value.bit_length() > 4 * limits.MAX_SWEEP_VALUE_LENGTH
            or len(str(value)) > limits.MAX_SWEEP_VALUE_LENGTH
        ):
            raise ValueError(f"must have at most {limits.MAX_SWEEP_VALUE_LENGTH} digits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number (NaN and Infinity are not allowed)")
        return value
    if isinstance(value, str):
        if len(value) > limits.MAX_SWEEP_VALUE_LENGTH:
            raise ValueError(f"must be at most {limits.MAX_SWEEP_VALUE_LENGTH} characters, got {len(value)}")
        return value
    raise ValueError("must be a number, a string or a boolean")


SweepValue = Annotated[bool | int | float | str, PlainValidator(_sweep_value)]


def _range_bound(value: Any) -> int | float:
    if isinstance(value, str) and limits.NUMBER_TEXT.fullmatch(value.strip()[:64]):
        # YAML 1.1 reads 1e-4 (no '.') as text: the common slip in a learning-rate range.
        raise ValueError(
            f"must be a number, not the text {value[:64]!r} (in YAML write 1e-4 as 1.0e-4 or 0.0001)"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if not math.isfinite(value) or abs(value) > limits.MAX_RANGE_MAGNITUDE:
        raise ValueError(
            f"must be a finite number from -{limits.MAX_RANGE_MAGNITUDE:g} to {limits.MAX_RANGE_MAGNITUDE:g}"
        )
    return value


RangeBound = Annotated[int | float, PlainValidator(_range_bound)]


class ParameterRange(_Model):
    """A parameter's values from `min` to `max`: every value (log: spread by its logarithm), or every
    `step` from `min`. Whole numbers when `min`, `max` and `step` are all whole numbers."""

    min: RangeBound
    max: RangeBound
    log: bool = False
    step: RangeBound | None = None

    @model_validator(mode="after")
    def _range(self) -> ParameterRange:
        if self.max <= self.min:
            raise ValueError(
                f"max ({self.max}) must be greater than min ({self.min}): the range is "
                + ("empty" if self.max == self.min else "inverted")
            )
        if self.log and self.min <= 0:
            raise ValueError(f"log needs min greater than 0, got {self.min}")
        if self.step is not None:
            if self.log:
                raise ValueError("a range takes log or step, not both")
            if self.step <= 0:
                raise ValueError(f"step must be greater than 0, got {self.step}")
            if self.size() > limits.MAX_RANGE_VALUES:
                raise ValueError(
                    f"gives {self.size()} values with step {self.step}; at most {limits.MAX_RANGE_VALUES}: "
                    "take a larger step"
                )
        return self

    @property
    def is_int(self) -> bool:
        return all(
            isinstance(v, int) for v in (self.min, self.max, self.step if self.step is not None else 1)
        )

    @property
    def discrete(self) -> bool:
        """Whether its values can be counted: whole numbers, or a step."""
        return self.is_int or self.step is not None

    def size(self) -> int:
        """How many values it has (discrete ranges only): `min`, then every `step` up to `max`."""
        step = self.step if self.step is not None else 1
        return int(_decimal(self.max - self.min) / _decimal(step) + _EPSILON) + 1

    def value(self, index: int) -> int | float:
        """Its index-th value (discrete ranges only), exact to the digits of min and step."""
        step = self.step if self.step is not None else 1
        if self.is_int:
            return int(self.min) + index * int(step)
        return float(_decimal(self.min) + index * _decimal(step))


def _decimal(value: float) -> decimal.Decimal:
    # repr is the shortest text that reads back as the float: 0.1 stays 0.1, not 0.1000000000000000055...
    return decimal.Decimal(repr(value))


# (max - min) / step a hair under a whole number counts as that number (0.3 / 0.1).
_EPSILON = decimal.Decimal("1e-9")


def _parameter_kind(value: Any) -> str:
    return "<range>" if isinstance(value, dict | ParameterRange) else "<list>"


def _not_a_parameter(value: Any) -> Any:
    if not isinstance(value, list | dict | ParameterRange):
        raise ValueError("must be a list of values or a range {min, max} (with log: true or a step)")
    return value


SweepParameter = Annotated[
    Annotated[list[SweepValue], Field(min_length=1, max_length=limits.MAX_SWEEP_VALUES), Tag("<list>")]
    | Annotated[ParameterRange, Tag("<range>")],
    Discriminator(_parameter_kind),
    BeforeValidator(_not_a_parameter),
]


class Objective(_Model):
    """The metric a sweep's trials are ranked by (reported in `squall-metric` lines) and its goal."""

    metric: str
    goal: Literal["maximize", "minimize"]

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        if not limits.METRIC_NAME.fullmatch(value):
            raise ValueError(
                "must be a metric name as trials report it: a letter, digit or '_', then at most "
                "63 letters, digits or '_./-' (such as 'eval/score')"
            )
        return value


class EarlyStopping(_Model):
    """Median stopping: a running trial whose objective at its latest step (at least minSteps) is worse
    than the median of the finished trials' at that step stops there."""

    rule: Literal["median"] = "median"
    min_steps: Annotated[int, between(0, limits.MAX_METRIC_STEP)]
    min_trials: Annotated[int, between(1, limits.MAX_SWEEP_TRIALS)] = 3


class Sweep(_Model):
    parameters: dict[str, SweepParameter] = Field(min_length=1, max_length=limits.MAX_SWEEP_PARAMETERS)
    strategy: Literal["grid", "random", "tpe"] = "grid"
    max_trials: Annotated[int, between(1, limits.MAX_SWEEP_TRIALS)] = 16
    parallelism: Annotated[int, between(1, limits.MAX_SWEEP_TRIALS)] = 4
    seed: Annotated[int, between(-(2**63), 2**63 - 1)] = 0
    objective: Objective | None = None
    early_stopping: EarlyStopping | None = None

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, SweepParameter]) -> dict[str, SweepParameter]:
        env_names: dict[str, str] = {}
        for name in value:
            if len(name) > limits.MAX_PARAMETER_NAME_LENGTH or not limits.ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"parameter name {name[:80]!r} must be a letter or '_' followed by "
                    f"letters, digits or '_' (at most {limits.MAX_PARAMETER_NAME_LENGTH})"
                )
            other = env_names.setdefault(name.upper(), name)
            if other != name:
                raise ValueError(
                    f"parameters {other!r} and {name!r} would both be SQUALL_PARAM_{name.upper()}"
                )
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
        if self.strategy == "grid":
            for name, values in self.parameters.items():
                if isinstance(values, ParameterRange) and not values.discrete:
                    raise _field_error(
                        ("parameters", name),
                        "grid needs a step for a range of non-whole numbers "
                        "(or strategy random or tpe, which sample it)",
                    )
        needs = "strategy tpe" if self.strategy == "tpe" else "earlyStopping" if self.early_stopping else None
        if needs is not None and self.objective is None:
            raise _field_error(
                ("objective",), f"{needs} needs an objective: {{metric: <name>, goal: maximize|minimize}}"
            )
        if self.early_stopping is not None and self.early_stopping.min_trials >= self.max_trials:
            raise _field_error(
                ("earlyStopping", "minTrials"),
                f"must be less than maxTrials ({self.max_trials}): else no trial could ever be stopped",
            )
        return self

    @property
    def discrete(self) -> bool:
        """Whether every parameter's values can be counted (a grid of them can be indexed)."""
        return all(not isinstance(v, ParameterRange) or v.discrete for v in self.parameters.values())

    def combinations(self) -> int:
        """How many points the grid has (it is never built: see expand_sweep); discrete sweeps only."""
        return math.prod(
            v.size() if isinstance(v, ParameterRange) else len(v) for v in self.parameters.values()
        )


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
    resources: ReplicaResources


class JobSpec(_Model):
    # Set by Squall on sweep trials, never by users (rejected at the queue).
    # Declared first so that validating `id` can see them.
    parent_id: str | None = None
    trial_parameters: dict[str, SweepValue] | None = None

    name: str
    team: str
    id: str | None = None
    image: str
    command: list[Annotated[str, Field(max_length=limits.MAX_ARG_LENGTH)]] = Field(
        default_factory=list, max_length=limits.MAX_COMMAND
    )
    args: list[Annotated[str, Field(max_length=limits.MAX_ARG_LENGTH)]] = Field(
        default_factory=list, max_length=limits.MAX_ARGS
    )
    env: dict[str, Annotated[str, Field(max_length=limits.MAX_ENV_VALUE_LENGTH)]] = Field(
        default_factory=dict, max_length=limits.MAX_ENV
    )
    resources: ReplicaResources = Field(default_factory=ReplicaResources)
    replicas: dict[ReplicaType, ReplicaGroup] | None = None
    placement: Placement = Field(default_factory=Placement)
    priority: Annotated[int, between(0, 100)] = 50
    max_runtime: str = "24h"
    retries: Annotated[int, between(0, 10)] = 2
    checkpoint_uri: str | None = None
    output_uri: str | None = None
    code_uri: str | None = None
    sweep: Sweep | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, what="name", max_length=limits.MAX_NAME_LENGTH)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        # Trial ids are the parent's id plus "-t<nnn>"; only those may be longer, or end so.
        if info.data.get("parent_id"):
            return _dns_label(value, what="id", max_length=limits.MAX_TRIAL_ID_LENGTH)
        _dns_label(value, what="id", max_length=limits.MAX_ID_LENGTH)
        if limits.TRIAL_SUFFIX.search(value):
            raise ValueError(
                "id must not end in '-t' and digits: Squall names sweep trials '<id>-t<nnn>', "
                "so this id could be another job's trial"
            )
        if value.startswith(limits.REJECTED_PREFIX):
            raise ValueError(
                f"id must not start with {limits.REJECTED_PREFIX!r}: Squall names rejected messages so"
            )
        return value

    @field_validator("team")
    @classmethod
    def _team(cls, value: str, info: ValidationInfo) -> str:
        teams = _context(info, "teams")
        if teams is not None and value not in teams:
            allowed = ", ".join(sorted(teams)) or "(none configured)"
            raise ValueError(f"team {value[:80]!r} is not configured; allowed: {allowed}")
        return value

    @field_validator("image")
    @classmethod
    @_checked
    def _image(cls, value: str, info: ValidationInfo) -> str:
        match = limits.IMAGE_REF.fullmatch(value) if len(value) <= limits.MAX_IMAGE_LENGTH else None
        if match is None or len(match["name"]) > limits.MAX_IMAGE_NAME_LENGTH:
            raise ValueError(
                "must be a container image reference, [registry[:port]/]repository[:tag][@digest], "
                "such as 'registry.example.com/squall/tf-trainer:1.0'"
            )
        registries = _context(info, "registries")
        # The repository (not the tag) must lie under an allowed registry path; the
        # grammar has already refused '..' and empty path components.
        if registries is not None and not any(
            match["name"].startswith(r.rstrip("/") + "/") for r in registries
        ):
            allowed = ", ".join(sorted(registries)) or "(none configured)"
            raise ValueError(f"image must come from an allowed registry: {allowed}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if len(key) > 128 or not limits.ENV_NAME.fullmatch(key):
                raise ValueError(f"env name {key[:80]!r} must match [A-Za-z_][A-Za-z0-9_]* (at most 128)")
            if key.startswith(limits.RESERVED_ENV):
                raise ValueError(f"env name {key!r} is reserved: Squall sets TF_CONFIG and SQUALL_*")
        return value

    @field_validator("replicas")
    @classmethod
    def _replicas(
        cls, value: dict[ReplicaType, ReplicaGroup] | None
    ) -> dict[ReplicaType, ReplicaGroup] | None:
        if value is None:
            return None
        for kind, group in value.items():
            limit = limits.MAX_REPLICAS[kind.value]
            if not 0 <= group.count <= limit:
                shown = group.count if group.count.bit_length() <= 64 else "a number beyond that"
                raise ValueError(f"{kind.value} count must be between 0 and {limit}, got {shown}")
        if sum(group.count for group in value.values()) == 0:
            raise ValueError("at least one replica is needed")
        if not (_count(value.get(ReplicaType.WORKER)) or _count(value.get(ReplicaType.CHIEF))):
            # Success is the chief's (else worker 0's) completion: without either the
            # job could never succeed and would re-run until its retries are spent.
            if value.get(ReplicaType.PS):
                raise ValueError("ps replicas need a chief or workers to serve")
            raise ValueError(
                "an evaluator needs a chief or workers to evaluate: at least one chief or worker is needed"
            )
        return value

    @field_validator("max_runtime")
    @classmethod
    @_checked
    def _max_runtime(cls, value: str, info: ValidationInfo) -> str:
        duration = parse_duration(value)
        context = info.context or {}
        if context.get("stored"):
            return value  # policy was checked when the job was accepted
        limit = context.get("max_runtime_limit") or limits.DEFAULT_MAX_RUNTIME_LIMIT
        if duration > limit:
            raise ValueError(f"must be at most {format_duration(limit)} (the configured maxRuntimeLimit)")
        return value

    @field_validator("checkpoint_uri", "output_uri")
    @classmethod
    def _uri(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > limits.MAX_URI_LENGTH or not limits.S3_URI.fullmatch(value)):
            raise ValueError("must be an s3:// URI such as 's3://bucket/prefix'")
        return value

    @field_validator("code_uri")
    @classmethod
    def _code_uri(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > limits.MAX_URI_LENGTH or not CODE_URI.fullmatch(value)):
            raise ValueError(
                "must be the s3:// URI of a code archive named by its sha256 (64 lowercase hex digits), "
                "such as 's3://bucket/code/<team>/<sha256>.tar.gz' (squall submit --code DIR makes one)"
            )
        return value

    @model_validator(mode="after")
    def _bounded(self) -> JobSpec:
        """Bounds across fields: what a trial adds to the args, and what one message creates."""
        if self.sweep is not None and len(self.args) + len(self.sweep.parameters) > limits.MAX_ARGS:
            extra = len(self.sweep.parameters)
            raise _field_error(
                ("args",),
                f"has {len(self.args)} entries and each trial adds one per sweep parameter ({extra}): "
                f"at most {limits.MAX_ARGS - extra} here",
            )
        replicas = len(self.replica_list())
        per_job = replicas * 2 if replicas > 1 else 1  # a Job each, and a Service each when distributed
        at_once = self.sweep.parallelism if self.sweep is not None else 1
        if per_job * at_once > limits.MAX_OBJECTS_PER_MESSAGE:
            where: tuple[str, ...] = (
                ("sweep", "parallelism") if per_job <= limits.MAX_OBJECTS_PER_MESSAGE else ("replicas",)
            )
            services = " and a Service" if replicas > 1 else ""
            raise _field_error(
                where,
                f"this job would create {per_job * at_once} Kubernetes objects at once "
                f"({replicas} replicas, a Job{services} each, times {at_once} trials at a time); "
                f"at most {limits.MAX_OBJECTS_PER_MESSAGE} per message",
            )
        return self

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
            resources = group.resources if group.resources is not None else self.resources
            replicas.extend(
                Replica(type=kind.value, index=i, resources=resources) for i in range(group.count)
            )
        return replicas

    def total_gpus(self) -> int:
        return sum(r.resources.gpu for r in self.replica_list())


def _count(group: ReplicaGroup | None) -> int:
    return 0 if group is None else group.count


def _context(info: ValidationInfo, key: str) -> Collection[str] | None:
    context = info.context or {}
    value = context.get(key)
    return None if value is None else list(value)


class CancelCommand(_Model):
    action: Literal["cancel"]
    id: str
    reason: Annotated[str, Field(max_length=512)] = "requested by user"

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _dns_label(value, what="id", max_length=limits.MAX_TRIAL_ID_LENGTH)
