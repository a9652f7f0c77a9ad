"""The configuration Squall reads, one schema each: node groups, policy, durations, teams.

Every reader uses these: `cdk synth` (stacks/config.py), the functions' settings
(core/settings.py, runtime.py), `squall plan` (planner/offline.py, cli/commands.py), scenario and
groups files (local/scenario, local/trace.py). A rule or a default is written once,
here, and every problem comes back as 'field: what is wrong', all at once.

Plain Python rather than pydantic: `squall plan` reads node groups and policy, and it
starts without importing pydantic (tests/unit/test_cli_errors.py holds it to that).
The pydantic models that hold these values (core/settings.py's PolicySettings, the
scenario file's models) delegate to these readers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import date, datetime, timedelta
from typing import Any, TypeVar, cast

from squall.planner.admission import TeamShare
from squall.planner.kube import parse_time
from squall.planner.model import (
    GPU_RESOURCE,
    TAINT_EFFECTS,
    GroupHealth,
    GroupInstance,
    NodeGroup,
    Policy,
    Resources,
    ScalingFailure,
    Taint,
)
from squall.planner.preemption import PreemptionPolicy
from squall.planner.quantity import parse_cpu_millicores, parse_memory_bytes, parse_whole_count
from squall.planner.text import kind, shown

DEFAULT_PODS_PER_NODE = 110
# How long a new instance takes to become a Ready node, when a group does not say: the planner's default.
DEFAULT_BOOT_TIME = cast(timedelta, next(f.default for f in fields(NodeGroup) if f.name == "boot_time"))
MAX_BOOT_TIME = timedelta(days=1)
# Bounds on what a group may declare: more than any real Auto Scaling group holds, and
# small enough that the planner's work stays proportional to what it is given.
MAX_GROUP_SIZE = 10_000
MAX_PRIORITY = 1_000_000
MAX_CONSECUTIVE_FAILURES = 1_000_000
MAX_ERRORS_SHOWN = 50
# A group's name becomes part of AWS and Kubernetes names: a short DNS label.
# Every pattern here means ASCII and says so: `\d` and `\w` alone take any script's
# digits and letters ("us-west-\u0662"), which AWS and Kubernetes refuse.
GROUP_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}", re.ASCII)
AWS_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]", re.ASCII)
# A cluster's name as EKS allows it (a letter or digit, then letters, digits, '-' and '_', 100
# at most): the one rule wherever Squall reads one (a node group's, the CLI's, a scenario's).
# Whether it is a configured one, the caller checks. Never a "/": sites are "<cluster>/<region>".
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}", re.ASCII)
CLUSTER_NAME_WORDS = (
    "a cluster's name (a letter or digit, then letters, digits, '-' and '_', 1 to 100 of them)"
)
ASG_NAME = re.compile(r"[\w.+=@/-]{1,255}", re.ASCII)  # what an ARN's autoScalingGroupName can hold
PRICE_FROM = re.compile("config|ec2")  # NodeGroup.price_from: the configured prices, or EC2's
_Value = TypeVar("_Value")


class InputError(ValueError):
    """Configuration that cannot be used; `errors` holds one 'field: problem' each."""

    def __init__(self, errors: Sequence[str], *, message: str | None = None) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors) if message is None else message)


class GroupsError(InputError):
    """The node groups are invalid; `errors` holds one 'field: problem' per problem (at most 50)."""

    def __init__(self, errors: Sequence[str]) -> None:
        shown_errors = list(errors[:MAX_ERRORS_SHOWN])
        if len(errors) > MAX_ERRORS_SHOWN:
            shown_errors.append(f"... and {len(errors) - MAX_ERRORS_SHOWN} more")
        super().__init__(shown_errors, message="invalid node groups:\n  " + "\n  ".join(shown_errors))
        self.errors = shown_errors


def shown_value(value: object) -> str:
    """A refused value as the reader wrote it: JSON's true, false and null; anything else as `shown`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return shown(value)


# ---- durations ------------------------------------------------------------------------------

_COMPACT = re.compile(
    r"(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,12}(?:\.\d{1,9})?)s)?", re.ASCII
)
_ISO_8601 = re.compile(
    r"P(?:(\d{1,9}(?:[.,]\d{1,9})?)Y)?(?:(\d{1,9}(?:[.,]\d{1,9})?)W)?(?:(\d{1,9}(?:[.,]\d{1,9})?)D)?"
    r"(?:T(?:(\d{1,9}(?:[.,]\d{1,9})?)H)?(?:(\d{1,9}(?:[.,]\d{1,9})?)M)?(?:(\d{1,12}(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE | re.ASCII,
)
_CLOCK = re.compile(r"(?:(\d{1,9}) days?, )?(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d{1,6})?))?", re.ASCII)
DURATION_EXAMPLES = "such as 90s, 4m, 1h30m, 2d or PT10M (ISO 8601), or a number of seconds"


