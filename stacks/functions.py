"""The five Squall functions, each with its own least-privilege role and settings.

Every function runs the same asset with its own handler. Its settings (node
groups, policy, teams and their submitters, the clusters) are a JSON file written
into the asset at synthesis, one per function with only what that function reads
(constants.SETTINGS_NEEDED), because Lambda's 4 KB environment cannot hold a real
configuration; the environment names the file and carries what is only known at
deploy time (the table's name, the drain queue's URL). Without a configured
certificate the functions read the cluster's with eks:DescribeCluster.

Every function starts from a SnapStart snapshot: Lambda initialises a published
version once (imports, no clients: runtime.py builds those on the first call, with
the restored environment's credentials) and resumes new environments from it. A
snapshot is only taken of a published version, so what invokes a function (the
triggers) invokes its ``live`` alias, which carries the asynchronous invocation
settings too; ``by_handler`` stays the unqualified function, for its role and
properties.

Each role grants what its function's code calls, on the one table, queue, bus,
group or cluster it is for: per-function DynamoDB actions, PutEvents for
Squall's own event source only, Auto Scaling changes only on groups tagged as
Squall's. No statement allows a wildcard action. The few ``*`` resources are for
actions that AWS cannot scope to a resource (Describe calls, X-Ray, VPC network
interfaces); each carries a cdk-nag suppression that says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from squall.core.prices import PRICE_LIST_REGION
from squall.core.settings import ClusterSettings, ServingSettings
from stacks import constants
from stacks.artifacts import bucket_arn
from stacks.config import IAM_PRINCIPAL_ARN, SquallConfig, VpcConfig, settings_of
from stacks.lifecycle import HookSettings
from stacks.packaging import lambda_code, staged_source
from stacks.queues import JobQueues
from stacks.researchers import log_group_arn

RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
# Tokens (queue URLs) resolve at deploy time; this is a generous bound on their length.
_TOKEN_ALLOWANCE = 160
# Lambda's bounds on an asynchronous event's maximum age.
_EVENT_AGE_RANGE = (60, 21600)

AUTOSCALING_DESCRIBE_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeScalingActivities",
    # Instance launch times, which Auto Scaling does not report (fleet.py).
    "ec2:DescribeInstances",
)
AUTOSCALING_SIZING_ACTIONS = (
    "autoscaling:SetDesiredCapacity",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    "autoscaling:SetInstanceProtection",
)
# Groups with priceFrom ec2: the scale check asks EC2 their prices (services/prices.py).
# Neither action takes a resource; the Price List API answers in us-east-1.
SPOT_PRICE_ACTIONS = ("ec2:DescribeSpotPriceHistory",)
PRICE_LIST_ACTIONS = ("pricing:GetProducts",)
# Reconcile reads running jobs' squall-metric lines (adapters/aws/metric_lines.py) in the
# clusters' application log groups; IAM authorises both on the group.
METRIC_LINES_ACTIONS = ("logs:FilterLogEvents", "logs:DescribeLogStreams")
# A drain looks up why Auto Scaling terminated the instance (service/lifecycle.py).
ACTIVITY_DESCRIBE_ACTIONS = ("autoscaling:DescribeScalingActivities",)
LIFECYCLE_ACTIONS = (
    "autoscaling:CompleteLifecycleAction",
    "autoscaling:RecordLifecycleActionHeartbeat",
)
# What Lambda needs to attach a function to private subnets (the managed policy
# AWSLambdaVPCAccessExecutionRole, spelled out so no managed policy is attached).
VPC_NETWORK_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)


class SquallFunctions(Construct):
    """submit, scale, lifecycle, drain and reconcile, and what each may touch."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SquallConfig,
        table: dynamodb.ITable,
        queues: JobQueues,
        lifecycle_failures: sqs.IQueue | None = None,
        code: lambda_.Code | None = None,
        artifacts_bucket_arn: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._code = code or lambda_code(source=self._staged_asset())
        self._environments = {
            handler: function_environment(config, handler=handler, table=table, queues=queues)
            for handler in constants.FUNCTIONS
        }
        self._network = _Network(self, "Network", config.vpc) if config.vpc else None
        self._lifecycle_failures = lifecycle_failures
        self._hooks = HookSettings.from_config(config)

        self.by_handler: dict[str, lambda_.Function] = {
            handler: self._function(handler, spec) for handler, spec in constants.FUNCTIONS.items()
        }
        # What the triggers invoke: the published version behind the alias, whose snapshot
        # new environments resume from ($LATEST would start every one cold).
        self.live: dict[str, lambda_.Alias] = {
            handler: self._live_alias(handler, spec) for handler, spec in constants.FUNCTIONS.items()
        }
        submit, scale, lifecycle, drain = (
            self.by_handler[h]
            for h in (constants.SUBMIT, constants.SCALE, constants.LIFECYCLE, constants.DRAIN)
        )

        # The job table: what each function's code calls (constants.TABLE_ACTIONS).
        for handler, function in self.by_handler.items():
            resources = [table.table_arn]
            if handler in constants.INDEX_READERS:
                resources.append(f"{table.table_arn}/index/*")
            self._allow(function, actions=constants.TABLE_ACTIONS[handler], resources=resources)

        # Scale-check requests come from the submit function only, as Squall's own source.
        bus_arn = cdk.Stack.of(self).format_arn(
            service="events", resource="event-bus", resource_name=constants.EVENT_BUS_NAME
        )
        self._allow(
            submit,
            actions=["events:PutEvents"],
            resources=[bus_arn],
            conditions={"StringEquals": {"events:source": [constants.SCALE_CHECK_SOURCE]}},
        )

        # Long drains continue through delayed messages. Consuming is granted by the
        # SQS event sources (ChangeMessageVisibility included, for the drain's retries).
        queues.drain.grant_send_messages(lifecycle)
        queues.drain.grant_send_messages(drain)

        group_arns = [self._group_arn(g.region, g.asg_name) for g in config.node_groups]
        # Only groups tagged as this deployment's: a group of another team with the
        # same name pattern, or one Squall no longer manages, is out of reach.
        squall_tagged = {"StringEquals": {f"aws:ResourceTag/{constants.MANAGED_BY_TAG}": config.prefix}}
        # Describe calls cannot be scoped to a resource, but they can be kept to
        # Squall's regions.
        in_squall_regions = {"StringEquals": {"aws:RequestedRegion": list(config.regions)}}
        self._allow(
            scale,
            actions=AUTOSCALING_DESCRIBE_ACTIONS,
            resources=["*"],
            conditions=in_squall_regions,
        )
        self._allow(scale, actions=AUTOSCALING_SIZING_ACTIONS, resources=group_arns, conditions=squall_tagged)
        if any(g.price_from == "ec2" for g in config.node_groups):
            self._allow(scale, actions=SPOT_PRICE_ACTIONS, resources=["*"], conditions=in_squall_regions)
            self._allow(
                scale,
                actions=PRICE_LIST_ACTIONS,
                resources=["*"],
                conditions={"StringEquals": {"aws:RequestedRegion": [PRICE_LIST_REGION]}},
            )
        for function in (lifecycle, drain):
            self._allow(function, actions=LIFECYCLE_ACTIONS, resources=group_arns, conditions=squall_tagged)
            self._allow(
                function,
                actions=ACTIVITY_DESCRIBE_ACTIONS,
                resources=["*"],
                conditions=in_squall_regions,
            )

        # A cluster without a configured certificate: every function reads it from EKS at cold start.
        described = [
            cdk.Stack.of(self).format_arn(
                service="eks", region=cluster.region, resource="cluster", resource_name=cluster.name
            )
            for cluster in config.clusters
            if not cluster.certificate_authority
        ]
        for function in self.by_handler.values():
            self._allow(function, actions=["eks:DescribeCluster"], resources=described)

        # Reconcile reads running jobs' metric lines in each cluster's application log group (in
        # the cluster's region); no other group. ":*" names the same group, as older examples write it.
        groups = [log_group_arn(self, cluster) for cluster in config.clusters]
        self._allow(
            self.by_handler[constants.RECONCILE],
            actions=METRIC_LINES_ACTIONS,
            resources=[arn for group in groups for arn in (group, f"{group}:*")],
        )

        # The submit function resolves the teams' submitter ARNs to unique ids.
        principals = sorted({arn for team in config.team_configs.values() for arn in team.submitter_arns})
        for kind, action in (("role", "iam:GetRole"), ("user", "iam:GetUser")):
            arns = [arn for arn in principals if _principal_kind(arn) == kind]
            self._allow(submit, actions=[action], resources=arns)

        # A serve request is refused unless the job's SavedModel is there: HeadObject of
        # <model uri>/saved_model.pb, which lies under teams/<team>/ (the team's Pod
        # Identity role reads only there). GetObject is the action HeadObject needs; the
        # function may ask for that one file name there and nothing else.
        buckets = [artifacts_bucket_arn] if artifacts_bucket_arn else []
        buckets += [bucket_arn(name) for name in config.artifacts.buckets]
        self._allow(submit, actions=["s3:GetObject"], resources=[saved_model_objects(b) for b in buckets])

        # Preemption counts what each candidate victim would lose from its trainer's checkpoint
        # report (services/preemption.py ReportedCheckpoints): a list of exactly that key, then a
        # ranged GetObject of it. A job writes only under teams/<team>/ of these buckets (its Pod
        # Identity role), so the scale function may list and read that one file name there, and
        # only when preemption is on (the settings it is deployed with say whether it is).
        if config.policy_settings.preemption.enabled:
            self._allow(
                scale,
                actions=["s3:ListBucket"],
                resources=buckets,
                conditions={"StringLike": {"s3:prefix": [checkpoint_report_keys()]}},
            )
            self._allow(scale, actions=["s3:GetObject"], resources=[checkpoint_reports(b) for b in buckets])
            _suppress_checkpoint_report_keys(scale)

        # Last, so that every policy statement above exists when it is marked.
        for function in self.by_handler.values():
            _suppress_scoped_wildcards(function)

    def _staged_asset(self) -> Path:
        """The asset's source: the package and each function's settings file."""
        stage = cdk.Stage.of(self)
        assert stage is not None
        directory = Path(stage.outdir) / f".squall-asset-{cdk.Stack.of(self).stack_name}"
        settings = {handler: function_settings(self._config, handler) for handler in constants.FUNCTIONS}
        return staged_source(directory=directory, settings=settings)

    @property
    def roles(self) -> dict[str, iam.IRole]:
        return {handler: fn.role for handler, fn in self.by_handler.items() if fn.role}

    @property
    def security_group(self) -> ec2.ISecurityGroup | None:
        return self._network.created_security_group if self._network else None

    def _function(self, handler: str, spec: constants.FunctionSpec) -> lambda_.Function:
        config = self._config
        name = constants.function_name(config.prefix, handler)
        construct_id = handler.capitalize()
        role = iam.Role(
            self,
            f"{construct_id}Role",
            # A fixed name, so aws-auth mappings and RBAC docs can name the role.
            role_name=f"{name}-{config.home_region}",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Squall {handler} function",
        )
        # The log group is created here, so the role needs no logs:CreateLogGroup.
        log_group = logs.LogGroup(
            self,
            f"{construct_id}Logs",
            log_group_name=f"/aws/lambda/{name}",
            retention=_retention(config.log_retention_days),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        log_group.grant_write(role)
        function = lambda_.Function(
            self,
            construct_id,
            function_name=name,
            description=spec.description,
            code=self._code,
            handler=spec.handler,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            memory_size=spec.memory_mb,
            timeout=cdk.Duration.seconds(spec.timeout_seconds),
            reserved_concurrent_executions=spec.reserved_concurrency,
            # Versions are published for SnapStart; one replaced by a newer is deleted,
            # so that no outdated snapshot stays cached (and billed).
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS,
            current_version_options=lambda_.VersionOptions(removal_policy=cdk.RemovalPolicy.DESTROY),
            role=role,
            environment=self._environments[handler],
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            vpc=self._network.vpc if self._network else None,
            vpc_subnets=self._network.subnet_selection if self._network else None,
            security_groups=self._network.security_groups if self._network else None,
        )
        if self._network:
            self._allow(function, actions=VPC_NETWORK_INTERFACE_ACTIONS, resources=["*"])
        NagSuppressions.add_resource_suppressions(
            function,
            [
                NagPackSuppression(
                    id="AwsSolutions-L1",
                    reason=(
                        f"Pinned to Python {constants.PYTHON_VERSION}, the version the bundled "
                        "wheels are built for (pip --python-version) and the package is tested "
                        "against; RUNTIME and constants.PYTHON_VERSION move together, deliberately."
                    ),
                )
            ],
        )
        return function

    def _live_alias(self, handler: str, spec: constants.FunctionSpec) -> lambda_.Alias:
        """The alias the triggers invoke, on the function's current published version."""
        max_event_age = spec.max_event_age_seconds
        on_failure = None
        if handler == constants.LIFECYCLE:
            # Past its hook's timeout Auto Scaling has answered the action itself: no
            # point retrying longer. What still fails lands in a queue with an alarm.
            low, high = _EVENT_AGE_RANGE
            max_event_age = min(max(self._hooks.longest_timeout_seconds, low), high)
            if self._lifecycle_failures is not None:
                on_failure = destinations.SqsDestination(self._lifecycle_failures)
        return lambda_.Alias(
            self,
            f"{handler.capitalize()}Live",
            alias_name=constants.LIVE_ALIAS,
            version=self.by_handler[handler].current_version,
            # Asynchronous invocations of the alias (EventBridge's) follow its own settings.
            max_event_age=_seconds(max_event_age),
            retry_attempts=spec.async_retries,
            on_failure=on_failure,
        )

    def _allow(
        self,
        function: lambda_.Function,
        *,
        actions: Iterable[str],
        resources: list[str],
        conditions: Mapping[str, object] | None = None,
    ) -> None:
        if not resources:
            return
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=list(actions), resources=resources, conditions=dict(conditions or {}) or None
            )
        )

    def _group_arn(self, region: str, asg_name: str) -> str:
        # The group's id (a UUID) is part of its ARN but unknown until it exists;
        # the name after it is what pins the statement to one group.
        return cdk.Stack.of(self).format_arn(
            service="autoscaling",
            region=region,
            resource="autoScalingGroup",
            resource_name=f"*:autoScalingGroupName/{asg_name}",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )


