"""The Squall stacks. Each only composes constructs; ``build`` creates them all.

<prefix>-control-plane          home region  queues, table, functions, triggers,
                                             access to the home cluster (and the
                                             GPU node role)
<prefix>-forwarding-<region>    each other region with groups: its Auto Scaling
                                             events to the home region's bus
<prefix>-capacity-<region>      each region with groups: the GPU groups, or only
                                             the lifecycle hooks on existing ones
<prefix>-monitoring             home region  dashboard, alarms, alarm topic
<prefix>-workloads              home region  what jobs and researchers use: the
                                             artifacts bucket, one Pod Identity role
                                             per team namespace, the log agent add-on
                                             (when asked), researcher policies
<prefix>-cluster-<name>         the cluster's every other cluster: the functions' access
                region                       entries, the nodes' (when Squall creates
                                             groups that join it), Pod Identity roles
                                             and associations, the add-ons (when asked)

The home cluster is the first cluster in the home region: its access entries,
roles and add-ons stay in the control-plane and workloads stacks, where a
one-cluster deployment has always had them, so adding clusters replaces none of
its resources. Every other cluster gets the same from a stack in its own region
(access entries, associations and add-ons are regional resources of a cluster),
which names the functions' and nodes' roles by their fixed names and attaches the
workloads stack's fixed-name job policies: a stack cannot refer to a resource of
another region.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from squall.core import dashboard
from stacks import constants
from stacks.artifacts import ArtifactsBucket, TeamBuckets, bucket_arn
from stacks.capacity import GpuGroups
from stacks.cluster_access import FunctionAccessEntries, NodeIdentity, node_access_entry
from stacks.config import ClusterConfig, ConfigError, SquallConfig
from stacks.forwarding import EventForwarding
from stacks.functions import SquallFunctions
from stacks.lifecycle import HookSettings, LifecycleHooks
from stacks.log_agent import LogAgent
from stacks.monitoring import Monitoring
from stacks.pod_identity import JobIdentities, JobPolicies, job_policy_name
from stacks.queues import JobQueues, failed_events_queue
from stacks.rbac import function_role_name
from stacks.researchers import ResearcherPolicies
from stacks.table import JobTable
from stacks.triggers import Triggers

# CloudFormation's longest stack name.
MAX_STACK_NAME = 128


def environment(config: SquallConfig, region: str) -> cdk.Environment:
    account = config.account or os.environ.get("CDK_DEFAULT_ACCOUNT")
    return cdk.Environment(account=account, region=region)


class ControlPlaneStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SquallConfig,
        artifacts_bucket_arn: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        teams = config.team_configs.values()
        self.queues = JobQueues(
            self,
            "Queues",
            prefix=config.prefix,
            submitter_arns=[arn for team in teams for arn in team.submitter_arns],
            submitter_ids=[unique_id for team in teams for unique_id in team.submitter_ids],
        )
        # Where lifecycle events go that the lifecycle function failed on (its
        # on-failure destination), and Auto Scaling events the rules could not deliver.
        self.lifecycle_failures = failed_events_queue(
            self,
            "LifecycleFailures",
            queue_name=constants.lifecycle_failures_queue_name(config.prefix),
            what="lifecycle events the lifecycle function failed on",
        )
        self.event_failures = failed_events_queue(
            self,
            "EventFailures",
            queue_name=constants.event_failures_queue_name(config.prefix, config.home_region),
            what="Auto Scaling events the rules could not deliver",
        )
        self.table = JobTable(self, "Jobs", prefix=config.prefix).table
        self.functions = SquallFunctions(
            self,
            "Functions",
            config=config,
            table=self.table,
            queues=self.queues,
            lifecycle_failures=self.lifecycle_failures,
            artifacts_bucket_arn=artifacts_bucket_arn,
        )
        Triggers(
            self,
            "Triggers",
            functions=self.functions.live,
            queues=self.queues,
            group_names=[g.asg_name for g in config.node_groups],
            failed_events=self.event_failures,
            hook_timeout=hook_timeout(config),
        )
        access_entries = config.cluster_access == "accessEntry"
        home = config.primary_cluster
        if access_entries and home is not None:
            FunctionAccessEntries(self, "ClusterAccess", cluster_name=home.name, roles=self.functions.roles)
        if config.creates_groups:
            NodeIdentity(
                self,
                "GpuNodes",
                role_name=constants.node_role_name(config.prefix, config.home_region),
                cluster_name=(
                    home.name
                    if access_entries and home is not None and home in config.node_clusters()
                    else None
                ),
            )

        cdk.CfnOutput(self, "JobsQueueUrl", value=self.queues.jobs.queue_url)
        cdk.CfnOutput(self, "LifecycleFailuresQueueUrl", value=self.lifecycle_failures.queue_url)
        cdk.CfnOutput(self, "TableName", value=self.table.table_name)
        cdk.CfnOutput(
            self,
            "Clusters",
            value=json.dumps(
                [{"name": c.name, "region": c.region} for c in config.clusters], separators=(",", ":")
            ),
            description="SQUALL_CLUSTERS for the squall CLI: every cluster's name and region",
        )
        for handler, role in self.functions.roles.items():
            cdk.CfnOutput(self, f"{handler.capitalize()}RoleArn", value=role.role_arn)
        if self.functions.security_group is not None:
            cdk.CfnOutput(
                self,
                "FunctionsSecurityGroupId",
                value=self.functions.security_group.security_group_id,
                description="Allow HTTPS from this group on the cluster's security group",
            )


class ForwardingStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: SquallConfig, region: str, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        EventForwarding(
            self,
            "AutoScalingEvents",
            prefix=config.prefix,
            home_region=config.home_region,
            group_names=[g.asg_name for g in config.groups_in(region)],
            hook_timeout=hook_timeout(config),
            alarm_email=config.alarms.email,
        )


class CapacityStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: SquallConfig, region: str, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        groups = config.groups_in(region)
        hooks = HookSettings.from_config(config)
        capacity = config.capacity[region]
        if capacity.create_groups:
            GpuGroups(
                self,
                "GpuGroups",
                prefix=config.prefix,
                clusters={c.name: c for c in config.clusters},
                capacity=capacity,
                groups=groups,
                hooks=hooks,
                instance_profile_name=constants.node_role_name(config.prefix, config.home_region),
            )
        else:
            LifecycleHooks(self, "LifecycleHooks", group_names=[g.asg_name for g in groups], settings=hooks)


class MonitoringStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: SquallConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        Monitoring(
            self,
            "Monitoring",
            description=monitoring_description(config),
            topic_name=f"{config.prefix}-alarms",
            alarm_email=config.alarms.email,
            prefix=config.prefix,
            failed_event_queues=(
                constants.lifecycle_failures_queue_name(config.prefix),
                constants.event_failures_queue_name(config.prefix, config.home_region),
            ),
        )


class WorkloadsStack(cdk.Stack):
    """What the jobs and their researchers use; of it the functions read only the artifacts
    bucket's SavedModel files (the submit function, before it serves a model)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: SquallConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.artifacts = ArtifactsBucket(self, "Artifacts", settings=config.artifacts)
        buckets = TeamBuckets(
            artifacts=self.artifacts.bucket.bucket_arn,
            others=tuple(bucket_arn(name) for name in config.artifacts.buckets),
        )
        home = config.primary_cluster
        self.jobs = (
            JobIdentities(
                self,
                "JobIdentities",
                cluster=home,
                namespace_teams=config.namespace_teams,
                buckets=buckets,
                install_agent=config.pod_identity_agent == "install",
            )
            if home is not None
            else None
        )
        self.log_agent = (
            LogAgent(self, "LogAgent", cluster=home, pod_identity_agent=self.jobs.agent)
            if config.log_agent == "install" and home is not None and self.jobs is not None
            else None
        )
        # The job roles of the other clusters attach these (their stacks are elsewhere).
        self.job_policies = (
            JobPolicies(
                self,
                "JobPolicies",
                prefix=config.prefix,
                home_region=config.home_region,
                namespace_teams=config.namespace_teams,
                buckets=buckets,
            )
            if config.other_clusters
            else None
        )
        self.researchers = ResearcherPolicies(
            self,
            "Researchers",
            prefix=config.prefix,
            home_region=config.home_region,
            clusters=config.clusters,
            teams=dict(config.teams),
            buckets=buckets,
            filter_whole_group=config.researcher_log_access == "group",
        )

        cdk.CfnOutput(
            self,
            "ArtifactsBucket",
            value=self.artifacts.bucket.bucket_name,
            description="SQUALL_ARTIFACTS_BUCKET: code archives (code/<team>/) and team outputs (teams/<team>/)",
        )
        if self.jobs is not None:
            job_role_outputs(self, self.jobs)
        for team, key in output_keys(self.researchers.policies).items():
            cdk.CfnOutput(
                self,
                f"ResearcherPolicyArn{key}",
                value=self.researchers.policies[team].managed_policy_arn,
                description=f"Attach to the researchers of team {team}",
            )