def parse_duration(value: object) -> timedelta:
    """A duration, not negative: seconds as a number, '90s', '4m', '1h30m', '2d', ISO 8601 ('PT10M',
    'P30D') or a clock ('00:10:00'). ValueError says what is allowed."""
    if isinstance(value, timedelta):
        span = value
    elif isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a duration {DURATION_EXAMPLES}, got {shown_value(value)}")
    elif isinstance(value, int | float):
        span = _seconds(float(value) if isinstance(value, float) else value, value)
    else:
        span = _parse_text(value.strip(), value)
    if span < timedelta(0):
        raise ValueError(f"must not be negative, got {shown_value(value)}")
    return span


def _parse_text(text: str, value: str) -> timedelta:
    units: list[tuple[str | None, float]]
    if text and (match := _COMPACT.fullmatch(text)):
        units = list(zip(match.groups(), (86_400, 3_600, 60, 1), strict=True))
    elif len(text) > 1 and (match := _ISO_8601.fullmatch(text)) and text.upper() not in ("PT",):
        units = list(zip(match.groups(), (365 * 86_400, 7 * 86_400, 86_400, 3_600, 60, 1), strict=True))
    elif match := _CLOCK.fullmatch(text):
        units = list(zip(match.groups(), (86_400, 3_600, 60, 1), strict=True))
    else:
        raise ValueError(f"must be a duration {DURATION_EXAMPLES}, got {shown_value(value)}")
    total = sum(float(part.replace(",", ".")) * unit for part, unit in units if part)
    return _seconds(total, value)