class _Network(Construct):
    """Private subnets and security groups for functions that reach a private endpoint."""

    def __init__(self, scope: Construct, construct_id: str, vpc: VpcConfig) -> None:
        super().__init__(scope, construct_id)
        # Imported by id, so synthesis needs no VPC lookup (and no credentials).
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=vpc.vpc_id, availability_zones=cdk.Fn.get_azs()
        )
        self.subnets = [
            ec2.Subnet.from_subnet_id(self, f"Subnet{i}", subnet_id)
            for i, subnet_id in enumerate(vpc.subnet_ids)
        ]
        self.created_security_group: ec2.SecurityGroup | None = None
        if vpc.security_group_ids:
            self.security_groups: list[ec2.ISecurityGroup] = [
                ec2.SecurityGroup.from_security_group_id(self, f"SecurityGroup{i}", sg)
                for i, sg in enumerate(vpc.security_group_ids)
            ]
        else:
            self.created_security_group = ec2.SecurityGroup(
                self,
                "SecurityGroup",
                vpc=self.vpc,
                description="Squall functions: outbound HTTPS to the cluster endpoint and AWS APIs",
                allow_all_outbound=True,
            )
            self.security_groups = [self.created_security_group]

    @property
    def subnet_selection(self) -> ec2.SubnetSelection:
        return ec2.SubnetSelection(subnets=self.subnets)