class ClusterStack(cdk.Stack):
    """Everything one cluster other than the home cluster needs, in the cluster's region."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SquallConfig,
        cluster: ClusterConfig,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        if config.cluster_access == "accessEntry":
            # The control plane's roles, by their fixed names: IAM is global, the stack is not.
            roles = {
                handler: iam.Role.from_role_name(
                    self, f"{handler.capitalize()}Role", function_role_name(config, handler)
                )
                for handler in constants.KUBERNETES_GROUPS
            }
            FunctionAccessEntries(self, "ClusterAccess", cluster_name=cluster.name, roles=roles)
            if cluster in config.node_clusters():
                node_role = iam.Role.from_role_name(
                    self, "GpuNodeRole", constants.node_role_name(config.prefix, config.home_region)
                )
                node_access_entry(
                    self, "GpuNodesAccessEntry", cluster_name=cluster.name, principal_arn=node_role.role_arn
                )
        self.jobs = JobIdentities(
            self,
            "JobIdentities",
            cluster=cluster,
            namespace_teams=config.namespace_teams,
            install_agent=config.pod_identity_agent == "install",
            shared_policies={
                namespace: job_policy_name(config.prefix, namespace, config.home_region)
                for namespace in config.namespace_teams
            },
        )
        self.log_agent = (
            LogAgent(self, "LogAgent", cluster=cluster, pod_identity_agent=self.jobs.agent)
            if config.log_agent == "install"
            else None
        )
        job_role_outputs(self, self.jobs)


def cluster_stack_name(prefix: str, cluster: str) -> str:
    """A stack name holds letters, digits and "-" only."""
    return f"{prefix}-cluster-{cluster.replace('_', '-')}"


def job_role_outputs(stack: cdk.Stack, jobs: JobIdentities) -> None:
    for namespace, key in output_keys(jobs.roles).items():
        cdk.CfnOutput(
            stack,
            f"JobRoleArn{key}",
            value=jobs.roles[namespace].role_arn,
            description=f"Pod Identity role of squall-job in namespace {namespace}",
        )


def output_keys(names: dict[str, Any]) -> dict[str, str]:
    """Name -> a distinct alphanumeric output key (team-a and team_a must not collide)."""
    keys: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(names):
        base = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name))
        key, n = base, 1
        while key in taken:
            n += 1
            key = f"{base}{n}"
        taken.add(key)
        keys[name] = key
    return keys


def hook_timeout(config: SquallConfig) -> cdk.Duration:
    """How long a lifecycle event matters: past its hook's timeout Auto Scaling has answered it."""
    return cdk.Duration.seconds(HookSettings.from_config(config).longest_timeout_seconds)