def _seconds(seconds: float, value: object) -> timedelta:
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise ValueError(f"must be a duration {DURATION_EXAMPLES}, got {shown_value(value)}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"is too long, got {shown_value(value)}") from None


# ---- policy -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyField:
    key: str  # as cdk.json writes it
    name: str  # the attribute
    default: timedelta | float | bool
    positive: bool  # zero is refused too


_PLANNER = Policy()  # the planner's fields take their defaults from the planner's Policy
POLICY_FIELDS = (
    PolicyField("provisionTimeout", "provision_timeout", _PLANNER.provision_timeout, True),
    PolicyField("idleThreshold", "idle_threshold", _PLANNER.idle_threshold, False),
    PolicyField("bootGrace", "boot_grace", _PLANNER.boot_grace, False),
    PolicyField("maxScaleDownFraction", "max_scale_down_fraction", _PLANNER.max_scale_down_fraction, True),
    PolicyField("backoffBase", "backoff_base", _PLANNER.backoff_base, True),
    PolicyField("backoffMax", "backoff_max", _PLANNER.backoff_max, True),
    PolicyField("failureWindow", "failure_window", _PLANNER.failure_window, True),
    PolicyField("drainDeadline", "drain_deadline", timedelta(minutes=30), True),
    PolicyField("drainStepDelay", "drain_step_delay", timedelta(seconds=30), False),
    PolicyField("jobTtlAfterFinished", "job_ttl_after_finished", timedelta(hours=1), False),
    PolicyField("scaleCheckDebounce", "scale_check_debounce", timedelta(seconds=2), False),
    # The longest maxRuntime a job spec may ask for (operator policy).
    PolicyField("maxRuntimeLimit", "max_runtime_limit", timedelta(days=30), True),
    # Admission lets a job use room reserved for the head of the queue when its maxRuntime ends
    # before the head could start; false: today's rule. agedAfter: planner/queue_order.py.
    PolicyField("backfill", "backfill", True, False),
    PolicyField("agedAfter", "aged_after", _PLANNER.aged_after, True),
)
# Preemption (`preemption: {enabled, minPriorityGap, graceSeconds}`): an object of its own.
PREEMPTION = "preemption"
PREEMPTION_KEYS = {"enabled": "enabled", "minPriorityGap": "min_priority_gap", "graceSeconds": "grace"}
# Its defaults are the planner's, as the other policy fields' are.
PREEMPTION_DEFAULTS: dict[str, Any] = {
    f.name: getattr(PreemptionPolicy(), f.name) for f in fields(PreemptionPolicy)
}
MAX_PRIORITY_GAP = 100  # job priorities run from 0 to 100
POLICY_DEFAULTS: dict[str, Any] = {f.name: f.default for f in POLICY_FIELDS}  # and preemption's
POLICY_KEYS = (*(f.key for f in POLICY_FIELDS), PREEMPTION)
_PLANNER_FIELDS = frozenset(f.name for f in fields(Policy))


def read_policy(value: object, *, path: str = "policy") -> dict[str, Any]:
    """cdk.json's `policy` (keys as cdk.json writes them, or attribute names), every field
    defaulted: attribute name -> value. InputError names every problem; '//' keys are comments."""
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise InputError([f"{path}: expected an object, got {kind(value)}"])
    by_key = {f.key: f for f in POLICY_FIELDS} | {f.name: f for f in POLICY_FIELDS}
    errors: list[str] = []
    values = POLICY_DEFAULTS | {PREEMPTION: dict(PREEMPTION_DEFAULTS)}
    for key, raw in value.items():
        if isinstance(key, str) and key.startswith("//"):
            continue
        if key == PREEMPTION:
            values[PREEMPTION] = _preemption(raw, f"{path}.{PREEMPTION}", errors)
            continue
        known = by_key.get(key) if isinstance(key, str) else None
        if known is None:
            errors.append(f"{path}.{key}: unknown field (allowed: {', '.join(POLICY_KEYS)})")
            continue
        try:
            values[known.name] = _policy_value(known, raw)
        except ValueError as exc:
            errors.append(f"{path}.{known.key}: {exc}")
    if not errors and values["backoff_max"] < values["backoff_base"]:
        errors.append(f"{path}.backoffMax: must be at least backoffBase ({values['backoff_base']})")
    if errors:
        raise InputError(errors)
    return values


def _policy_value(field: PolicyField, raw: object) -> timedelta | float | bool:
    if isinstance(field.default, bool):
        if not isinstance(raw, bool):
            raise ValueError(f"expected true or false, got {shown_value(raw)}")
        return raw
    if isinstance(field.default, float):
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw <= 1:
            raise ValueError(f"expected a number greater than 0 and at most 1, got {shown_value(raw)}")
        return float(raw)
    span = parse_duration(raw)
    if field.positive and span <= timedelta(0):
        raise ValueError(f"must be positive, got {shown_value(raw)}")
    return span


def _preemption(value: object, where: str, errors: list[str]) -> dict[str, Any]:
    """`preemption: {enabled, minPriorityGap, graceSeconds}` (or its attribute names, as the
    functions' settings hold it): enabled, min_priority_gap, grace. Problems join `errors`."""
    values = dict(PREEMPTION_DEFAULTS)
    if value is None:
        return values
    if not isinstance(value, Mapping):
        errors.append(f"{where}: expected an object with {', '.join(PREEMPTION_KEYS)}, got {kind(value)}")
        return values
    key_of = {name: key for key, name in PREEMPTION_KEYS.items()}
    for key, raw in value.items():
        name = PREEMPTION_KEYS.get(key, key if key in key_of else None) if isinstance(key, str) else None
        if name is not None:
            try:
                values[name] = _preemption_value(name, raw)
            except ValueError as exc:
                errors.append(f"{where}.{key_of[name]}: {exc}")
        elif not (isinstance(key, str) and key.startswith("//")):
            errors.append(f"{where}.{key}: unknown field (allowed: {', '.join(PREEMPTION_KEYS)})")
    return values


def _preemption_value(name: str, raw: object) -> timedelta | float | bool:
    if name == "enabled":
        return _policy_value(PolicyField("enabled", name, False, False), raw)
    if name == "min_priority_gap":
        if type(raw) is not int or not 1 <= raw <= MAX_PRIORITY_GAP:
            raise ValueError(f"expected a whole number from 1 to {MAX_PRIORITY_GAP}, got {shown_value(raw)}")
        return raw
    # graceSeconds: seconds as cdk.json writes it; a timedelta as the settings model holds it.
    seconds = raw.total_seconds() if isinstance(raw, timedelta) else raw
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= 3600:
        raise ValueError(f"expected a number of seconds from 0 to 3600, got {shown_value(raw)}")
    return timedelta(seconds=seconds)


def planner_policy(values: Mapping[str, Any]) -> Policy:
    """The planner's Policy from a policy's values (read_policy's, or PolicySettings')."""
    return Policy(**{name: values[name] for name in _PLANNER_FIELDS})


# ---- teams ------------------------------------------------------------------------------------

TEAM_FIELDS = ("namespace", "submitters", "gpuQuota", "weight", "budget")
BUDGET_FIELDS = ("monthly",)
MAX_BUDGET = 1e12  # dollars a month: far above any team's, and a float that adds up exactly
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)  # a DNS-1123 label
# A submitter: an IAM role or user ARN (the stack resolves it to its unique id), or the
# unique id itself (AROA... for a role, AIDA... for a user), what SQS reports as SenderId.
IAM_PRINCIPAL_ARN = re.compile(
    r"^arn:aws(-[a-z]+)*:iam::(?P<account>\d{12}):(?P<kind>role|user)/(?:[\w+=,.@-]+/)*(?P<name>[\w+=,.@-]{1,128})$",
    re.ASCII,
)
IAM_UNIQUE_ID = re.compile(r"^(AROA|AIDA)[A-Z0-9]{12,124}$", re.ASCII)


