"""The deployment's settings, read from the CDK context (cdk.json) and checked once.

Every setting has a default in cdk.json and a line of documentation in its
``"//"`` entry. ``SquallConfig.from_context`` reports every problem at once, with
the setting's path, before any construct is built: a typo in cdk.json fails
``cdk synth`` with a sentence, not half-way through a deployment.

Plain Python, no aws_cdk import: ``python -m stacks.cluster_access`` reads the
same settings without starting jsii.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from squall.core.dashboard import Thresholds
from squall.core.settings import PolicySettings, ServingSettings
from squall.core.spec.limits import IMAGE_REF, MAX_IMAGE_LENGTH, MAX_IMAGE_NAME_LENGTH
from squall.planner.inputs import (
    AWS_REGION,
    CLUSTER_NAME,
    IAM_PRINCIPAL_ARN,
    IAM_UNIQUE_ID,
    GroupsError,
    InputError,
    read_node_groups,
    read_policy,
    read_teams,
)
from squall.planner.model import NodeGroup
from stacks import constants

CDK_JSON = constants.REPO_ROOT / "cdk.json"

# Every top-level setting Squall reads from the context. CDK's own keys (feature
# flags "@aws-cdk/...", "aws:cdk:...") and "//" (the documentation) are not settings.
SETTINGS = (
    "prefix",
    "account",
    "homeRegion",
    "regions",
    "clusters",
    "cluster",
    "clusterAccess",
    "vpc",
    "teams",
    "allowedRegistries",
    "nodeGroups",
    "capacity",
    "policy",
    "lifecycleHooks",
    "dryRun",
    "logLevel",
    "logRetentionDays",
    "alarms",
    "artifacts",
    "podIdentityAgent",
    "logAgent",
    "researcherLogAccess",
    "serving",
)
CLUSTER_ACCESS_MODES = ("accessEntry", "awsAuth")
# An EKS add-on the app installs and owns ("install"), or one the platform team
# runs already ("existing": the app leaves the cluster's add-ons alone).
ADDON_MODES = ("install", "existing")
# "streams": researchers read their team's log streams only (GetLogEvents), and list
# stream names (DescribeLogStreams); "group": also FilterLogEvents, which IAM can only
# grant on the whole log group, so every team's output becomes readable.
RESEARCHER_LOG_ACCESS = ("streams", "group")
# A team's name becomes an S3 prefix (code/<team>/, teams/<team>/) and part of IAM
# resource ARNs and policy names: no "*", "?" or "${" that IAM would read as a pattern
# or a variable, no "/" that would reach into another team's prefix.
_TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# S3 bucket names (general purpose buckets): 3-63 lower-case letters, digits, "." and "-".
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# The fields of a cluster (cdk.json ``clusters[]``, or ``cluster``).
CLUSTER_FIELDS = ("name", "region", "endpoint", "certificateAuthority", "serviceCidr", "kubernetesVersion")
# How a model service's Kubernetes Service is exposed (core/serving_manifests.py): a
# load balancer (the AWS Load Balancer Controller's NLB) or in-cluster only.
SERVICE_TYPES = ("LoadBalancer", "ClusterIP")
LOAD_BALANCER_SCHEMES = ("internal", "internet-facing")
# Tags that move: an image under them is not the image that was reviewed and tested.
_FLOATING_TAG = re.compile(r"latest([-_.].*)?", re.IGNORECASE | re.ASCII)
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
# An EKS cluster's name (CreateCluster: 1-100 characters, a letter or digit first).
# Node groups, teams and policy are read by squall/planner/inputs.py, as every other
# reader reads them; this module adds what only a deployment needs (regions, capacity).
__all__ = [
    "IAM_PRINCIPAL_ARN",
    "IAM_UNIQUE_ID",
    "ConfigError",
    "NodeGroupConfig",
    "SquallConfig",
    "TeamConfig",
]


class ConfigError(ValueError):
    """The context does not describe a deployable Squall; lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid Squall settings in the CDK context:\n  - " + "\n  - ".join(problems))