def function_settings(config: SquallConfig, handler: str) -> dict[str, Any]:
    """What one function reads from its settings file (functions/squall/core/settings.py field names)."""
    everything: dict[str, Any] = {
        "teams": dict(config.teams),
        "submitters": {team: list(principals) for team, principals in config.submitters.items()},
        # Admission holds each team to its GPU quota, by its weight (teams that set either).
        "quotas": config.quotas,
        # Admission holds a team's jobs past its monthly budget (teams that set one).
        "budgets": config.budgets,
        # The jobs functions' Kubernetes role reads the team namespaces only, and so
        # does the scale function's for Jobs (it lists, admits and releases them there).
        "namespaces": sorted(set(config.teams.values())),
        # The scale function reads Pods across the cluster (squall-capacity).
        "cluster_wide_pods": True,
        "allowed_registries": list(config.allowed_registries),
        # Each group names its cluster, also where cdk.json leaves it to the only one.
        "node_groups": [{**g.raw, "cluster": g.cluster_name} for g in config.node_groups],
        "policy": dict(config.policy),
        # Every cluster, in configuration order; an empty certificate is read from EKS at
        # cold start (eks:DescribeCluster).
        "clusters": [settings_of(cluster, ClusterSettings) for cluster in config.clusters],
        "event_bus_name": constants.EVENT_BUS_NAME,
        "dry_run": config.dry_run,
        "launch_hook_name": config.launch_hook_name,
        "terminate_hook_name": config.terminate_hook_name,
        # Model services: the images their objects run and how their Service is exposed.
        "serving": settings_of(config.serving, ServingSettings),
    }
    return {key: everything[key] for key in constants.SETTINGS_NEEDED[handler]}


