"""The control-plane stack: queues, table, functions, triggers, cluster access."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match, Template

from stacks import constants

from .helpers import (
    actions_of,
    as_list,
    function_statements,
    logical_id,
    resources,
    statements_with,
)
from .scenario import HOME, PRIVATE_SUBNETS, SUBMITTER_ID, SUBMITTER_ROLE, SUBMITTER_USER, Synthesis

pytestmark = pytest.mark.slow

HANDLERS = {
    "submit": "squall.handlers.submit.handler",
    "scale": "squall.handlers.scale.handler",
    "lifecycle": "squall.handlers.lifecycle.handler",
    "drain": "squall.handlers.drain.handler",
    "reconcile": "squall.handlers.reconcile.handler",
}
GROUP_NAMES = ["squall-p3-usw2", "squall-p3-use1", "squall-g5-use1-spot"]


@pytest.fixture(scope="module")
def template(full: Synthesis) -> Template:
    return full.template(full.stacks.control_plane)


@pytest.fixture(scope="module")
def raw(template: Template) -> dict[str, Any]:
    return dict(template.to_json())


@pytest.fixture(scope="module")
def fns(full: Synthesis) -> dict[str, Any]:
    return full.stacks.control_plane.functions.by_handler


@pytest.fixture(scope="module")
def live(full: Synthesis) -> dict[str, Any]:
    """What the triggers invoke: each function's `live` alias (SnapStart needs a published version)."""
    return full.stacks.control_plane.functions.live


def _invoked(alias: Any, attribute: str = "function_arn") -> Any:
    """How a template names what a trigger invokes (an alias ARN, or function name and qualifier)."""
    return alias.stack.resolve(getattr(alias, attribute))


def _ref(construct: Any) -> dict[str, str]:
    return {"Ref": logical_id(construct)}


def _arn(construct: Any) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [logical_id(construct), "Arn"]}


# -- queues ---------------------------------------------------------------------------


def test_jobs_queue_has_dead_letter_queue_redrive_and_encryption(full: Synthesis, template: Template) -> None:
    queues = full.stacks.control_plane.queues
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "QueueName": "squall-jobs",
            "SqsManagedSseEnabled": True,
            "VisibilityTimeout": 6 * 60,  # 6 x the submit function's 60 s
            # set, not left to the default: the local queues refuse what this refuses
            "MaximumMessageSize": constants.SQS_MAX_MESSAGE_BYTES,
            "RedrivePolicy": {
                "deadLetterTargetArn": _arn(queues.jobs_dead_letters),
                "maxReceiveCount": constants.JOBS_MAX_RECEIVE_COUNT,
            },
        },
    )
    # The dead-letter queue takes redrives from its own source queue only.
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "QueueName": "squall-jobs-dlq",
            "SqsManagedSseEnabled": True,
            "MessageRetentionPeriod": 14 * 24 * 3600,
            "RedriveAllowPolicy": {
                "redrivePermission": "byQueue",
                "sourceQueueArns": [
                    {
                        "Fn::Join": [
                            "",
                            Match.array_with([Match.string_like_regexp(":sqs:us-west-2:"), ":squall-jobs"]),
                        ]
                    }
                ],
            },
        },
    )


def test_queues_refuse_unencrypted_transport(full: Synthesis, template: Template) -> None:
    for queue in (
        full.stacks.control_plane.queues.jobs,
        *full.stacks.control_plane.queues.dead_letter_queues,
    ):
        template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [_ref(queue)],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            )
                        ]
                    )
                },
            },
        )


def test_drain_queue_visibility_covers_six_drain_timeouts(
    full: Synthesis, raw: dict[str, Any], fns: dict[str, Any]
) -> None:
    drain_queue = raw["Resources"][logical_id(full.stacks.control_plane.queues.drain)]["Properties"]
    drain_function = raw["Resources"][logical_id(fns["drain"])]["Properties"]
    assert drain_queue["QueueName"] == "squall-drain"
    assert drain_queue["VisibilityTimeout"] >= 6 * drain_function["Timeout"]
    assert drain_queue["RedrivePolicy"]["maxReceiveCount"] == constants.DRAIN_MAX_RECEIVE_COUNT
    # Per-message delays are the sender's: the queue itself must not delay.
    assert "DelaySeconds" not in drain_queue