def settings_keys(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the key the functions' settings model reads it by (its alias, else its name)."""
    return {name: info.alias or name for name, info in model.model_fields.items()}


def settings_of(config: object, model: type[BaseModel]) -> dict[str, Any]:
    """The values of `config` that the functions' settings `model` reads, under its keys.

    The functions' model names the fields: one the deployment's settings lack fails
    ``cdk synth`` here rather than a function at cold start.
    """
    return {key: getattr(config, name) for name, key in settings_keys(model).items()}


# cdk.json's ``serving`` is passed to the functions as it is: its keys are ServingSettings'.
SERVING_KEYS = tuple(settings_keys(ServingSettings).values())


@dataclass(frozen=True)
class ClusterConfig:
    """One EKS cluster (an entry of cdk.json ``clusters``, or the one-cluster ``cluster``)."""

    name: str
    endpoint: str
    certificate_authority: str
    region: str
    service_cidr: str
    kubernetes_version: str


@dataclass(frozen=True)
class TeamConfig:
    """A team (cdk.json ``teams``): its namespace, who may submit for it, its GPU quota, weight and budget."""

    name: str
    namespace: str
    # IAM role or user ARNs, or unique ids. Empty: any principal allowed to send to
    # the jobs queue may submit for the team while no team names submitters, and
    # nobody once another team does (core/settings.py may_submit).
    submitters: tuple[str, ...] = ()
    gpu_quota: int | None = None
    weight: float | None = None
    # Dollars a calendar month (``budget: {monthly}``); None: no budget.
    monthly_budget: float | None = None

    @property
    def submitter_arns(self) -> tuple[str, ...]:
        return tuple(s for s in self.submitters if IAM_PRINCIPAL_ARN.match(s))

    @property
    def submitter_ids(self) -> tuple[str, ...]:
        return tuple(s for s in self.submitters if IAM_UNIQUE_ID.match(s))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroupConfig(NodeGroup):
    """A node group of cdk.json, as the planner reads it, and as written (for the functions)."""

    raw: Mapping[str, Any] = field(
        default_factory=dict
    )  # passed through to the functions (SQUALL_NODE_GROUPS)
    # The cluster its nodes join (``cluster``; the only one when the group names none).
    cluster_name: str = ""

    @property
    def gpus(self) -> int:
        return self.allocatable.gpu


@dataclass(frozen=True)
class CapacityConfig:
    """How Squall treats the GPU groups of one region."""

    region: str
    create_groups: bool
    # False: the platform team adds Squall's hooks itself; no capacity stack.
    manage_hooks: bool = True
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    root_volume_gib: int = constants.ROOT_VOLUME_GIB


@dataclass(frozen=True)
class VpcConfig:
    vpc_id: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]


@dataclass(frozen=True)
class ArtifactsConfig:
    """The artifacts bucket (code archives, team outputs) and the other buckets jobs may use."""

    # Code archives (code/<team>/<sha256>.tar.gz) expire this many days after upload.
    code_expiration_days: int = constants.CODE_EXPIRATION_DAYS
    # Overwritten or deleted objects stay recoverable this many days.
    noncurrent_version_days: int = constants.NONCURRENT_VERSION_DAYS
    versioned: bool = True
    # Buckets of your own whose teams/<team>/ prefixes each team's jobs and researchers may use.
    buckets: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServingConfig:
    """Model services (cdk.json ``serving``): the images and how their Service is exposed.

    An image left empty switches serving off: the functions then refuse serve
    requests with a sentence that names the setting.
    """

    # TensorFlow Serving, pinned; None: not configured.
    image: str | None = None
    # Squall's worker image: its fetch-model init container copies the SavedModel in.
    fetch_image: str | None = None
    service_type: str = "LoadBalancer"
    load_balancer_scheme: str = "internal"


@dataclass(frozen=True)
class AlarmConfig:
    email: str
    thresholds: Thresholds