def saved_model_objects(bucket: str) -> str:
    """ARN pattern of the SavedModel files under the team prefixes of the bucket whose ARN is `bucket`."""
    return f"{bucket}/{constants.TEAMS_PREFIX}/*/{constants.SAVED_MODEL_FILE}"


# Where a trainer reports its latest checkpoint, under <checkpointUri>/<job id>/: services/
# preemption.py's CHECKPOINT_REPORT (the stacks import no service; a test holds the two equal).
CHECKPOINT_REPORT_FILE = "checkpoints/squall-checkpoint.json"


def checkpoint_report_keys() -> str:
    """Key pattern of the checkpoint reports under the team prefixes (the s3:prefix a list may ask for)."""
    return f"{constants.TEAMS_PREFIX}/*/{CHECKPOINT_REPORT_FILE}"


def checkpoint_reports(bucket: str) -> str:
    """ARN pattern of the checkpoint reports under the team prefixes of the bucket whose ARN is `bucket`."""
    return f"{bucket}/{checkpoint_report_keys()}"


def settings_file(handler: str) -> str:
    """Where a function's settings file is, relative to the asset's root."""
    return f"{constants.SETTINGS_DIR}/{handler}.json"


def function_environment(
    config: SquallConfig, *, handler: str, table: dynamodb.ITable, queues: JobQueues
) -> dict[str, str]:
    """The variables of one function: its settings file, and what is known at deploy time only."""
    environment = {
        "SQUALL_SETTINGS_FILE": settings_file(handler),
        "SQUALL_TABLE_NAME": table.table_name,
        "POWERTOOLS_SERVICE_NAME": "squall",
        "POWERTOOLS_METRICS_NAMESPACE": "Squall",
        "POWERTOOLS_LOG_LEVEL": config.log_level,
    }
    if handler in (constants.LIFECYCLE, constants.DRAIN):
        environment["SQUALL_DRAIN_QUEUE_URL"] = queues.drain.queue_url
    size = environment_size(environment)
    if size > constants.LAMBDA_ENVIRONMENT_LIMIT_BYTES:
        raise ValueError(
            f"the {handler} function's environment would be about {size} bytes; Lambda allows "
            f"{constants.LAMBDA_ENVIRONMENT_LIMIT_BYTES}"
        )
    return environment