# -- table ----------------------------------------------------------------------------


def test_table_keys_index_ttl_and_protection(template: Template) -> None:
    template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": "Retain",
            "Properties": {
                "TableName": "squall-jobs",
                "BillingMode": "PAY_PER_REQUEST",
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "SSESpecification": {"SSEEnabled": True},
                "TimeToLiveSpecification": {"AttributeName": "expiresAt", "Enabled": True},
                "DeletionProtectionEnabled": True,
                "GlobalSecondaryIndexes": [
                    {
                        "IndexName": "status-index",
                        "KeySchema": [
                            {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                            {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "ALL"},
                    },
                    # the queue: sparse, and only what admission reads of a queued job
                    {
                        "IndexName": "queue-index",
                        "KeySchema": [
                            {"AttributeName": "gsi2pk", "KeyType": "HASH"},
                            {"AttributeName": "gsi2sk", "KeyType": "RANGE"},
                        ],
                        "Projection": {
                            "ProjectionType": "INCLUDE",
                            "NonKeyAttributes": list(constants.QUEUE_INDEX_ATTRIBUTES),
                        },
                    },
                ],
                "AttributeDefinitions": Match.array_with(
                    [
                        {"AttributeName": name, "AttributeType": "S"}
                        for name in ("pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk")
                    ]
                ),
            },
        },
    )


# -- functions ------------------------------------------------------------------------


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_each_function_runs_its_handler_on_the_shared_asset(
    raw: dict[str, Any], fns: dict[str, Any], handler: str
) -> None:
    props = raw["Resources"][logical_id(fns[handler])]["Properties"]
    assert props["FunctionName"] == f"squall-{handler}"
    assert props["Handler"] == HANDLERS[handler]
    assert props["Runtime"] in ("python3.11", "python3.12")
    assert props["Architectures"] == ["arm64"]
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["Role"] == {"Fn::GetAtt": [logical_id(fns[handler].role), "Arn"]}
    log_group = raw["Resources"][props["LoggingConfig"]["LogGroup"]["Ref"]]
    assert log_group["Properties"]["LogGroupName"] == f"/aws/lambda/squall-{handler}"
    # One asset for all five functions.
    codes = {
        json.dumps(f["Properties"]["Code"], sort_keys=True)
        for f in resources(raw, "AWS::Lambda::Function").values()
    }
    assert len(codes) == 1


def test_only_the_scale_function_is_limited_to_one_concurrent_run(
    raw: dict[str, Any], fns: dict[str, Any]
) -> None:
    concurrency = {
        handler: raw["Resources"][logical_id(fn)]["Properties"].get("ReservedConcurrentExecutions")
        for handler, fn in fns.items()
    }
    assert concurrency == {"submit": None, "scale": 1, "lifecycle": None, "drain": None, "reconcile": None}


def test_stale_scheduled_invocations_are_dropped_not_retried(template: Template, fns: dict[str, Any]) -> None:
    for handler in ("scale", "reconcile"):
        template.has_resource_properties(
            "AWS::Lambda::EventInvokeConfig",
            {
                "FunctionName": _ref(fns[handler]),
                "MaximumEventAgeInSeconds": 120,
                "MaximumRetryAttempts": 0,
            },
        )


def test_function_logs_have_retention(template: Template) -> None:
    for handler in HANDLERS:
        template.has_resource_properties(
            "AWS::Logs::LogGroup",
            {"LogGroupName": f"/aws/lambda/squall-{handler}", "RetentionInDays": 30},
        )


