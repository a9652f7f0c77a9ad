"""Settings of the functions, read once per process: a JSON file, then the environment.

The CDK stack writes each function's settings (node groups, policy, teams and
their submitters, the cluster) into a JSON file in the Lambda asset, named by
``SQUALL_SETTINGS_FILE`` (relative to the asset's root), because Lambda's 4 KB
environment cannot hold a real configuration. The environment carries what is
only known at deploy time (``SQUALL_TABLE_NAME``, ``SQUALL_DRAIN_QUEUE_URL``)
and may override any file value (``SQUALL_<FIELD>``, JSON for complex values).
``runtime.py`` reads them at cold start, so a misconfigured function fails on
its first invocation with a message naming the variable or the file, instead of
half-way through a batch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from squall.core.spec import JobSpec
from squall.planner.admission import TeamShare
from squall.planner.inputs import (
    POLICY_DEFAULTS,
    PREEMPTION_DEFAULTS,
    InputError,
    parse_duration,
    planner_policy,
    read_budgets,
    read_policy,
    read_team_shares,
)
from squall.planner.model import Policy
from squall.planner.preemption import PreemptionPolicy

SETTINGS_FILE_VARIABLE = "SQUALL_SETTINGS_FILE"
# The asset's root in Lambda; elsewhere the directory that holds the squall package.
_ASSET_ROOT = Path(__file__).resolve().parents[1]


class ClusterSettings(BaseModel):
    """How the functions reach one Kubernetes cluster's API (one entry of ``clusters``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    endpoint: str = ""
    certificate_authority: str = ""  # base64 PEM, as EKS DescribeCluster returns it
    region: str = ""


# A duration in any form Squall reads one (planner/inputs.py parse_duration), for pydantic models.
Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
_DEFAULTS = POLICY_DEFAULTS


def _read_quotas(value: Any) -> dict[str, TeamShare]:
    try:
        return read_team_shares(value)
    except InputError as exc:
        raise ValueError("; ".join(exc.errors)) from None


# team -> its share in admission, read by planner/inputs.py read_team_shares: the settings
# file holds {team: {gpuQuota, weight}} as cdk.json writes them; TeamShare values pass as they are.
TeamShares = Annotated[dict[str, TeamShare], BeforeValidator(_read_quotas)]


def _read_budgets(value: Any) -> dict[str, float]:
    try:
        return read_budgets(value)
    except InputError as exc:
        raise ValueError("; ".join(exc.errors)) from None


# team -> dollars it may spend a calendar month, read by planner/inputs.py read_budgets.
TeamBudgets = Annotated[dict[str, float], BeforeValidator(_read_budgets)]


class PreemptionSettings(BaseModel):
    """Policy ``preemption`` (cdk.json's {enabled, minPriorityGap, graceSeconds}), read by
    planner/inputs.py read_policy: whether a job that cannot be admitted may take room from
    running jobs at least `min_priority_gap` below it, giving them `grace` to checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = PREEMPTION_DEFAULTS["enabled"]
    min_priority_gap: int = PREEMPTION_DEFAULTS["min_priority_gap"]
    grace: timedelta = PREEMPTION_DEFAULTS["grace"]

    def planner_policy(self) -> PreemptionPolicy:
        """What planner/preemption.py and the Preempter read."""
        return PreemptionPolicy(
            enabled=self.enabled, min_priority_gap=self.min_priority_gap, grace=self.grace
        )


class PolicySettings(BaseModel):
    """Planner and drain policy (cdk.json context ``policy``), read by planner/inputs.py read_policy.

    The rules and defaults live there, once: this model only holds the values for the
    functions' settings. ``planner_policy()`` is the planner's part of it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    provision_timeout: timedelta = _DEFAULTS["provision_timeout"]
    idle_threshold: timedelta = _DEFAULTS["idle_threshold"]
    boot_grace: timedelta = _DEFAULTS["boot_grace"]
    max_scale_down_fraction: float = _DEFAULTS["max_scale_down_fraction"]
    backoff_base: timedelta = _DEFAULTS["backoff_base"]
    backoff_max: timedelta = _DEFAULTS["backoff_max"]
    failure_window: timedelta = _DEFAULTS["failure_window"]
    drain_deadline: timedelta = _DEFAULTS["drain_deadline"]
    drain_step_delay: timedelta = _DEFAULTS["drain_step_delay"]
    job_ttl_after_finished: timedelta = _DEFAULTS["job_ttl_after_finished"]
    scale_check_debounce: timedelta = _DEFAULTS["scale_check_debounce"]
    max_runtime_limit: timedelta = _DEFAULTS["max_runtime_limit"]
    backfill: bool = _DEFAULTS["backfill"]
    aged_after: timedelta = _DEFAULTS["aged_after"]
    preemption: PreemptionSettings = Field(default_factory=PreemptionSettings)

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        if isinstance(data, PolicySettings):
            return data
        if isinstance(data, Mapping) and isinstance(data.get("preemption"), PreemptionSettings):
            data = {**data, "preemption": dict(data["preemption"])}
        try:
            return read_policy(data)
        except InputError as exc:
            raise ValueError("; ".join(exc.errors)) from None

    def planner_policy(self) -> Policy:
        return planner_policy(dict(self))


