"""The five Squall functions, each with its own least-privilege role.

Every function runs the same asset with its own handler and reads the same
``SQUALL_*`` environment (functions/squall/settings.py). What differs is the
role: each grant below names the one table, queue, bus or group it is for, and
no statement allows a wildcard action. The few ``*`` resources are for actions
that AWS cannot scope to a resource (Describe calls, X-Ray, VPC network
interfaces); each carries a cdk-nag suppression that says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from stacks import constants
from stacks.config import SquallConfig, VpcConfig
from stacks.packaging import lambda_code
from stacks.queues import JobQueues

RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
# Tokens (queue URLs) resolve at deploy time; this is a generous bound on their length.
_TOKEN_ALLOWANCE = 160

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
        code: lambda_.Code | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._code = code or lambda_code()
        self._environment = function_environment(config, table=table, queues=queues)
        self._network = _Network(self, "Network", config.vpc) if config.vpc else None

        self.by_handler: dict[str, lambda_.Function] = {
            handler: self._function(handler, spec) for handler, spec in constants.FUNCTIONS.items()
        }
        submit, scale, lifecycle, drain, reconcile = (
            self.by_handler[h]
            for h in (
                constants.SUBMIT,
                constants.SCALE,
                constants.LIFECYCLE,
                constants.DRAIN,
                constants.RECONCILE,
            )
        )

        # Every function keeps job records, group backoff or drain state.
        for function in self.by_handler.values():
            table.grant_read_write_data(function)

        # Scale-check requests; also how lifecycle and drain wake the planner.
        bus = events.EventBus.from_event_bus_name(self, "Bus", constants.EVENT_BUS_NAME)
        for function in (submit, lifecycle, drain):
            bus.grant_put_events_to(function)

        # Long drains continue through delayed messages; lost jobs are re-run
        # through the jobs queue. Consuming is granted by the SQS event sources.
        queues.drain.grant_send_messages(lifecycle)
        queues.drain.grant_send_messages(drain)
        queues.jobs.grant_send_messages(reconcile)

        group_arns = [self._group_arn(g.region, g.asg_name) for g in config.node_groups]
        # Describe calls cannot be scoped to a resource, but they can be kept to
        # Squall's regions.
        in_squall_regions = {"StringEquals": {"aws:RequestedRegion": list(config.regions)}}
        self._allow(
            scale,
            actions=AUTOSCALING_DESCRIBE_ACTIONS,
            resources=["*"],
            conditions=in_squall_regions,
        )
        self._allow(scale, actions=AUTOSCALING_SIZING_ACTIONS, resources=group_arns)
        for function in (lifecycle, drain):
            self._allow(function, actions=LIFECYCLE_ACTIONS, resources=group_arns)
            self._allow(
                function,
                actions=ACTIVITY_DESCRIBE_ACTIONS,
                resources=["*"],
                conditions=in_squall_regions,
            )

        # Last, so that every policy statement above exists when it is marked.
        for function in self.by_handler.values():
            _suppress_scoped_wildcards(function)

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
            max_event_age=_seconds(spec.max_event_age_seconds),
            retry_attempts=spec.async_retries,
            role=role,
            environment=self._environment,
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


def function_environment(
    config: SquallConfig, *, table: dynamodb.ITable, queues: JobQueues
) -> dict[str, str]:
    """The SQUALL_* variables of every function (functions/squall/settings.py)."""

    def compact(value: object) -> str:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)

    environment = {
        "SQUALL_TABLE_NAME": table.table_name,
        "SQUALL_JOBS_QUEUE_URL": queues.jobs.queue_url,
        "SQUALL_DRAIN_QUEUE_URL": queues.drain.queue_url,
        "SQUALL_EVENT_BUS_NAME": constants.EVENT_BUS_NAME,
        "SQUALL_TEAMS": compact(dict(config.teams)),
        "SQUALL_ALLOWED_REGISTRIES": compact(list(config.allowed_registries)),
        "SQUALL_REGIONS": compact(list(config.regions)),
        "SQUALL_NODE_GROUPS": compact([dict(g.raw) for g in config.node_groups]),
        "SQUALL_POLICY": compact(dict(config.policy)),
        "SQUALL_CLUSTER": compact(config.cluster.settings()),
        "SQUALL_DRY_RUN": "true" if config.dry_run else "false",
        "SQUALL_LAUNCH_HOOK_NAME": config.launch_hook_name,
        "SQUALL_TERMINATE_HOOK_NAME": config.terminate_hook_name,
        "POWERTOOLS_SERVICE_NAME": "squall",
        "POWERTOOLS_METRICS_NAMESPACE": "Squall",
        "POWERTOOLS_LOG_LEVEL": config.log_level,
    }
    size = environment_size(environment)
    if size > constants.LAMBDA_ENVIRONMENT_LIMIT_BYTES:
        raise ValueError(
            f"the functions' environment would be about {size} bytes; Lambda allows "
            f"{constants.LAMBDA_ENVIRONMENT_LIMIT_BYTES}. Shorten nodeGroups (labels, "
            "optional fields) or the cluster certificate."
        )
    return environment


def environment_size(environment: Mapping[str, str]) -> int:
    """Bytes Lambda counts against its 4 KB limit, with unresolved tokens estimated."""
    return sum(
        len(key) + (_TOKEN_ALLOWANCE if cdk.Token.is_unresolved(value) else len(value.encode()))
        for key, value in environment.items()
    )


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
                    "aws:RequestedRegion), X-Ray PutTraceSegments/PutTelemetryRecords, and the "
                    "network-interface actions Lambda needs in a VPC."
                ),
                applies_to=["Resource::*"],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "The job table's status index: queries by status need the index ARN, "
                    "table/<name>/index/*, which grants this one table's indexes only."
                ),
                applies_to=[RegexAppliesTo(regex=r"/^Resource::<.*Table.*\.Arn>\/index\/\*$/")],
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