def test_each_function_reads_its_own_settings_file_from_the_asset(
    full: Synthesis, raw: dict[str, Any], fns: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from squall.core.settings import Settings
    from squall.planner.admission import TeamShare

    staged = next(full.outdir.glob(".squall-asset-squall-control-plane"))
    queues = full.stacks.control_plane.queues
    for handler, fn in fns.items():
        # given a function's environment, with deploy-time references filled in
        env = raw["Resources"][logical_id(fn)]["Properties"]["Environment"]["Variables"]
        assert env["SQUALL_SETTINGS_FILE"] == f"{constants.SETTINGS_DIR}/{handler}.json"
        assert env["SQUALL_TABLE_NAME"] == _ref(full.stacks.control_plane.table)
        assert ("SQUALL_DRAIN_QUEUE_URL" in env) == (handler in ("lifecycle", "drain"))
        if "SQUALL_DRAIN_QUEUE_URL" in env:
            assert env["SQUALL_DRAIN_QUEUE_URL"] == _ref(queues.drain)
        assert (env["POWERTOOLS_SERVICE_NAME"], env["POWERTOOLS_METRICS_NAMESPACE"]) == ("squall", "Squall")
        assert env["POWERTOOLS_LOG_LEVEL"] == "INFO"
        # and its settings file holds what that function reads, and nothing else
        content = json.loads((staged / env["SQUALL_SETTINGS_FILE"]).read_text())
        assert set(content) == set(constants.SETTINGS_NEEDED[handler])
        monkeypatch.setenv("LAMBDA_TASK_ROOT", str(staged))
        for key, value in env.items():
            monkeypatch.setenv(key, value if isinstance(value, str) else f"resolved-{key.lower()}")
        # when the function reads its settings
        settings = Settings()
        # then every value parses, and means what cdk.json said
        assert [(c.name, c.region) for c in settings.clusters] == [("gpu-training", HOME)]
        assert settings.policy.provision_timeout.total_seconds() == 600
        assert settings.policy.max_runtime_limit.days == 30
        if handler in ("scale", "lifecycle", "drain"):
            assert [g["asgName"] for g in settings.node_groups] == GROUP_NAMES
            assert "submitters" not in content
        if handler in ("lifecycle", "drain"):
            assert (settings.launch_hook_name, settings.terminate_hook_name) == (
                "squall-launch",
                "squall-terminate",
            )
            assert "teams" not in content and "quotas" not in content
        if handler == "scale":
            assert settings.dry_run is False
            # admission holds each team to its quota and weight, and lists Jobs in the team namespaces
            assert content["quotas"] == {"research": {"gpuQuota": 16, "weight": 2.0}}
            # and each team's monthly budget (the teams with one)
            assert settings.budgets == {"research": 20000.0}
            assert settings.team_shares() == {
                "research": TeamShare(quota=16, weight=2.0),
                "vision": TeamShare(),
            }
            assert settings.namespaces == ["team-research", "team-vision"]
            assert settings.cluster_wide_pods is True
        else:
            assert "quotas" not in content and "budgets" not in content and not settings.cluster_wide_pods
        if handler in ("submit", "reconcile"):
            assert settings.teams == {"research": "team-research", "vision": "team-vision"}
            assert settings.namespaces == ["team-research", "team-vision"]
            # submit places a model service where a group can grow for it; reconcile prices a
            # starting job's pods by their nodes' groups (a job's rate, which budgets count)
            assert "node_groups" in content
        if handler == "submit":
            assert settings.submitters == {"research": [SUBMITTER_ROLE, SUBMITTER_USER, SUBMITTER_ID]}
            assert settings.event_bus_name == "default"


def test_the_functions_environment_stays_small_whatever_the_configuration() -> None:
    from types import SimpleNamespace

    from stacks.config import SquallConfig, load_cdk_json_context
    from stacks.functions import environment_size, function_environment

    context = load_cdk_json_context()
    context["nodeGroups"] = [
        {**group, "name": f"{group['name']}-{i}", "asgName": f"{group['asgName']}-{i}"}
        for group in context["nodeGroups"]
        for i in range(50)
    ]
    config = SquallConfig.from_context(context)
    stand_ins: dict[str, Any] = {
        "table": SimpleNamespace(table_name="squall-jobs"),
        "queues": SimpleNamespace(drain=SimpleNamespace(queue_url="https://sqs/drain")),
    }
    for handler in constants.FUNCTIONS:
        environment = function_environment(config, handler=handler, **stand_ins)
        assert environment_size(environment) < 1024
        assert not any("nodeGroups" in v or "asgName" in v for v in environment.values())


def test_functions_run_in_the_configured_private_subnets(
    template: Template, fns: dict[str, Any], full: Synthesis
) -> None:
    security_group = full.stacks.control_plane.functions.security_group
    assert security_group is not None
    for handler in fns:
        template.has_resource_properties(
            "AWS::Lambda::Function",
            {
                "FunctionName": f"squall-{handler}",
                "VpcConfig": {
                    "SubnetIds": list(PRIVATE_SUBNETS),
                    "SecurityGroupIds": [{"Fn::GetAtt": [logical_id(security_group), "GroupId"]}],
                },
            },
        )
    template.has_output("FunctionsSecurityGroupId", Match.any_value())


# -- triggers -------------------------------------------------------------------------


def test_sqs_event_sources_report_partial_batch_failures(
    full: Synthesis, template: Template, live: dict[str, Any]
) -> None:
    queues = full.stacks.control_plane.queues
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": _arn(queues.jobs),
            "FunctionName": _invoked(live["submit"], "function_name"),
            "BatchSize": 10,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "ScalingConfig": {"MaximumConcurrency": constants.SUBMIT_MAX_CONCURRENCY},
        },
    )
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": _arn(queues.drain),
            "FunctionName": _invoked(live["drain"], "function_name"),
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 2)