class ServingSettings(BaseModel):
    """Model services (cdk.json ``serving``, camelCase as the stack writes it).

    Serve requests are refused while either image is unset; `Settings` checks both
    against ``allowed_registries`` as a job's image is checked.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    # TensorFlow Serving, pinned by tag or digest.
    image: str | None = None
    # Squall's worker image: its fetch-model init container copies the SavedModel in.
    fetch_image: str | None = None
    service_type: Literal["LoadBalancer", "ClusterIP"] = "LoadBalancer"
    # The AWS Load Balancer Controller's scheme for the LoadBalancer Service.
    load_balancer_scheme: Literal["internal", "internet-facing"] = "internal"

    @field_validator("image", "fetch_image", mode="before")
    @classmethod
    def _unset(cls, value: Any) -> Any:
        return None if value == "" else value  # cdk.json's "" means not configured

    @property
    def not_configured(self) -> str | None:
        """Why serve requests are refused now, or None when serving is configured."""
        if self.image is None or self.fetch_image is None:
            return "serving is not configured: set serving.image and serving.fetchImage"
        return None


def image_problem(image: str, *, registries: list[str]) -> str | None:
    """Why `image` may not run in the cluster, by the job spec's own rule; None when it may."""
    try:
        JobSpec.model_validate(
            {"name": "image", "team": "-", "image": image}, context={"registries": registries}
        )
    except ValidationError as exc:
        problems = [e["msg"].removeprefix("Value error, ") for e in exc.errors() if e["loc"] == ("image",)]
        return problems[0] if problems else None
    return None


# ---- who may submit for a team ----------------------------------------------------------------
# Once one team names its submitters, the jobs queue lets only the named principals send
# (stacks/queues.py), and a message's body names its team: a team that named nobody, if
# it were open, would take specs, cancels and serve requests from every other team's
# submitters and run them in its namespace with its role. So a team is open only while
# no team names submitters; after that it takes its own submitters and nobody else, and a
# team that names none takes nobody. The submit function (deployed and local) and the
# scenario reader decide by this one rule; the jobs queue's policy denies every sender
# that no team names, which agrees with it.


def may_submit(submitters: Mapping[str, Collection[str]], *, team: str, principal: str | None) -> bool:
    """Whether a principal (its unique id) may submit, cancel, serve or unserve for a team.

    `submitters` maps the teams that name submitters to them. Empty: yes, whoever the
    jobs queue lets send. Otherwise only a submitter the team names.
    """
    if not submitters:
        return True
    return principal is not None and principal in submitters.get(team, ())


def names_no_submitters(submitters: Mapping[str, Collection[str]], *, team: str) -> bool:
    """Whether a team is closed because it names no submitters while another team names some."""
    return bool(submitters) and team not in submitters


class SettingsFileError(ValueError):
    """The settings file named by SQUALL_SETTINGS_FILE is missing or not a settings object."""


def settings_file_path(value: str) -> Path:
    """Where a SQUALL_SETTINGS_FILE value points: relative paths start at the asset's root."""
    path = Path(value)
    if path.is_absolute():
        return path
    return Path(os.environ.get("LAMBDA_TASK_ROOT") or _ASSET_ROOT) / path