@dataclass(frozen=True)
class SquallConfig:
    prefix: str
    account: str | None
    home_region: str
    regions: tuple[str, ...]
    # Every cluster, in configuration order (the functions' preference order).
    clusters: tuple[ClusterConfig, ...]
    cluster_access: str
    vpc: VpcConfig | None
    teams: Mapping[str, str]  # team -> Kubernetes namespace
    team_configs: Mapping[str, TeamConfig]
    allowed_registries: tuple[str, ...]
    node_groups: tuple[NodeGroupConfig, ...]
    capacity: Mapping[str, CapacityConfig]
    policy: Mapping[str, Any]  # as written in cdk.json (aliases), checked by PolicySettings
    policy_settings: PolicySettings
    launch_hook_name: str
    terminate_hook_name: str
    dry_run: bool
    log_level: str
    log_retention_days: int
    alarms: AlarmConfig
    artifacts: ArtifactsConfig = field(default_factory=ArtifactsConfig)
    pod_identity_agent: str = "existing"
    log_agent: str = "existing"
    researcher_log_access: str = "streams"
    serving: ServingConfig = field(default_factory=ServingConfig)

    @property
    def submitters(self) -> dict[str, tuple[str, ...]]:
        """Team -> the principals that may submit for it, for the teams that name any."""
        return {name: team.submitters for name, team in self.team_configs.items() if team.submitters}

    @property
    def quotas(self) -> dict[str, dict[str, int | float]]:
        """Team -> {gpuQuota, weight}, as the functions' settings hold them, for the teams that set either."""
        quotas: dict[str, dict[str, int | float]] = {}
        for name, team in self.team_configs.items():
            share = {
                key: value
                for key, value in (("gpuQuota", team.gpu_quota), ("weight", team.weight))
                if value is not None
            }
            if share:
                quotas[name] = share
        return quotas

    @property
    def budgets(self) -> dict[str, float]:
        """Team -> its monthly budget in dollars, as the functions' settings hold them, for the teams with one."""
        return {
            name: team.monthly_budget
            for name, team in self.team_configs.items()
            if team.monthly_budget is not None
        }

    @property
    def namespace_teams(self) -> dict[str, tuple[str, ...]]:
        """Namespace -> the teams whose jobs run in it (one pod identity per namespace)."""
        found: dict[str, list[str]] = {}
        for name, namespace in self.teams.items():
            found.setdefault(namespace, []).append(name)
        return {namespace: tuple(names) for namespace, names in found.items()}

    @property
    def remote_regions(self) -> tuple[str, ...]:
        """Regions whose Auto Scaling events must be forwarded to the home region."""
        return tuple(r for r in self.regions if r != self.home_region)

    def groups_in(self, region: str) -> tuple[NodeGroupConfig, ...]:
        return tuple(g for g in self.node_groups if g.region == region)

    @property
    def primary_cluster(self) -> ClusterConfig | None:
        """The first cluster in the home region: its resources live in the home stacks, where a
        one-cluster deployment has always had them (so adding clusters replaces none of them)."""
        return next((c for c in self.clusters if c.region == self.home_region), None)

    @property
    def other_clusters(self) -> tuple[ClusterConfig, ...]:
        """The clusters that get a stack of their own, in their region."""
        primary = self.primary_cluster
        return tuple(c for c in self.clusters if c is not primary)

    def node_clusters(self) -> tuple[ClusterConfig, ...]:
        """The clusters that nodes of the groups Squall creates join."""
        names = {g.cluster_name for g in self.node_groups if self.capacity[g.region].create_groups}
        return tuple(c for c in self.clusters if c.name in names)

    @property
    def group_regions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.region for g in self.node_groups))

    @property
    def capacity_regions(self) -> tuple[str, ...]:
        """Regions that get a capacity stack (groups, or hooks on existing ones)."""
        return tuple(r for r in self.group_regions if self.capacity[r].manage_hooks)

    @property
    def creates_groups(self) -> bool:
        return any(c.create_groups for c in self.capacity.values())

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> SquallConfig:
        return _Reader(context).read()