def _rules_targeting(raw: dict[str, Any], function: Any) -> list[dict[str, Any]]:
    target = _invoked(function)
    return [
        rule["Properties"]
        for rule in resources(raw, "AWS::Events::Rule").values()
        if any(t["Arn"] == target for t in rule["Properties"]["Targets"])
    ]


def test_scale_runs_every_minute_on_request_and_on_launch_failures(
    raw: dict[str, Any], live: dict[str, Any]
) -> None:
    rules = _rules_targeting(raw, live["scale"])
    schedules = [r["ScheduleExpression"] for r in rules if "ScheduleExpression" in r]
    patterns = [r["EventPattern"] for r in rules if "EventPattern" in r]
    assert schedules == ["rate(1 minute)"]
    assert {"source": ["squall.core.jobs"], "detail-type": ["Scale Check Requested"]} in patterns
    assert {
        "source": ["aws.autoscaling"],
        "detail-type": ["EC2 Instance Launch Unsuccessful"],
        "detail": {"AutoScalingGroupName": GROUP_NAMES},
    } in patterns
    assert len(rules) == 3


def test_scale_check_event_names_match_the_sender() -> None:
    from squall.adapters.aws import eventbridge as events

    assert constants.SCALE_CHECK_SOURCE == events.SOURCE
    assert constants.SCALE_CHECK_DETAIL_TYPE == events.SCALE_CHECK_REQUESTED


def test_lifecycle_actions_of_managed_groups_reach_the_lifecycle_function(
    raw: dict[str, Any], live: dict[str, Any]
) -> None:
    (rule,) = _rules_targeting(raw, live["lifecycle"])
    assert rule["EventPattern"] == {
        "source": ["aws.autoscaling"],
        "detail-type": [
            "EC2 Instance-launch Lifecycle Action",
            "EC2 Instance-terminate Lifecycle Action",
        ],
        "detail": {"AutoScalingGroupName": GROUP_NAMES},
    }
    assert "EventBusName" not in rule  # the default bus, where Auto Scaling publishes


def test_reconcile_runs_every_minute(raw: dict[str, Any], live: dict[str, Any]) -> None:
    rules = _rules_targeting(raw, live["reconcile"])
    assert [r.get("ScheduleExpression") for r in rules] == ["rate(1 minute)"]


# -- least privilege ------------------------------------------------------------------


def _group_arn(region: str, name: str) -> dict[str, Any]:
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":autoscaling:{region}:",
                {"Ref": "AWS::AccountId"},
                f":autoScalingGroup:*:autoScalingGroupName/{name}",
            ],
        ]
    }


SQUALL_TAGGED = {"StringEquals": {"aws:ResourceTag/squall.io/managed-by": "squall"}}
IN_SQUALL_REGIONS = {"StringEquals": {"aws:RequestedRegion": ["us-west-2", "us-east-1"]}}
GROUP_ARNS = [
    _group_arn("us-west-2", "squall-p3-usw2"),
    _group_arn("us-east-1", "squall-p3-use1"),
    _group_arn("us-east-1", "squall-g5-use1-spot"),
]