def environment_size(environment: Mapping[str, str]) -> int:
    """Bytes Lambda counts against its 4 KB limit, with unresolved tokens estimated."""
    return sum(
        len(key) + (_TOKEN_ALLOWANCE if cdk.Token.is_unresolved(value) else len(value.encode()))
        for key, value in environment.items()
    )


def _principal_kind(arn: str) -> str:
    match = IAM_PRINCIPAL_ARN.match(arn)
    return match["kind"] if match else ""


def _seconds(value: int | None) -> cdk.Duration | None:
    return None if value is None else cdk.Duration.seconds(value)


_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def _retention(days: int) -> logs.RetentionDays:
    try:
        return _RETENTION[days]
    except KeyError:
        raise ValueError(f"logRetentionDays must be one of {sorted(_RETENTION)}") from None


def _suppress_checkpoint_report_keys(function: lambda_.Function) -> None:
    assert function.role is not None  # every function gets its own role above
    NagSuppressions.add_resource_suppressions(
        function.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "Preemption reads running jobs' checkpoint reports: s3:GetObject of "
                    "teams/*/checkpoints/squall-checkpoint.json only, in the artifacts bucket and "
                    "artifacts.buckets. The team, the checkpointUri and the job are chosen at run "
                    "time, so the key needs a wildcard; the file name pins it to the reports."
                ),
                applies_to=[
                    RegexAppliesTo(regex=r"/^Resource::.*\/teams\/\*\/checkpoints\/squall-checkpoint\.json$/")
                ],
            )
        ],
        apply_to_children=True,  # the role's DefaultPolicy holds the statement
    )