def monitoring_description(config: SquallConfig) -> dashboard.MonitoringDescription:
    """The dashboard and alarms of the deployment (core/dashboard.py's), costs and budgets included."""
    return dashboard.describe(monitoring_deployment(config), config.alarms.thresholds)


def monitoring_deployment(config: SquallConfig) -> dashboard.Deployment:
    """The names the dashboard description needs, derived like the stacks derive them."""
    jobs = constants.jobs_queue_name(config.prefix)
    drain = constants.drain_queue_name(config.prefix)
    return dashboard.Deployment(
        prefix=config.prefix,
        functions={h: constants.function_name(config.prefix, h) for h in constants.FUNCTIONS},
        jobs_queue=jobs,
        drain_queue=drain,
        dead_letter_queues=(
            constants.dead_letter_queue_name(jobs),
            constants.dead_letter_queue_name(drain),
        ),
        groups=tuple(dashboard.DashboardGroup(g.name, g.region) for g in config.node_groups),
        teams=tuple(
            dashboard.DashboardTeam(name, team.gpu_quota) for name, team in config.team_configs.items()
        ),
        clusters=tuple(cluster.name for cluster in config.clusters),
        budgets=config.budgets,
    )


@dataclass
class SquallStacks:
    control_plane: ControlPlaneStack
    monitoring: MonitoringStack
    workloads: WorkloadsStack
    forwarding: dict[str, ForwardingStack] = field(default_factory=dict)
    capacity: dict[str, CapacityStack] = field(default_factory=dict)
    # Cluster name -> its stack, for every cluster but the home one.
    clusters: dict[str, ClusterStack] = field(default_factory=dict)

    def all(self) -> list[cdk.Stack]:
        return [
            self.control_plane,
            *self.forwarding.values(),
            *self.capacity.values(),
            self.monitoring,
            self.workloads,
            *self.clusters.values(),
        ]