def _assert_on_named_groups_only(statement: dict[str, Any]) -> None:
    """Only the node groups of the settings, and each only while it carries Squall's tag."""
    assert statement["Resource"] == GROUP_ARNS
    assert statement["Condition"] == SQUALL_TAGGED


def test_every_function_has_its_own_role_without_managed_policies(
    raw: dict[str, Any], fns: dict[str, Any]
) -> None:
    roles = {logical_id(fn.role) for fn in fns.values()}
    assert len(roles) == len(fns)
    for role_id in roles:
        props = raw["Resources"][role_id]["Properties"]
        assert "ManagedPolicyArns" not in props
        assert props["AssumeRolePolicyDocument"]["Statement"] == [
            {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
        ]
        assert props["RoleName"].startswith("squall-") and props["RoleName"].endswith(f"-{HOME}")


def test_table_access_is_what_each_functions_code_calls(
    full: Synthesis, raw: dict[str, Any], fns: dict[str, Any]
) -> None:
    table = full.stacks.control_plane.table
    expected = {
        "submit": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
        "scale": {
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            "dynamodb:DeleteItem",
        },
        "lifecycle": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"},
        "drain": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"},
        "reconcile": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"},
    }
    for handler, fn in fns.items():
        statements = [
            s
            for s in function_statements(raw, fn)
            if any(a.startswith("dynamodb:") for a in as_list(s["Action"]))
        ]
        (statement,) = statements
        assert set(as_list(statement["Action"])) == expected[handler], handler
        # only reconcile queries the status index, and only the scale check the queue index
        index = {"Fn::Join": ["", [_arn(table), "/index/*"]]}
        assert as_list(statement["Resource"]) == (
            [_arn(table), index] if handler in {"reconcile", "scale"} else [_arn(table)]
        )
    assert not {"dynamodb:Scan", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & actions_of(
        function_statements(raw, fns["submit"])
    )


def test_scale_may_size_only_the_named_groups(raw: dict[str, Any], fns: dict[str, Any]) -> None:
    statements = function_statements(raw, fns["scale"])
    (sizing,) = statements_with(statements, "autoscaling:SetDesiredCapacity")
    assert sorted(sizing["Action"]) == sorted(
        [
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
            "autoscaling:SetInstanceProtection",
        ]
    )
    _assert_on_named_groups_only(sizing)
    (describe,) = statements_with(statements, "autoscaling:DescribeAutoScalingGroups")
    assert describe["Resource"] == "*"
    assert describe["Condition"] == IN_SQUALL_REGIONS
    assert not any(a.startswith("sqs:") for a in actions_of(statements))


def test_lifecycle_and_drain_answer_hooks_of_named_groups_only(
    full: Synthesis, raw: dict[str, Any], fns: dict[str, Any]
) -> None:
    drain_queue = full.stacks.control_plane.queues.drain
    for handler in ("lifecycle", "drain"):
        statements = function_statements(raw, fns[handler])
        (hooks,) = statements_with(statements, "autoscaling:CompleteLifecycleAction")
        assert sorted(hooks["Action"]) == [
            "autoscaling:CompleteLifecycleAction",
            "autoscaling:RecordLifecycleActionHeartbeat",
        ]
        _assert_on_named_groups_only(hooks)
        (activities,) = statements_with(statements, "autoscaling:DescribeScalingActivities")
        assert activities["Action"] == "autoscaling:DescribeScalingActivities"
        assert activities["Condition"] == IN_SQUALL_REGIONS
        assert "autoscaling:SetDesiredCapacity" not in actions_of(statements)
        sends = statements_with(statements, "sqs:SendMessage")
        assert [s["Resource"] for s in sends if s["Resource"] == _arn(drain_queue)] == [_arn(drain_queue)]
        # they ask for no scale check: their code puts no events
        assert "events:PutEvents" not in actions_of(statements)
    drain_receives = statements_with(function_statements(raw, fns["drain"]), "sqs:ReceiveMessage")
    assert [s["Resource"] for s in drain_receives] == [_arn(drain_queue)]
    assert "sqs:ReceiveMessage" not in actions_of(function_statements(raw, fns["lifecycle"]))


def test_submit_consumes_jobs_and_asks_for_scale_checks_as_squall_only(
    full: Synthesis, raw: dict[str, Any], fns: dict[str, Any]
) -> None:
    jobs = full.stacks.control_plane.queues.jobs
    submit = function_statements(raw, fns["submit"])
    assert [s["Resource"] for s in statements_with(submit, "sqs:ReceiveMessage")] == [_arn(jobs)]
    assert "sqs:SendMessage" not in actions_of(submit)
    assert not any(a.startswith("autoscaling:") for a in actions_of(submit))
    (put,) = statements_with(submit, "events:PutEvents")
    assert put["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":events:us-west-2:",
                {"Ref": "AWS::AccountId"},
                ":event-bus/default",
            ],
        ]
    }
    assert put["Condition"] == {"StringEquals": {"events:source": ["squall.core.jobs"]}}
    # reconcile re-runs lost jobs through its own intake, not through the queue
    reconcile = function_statements(raw, fns["reconcile"])
    assert not any(a.startswith(("sqs:", "autoscaling:", "events:")) for a in actions_of(reconcile))