@dataclass(frozen=True, slots=True)
class Team:
    """A team of cdk.json's `teams` (or a scenario's): its namespace and who may submit for it.

    `submitters` None: anyone allowed to send to the jobs queue may submit for the team;
    otherwise only these principals (IAM role ARNs in cdk.json, unique ids in a scenario).
    """

    namespace: str
    submitters: tuple[str, ...] | None = None
    gpu_quota: int | None = None
    weight: float | None = None
    # Dollars the team may spend in a calendar month (UTC): admission holds its jobs past it.
    monthly_budget: float | None = None


def read_teams(value: object, *, path: str = "teams", unique_ids_only: bool = False) -> dict[str, Team]:
    """`{team: namespace | {namespace, submitters, gpuQuota, weight, budget: {monthly}}}`; InputError names
    every problem.

    Submitters are IAM role or user ARNs or unique ids, as cdk.json holds them; with
    `unique_ids_only` (a scenario, where no IAM resolves an ARN) unique ids only.
    """
    if not isinstance(value, Mapping):
        raise InputError([f"{path}: expected an object of team -> namespace, got {kind(value)}"])
    errors: list[str] = []
    teams: dict[str, Team] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not name.strip():
            errors.append(f"{path}: team names must be non-empty strings, got {shown_value(name)}")
            continue
        team = _team(entry, f"{path}.{name}", errors, unique_ids_only=unique_ids_only)
        if team is not None:
            teams[name] = team
    if errors:
        raise InputError(errors)
    return teams


def _team(entry: object, where: str, errors: list[str], *, unique_ids_only: bool) -> Team | None:
    if isinstance(entry, str):
        return Team(namespace=entry) if _namespace(entry, where, errors) else None
    if not isinstance(entry, Mapping):
        errors.append(
            f"{where}: expected a namespace or an object with {', '.join(TEAM_FIELDS)}, got {kind(entry)}"
        )
        return None
    before = len(errors)
    for key in entry:
        if key not in TEAM_FIELDS:
            errors.append(f"{where}.{key}: unknown field (allowed: {', '.join(TEAM_FIELDS)})")
    namespace = entry.get("namespace")
    if namespace is None:
        errors.append(f"{where}.namespace: required")
    elif not isinstance(namespace, str):
        errors.append(f"{where}.namespace: expected a string, got {kind(namespace)}")
    else:
        _namespace(namespace, f"{where}.namespace", errors)
    submitters = entry.get("submitters")
    if "submitters" in entry:
        _submitters(submitters, f"{where}.submitters", errors, unique_ids_only=unique_ids_only)
    quota, weight = _share_fields(entry, where, errors)
    budget = _budget(entry.get("budget"), f"{where}.budget", errors)
    if len(errors) > before:
        return None
    return Team(
        namespace=str(namespace),
        submitters=tuple(submitters) if submitters is not None else None,
        gpu_quota=quota,
        weight=weight,
        monthly_budget=budget,
    )


def _budget(value: object, where: str, errors: list[str]) -> float | None:
    """A team's `budget: {monthly: dollars}`, None when left out; problems join `errors`."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.append(f"{where}: expected an object {{monthly: dollars}}, got {kind(value)}")
        return None
    for key in value:
        if key not in BUDGET_FIELDS:
            errors.append(f"{where}.{key}: unknown field (allowed: {', '.join(BUDGET_FIELDS)})")
    if "monthly" not in value:
        errors.append(f"{where}.monthly: required (dollars a month, more than 0)")
        return None
    try:
        return budget_dollars(value["monthly"])
    except ValueError as exc:
        errors.append(f"{where}.monthly: {exc}")
        return None


def budget_dollars(value: object) -> float:
    """A monthly budget in dollars, more than 0; ValueError says what is allowed."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_BUDGET:
        raise ValueError(
            f"expected dollars a month, more than 0 and at most {MAX_BUDGET:,.0f}, got {shown_value(value)}"
        )
    return float(value)