class _SettingsFile(PydanticBaseSettingsSource):
    """The JSON object in the file SQUALL_SETTINGS_FILE names (nothing when it is unset)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        value = os.environ.get(SETTINGS_FILE_VARIABLE, "")
        if not value:
            return {}
        path = settings_file_path(value)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise SettingsFileError(
                f"{SETTINGS_FILE_VARIABLE}={value}: cannot read {path}: {exc.strerror}"
            ) from exc
        except (UnicodeDecodeError, ValueError) as exc:
            raise SettingsFileError(f"{SETTINGS_FILE_VARIABLE}={value}: {path} is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise SettingsFileError(f"{SETTINGS_FILE_VARIABLE}={value}: {path} must hold a JSON object")
        unknown = sorted(set(data) - set(self.settings_cls.model_fields))
        if unknown:
            raise SettingsFileError(
                f"{SETTINGS_FILE_VARIABLE}={value}: unknown settings {', '.join(unknown)} "
                f"(known: {', '.join(self.settings_cls.model_fields)})"
            )
        # A variable replaces the file's value whole, never merged into it.
        overridden = {name.upper() for name in os.environ}
        return {key: item for key, item in data.items() if f"SQUALL_{key.upper()}" not in overridden}


class Settings(BaseSettings):
    """Settings of every Squall function: the settings file, overridden by ``SQUALL_*`` variables."""

    model_config = SettingsConfigDict(env_prefix="SQUALL_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win: what is passed in, then the environment, then the file.
        return init_settings, env_settings, _SettingsFile(settings_cls), dotenv_settings, file_secret_settings

    table_name: str
    jobs_queue_url: str = ""
    drain_queue_url: str = ""
    event_bus_name: str = "default"
    # team -> Kubernetes namespace
    teams: dict[str, str] = Field(default_factory=lambda: {"research": "team-research"})
    # team -> the IAM principals that may submit for it: role or user ARNs, which
    # runtime.py resolves to unique ids at cold start, or unique ids (AROA..., AIDA...).
    # Empty: every team takes jobs from any sender the queue lets in; otherwise a team
    # not listed here takes nobody's (may_submit).
    submitters: dict[str, list[str]] = Field(default_factory=dict)
    # team -> its GPU quota (None: no limit) and weight in the scale check's admission
    # ({gpuQuota, weight}, as in cdk.json). A team not listed has no quota and weight 1.
    quotas: TeamShares = Field(default_factory=dict)
    # team -> dollars it may spend a calendar month (UTC): admission holds its jobs past it
    # (cdk.json's team `budget: {monthly}`). A team not listed has no budget.
    budgets: TeamBudgets = Field(default_factory=dict)
    allowed_registries: list[str] = Field(default_factory=list)
    regions: list[str] = Field(default_factory=list)
    node_groups: list[dict[str, Any]] = Field(default_factory=list)
    # Set for functions whose Kubernetes role may read Jobs and Pods in these
    # namespaces only (the team namespaces): their lists go namespace by namespace.
    namespaces: list[str] = Field(default_factory=list)
    # The function's role reads Pods across the cluster (the scale function's: any pod on
    # a node counts for its use), so only its Job lists go namespace by namespace.
    cluster_wide_pods: bool = False
    policy: PolicySettings = Field(default_factory=PolicySettings)
    # Every cluster Squall admits jobs to, in preference order (cdk.json `clusters`); the old
    # single `cluster` key is read as a list of one. Node groups name theirs (`cluster`).
    clusters: list[ClusterSettings] = Field(default_factory=list)
    cluster: ClusterSettings | None = None
    serving: ServingSettings = Field(default_factory=ServingSettings)
    dry_run: bool = False
    # Squall's own lifecycle hooks (names) on the groups it manages
    launch_hook_name: str = "squall-launch"
    terminate_hook_name: str = "squall-terminate"

    @model_validator(mode="after")
    def _one_cluster_list(self) -> Settings:
        """`cluster` (the one-cluster form) becomes `clusters`; groups are checked against them."""
        if self.cluster is not None:
            if self.clusters:
                raise ValueError("give either clusters (a list) or cluster (one), not both")
            self.clusters = [self.cluster]
            self.cluster = None
        if not self.clusters:
            self.clusters = [ClusterSettings()]
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"clusters: names must differ, got {', '.join(map(repr, names))}")
        for index, group in enumerate(self.node_groups):
            named = group.get("cluster") if isinstance(group, Mapping) else None
            if named is None:
                if len(self.clusters) > 1:
                    raise ValueError(
                        f"nodeGroups[{index}].cluster: required when more than one cluster is configured "
                        f"(one of {', '.join(names)})"
                    )
                continue
            if named not in names:
                raise ValueError(
                    f"nodeGroups[{index}].cluster: {str(named)[:100]!r} is not a configured cluster "
                    f"(one of {', '.join(map(repr, names))})"
                )
        return self

    @property
    def cluster_names(self) -> list[str]:
        """The configured clusters' names, in preference order."""
        return [c.name for c in self.clusters]

    def group_cluster(self, group: Mapping[str, Any]) -> str:
        """The cluster a configured node group belongs to (the only one when it names none)."""
        named = group.get("cluster")
        return str(named) if named is not None else self.clusters[0].name

    @model_validator(mode="after")
    def _serving_images(self) -> Settings:
        for key, image in (("image", self.serving.image), ("fetchImage", self.serving.fetch_image)):
            if image is None:
                continue
            problem = image_problem(image, registries=self.allowed_registries)
            if problem is not None:
                raise ValueError(f"serving.{key} {image[:200]!r}: {problem}")
        return self

    def team_shares(self) -> dict[str, TeamShare]:
        """Every team's share in admission (ScaleConfig.teams): a team without a quota has none, weight 1."""
        return {team: TeamShare() for team in self.teams} | dict(self.quotas)