def test_only_submit_looks_up_the_submitters_and_only_those(raw: dict[str, Any], fns: dict[str, Any]) -> None:
    submit = function_statements(raw, fns["submit"])
    (get_role,) = statements_with(submit, "iam:GetRole")
    (get_user,) = statements_with(submit, "iam:GetUser")
    assert get_role["Resource"] == SUBMITTER_ROLE and get_user["Resource"] == SUBMITTER_USER
    for handler in ("scale", "lifecycle", "drain", "reconcile"):
        assert not any(a.startswith("iam:") for a in actions_of(function_statements(raw, fns[handler])))


def test_only_the_teams_submitters_may_send_to_the_jobs_queue(full: Synthesis, template: Template) -> None:
    jobs = full.stacks.control_plane.queues.jobs
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [_ref(jobs)],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Sid": "OnlyTeamSubmittersSend",
                            "Effect": "Deny",
                            "Principal": {"AWS": "*"},
                            "Action": "sqs:SendMessage",
                            "Resource": _arn(jobs),
                            "Condition": {
                                "ArnNotLike": {"aws:PrincipalArn": sorted([SUBMITTER_ROLE, SUBMITTER_USER])},
                                "StringNotLike": {"aws:userid": [SUBMITTER_ID, f"{SUBMITTER_ID}:*"]},
                            },
                        }
                    ]
                )
            },
        },
    )
    # the drain queue takes no such statement: only Squall's functions send to it
    drain_policy = Capture()
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {"Queues": [_ref(full.stacks.control_plane.queues.drain)], "PolicyDocument": drain_policy},
    )
    assert all(s.get("Sid") != "OnlyTeamSubmittersSend" for s in drain_policy.as_object()["Statement"])


def test_without_submitters_the_jobs_queue_takes_any_sender(default_app: Any) -> None:
    template = json.loads((default_app.outdir / "squall-control-plane.template.json").read_text())
    statements = [
        statement
        for policy in resources(template, "AWS::SQS::QueuePolicy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert statements and all(s.get("Sid") != "OnlyTeamSubmittersSend" for s in statements)


def test_without_a_configured_certificate_every_function_may_describe_the_cluster(default_app: Any) -> None:
    template = json.loads((default_app.outdir / "squall-control-plane.template.json").read_text())
    cluster_arn = {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":eks:us-west-2:",
                {"Ref": "AWS::AccountId"},
                ":cluster/gpu-training",
            ],
        ]
    }
    describing = {
        role
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "eks:DescribeCluster"
        for role in (r["Ref"] for r in policy["Properties"]["Roles"])
        if statement["Resource"] == cluster_arn
    }
    assert len(describing) == len(HANDLERS)