def team_budgets(teams: Mapping[str, Team]) -> dict[str, float]:
    """Team -> its monthly budget in dollars, for the teams that have one (Settings.budgets)."""
    return {name: team.monthly_budget for name, team in teams.items() if team.monthly_budget is not None}


def read_budgets(value: object, *, path: str = "budgets") -> dict[str, float]:
    """`{team: dollars a month}` (the functions' settings); InputError names every problem."""
    if not isinstance(value, Mapping):
        raise InputError([f"{path}: expected an object of team -> dollars a month, got {kind(value)}"])
    errors: list[str] = []
    budgets: dict[str, float] = {}
    for name, dollars in value.items():
        if not isinstance(name, str) or not name.strip():
            errors.append(f"{path}: team names must be non-empty strings, got {shown_value(name)}")
            continue
        try:
            budgets[name] = budget_dollars(dollars)
        except ValueError as exc:
            errors.append(f"{path}.{name}: {exc}")
    if errors:
        raise InputError(errors)
    return budgets


def _share_fields(entry: Mapping[Any, Any], where: str, errors: list[str]) -> tuple[int | None, float | None]:
    """A team's `gpuQuota` and `weight`, each None when left out; problems join `errors`."""
    quota = entry.get("gpuQuota")
    if quota is not None and (type(quota) is not int or quota < 0):
        errors.append(
            f"{where}.gpuQuota: expected a whole number of GPUs, at least 0, got {shown_value(quota)}"
        )
        quota = None
    weight = entry.get("weight")
    if weight is not None and (type(weight) not in (int, float) or not math.isfinite(weight) or weight <= 0):
        errors.append(f"{where}.weight: expected a positive number, got {shown_value(weight)}")
        weight = None
    return quota, float(weight) if weight is not None else None


def team_share(team: Team) -> TeamShare:
    """What admission holds a team to: its `gpuQuota` (None: no limit) and `weight` (default 1)."""
    return TeamShare(quota=team.gpu_quota, weight=1.0 if team.weight is None else team.weight)


def team_shares(teams: Mapping[str, Team]) -> dict[str, TeamShare]:
    """Every team's share for the scale check (ScaleConfig.teams), a team without a quota included."""
    return {name: team_share(team) for name, team in teams.items()}


SHARE_FIELDS = ("gpuQuota", "weight")


def read_team_shares(value: object, *, path: str = "quotas") -> dict[str, TeamShare]:
    """`{team: {gpuQuota, weight}}` (the functions' settings; a TeamShare passes as it is).

    InputError names every problem.
    """
    if not isinstance(value, Mapping):
        raise InputError([f"{path}: expected an object of team -> {{gpuQuota, weight}}, got {kind(value)}"])
    errors: list[str] = []
    shares: dict[str, TeamShare] = {}
    for name, entry in value.items():
        where = f"{path}.{name}"
        if not isinstance(name, str) or not name.strip():
            errors.append(f"{path}: team names must be non-empty strings, got {shown_value(name)}")
        elif isinstance(entry, TeamShare):
            shares[name] = entry
        elif not isinstance(entry, Mapping):
            errors.append(f"{where}: expected an object with {', '.join(SHARE_FIELDS)}, got {kind(entry)}")
        else:
            before = len(errors)
            for key in entry:
                if key not in SHARE_FIELDS:
                    errors.append(f"{where}.{key}: unknown field (allowed: {', '.join(SHARE_FIELDS)})")
            quota, weight = _share_fields(entry, where, errors)
            if len(errors) == before:
                shares[name] = TeamShare(quota=quota, weight=1.0 if weight is None else weight)
    if errors:
        raise InputError(errors)
    return shares


def share_document(share: TeamShare) -> dict[str, Any]:
    """A team's share as the settings file holds it (read_team_shares reads it back)."""
    return {"gpuQuota": share.quota, "weight": share.weight}