def build(app: cdk.App, config: SquallConfig) -> SquallStacks:
    prefix = config.prefix
    home = environment(config, config.home_region)
    # First: the submit function may read the SavedModels in its artifacts bucket, so the
    # control plane refers to the bucket (and deploys after this stack). Nothing here
    # refers to the control plane: the table is named, not referenced.
    workloads = WorkloadsStack(
        app,
        f"{prefix}-workloads",
        config=config,
        env=home,
        description="Squall workloads: artifacts bucket, job pod identities, log agent, researcher policies",
    )
    control_plane = ControlPlaneStack(
        app,
        f"{prefix}-control-plane",
        config=config,
        artifacts_bucket_arn=workloads.artifacts.bucket.bucket_arn,
        env=home,
        description="Squall control plane: jobs queue, job table, functions, triggers, cluster access",
    )
    # Names, not references: the dashboard needs no cross-stack export, and the
    # control plane stays free to replace a resource.
    monitoring = MonitoringStack(
        app, f"{prefix}-monitoring", config=config, env=home, description="Squall dashboard and alarms"
    )
    monitoring.add_stack_dependency(control_plane)
    stacks = SquallStacks(control_plane=control_plane, monitoring=monitoring, workloads=workloads)
    for region in config.remote_regions:
        if not config.groups_in(region):
            continue
        stacks.forwarding[region] = ForwardingStack(
            app,
            f"{prefix}-forwarding-{region}",
            config=config,
            region=region,
            env=environment(config, region),
            description=f"Squall: forwards Auto Scaling events of {region} to {config.home_region}",
        )
    for cluster in config.other_clusters:
        name = cluster_stack_name(prefix, cluster.name)
        if len(name) > MAX_STACK_NAME or any(s.stack_name == name for s in stacks.clusters.values()):
            raise ConfigError(
                [
                    f"clusters: cluster {cluster.name} needs a stack named {name}, which is "
                    + (
                        "taken by another cluster"
                        if len(name) <= MAX_STACK_NAME
                        else f"over {MAX_STACK_NAME} characters"
                    )
                    + ": choose a shorter prefix or cluster name"
                ]
            )
        cluster_stack = ClusterStack(
            app,
            name,
            config=config,
            cluster=cluster,
            env=environment(config, cluster.region),
            description=f"Squall: access, job identities and add-ons of cluster {cluster.name} in {cluster.region}",
        )
        # Its access entries name the control plane's roles, its job roles attach the
        # workloads stack's policies: both must exist first.
        cluster_stack.add_stack_dependency(control_plane)
        cluster_stack.add_stack_dependency(workloads)
        stacks.clusters[cluster.name] = cluster_stack
    for region in config.capacity_regions:
        capacity = CapacityStack(
            app,
            f"{prefix}-capacity-{region}",
            config=config,
            region=region,
            env=environment(config, region),
            description=f"Squall GPU capacity in {region}",
        )
        # Created groups launch with the node instance profile of the control plane;
        # and hooks fire events that only the deployed control plane can answer.
        capacity.add_stack_dependency(control_plane)
        if region in stacks.forwarding:
            capacity.add_stack_dependency(stacks.forwarding[region])
        # Created nodes join their cluster with the access entry of its stack.
        if config.capacity[region].create_groups:
            for name in dict.fromkeys(g.cluster_name for g in config.groups_in(region)):
                if name in stacks.clusters:
                    capacity.add_stack_dependency(stacks.clusters[name])
        stacks.capacity[region] = capacity
    for stack in stacks.all():
        cdk.Tags.of(stack).add("squall:deployment", prefix)
    return stacks