def test_with_a_configured_certificate_no_function_describes_the_cluster(
    raw: dict[str, Any], fns: dict[str, Any]
) -> None:
    for fn in fns.values():
        assert "eks:DescribeCluster" not in actions_of(function_statements(raw, fn))


def test_failed_lifecycle_events_land_in_a_queue_and_stop_when_the_hook_has_expired(
    full: Synthesis, template: Template, fns: dict[str, Any], live: dict[str, Any]
) -> None:
    plane = full.stacks.control_plane
    # the lifecycle function's failed invocations go to its on-failure destination,
    # and are not retried past the longest hook timeout (the 600 s launch hook)
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": _ref(fns["lifecycle"]),
            "MaximumEventAgeInSeconds": 600,
            "DestinationConfig": {"OnFailure": {"Destination": _arn(plane.lifecycle_failures)}},
        },
    )
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "QueueName": "squall-lifecycle-failures",
            "SqsManagedSseEnabled": True,
            "MessageRetentionPeriod": 14 * 86400,
        },
    )
    # the Auto Scaling rules' targets retry a bounded number of times, while the
    # event still matters, then keep the event in the failed-events queue
    for pattern, target, age in (
        ("EC2 Instance-launch Lifecycle Action", live["lifecycle"], 600),
        ("EC2 Instance Launch Unsuccessful", live["scale"], 120),
    ):
        template.has_resource_properties(
            "AWS::Events::Rule",
            {
                "EventPattern": Match.object_like({"detail-type": Match.array_with([pattern])}),
                "Targets": [
                    Match.object_like(
                        {
                            "Arn": _invoked(target),
                            "DeadLetterConfig": {"Arn": _arn(plane.event_failures)},
                            "RetryPolicy": {"MaximumEventAgeInSeconds": age, "MaximumRetryAttempts": 8},
                        }
                    )
                ],
            },
        )
    template.has_resource_properties("AWS::SQS::Queue", {"QueueName": "squall-events-failed-us-west-2"})


def test_functions_write_only_their_own_log_group(raw: dict[str, Any], fns: dict[str, Any]) -> None:
    for handler, fn in fns.items():
        (logs,) = statements_with(function_statements(raw, fn), "logs:PutLogEvents")
        group_id = logs["Resource"]["Fn::GetAtt"][0]
        assert raw["Resources"][group_id]["Properties"]["LogGroupName"] == f"/aws/lambda/squall-{handler}"


# -- cluster access -------------------------------------------------------------------


def test_each_function_role_has_an_access_entry_in_its_kubernetes_group(
    template: Template, fns: dict[str, Any]
) -> None:
    for handler, fn in fns.items():
        template.has_resource_properties(
            "AWS::EKS::AccessEntry",
            {
                "ClusterName": "gpu-training",
                "PrincipalArn": _arn(fn.role),
                "Type": "STANDARD",
                "KubernetesGroups": list(constants.KUBERNETES_GROUPS[handler]),
                # RBAC is the whole grant: no EKS access policy on top.
                "AccessPolicies": Match.absent(),
            },
        )


def test_created_gpu_nodes_get_a_role_profile_and_node_access_entry(
    template: Template, raw: dict[str, Any]
) -> None:
    role = Capture()
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": f"squall-gpu-node-{HOME}",
            "AssumeRolePolicyDocument": {
                "Statement": [Match.object_like({"Principal": {"Service": "ec2.amazonaws.com"}})]
            },
            "ManagedPolicyArns": role,
        },
    )
    policies = {json.dumps(arn)[-60:] for arn in role.as_array()}
    assert any("AmazonEKSWorkerNodePolicy" in p for p in policies)
    template.has_resource_properties(
        "AWS::IAM::InstanceProfile", {"InstanceProfileName": f"squall-gpu-node-{HOME}"}
    )
    template.has_resource_properties(
        "AWS::EKS::AccessEntry", {"ClusterName": "gpu-training", "Type": "EC2_LINUX"}
    )


def test_outputs_name_the_queue_table_and_roles(template: Template) -> None:
    for name in ("JobsQueueUrl", "TableName", *(f"{h.capitalize()}RoleArn" for h in HANDLERS)):
        template.has_output(name, Match.any_value())