def _submitters(value: object, where: str, errors: list[str], *, unique_ids_only: bool) -> None:
    wanted = (
        "unique ids (AROA..., AIDA...)"
        if unique_ids_only
        else "IAM role ARNs or unique ids (AROA..., AIDA...)"
    )
    if not isinstance(value, list) or not value:
        errors.append(
            f"{where}: expected a non-empty list of {wanted}; leave it out to let any sender submit"
        )
        return
    one = (
        "a unique id (AROA..., AIDA...)"
        if unique_ids_only
        else "an IAM role or user ARN, or a unique id (AROA..., AIDA...)"
    )
    for index, principal in enumerate(value):
        valid = isinstance(principal, str) and (
            IAM_UNIQUE_ID.fullmatch(principal)
            or (not unique_ids_only and IAM_PRINCIPAL_ARN.fullmatch(principal))
        )
        if not valid:
            errors.append(f"{where}[{index}]: {shown_value(principal)} is not {one}")
    if len({p for p in value if isinstance(p, str)}) != len(value):
        errors.append(f"{where}: a principal is listed twice")


def _namespace(name: str, where: str, errors: list[str]) -> bool:
    if NAMESPACE.fullmatch(name):
        return True
    errors.append(
        f"{where}: {shown(name)} is not a Kubernetes namespace (a DNS-1123 label: a-z, 0-9, '-', at most 63)"
    )
    return False


# ---- node groups ------------------------------------------------------------------------------


def read_node_groups(
    doc: Mapping[str, Any] | Sequence[Any], *, path: str = "nodeGroups"
) -> tuple[list[NodeGroup], dict[str, GroupHealth]]:
    """Node groups and their persisted health from a list, {nodeGroups: [...]} or a cdk.json.

    GroupsError names the field of every problem (the first 50).
    """
    raw_groups = _group_list(doc, path)
    errors: list[str] = []
    groups: list[NodeGroup] = []
    health: dict[str, GroupHealth] = {}
    for index, raw in enumerate(raw_groups):
        fields_ = Fields(raw, f"{path}[{index}]", errors)
        parsed = _parse_group(fields_) if fields_.ok_object() else None
        if parsed is not None:
            groups.append(parsed[0])
            health[parsed[0].name] = parsed[1]
    errors.extend(_duplicates(groups, path))
    if errors:
        raise GroupsError(errors)
    return groups, health


def _group_list(doc: Mapping[str, Any] | Sequence[Any], path: str) -> Sequence[Any]:
    found: object = doc
    if isinstance(doc, Mapping):
        context = doc.get("context")
        holder = context if isinstance(context, Mapping) and "nodeGroups" in context else doc
        if "nodeGroups" not in holder:
            raise GroupsError([f"{path}: missing (expected a list of node groups, or {{nodeGroups: [...]}})"])
        found = holder["nodeGroups"]
    if not isinstance(found, Sequence) or isinstance(found, str):
        raise GroupsError([f"{path}: expected a list, got {kind(found)}"])
    return found


def _parse_group(fields_: Fields) -> tuple[NodeGroup, GroupHealth] | None:
    errors_before = len(fields_.errors)
    name = fields_.text(
        "name", required=True, pattern=GROUP_NAME, what="lower-case letters, digits and '-', at most 31"
    )
    region = fields_.text(
        "region", required=True, pattern=AWS_REGION, what="an AWS region name such as us-west-2"
    )
    instance_type = fields_.text("instanceType", required=True)
    allocatable = _allocatable(fields_, name=name, instance_type=instance_type)
    min_size = fields_.integer("minSize", default=0, maximum=MAX_GROUP_SIZE)
    max_size = fields_.integer("maxSize", required=True, maximum=MAX_GROUP_SIZE)
    instances = fields_.objects("instances", _instance)
    desired = fields_.integer("desired", default=max(min_size or 0, len(instances)), maximum=MAX_GROUP_SIZE)
    priority = fields_.integer("priority", default=0, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)
    labels = fields_.labels("labels")
    taints = tuple(fields_.objects("taints", _taint))
    failures = tuple(fields_.objects("failures", _failure))
    price = fields_.number("pricePerHour")
    on_demand_price = fields_.number("onDemandPricePerHour")
    boot_time = fields_.parsed("bootTime", _boot_time, default=DEFAULT_BOOT_TIME)
    spot = fields_.boolean("spot")
    price_from = fields_.text("priceFrom", pattern=PRICE_FROM, what="config or ec2") or "config"
    asg_name = fields_.text("asgName", pattern=ASG_NAME, what="an Auto Scaling group name") or name
    cluster_name = CLUSTER_NAME_WORDS
    cluster = fields_.text("cluster", pattern=CLUSTER_NAME, what=cluster_name)
    if fields_.raw.get("cluster") == "":
        fields_.error("cluster", f"expected {cluster_name}, got ''")
    health = _health(fields_)
    if min_size is not None and max_size is not None:
        if min_size > max_size:
            fields_.error("maxSize", f"must be at least minSize ({min_size}), got {max_size}")
        elif max_size < 1:
            fields_.errors.append(
                f"{fields_.path}: needs 0 <= minSize <= maxSize and maxSize >= 1, got maxSize 0"
            )
    if desired is not None and max_size is not None and desired > max_size:
        fields_.error("desired", f"must be at most maxSize ({max_size}), got {desired}")
    if len(fields_.errors) > errors_before or allocatable is None or min_size is None or max_size is None:
        return None
    group = NodeGroup(
        name=name,
        region=region,
        instance_type=instance_type,
        allocatable=allocatable,
        labels=labels,
        taints=taints,
        priority=priority or 0,
        min_size=min_size,
        max_size=max_size,
        desired=desired or 0,
        instances=tuple(instances),
        failures=failures,
        price_per_hour=price,
        spot=spot,
        asg_name=asg_name,
        cluster=cluster,
        boot_time=boot_time or DEFAULT_BOOT_TIME,  # None only with an error, above
        on_demand_price_per_hour=on_demand_price,
        price_from=price_from,
    )
    return group, health


