"""The job spec: the public contract of the jobs queue.

A queue message body is either a job spec or a command. Everything a user can ask
for is declared here, strictly: unknown fields are errors, every bound is explicit,
and every error names the field path as the user wrote it and what is allowed.
Users never write a pod spec, so nothing here can ask for privileged containers,
host paths or host networking.

What one message may cost is bounded too, because one body must never be able to
hang or wedge the functions: a sweep is expanded in time proportional to its trials,
not its grid; the Kubernetes objects one message creates at once are counted; a
recorded spec (the job's and each trial's) has a size limit well inside DynamoDB's
item limit; and every recorded spec is loaded back with the same rules before it is
accepted, so reconcile can always read what intake wrote.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes

# Every pattern is used with fullmatch: "$" would let a trailing newline through.
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")
DURATION = re.compile(r"(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,12})s)?")
S3_URI = re.compile(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?")
TRIAL_SUFFIX = re.compile(r"-t\d+\Z")

# Image references by the OCI distribution reference grammar
# (github.com/distribution/reference): [domain[:port]/]path[:tag][@digest].
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
MAX_IMAGE_LENGTH = 512
MAX_IMAGE_NAME_LENGTH = 255  # the distribution spec's limit on the repository name

# Kubernetes object names derive from the job id: "<id>-<type>-<index>" must stay a
# DNS-1123 label (63 characters), and sweep trials append "-t<nnn>" to the parent id.
MAX_NAME_LENGTH = 36
MAX_ID_LENGTH = 45
MAX_TRIAL_ID_LENGTH = MAX_ID_LENGTH + 5
REJECTED_PREFIX = "rejected-"  # ids of REJECTED records (intake derives them)

MAX_REPLICAS = {"chief": 1, "worker": 64, "ps": 16, "evaluator": 1}
MAX_CPU_MILLIS = 192_000
MAX_MEMORY_BYTES = 2 * 1024**4  # 2 TiB
MAX_GPUS = 16
# The operator may set another limit (cdk.json policy.maxRuntimeLimit); real multi-GPU
# training runs for weeks.
DEFAULT_MAX_RUNTIME_LIMIT = timedelta(days=30)
MAX_COMMAND = 64
MAX_ARGS = 256
MAX_ARG_LENGTH = 4096
MAX_ENV = 100
MAX_ENV_VALUE_LENGTH = 32_768
MAX_URI_LENGTH = 1024
MAX_SWEEP_TRIALS = 100
MAX_SWEEP_PARAMETERS = 10
MAX_SWEEP_VALUES = 100  # per parameter
MAX_SWEEP_VALUE_LENGTH = 1024  # as formatted into "--name=value" and SQUALL_PARAM_<NAME>
MAX_PARAMETER_NAME_LENGTH = 64
# What one message may create in Kubernetes at once: a Job per replica, a Service per
# replica when distributed, times the sweep trials that start together. The submit
# function creates these within its timeout, ten messages to a batch.
MAX_OBJECTS_PER_MESSAGE = 200
# A recorded spec (the job's, and each trial's) as JSON; the job table's items stay
# far inside DynamoDB's 400 KB limit, and one message writes at most 101 of them.
MAX_RECORDED_SPEC_BYTES = 64 * 1024
# Bounds on the body's shape, far above any valid spec (a valid spec has at most a
# few thousand values, five levels deep); they bound the work of validating hostile
# bodies before pydantic sees them.
MAX_BODY_DEPTH = 16
MAX_BODY_VALUES = 10_000
RESERVED_ENV = ("TF_CONFIG", "SQUALL_")

# What an error report keeps: a REJECTED record must fit DynamoDB's item limit next
# to the body it records, however many problems a body has.
MAX_ISSUES = 50
MAX_ISSUE_FIELD_LENGTH = 200
MAX_ISSUE_MESSAGE_LENGTH = 500
MAX_ISSUES_JSON_BYTES = 48 * 1024
ISSUES_CONSIDERED = MAX_ISSUES * 4  # the rest of a huge body's errors are only counted

TF_PORT = 2222


class SpecError(ValueError):
    """A job spec or command that cannot be accepted; `issues` lists its problems.

    The list is bounded (see `bound_issues`): at most MAX_ISSUES, each clipped, and a
    last "and N more" issue when some were left out. `total` counts them all.
    """

    def __init__(self, issues: Sequence[Issue], *, more: int = 0) -> None:
        self.total = len(issues) + more
        self.issues = bound_issues(issues, more=more)
        super().__init__("; ".join(f"{i.field}: {i.message}" for i in self.issues))


@dataclass(frozen=True)
class Issue:
    """One validation problem: the field path as the user wrote it, and why."""

    field: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


def bound_issues(issues: Sequence[Issue], *, more: int = 0) -> list[Issue]:
    """The issues worth keeping: distinct, printable, clipped, and bounded in count and size.

    `more` counts issues found but not even listed (a huge body's)."""
    considered = issues[:ISSUES_CONSIDERED]
    distinct = list(
        dict.fromkeys(
            Issue(_clip(i.field, MAX_ISSUE_FIELD_LENGTH), _clip(i.message, MAX_ISSUE_MESSAGE_LENGTH))
            for i in considered
        )
    )
    left_out = len(issues) - len(considered) + more
    kept: list[Issue] = []
    size = 2
    for issue in distinct:
        cost = len(json.dumps(issue.to_dict())) + 2
        if len(kept) == MAX_ISSUES or size + cost > MAX_ISSUES_JSON_BYTES:
            break
        kept.append(issue)
        size += cost
    left_out += len(distinct) - len(kept)
    if left_out:
        kept.append(Issue(field="(body)", message=f"and {left_out} more issues"))
    return kept


def _clip(text: str, limit: int) -> str:
    """Printable text (control characters and lone surrogates escaped), at most `limit` characters."""
    text = text[: limit + 1]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    if not DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{what} must be a DNS-1123 label: lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return value


MAX_DURATION_SECONDS = int(timedelta.max.total_seconds())


def parse_duration(value: str | int) -> timedelta:
    """'6h', '1h30m', '90s', '2d' or a number of seconds."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("must be a duration such as '6h', '30m' or '1h30m'")
    if isinstance(value, int):
        seconds = value
    else:
        match = DURATION.fullmatch(value)
        if not value or not match:
            raise ValueError(f"must be a duration such as '6h', '30m' or '1h30m', got {value[:40]!r}")
        days, hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if seconds <= 0:
        raise ValueError("must be positive")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError("is too long")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A duration in the spec's own grammar: 30d, 1h30m, 90s."""
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


class ReplicaResources(_Model):
    """Requests of one replica. cpu and memory are Kubernetes quantities."""

    cpu: str = "1"
    memory: str = "4Gi"
    gpu: Annotated[StrictInt, Field(ge=0, le=MAX_GPUS)] = 0

    @field_validator("cpu", mode="before")
    @classmethod
    @_checked
    def _cpu(cls, value: Any) -> str:
        text = _quantity_text(value)
        millis = parse_cpu_millicores(text)
        if millis <= 0 or millis > MAX_CPU_MILLIS:
            raise ValueError(f"must be between 1m and {MAX_CPU_MILLIS // 1000} cores, got {text!r}")
        return text

    @field_validator("memory", mode="before")
    @classmethod
    @_checked
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
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
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
    if len(value) > 32 or not REGION.fullmatch(value):
        raise ValueError("must be an AWS region name such as 'us-west-2'")
    return value


def _node_group(value: str) -> str:
    # Rendered as a label value in the pods' node affinity.
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        raise ValueError(
            "must be a node group name: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


def _sweep_value(value: Any) -> bool | int | float | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value.bit_length() > 4 * MAX_SWEEP_VALUE_LENGTH or len(str(value)) > MAX_SWEEP_VALUE_LENGTH:
            raise ValueError(f"must have at most {MAX_SWEEP_VALUE_LENGTH} digits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number (NaN and Infinity are not allowed)")
        return value
    if isinstance(value, str):
        if len(value) > MAX_SWEEP_VALUE_LENGTH:
            raise ValueError(f"must be at most {MAX_SWEEP_VALUE_LENGTH} characters, got {len(value)}")
        return value
    raise ValueError("must be a number, a string or a boolean")


SweepValue = Annotated[bool | int | float | str, PlainValidator(_sweep_value)]


class Sweep(_Model):
    parameters: dict[str, Annotated[list[SweepValue], Field(min_length=1, max_length=MAX_SWEEP_VALUES)]] = (
        Field(min_length=1, max_length=MAX_SWEEP_PARAMETERS)
    )
    strategy: Literal["grid", "random"] = "grid"
    max_trials: Annotated[StrictInt, Field(ge=1, le=MAX_SWEEP_TRIALS)] = 16
    parallelism: Annotated[StrictInt, Field(ge=1, le=MAX_SWEEP_TRIALS)] = 4
    seed: Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)] = 0

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, list[SweepValue]]) -> dict[str, list[SweepValue]]:
        env_names: dict[str, str] = {}
        for name in value:
            if len(name) > MAX_PARAMETER_NAME_LENGTH or not ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"parameter name {name[:80]!r} must be a letter or '_' followed by "
                    f"letters, digits or '_' (at most {MAX_PARAMETER_NAME_LENGTH})"
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
        return self

    def combinations(self) -> int:
        """How many points the grid has (it is never built: see expand_sweep)."""
        return math.prod(len(values) for values in self.parameters.values())


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
    command: list[Annotated[str, Field(max_length=MAX_ARG_LENGTH)]] = Field(
        default_factory=list, max_length=MAX_COMMAND
    )
    args: list[Annotated[str, Field(max_length=MAX_ARG_LENGTH)]] = Field(
        default_factory=list, max_length=MAX_ARGS
    )
    env: dict[str, Annotated[str, Field(max_length=MAX_ENV_VALUE_LENGTH)]] = Field(
        default_factory=dict, max_length=MAX_ENV
    )
    resources: ReplicaResources = Field(default_factory=ReplicaResources)
    replicas: dict[ReplicaType, ReplicaGroup] | None = None
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
        # Trial ids are the parent's id plus "-t<nnn>"; only those may be longer, or end so.
        if info.data.get("parent_id"):
            return _dns_label(value, what="id", max_length=MAX_TRIAL_ID_LENGTH)
        _dns_label(value, what="id", max_length=MAX_ID_LENGTH)
        if TRIAL_SUFFIX.search(value):
            raise ValueError(
                "id must not end in '-t' and digits: Squall names sweep trials '<id>-t<nnn>', "
                "so this id could be another job's trial"
            )
        if value.startswith(REJECTED_PREFIX):
            raise ValueError(f"id must not start with {REJECTED_PREFIX!r}: Squall names rejected messages so")
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
        match = IMAGE_REF.fullmatch(value) if len(value) <= MAX_IMAGE_LENGTH else None
        if match is None or len(match["name"]) > MAX_IMAGE_NAME_LENGTH:
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
            if len(key) > 128 or not ENV_NAME.fullmatch(key):
                raise ValueError(f"env name {key[:80]!r} must match [A-Za-z_][A-Za-z0-9_]* (at most 128)")
            if key.startswith(RESERVED_ENV):
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
            limit = MAX_REPLICAS[kind.value]
            if not 0 <= group.count <= limit:
                raise ValueError(f"{kind.value} count must be between 0 and {limit}, got {group.count}")
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
        limit = context.get("max_runtime_limit") or DEFAULT_MAX_RUNTIME_LIMIT
        if duration > limit:
            raise ValueError(f"must be at most {format_duration(limit)} (the configured maxRuntimeLimit)")
        return value

    @field_validator("checkpoint_uri", "output_uri")
    @classmethod
    def _uri(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > MAX_URI_LENGTH or not S3_URI.fullmatch(value)):
            raise ValueError("must be an s3:// URI such as 's3://bucket/prefix'")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> JobSpec:
        """Bounds across fields: what a trial adds to the args, and what one message creates."""
        if self.sweep is not None and len(self.args) + len(self.sweep.parameters) > MAX_ARGS:
            extra = len(self.sweep.parameters)
            raise _field_error(
                ("args",),
                f"has {len(self.args)} entries and each trial adds one per sweep parameter ({extra}): "
                f"at most {MAX_ARGS - extra} here",
            )
        replicas = len(self.replica_list())
        per_job = replicas * 2 if replicas > 1 else 1  # a Job each, and a Service each when distributed
        at_once = self.sweep.parallelism if self.sweep is not None else 1
        if per_job * at_once > MAX_OBJECTS_PER_MESSAGE:
            where: tuple[str, ...] = (
                ("sweep", "parallelism") if per_job <= MAX_OBJECTS_PER_MESSAGE else ("replicas",)
            )
            services = " and a Service" if replicas > 1 else ""
            raise _field_error(
                where,
                f"this job would create {per_job * at_once} Kubernetes objects at once "
                f"({replicas} replicas, a Job{services} each, times {at_once} trials at a time); "
                f"at most {MAX_OBJECTS_PER_MESSAGE} per message",
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
        return _dns_label(value, what="id", max_length=MAX_TRIAL_ID_LENGTH)


# ---- parsing --------------------------------------------------------------


def _path(loc: Sequence[str | int]) -> str:
    path = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
        else:
            path += f".{item}" if path else item
    return path or "(body)"


_AFTER_VALIDATION = re.compile(r" after validation")
_INSTANCE_OF = re.compile(r" or instance of \w+")


def _issues(exc: ValidationError) -> list[Issue]:
    """Issues at the user's field paths, in the user's words (no pydantic internals)."""
    issues = []
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    for error in errors[:ISSUES_CONSIDERED]:
        loc = error["loc"]
        message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        message = _INSTANCE_OF.sub("", _AFTER_VALIDATION.sub("", message))
        if error["type"] == "extra_forbidden":
            message = "unknown field; check the spelling against the job spec reference"
        elif error["type"] == "missing":
            message = "is required"
        if "[key]" in loc:
            message = f"not an allowed key: {message}"
            loc = tuple(item for item in loc if item != "[key]")
        issues.append(Issue(field=_path(loc), message=message))
    return issues


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _key_text(key: object) -> str:
    text = key if isinstance(key, str) else repr(key)
    return text if len(text) <= 64 else text[:63] + "…"


def _shape_issues(data: Any) -> tuple[list[Issue], bool]:
    """Problems pydantic would not name or would be slow to: text that is not Unicode, and size.

    Returns the issues and whether the body is too large or deep to validate at all.
    Walks without recursion and stops at MAX_BODY_VALUES.
    """
    issues: list[Issue] = []
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    seen = 0
    while stack:
        node, path, depth = stack.pop()
        seen += 1
        if seen > MAX_BODY_VALUES:
            issues.append(
                Issue("(body)", f"has more than {MAX_BODY_VALUES} values; a job spec has far fewer")
            )
            return issues, True
        if isinstance(node, str):
            if _has_surrogate(node):
                issues.append(Issue(path or "(body)", "is not valid Unicode text (a lone surrogate)"))
            continue
        if isinstance(node, Mapping):
            entries: list[tuple[object, Any]] = list(node.items())
        elif isinstance(node, list | tuple):
            entries = list(enumerate(node))
        else:
            continue
        if depth >= MAX_BODY_DEPTH:
            issues.append(Issue(path or "(body)", f"is nested more than {MAX_BODY_DEPTH} levels deep"))
            return issues, True
        for key, value in reversed(entries):
            if isinstance(key, int) and not isinstance(node, Mapping):
                child = f"{path}[{key}]"
            else:
                child = f"{path}.{_key_text(key)}" if path else _key_text(key)
                if isinstance(key, str) and _has_surrogate(key):
                    issues.append(Issue(child, "the key is not valid Unicode text (a lone surrogate)"))
            stack.append((value, child, depth + 1))
    return issues, False


def _validate(model: type[_Model], data: Any, context: dict[str, Any]) -> Any:
    shape, too_large = _shape_issues(data)
    if too_large:
        raise SpecError(shape)
    try:
        parsed = model.model_validate(data, context=context)
    except ValidationError as exc:
        named = {issue.field for issue in shape}  # pydantic's own words for the same text add nothing
        found = [i for i in _issues(exc) if i.field not in named]
        raise SpecError(shape + found, more=max(0, exc.error_count() - ISSUES_CONSIDERED)) from exc
    except RecursionError as exc:
        raise SpecError([*shape, Issue("(body)", "is nested too deeply")]) from exc
    except Exception as exc:
        # A bug in a check must not become a traceback for the sender.
        raise SpecError([*shape, Issue("(body)", f"could not be validated ({type(exc).__name__})")]) from exc
    if shape:
        raise SpecError(shape)
    return parsed


def parse_spec(
    data: Any,
    *,
    teams: Collection[str],
    registries: Collection[str],
    max_runtime_limit: timedelta = DEFAULT_MAX_RUNTIME_LIMIT,
) -> JobSpec:
    """Validate a job spec against the configured teams and registries.

    Raises SpecError listing its problems (never only the first), bounded.
    Beyond the fields, the spec as recorded and every trial of its sweep must load
    back with `load_spec`, the rules reconcile reads them with.
    """
    if not isinstance(data, Mapping):
        raise SpecError([Issue(field="(body)", message="a job spec must be a JSON object")])
    for reserved in ("parentId", "parent_id", "trialParameters", "trial_parameters"):
        if reserved in data:
            raise SpecError([Issue(field=reserved, message="is set by Squall for sweep trials only")])
    spec: JobSpec = _validate(
        JobSpec,
        data,
        {"teams": teams, "registries": registries, "max_runtime_limit": max_runtime_limit},
    )
    # The id a message would get has the same length and form as this stand-in.
    check_recorded(spec, job_id=spec.id or f"{spec.name}-{'0' * 8}")
    return spec


def parse_message(
    data: Any,
    *,
    teams: Collection[str],
    registries: Collection[str],
    max_runtime_limit: timedelta = DEFAULT_MAX_RUNTIME_LIMIT,
) -> JobSpec | CancelCommand:
    """A queue message body (already decoded JSON): a job spec or a command."""
    if isinstance(data, Mapping) and "action" in data:
        command: CancelCommand = _validate(CancelCommand, data, {})
        return command
    return parse_spec(data, teams=teams, registries=registries, max_runtime_limit=max_runtime_limit)


def recorded(spec: JobSpec) -> dict[str, Any]:
    """The spec as the job record keeps it (JSON-ready, by alias, without unset options)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


def load_spec(data: Any) -> JobSpec:
    """A recorded spec (a job's or a sweep trial's), with the rules it was accepted by.

    Operator policy (teams, registries, maxRuntimeLimit) was checked at intake and
    may have changed since: it is not applied again. Raises SpecError.
    """
    if not isinstance(data, Mapping):
        raise SpecError([Issue(field="(body)", message="a recorded job spec must be an object")])
    spec: JobSpec = _validate(JobSpec, data, {"stored": True})
    return spec


def check_recorded(spec: JobSpec, *, job_id: str) -> None:
    """Raise SpecError unless the spec and each of its trials records within bounds and loads back."""
    issues: list[Issue] = []
    records: list[tuple[str | None, JobSpec]] = [(None, spec), *expand_sweep(spec, job_id=job_id)]
    for number, (trial_id, record) in enumerate(records):
        what = "the job spec" if trial_id is None else f"trial {number} ({trial_id})"
        where = "(body)" if trial_id is None else "sweep"
        text = json.dumps(recorded(record), separators=(",", ":"))
        if len(text) > MAX_RECORDED_SPEC_BYTES:
            issues.append(
                Issue(where, f"{what} takes {len(text)} bytes as recorded; at most {MAX_RECORDED_SPEC_BYTES}")
            )
            break
        try:
            load_spec(json.loads(text))
        except SpecError as exc:
            issues.extend(
                Issue(where, f"{what} would be invalid: {i.field}: {i.message}") for i in exc.issues
            )
            break
    if issues:
        raise SpecError(issues)


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


def trial_indices(sweep: Sweep) -> list[int]:
    """Which points of the grid become trials, in grid order; never more than maxTrials.

    Grid: the first maxTrials points. Random: maxTrials distinct points drawn with
    the sweep's seed (the same spec always draws the same ones). Either way the
    work is proportional to maxTrials, whatever the size of the grid.
    """
    total = sweep.combinations()
    count = min(total, sweep.max_trials)
    if sweep.strategy != "random":
        return list(range(count))
    rng = random.Random(sweep.seed)
    if total <= sys.maxsize:
        return sorted(rng.sample(range(total), count))  # a range is never materialised
    chosen: set[int] = set()
    while len(chosen) < count:  # len(range) overflows here; draw as sample does for large ones
        chosen.add(rng.randrange(total))
    return sorted(chosen)


def grid_point(columns: Sequence[Sequence[SweepValue]], index: int) -> tuple[SweepValue, ...]:
    """The index-th point of the grid in itertools.product order (the last column varies fastest)."""
    digits: list[SweepValue] = []
    for values in reversed(columns):
        index, digit = divmod(index, len(values))
        digits.append(values[digit])
    return tuple(reversed(digits))


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
    columns = [sweep.parameters[n] for n in names]
    trials = []
    for number, index in enumerate(trial_indices(sweep)):
        values = dict(zip(names, grid_point(columns, index), strict=True))
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