def load_cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The ``context`` object of cdk.json: the defaults every setting starts from."""
    context = json.loads(path.read_text())["context"]
    if not isinstance(context, dict):
        raise ConfigError([f"{path.name}: 'context' must be an object"])
    return context


def setting_keys(context: Mapping[str, Any]) -> list[str]:
    """Keys of the context that are Squall's (not CDK's own, not documentation)."""
    return [k for k in context if not (k.startswith(("@", "//")) or ":" in k)]


class _Reader:
    """Reads the context, collecting problems instead of stopping at the first."""

    def __init__(self, context: Mapping[str, Any]) -> None:
        self.ctx = context
        self.problems: list[str] = []
        # Cluster name -> where it is configured ("cluster", "clusters[1]"), for problems.
        self.cluster_paths: dict[str, str] = {}

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    # -- typed getters ---------------------------------------------------------

    def get(
        self,
        path: str,
        kind: type | tuple[type, ...],
        default: Any = None,
        *,
        source: Mapping[str, Any] | None = None,
    ) -> Any:
        data = self.ctx if source is None else source
        key = path.rsplit(".", 1)[-1]
        value = data.get(key, default)
        if value is None:
            return default
        # bool is an int in Python; a count written as `true` is a mistake.
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            self.problem(path, f"expected {_kind_name(kind)}, got {json.dumps(value)}")
            return default
        return value

    def strings(self, path: str, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.problem(path, "expected a list of non-empty strings")
            return ()
        return tuple(value)

    def ids(self, path: str, value: Any, kind: str) -> tuple[str, ...]:
        """AWS resource ids such as subnet-0123456789abcdef0 (8 or 17 hex digits)."""
        ids = self.strings(path, value)
        pattern = re.compile(rf"^{kind}-([0-9a-f]{{8}}|[0-9a-f]{{17}})$")
        for i, value_id in enumerate(ids):
            if not pattern.fullmatch(value_id):
                self.problem(f"{path}[{i}]", f"{json.dumps(value_id)} is not a {kind} id")
        return ids

    def region(self, path: str, value: Any) -> str:
        if not isinstance(value, str) or not AWS_REGION.fullmatch(value):
            self.problem(path, f"{json.dumps(value)} is not an AWS region name")
            return ""
        return value

    # -- sections --------------------------------------------------------------

    def read(self) -> SquallConfig:
        unknown = sorted(set(setting_keys(self.ctx)) - set(SETTINGS))
        for key in unknown:
            self.problem(key, f"unknown setting (known: {', '.join(SETTINGS)})")
        prefix = self.get("prefix", str, "squall")
        if not _NAME.fullmatch(prefix):
            self.problem("prefix", "lower-case letters, digits and dashes, at most 31 characters")
        home_region = self.region("homeRegion", self.ctx.get("homeRegion"))
        regions = tuple(self.region(f"regions[{i}]", r) for i, r in enumerate(self.get("regions", list, [])))
        if home_region and home_region not in regions:
            regions = (home_region, *regions)
        clusters = self.clusters(home_region, regions)
        cluster_access = self.choice("clusterAccess", CLUSTER_ACCESS_MODES, "accessEntry")
        team_configs = self.teams()
        node_groups = self.node_groups(regions, clusters)
        capacity = self.capacity(clusters)
        policy = self.get("policy", dict, {})
        try:
            policy_settings = PolicySettings.model_validate(read_policy(policy))
        except InputError as exc:
            self.problems.extend(exc.errors)
            policy_settings = PolicySettings()
        hooks = self.get("lifecycleHooks", dict, {})
        launch_hook = self.get("lifecycleHooks.launch", str, "squall-launch", source=hooks)
        terminate_hook = self.get("lifecycleHooks.terminate", str, "squall-terminate", source=hooks)
        if launch_hook == terminate_hook:
            self.problem("lifecycleHooks", "launch and terminate hooks need different names")
        log_level = self.get("logLevel", str, "INFO").upper()
        if log_level not in LOG_LEVELS:
            self.problem("logLevel", f"one of {', '.join(LOG_LEVELS)}")
        account = self.get("account", str, "") or None
        if account is not None and not re.fullmatch(r"[0-9]{12}", account):
            self.problem("account", "a 12-digit AWS account id, or empty to use the CLI's")
        allowed_registries = self.strings("allowedRegistries", self.ctx.get("allowedRegistries"))
        config = SquallConfig(
            prefix=prefix,
            account=account,
            home_region=home_region,
            regions=regions,
            clusters=tuple(clusters.values()),
            cluster_access=cluster_access,
            vpc=self.vpc(),
            teams={name: team.namespace for name, team in team_configs.items()},
            team_configs=team_configs,
            allowed_registries=allowed_registries,
            node_groups=node_groups,
            capacity=capacity,
            policy=dict(policy),
            policy_settings=policy_settings,
            launch_hook_name=launch_hook,
            terminate_hook_name=terminate_hook,
            dry_run=self.get("dryRun", bool, False),
            log_level=log_level,
            log_retention_days=self.get("logRetentionDays", int, constants.LOG_RETENTION_DAYS),
            alarms=self.alarms(),
            artifacts=self.artifacts(policy_settings),
            pod_identity_agent=self.choice("podIdentityAgent", ADDON_MODES, "existing"),
            log_agent=self.choice("logAgent", ADDON_MODES, "existing"),
            researcher_log_access=self.choice("researcherLogAccess", RESEARCHER_LOG_ACCESS, "streams"),
            serving=self.serving(allowed_registries),
        )
        if self.problems:
            raise ConfigError(self.problems)
        return config

    def teams(self) -> dict[str, TeamConfig]:
        """``teams``: name -> a namespace, or {namespace, submitters, gpuQuota, weight, budget}."""
        raw_all = self.get("teams", dict, {})
        if not raw_all:
            self.problem("teams", "expected an object of team name -> Kubernetes namespace or team object")
        try:
            teams = read_teams(raw_all)
        except InputError as exc:
            self.problems.extend(exc.errors)
            return {}
        for name in teams:
            if not _TEAM_NAME.fullmatch(name):
                self.problem(
                    f"teams.{name}",
                    "a team name is an S3 prefix and part of IAM names: 1-63 letters, digits, "
                    "'.', '_' or '-', starting with a letter or digit",
                )
        if len(teams) > constants.MAX_TEAMS:
            self.problem(
                "teams",
                f"{len(teams)} teams; at most {constants.MAX_TEAMS} (each team's role, pod identity "
                "association and researcher policy must fit one CloudFormation stack)",
            )
        return {
            name: TeamConfig(
                name=name,
                namespace=team.namespace,
                submitters=team.submitters or (),
                gpu_quota=team.gpu_quota,
                weight=team.weight,
                monthly_budget=team.monthly_budget,
            )
            for name, team in teams.items()
        }

    def choice(
        self, path: str, allowed: tuple[str, ...], default: str, *, source: Mapping[str, Any] | None = None
    ) -> str:
        value = self.get(path, str, default, source=source)
        if value not in allowed:
            self.problem(path, f"one of {', '.join(allowed)}, got {json.dumps(value)}")
            return default
        return str(value)

    def artifacts(self, policy: PolicySettings) -> ArtifactsConfig:
        raw = self.get("artifacts", dict, {})
        defaults = ArtifactsConfig()
        config = ArtifactsConfig(
            code_expiration_days=self.get(
                "artifacts.codeExpirationDays", int, defaults.code_expiration_days, source=raw
            ),
            noncurrent_version_days=self.get(
                "artifacts.noncurrentVersionDays", int, defaults.noncurrent_version_days, source=raw
            ),
            versioned=self.get("artifacts.versioned", bool, defaults.versioned, source=raw),
            buckets=self.strings("artifacts.buckets", raw.get("buckets")),
        )
        for key in sorted(set(raw) - {"codeExpirationDays", "noncurrentVersionDays", "versioned", "buckets"}):
            self.problem(
                f"artifacts.{key}",
                "unknown field (allowed: codeExpirationDays, noncurrentVersionDays, versioned, buckets)",
            )
        # A job may run for maxRuntimeLimit; its code must not expire under it.
        longest_days = -(-int(policy.max_runtime_limit.total_seconds()) // 86400)
        if config.code_expiration_days <= longest_days:
            self.problem(
                "artifacts.codeExpirationDays",
                f"must be more than policy.maxRuntimeLimit ({longest_days} days), so that no running "
                f"job's code expires; got {config.code_expiration_days}",
            )
        if config.noncurrent_version_days < 1:
            self.problem(
                "artifacts.noncurrentVersionDays", f"at least 1, got {config.noncurrent_version_days}"
            )
        for i, bucket in enumerate(config.buckets):
            if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
                self.problem(
                    f"artifacts.buckets[{i}]",
                    f"{json.dumps(bucket)} is not an S3 bucket name (a name, not an ARN or s3:// URI)",
                )
        if len(set(config.buckets)) != len(config.buckets):
            self.problem("artifacts.buckets", "a bucket is named twice")
        return config

    def serving(self, registries: tuple[str, ...]) -> ServingConfig:
        """``serving``: {image, fetchImage, serviceType, loadBalancerScheme}."""
        raw = self.get("serving", dict, {})
        for key in sorted(set(raw) - set(SERVING_KEYS)):
            self.problem(f"serving.{key}", f"unknown field (allowed: {', '.join(SERVING_KEYS)})")
        defaults = ServingConfig()
        return ServingConfig(
            image=self.image("serving.image", raw.get("image"), registries),
            fetch_image=self.image("serving.fetchImage", raw.get("fetchImage"), registries),
            service_type=self.choice("serving.serviceType", SERVICE_TYPES, defaults.service_type, source=raw),
            load_balancer_scheme=self.choice(
                "serving.loadBalancerScheme", LOAD_BALANCER_SCHEMES, defaults.load_balancer_scheme, source=raw
            ),
        )

    def image(self, path: str, value: Any, registries: tuple[str, ...]) -> str | None:
        """A container image the cluster will pull: from an allowed registry, pinned by tag or digest."""
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.problem(path, f"expected an image reference (a string) or null, got {json.dumps(value)}")
            return None
        match = IMAGE_REF.fullmatch(value) if len(value) <= MAX_IMAGE_LENGTH else None
        if match is None or len(match["name"]) > MAX_IMAGE_NAME_LENGTH:
            self.problem(
                path,
                f"{json.dumps(value[:120])} is not a container image reference, "
                "registry/repository:tag or registry/repository@sha256:<digest>",
            )
            return None
        # The same rule as a job's image (core/spec/model.py): the repository lies under
        # an allowed registry path, not merely a name that starts with its text.
        if not any(match["name"].startswith(r.rstrip("/") + "/") for r in registries):
            allowed = ", ".join(registries) or "(none configured)"
            self.problem(path, f"{json.dumps(value)} must come from one of allowedRegistries: {allowed}")
            return None
        tag, digest = match["tag"], match["digest"]
        if digest is None and (tag is None or _FLOATING_TAG.fullmatch(tag)):
            self.problem(
                path,
                f"{json.dumps(value)} must be pinned: an exact version tag (such as :2.21.0) or a digest "
                "(@sha256:...), never latest or no tag, so every node runs the image you tested",
            )
            return None
        return value

    def clusters(self, home_region: str, regions: tuple[str, ...]) -> dict[str, ClusterConfig]:
        """``clusters`` (a list), or the one-cluster form ``cluster``, read as a list of one."""
        listed, single = self.ctx.get("clusters"), self.ctx.get("cluster")
        if listed is not None and single is not None:
            self.problem("cluster", "give either clusters (a list) or cluster (one cluster), not both")
        entries: list[tuple[str, Any]]
        if listed is None:
            entries = [("cluster", self.get("cluster", dict, {}))]
        elif not isinstance(listed, list) or not listed:
            self.problem("clusters", "expected a list of at least one cluster {name, region, endpoint, ...}")
            entries = []
        else:
            entries = [(f"clusters[{i}]", raw) for i, raw in enumerate(listed)]
        clusters: dict[str, ClusterConfig] = {}
        for path, raw in entries:
            if not isinstance(raw, dict):
                self.problem(path, f"expected an object, got {json.dumps(raw)[:100]}")
                continue
            cluster = self.cluster(path, raw, home_region, regions)
            if cluster.name in clusters:
                self.problem(f"{path}.name", f"{cluster.name} is configured twice")
                continue
            clusters[cluster.name] = cluster
            self.cluster_paths[cluster.name] = path
        return clusters

    def cluster(
        self, path: str, raw: Mapping[str, Any], home_region: str, regions: tuple[str, ...]
    ) -> ClusterConfig:
        for key in sorted(set(raw) - set(CLUSTER_FIELDS)):
            self.problem(f"{path}.{key}", f"unknown field (allowed: {', '.join(CLUSTER_FIELDS)})")
        cluster = ClusterConfig(
            name=self.get(f"{path}.name", str, "", source=raw),
            endpoint=self.get(f"{path}.endpoint", str, "", source=raw),
            certificate_authority=self.get(f"{path}.certificateAuthority", str, "", source=raw),
            region=self.get(f"{path}.region", str, home_region, source=raw),
            service_cidr=self.get(f"{path}.serviceCidr", str, "10.100.0.0/16", source=raw),
            kubernetes_version=self.get(f"{path}.kubernetesVersion", str, "1.31", source=raw),
        )
        if not cluster.name:
            self.problem(f"{path}.name", "the EKS cluster's name is required")
        elif not CLUSTER_NAME.fullmatch(cluster.name):
            self.problem(
                f"{path}.name",
                f"{json.dumps(cluster.name)[:120]} is not an EKS cluster name (1-100 letters, digits, '-' or '_')",
            )
        if not cluster.endpoint.startswith("https://"):
            self.problem(f"{path}.endpoint", "the cluster's API endpoint, https://...")
        # A cluster's access entries, Pod Identity associations and add-ons are resources
        # of its region: the app deploys there, as it does to every region of `regions`.
        if self.region(f"{path}.region", cluster.region) and regions and cluster.region not in regions:
            self.problem(f"{path}.region", f"{cluster.region} is not one of regions")
        if not re.fullmatch(r"[0-9]+\.[0-9]+", cluster.kubernetes_version):
            self.problem(f"{path}.kubernetesVersion", "a minor version such as 1.31")
        return cluster

    def node_groups(
        self, regions: tuple[str, ...], clusters: Mapping[str, ClusterConfig]
    ) -> tuple[NodeGroupConfig, ...]:
        raw_groups = self.get("nodeGroups", list, [])
        if not raw_groups:
            self.problem("nodeGroups", "at least one node group is required")
        # What only a deployment needs of a group: a region it deploys to, the name
        # of the Auto Scaling group its hooks attach to, and the cluster its nodes join.
        for i, raw in enumerate(raw_groups):
            if not isinstance(raw, dict):
                continue
            region = raw.get("region")
            if isinstance(region, str) and AWS_REGION.fullmatch(region) and region not in regions:
                self.problem(f"nodeGroups[{i}].region", f"{region} is not one of regions")
            if raw.get("asgName") is None:
                self.problem(f"nodeGroups[{i}].asgName", "the Auto Scaling group's name is required")
            self.group_cluster(f"nodeGroups[{i}].cluster", raw, clusters)
        try:
            groups, _ = read_node_groups(raw_groups)
        except GroupsError as exc:
            self.problems.extend(exc.errors)
            return ()
        names = [f.name for f in fields(NodeGroup)]
        return tuple(
            NodeGroupConfig(
                **{name: getattr(group, name) for name in names},
                raw=dict(raw),
                cluster_name=self.group_cluster(None, raw, clusters),
            )
            for group, raw in zip(groups, raw_groups, strict=True)
        )

    def group_cluster(
        self, path: str | None, raw: Mapping[str, Any], clusters: Mapping[str, ClusterConfig]
    ) -> str:
        """The cluster a group names, or the only one; reports a problem at `path` (when given)."""
        named = raw.get("cluster")
        configured = ", ".join(clusters)
        if named is None:
            if len(clusters) > 1 and path is not None:
                self.problem(path, f"required when more than one cluster is configured (one of {configured})")
            return next(iter(clusters), "") if len(clusters) == 1 else ""
        if not isinstance(named, str) or named not in clusters:
            if path is not None:
                self.problem(
                    path, f"{json.dumps(named)[:120]} is not a configured cluster (one of {configured})"
                )
            return ""
        return named

    @staticmethod
    def group_regions(raw_groups: Any) -> list[str]:
        """The regions the groups name, as written (the groups may hold mistakes elsewhere)."""
        found = (
            [g.get("region") for g in raw_groups if isinstance(g, dict)]
            if isinstance(raw_groups, list)
            else []
        )
        return list(dict.fromkeys(r for r in found if isinstance(r, str) and AWS_REGION.fullmatch(r)))

    def capacity(self, clusters: Mapping[str, ClusterConfig]) -> dict[str, CapacityConfig]:
        raw_all = self.get("capacity", dict, {})
        group_regions = self.group_regions(self.ctx.get("nodeGroups"))
        for region in raw_all:
            if region not in group_regions:
                self.problem(f"capacity.{region}", "no node group is in this region")
        capacity: dict[str, CapacityConfig] = {}
        for region in group_regions:
            path = f"capacity.{region}"
            raw = raw_all.get(region) or {}
            if not isinstance(raw, dict):
                self.problem(path, "expected an object")
                raw = {}
            create = self.get(f"{path}.createGroups", bool, False, source=raw)
            item = CapacityConfig(
                region=region,
                create_groups=create,
                manage_hooks=self.get(f"{path}.manageHooks", bool, True, source=raw),
                subnet_ids=self.ids(f"{path}.subnetIds", raw.get("subnetIds"), "subnet"),
                security_group_ids=self.ids(f"{path}.securityGroupIds", raw.get("securityGroupIds"), "sg"),
                root_volume_gib=self.get(f"{path}.rootVolumeGiB", int, constants.ROOT_VOLUME_GIB, source=raw),
            )
            if create and not item.manage_hooks:
                self.problem(f"{path}.manageHooks", "groups Squall creates always carry its hooks")
            if create:
                if not item.subnet_ids:
                    self.problem(f"{path}.subnetIds", "required to create groups in this region")
                if not item.security_group_ids:
                    self.problem(
                        f"{path}.securityGroupIds",
                        "required to create groups (the cluster's node security group)",
                    )
                for name in self.created_clusters(region, clusters):
                    if not clusters[name].certificate_authority:
                        self.problem(
                            f"{self.cluster_paths[name]}.certificateAuthority",
                            f"required for the nodes of the groups created in {region}",
                        )
            capacity[region] = item
        return capacity

    def created_clusters(self, region: str, clusters: Mapping[str, ClusterConfig]) -> list[str]:
        """The clusters that the groups of `region` join, as written (the groups may hold mistakes)."""
        raw_groups = self.ctx.get("nodeGroups")
        found = [
            self.group_cluster(None, raw, clusters)
            for raw in (raw_groups if isinstance(raw_groups, list) else [])
            if isinstance(raw, dict) and raw.get("region") == region
        ]
        return list(dict.fromkeys(name for name in found if name))

    def vpc(self) -> VpcConfig | None:
        raw = self.get("vpc", dict, None)
        if not raw:
            return None
        vpc = VpcConfig(
            vpc_id=self.get("vpc.vpcId", str, "", source=raw),
            subnet_ids=self.ids("vpc.subnetIds", raw.get("subnetIds"), "subnet"),
            security_group_ids=self.ids("vpc.securityGroupIds", raw.get("securityGroupIds"), "sg"),
        )
        self.ids("vpc.vpcId", [vpc.vpc_id], "vpc")
        if not vpc.subnet_ids:
            self.problem("vpc.subnetIds", "private subnets that route to the cluster endpoint")
        return vpc

    def alarms(self) -> AlarmConfig:
        raw = self.get("alarms", dict, {})
        defaults = Thresholds()
        thresholds = Thresholds(
            oldest_queued_job_seconds=self.get(
                "alarms.oldestQueuedJobSeconds", int, defaults.oldest_queued_job_seconds, source=raw
            ),
            fallbacks=self.get("alarms.fallbacks", int, defaults.fallbacks, source=raw),
            fallback_window_minutes=self.get(
                "alarms.fallbackWindowMinutes", int, defaults.fallback_window_minutes, source=raw
            ),
            scale_errors_minutes=self.get(
                "alarms.scaleErrorMinutes", int, defaults.scale_errors_minutes, source=raw
            ),
            drains_past_deadline=self.get(
                "alarms.drainsPastDeadline", int, defaults.drains_past_deadline, source=raw
            ),
        )
        if not 1 <= thresholds.scale_errors_minutes <= 5:
            self.problem("alarms.scaleErrorMinutes", "between 1 and 5")
        return AlarmConfig(email=self.get("alarms.email", str, "", source=raw), thresholds=thresholds)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "a whole number", bool: "true or false", list: "a list", dict: "an object"}
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))