def _boot_time(value: object) -> timedelta:
    span = parse_duration(value)
    if span > MAX_BOOT_TIME:
        raise ValueError(f"must be at most a day, got {shown_value(value)}")
    return span


def _allocatable(fields_: Fields, *, name: str, instance_type: str) -> Resources | None:
    raw = fields_.raw.get("allocatable")
    if not isinstance(raw, Mapping):
        fields_.error(
            "allocatable",
            f"group {name or '?'} must declare its per-node allocatable "
            f"{{cpu, memory, {GPU_RESOURCE}, pods}}; the planner has no size for {instance_type or '?'}",
        )
        return None
    inner = Fields(raw, f"{fields_.path}.allocatable", fields_.errors)
    cpu = inner.quantity("cpu", parse_cpu_millicores, required=True)
    memory = inner.quantity("memory", parse_memory_bytes, required=True)
    gpu_key = GPU_RESOURCE if GPU_RESOURCE in raw else "gpu"
    gpu = inner.quantity(gpu_key, parse_whole_count, default=0)
    pods = inner.quantity("pods", parse_whole_count, default=DEFAULT_PODS_PER_NODE)
    if cpu is None or memory is None or gpu is None or pods is None:
        return None
    return Resources(cpu=cpu, memory=memory, gpu=gpu, pods=pods)


def _instance(fields_: Fields) -> GroupInstance | None:
    instance_id = fields_.text("id", required="instanceId" not in fields_.raw) or fields_.text("instanceId")
    state = fields_.text("lifecycleState", required=True)
    launched = fields_.time("launchTime", required=True)
    if not instance_id or not state or launched is None:
        return None
    return GroupInstance(instance_id=instance_id, lifecycle_state=state, launch_time=launched)


def _failure(fields_: Fields) -> ScalingFailure | None:
    time = fields_.time("time", required=True)
    reason = fields_.text("reason", required=True)
    if time is None or not reason:
        return None
    return ScalingFailure(time=time, reason=reason)


def _taint(fields_: Fields) -> Taint | None:
    key = fields_.text("key", required=True)
    value = fields_.text("value")
    effect = fields_.text("effect", required=True)
    if effect and effect not in TAINT_EFFECTS:
        fields_.error("effect", f"must be one of {', '.join(sorted(TAINT_EFFECTS))}, got {shown(effect)}")
        return None
    return Taint(key=key, value=value, effect=effect) if key and effect else None


def _health(fields_: Fields) -> GroupHealth:
    until = fields_.time("backoffUntil")
    consecutive = fields_.integer(
        "consecutiveFailures", default=1 if until is not None else 0, maximum=MAX_CONSECUTIVE_FAILURES
    )
    return GroupHealth(
        backoff_until=until,
        consecutive_failures=consecutive or 0,
        last_failure_at=fields_.time("lastFailureAt"),
        reason="backoff carried over from the GROUPS document" if until is not None else "",
    )