def _suppress_scoped_wildcards(function: lambda_.Function) -> None:
    assert function.role is not None  # every function gets its own role above
    NagSuppressions.add_resource_suppressions(
        function.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "Resource '*' only for actions that support no resource-level permissions: "
                    "Auto Scaling and EC2 Describe calls (limited to Squall's regions by "
                    "aws:RequestedRegion), the Price List API's GetProducts (limited to us-east-1, "
                    "where it answers), X-Ray PutTraceSegments/PutTelemetryRecords, and the "
                    "network-interface actions Lambda needs in a VPC."
                ),
                applies_to=["Resource::*"],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "The job table's indexes (status-index for reconcile, queue-index for the scale "
                    "check): queries need the index ARN, "
                    "table/<name>/index/*, which grants this one table's indexes only."
                ),
                applies_to=[RegexAppliesTo(regex=r"/^Resource::<.*Table.*\.Arn>\/index\/\*$/")],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "The submit function checks that a job's SavedModel exists before serving it: "
                    "HeadObject (s3:GetObject) of teams/*/saved_model.pb only, in the artifacts bucket "
                    "and artifacts.buckets. The team and the run are chosen at run time, so the "
                    "key needs a wildcard; the file name pins it to SavedModels."
                ),
                applies_to=[RegexAppliesTo(regex=r"/^Resource::.*\/teams\/\*\/saved_model\.pb$/")],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "Reconcile reads running jobs' metric lines with FilterLogEvents and "
                    "DescribeLogStreams, which IAM authorises on the log group: each cluster's "
                    "application log group only, also written <group ARN>:* (the same group)."
                ),
                applies_to=[
                    RegexAppliesTo(
                        regex=r"/^Resource::.*:log-group:\/aws\/containerinsights\/.+\/application:\*$/"
                    )
                ],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "An Auto Scaling group ARN contains the group's UUID, unknown before the "
                    "group exists; the statement is pinned to each managed group by "
                    "autoScalingGroupName/<name>."
                ),
                applies_to=[
                    RegexAppliesTo(
                        regex=(
                            r"/^Resource::arn:<AWS::Partition>:autoscaling:[a-z0-9-]+:"
                            r"(<AWS::AccountId>|\d{12}):autoScalingGroup:\*:autoScalingGroupName\/.+$/"
                        )
                    )
                ],
            ),
        ],
        apply_to_children=True,
    )