def _duplicates(groups: Sequence[NodeGroup], path: str) -> list[str]:
    errors: list[str] = []
    seen_groups: set[str] = set()
    seen_asgs: dict[str, str] = {}
    seen_instances: dict[str, str] = {}
    for group in groups:
        if group.name in seen_groups:
            errors.append(f"{path}: group name {group.name!r} appears twice")
        seen_groups.add(group.name)
        other_asg = seen_asgs.setdefault(group.asg_name, group.name)
        if other_asg != group.name:
            errors.append(
                f"{path}: Auto Scaling group {group.asg_name!r} is in both {other_asg} and {group.name}"
            )
        for instance in group.instances:
            other = seen_instances.setdefault(instance.instance_id, group.name)
            if other != group.name:
                errors.append(f"{path}: instance {instance.instance_id} is in both {other} and {group.name}")
    return errors


@dataclass(slots=True)
class Fields:
    """Reads one object's fields, recording 'path.field: problem' instead of raising.

    A field set to null counts as absent.
    """

    raw: Any
    path: str
    errors: list[str]

    def ok_object(self) -> bool:
        if isinstance(self.raw, Mapping):
            return True
        self.errors.append(f"{self.path}: expected an object, got {kind(self.raw)}")
        return False

    def error(self, key: str, message: str) -> None:
        self.errors.append(f"{self.path}.{key}: {message}")

    def text(
        self,
        key: str,
        *,
        required: bool = False,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
    ) -> str:
        value = self.raw.get(key)
        if value is None:
            if required:
                self.error(key, "required")
            return ""
        if not isinstance(value, str) or (required and not value.strip()):
            self.error(key, f"expected a non-empty string, got {shown_value(value)}")
            return ""
        if pattern is not None and value and not pattern.fullmatch(value):
            self.error(key, f"expected {what}, got {shown(value)}")
            return ""
        return value

    def integer(
        self,
        key: str,
        *,
        default: int | None = None,
        required: bool = False,
        minimum: int = 0,
        maximum: int,
    ) -> int | None:
        def whole(value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"expected a whole number, got {shown_value(value)}")
            if not minimum <= value <= maximum:
                raise ValueError(f"must be from {minimum} to {maximum}, got {shown_value(value)}")
            return value

        return self.parsed(key, whole, required=required, default=default)

    def number(self, key: str) -> float | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e12:
            self.error(key, f"expected a non-negative number, got {shown_value(value)}")
            return None
        return float(value)

    def boolean(self, key: str) -> bool:
        value = self.raw.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.error(key, f"expected true or false, got {shown_value(value)}")
            return False
        return value

    def quantity(
        self, key: str, parse: Callable[[Any], int], *, required: bool = False, default: int | None = None
    ) -> int | None:
        def as_written(value: Any) -> int:
            # A YAML date is no quantity: the parser refuses it as the text it was written as.
            return parse(str(value) if isinstance(value, date) else value)

        return self.parsed(key, as_written, required=required, default=default)

    def time(self, key: str, *, required: bool = False) -> datetime | None:
        return self.parsed(key, parse_time, required=required)

    def parsed(
        self,
        key: str,
        parse: Callable[[Any], _Value],
        *,
        required: bool = False,
        default: _Value | None = None,
    ) -> _Value | None:
        """The field read by `parse`, whose ValueError says what is wrong with it."""
        value = self.raw.get(key)
        if value is None:
            if required:
                self.error(key, "required")
            return default
        try:
            return parse(value)
        except ValueError as exc:
            self.error(key, str(exc))
            return None

    def labels(self, key: str) -> dict[str, str]:
        value = self.raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(key, f"expected an object of strings, got {type(value).__name__}")
            return {}
        labels: dict[str, str] = {}
        for name, label in value.items():
            if not isinstance(name, str):
                self.error(key, f"label names must be strings, got {kind(name)} {shown_value(name)}")
            elif not isinstance(label, str):
                # YAML reads `true` or `1` as non-strings: a label value is text, so it is quoted.
                self.error(f"{key}.{name}", f"expected a string (quote it), got {shown_value(label)}")
            else:
                labels[name] = label
        return labels

    def objects(self, key: str, parse: Callable[[Fields], _Value | None]) -> list[_Value]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(key, f"expected a list, got {kind(value)}")
            return []
        parsed: list[_Value] = []
        for index, item in enumerate(value):
            inner = Fields(item, f"{self.path}.{key}[{index}]", self.errors)
            result = parse(inner) if inner.ok_object() else None
            if result is not None:
                parsed.append(result)
        return parsed
