"""Capacity stacks (created groups or hooks on existing ones) and event forwarding."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Capture, Match, Template

from .helpers import resources, role_statements
from .scenario import FAKE_CA, HOME, NODE_SECURITY_GROUP, NODE_SUBNETS, REMOTE, Synthesis

pytestmark = pytest.mark.slow

AMI_PARAMETER = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id"


@pytest.fixture(scope="module")
def created(full: Synthesis) -> dict[str, Any]:
    """us-east-1: Squall creates the groups."""
    return dict(full.template(full.stacks.capacity[REMOTE]).to_json())


@pytest.fixture(scope="module")
def existing(full: Synthesis) -> Template:
    """us-west-2: the groups exist; Squall adds its hooks."""
    return full.template(full.stacks.capacity[HOME])


def _group(template: dict[str, Any], asg_name: str) -> dict[str, Any]:
    (group,) = [
        g["Properties"]
        for g in resources(template, "AWS::AutoScaling::AutoScalingGroup").values()
        if g["Properties"]["AutoScalingGroupName"] == asg_name
    ]
    return group


def _launch_template(template: dict[str, Any], name: str) -> dict[str, Any]:
    (data,) = [
        t["Properties"]["LaunchTemplateData"]
        for t in resources(template, "AWS::EC2::LaunchTemplate").values()
        if t["Properties"]["LaunchTemplateName"] == name
    ]
    return data


def test_existing_groups_get_only_the_lifecycle_hooks(existing: Template) -> None:
    existing.resource_count_is("AWS::AutoScaling::AutoScalingGroup", 0)
    existing.resource_count_is("AWS::EC2::LaunchTemplate", 0)
    existing.resource_count_is("AWS::AutoScaling::LifecycleHook", 2)
    existing.has_resource_properties(
        "AWS::AutoScaling::LifecycleHook",
        {
            "AutoScalingGroupName": "squall-p3-usw2",
            "LifecycleHookName": "squall-launch",
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
            "HeartbeatTimeout": 600,  # policy.provisionTimeout
            "DefaultResult": "ABANDON",
            # the lifecycle function reads the hook's timeout from every event
            "NotificationMetadata": '{"heartbeatTimeout": 600}',
            "NotificationTargetARN": Match.absent(),  # EventBridge gets them anyway
        },
    )
    existing.has_resource_properties(
        "AWS::AutoScaling::LifecycleHook",
        {
            "AutoScalingGroupName": "squall-p3-usw2",
            "LifecycleHookName": "squall-terminate",
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "HeartbeatTimeout": 300,
            "DefaultResult": "CONTINUE",
            "NotificationMetadata": '{"heartbeatTimeout": 300}',
        },
    )


def test_created_groups_start_at_zero_with_hooks_and_no_desired_capacity(created: dict[str, Any]) -> None:
    group = _group(created, "squall-p3-use1")
    assert group["MinSize"] == "0"
    assert group["MaxSize"] == "16"
    # Squall owns desired capacity; a redeploy must not reset it.
    assert "DesiredCapacity" not in group
    assert group["VPCZoneIdentifier"] == list(NODE_SUBNETS)
    assert [
        (h["LifecycleHookName"], h["LifecycleTransition"], h["DefaultResult"])
        for h in group["LifecycleHookSpecificationList"]
    ] == [
        ("squall-launch", "autoscaling:EC2_INSTANCE_LAUNCHING", "ABANDON"),
        ("squall-terminate", "autoscaling:EC2_INSTANCE_TERMINATING", "CONTINUE"),
    ]


def test_created_groups_declare_their_node_template_for_scale_from_zero(created: dict[str, Any]) -> None:
    tags = {t["Key"]: t["Value"] for t in _group(created, "squall-g5-use1-spot")["Tags"]}
    prefix = "k8s.io/cluster-autoscaler/node-template"
    assert tags[f"{prefix}/label/squall.io/accelerator"] == "a10g"
    assert tags[f"{prefix}/label/squall.io/capacity"] == "spot"
    assert tags[f"{prefix}/taint/nvidia.com/gpu"] == "true:NoSchedule"
    assert tags[f"{prefix}/resources/nvidia.com/gpu"] == "4"
    assert tags["kubernetes.io/cluster/gpu-training"] == "owned"


def test_launch_template_uses_the_eks_gpu_ami_from_ssm(created: dict[str, Any]) -> None:
    data = _launch_template(created, "squall-p3-use1")
    parameter = created["Parameters"][data["ImageId"]["Ref"]]
    assert parameter == {
        "Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
        "Default": AMI_PARAMETER,
    }
    assert data["InstanceType"] == "p3.2xlarge"
    assert data["IamInstanceProfile"] == {"Name": f"squall-gpu-node-{HOME}"}
    assert data["SecurityGroupIds"] == [NODE_SECURITY_GROUP]
    # IMDSv2 only, and one hop: pods cannot reach the node's role (they have their team's).
    assert data["MetadataOptions"] == {
        "HttpTokens": "required",
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 1,
    }
    (volume,) = data["BlockDeviceMappings"]
    assert volume["Ebs"]["Encrypted"] is True
    assert volume["Ebs"]["VolumeSize"] == 200


def test_nodes_join_the_cluster_with_the_groups_labels_and_taints(created: dict[str, Any]) -> None:
    user_data = base64.b64decode(_launch_template(created, "squall-g5-use1-spot")["UserData"]).decode()
    assert "Content-Type: application/node.eks.aws" in user_data
    document = user_data.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--", 1)[0]
    node_config = yaml.safe_load(document)
    assert node_config["kind"] == "NodeConfig"
    assert node_config["spec"]["cluster"] == {
        "name": "gpu-training",
        "apiServerEndpoint": "https://EXAMPLE0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com",
        "certificateAuthority": FAKE_CA,
        "cidr": "10.100.0.0/16",
    }
    assert node_config["spec"]["kubelet"]["flags"] == [
        # its group's name too: reconcile prices a job by its nodes' group
        "--node-labels=squall.io/accelerator=a10g,squall.io/capacity=spot,squall.io/node-group=g5-use1-spot",
        "--register-with-taints=nvidia.com/gpu=true:NoSchedule",
    ]


def test_spot_groups_launch_spot_only_through_a_mixed_instances_policy(created: dict[str, Any]) -> None:
    group = _group(created, "squall-g5-use1-spot")
    assert "LaunchTemplate" not in group
    policy = group["MixedInstancesPolicy"]
    assert policy["InstancesDistribution"]["OnDemandPercentageAboveBaseCapacity"] == 0
    assert policy["LaunchTemplate"]["Overrides"] == [{"InstanceType": "g5.12xlarge"}]
    assert (
        _launch_template(created, "squall-g5-use1-spot")["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    )


def test_capacity_stacks_deploy_after_the_control_plane(full: Synthesis) -> None:
    for stack in full.stacks.capacity.values():
        assert full.stacks.control_plane in stack.dependencies


# -- forwarding -----------------------------------------------------------------------


def test_only_remote_regions_forward_their_events(full: Synthesis) -> None:
    assert sorted(full.stacks.forwarding) == [REMOTE]
    assert full.stacks.forwarding[REMOTE].region == REMOTE


def test_remote_auto_scaling_events_go_to_the_home_bus(full: Synthesis) -> None:
    stack = full.stacks.forwarding[REMOTE]
    template = full.template(stack).to_json()
    home_bus = {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":events:{HOME}:",
                {"Ref": "AWS::AccountId"},
                ":event-bus/default",
            ],
        ]
    }
    (rule,) = resources(template, "AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.autoscaling"],
        "detail-type": [
            "EC2 Instance-launch Lifecycle Action",
            "EC2 Instance-terminate Lifecycle Action",
            "EC2 Instance Launch Unsuccessful",
        ],
        # This region's groups only.
        "detail": {"AutoScalingGroupName": ["squall-p3-use1", "squall-g5-use1-spot"]},
    }
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == home_bus
    # an event the home bus does not take is retried while its hook waits (the 600 s
    # launch hook), not for EventBridge's default 24 hours, then kept in this region
    queues = resources(template, "AWS::SQS::Queue")
    (queue_id,) = [
        k for k, q in queues.items() if q["Properties"]["QueueName"] == f"squall-events-failed-{REMOTE}"
    ]
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue_id, "Arn"]}}
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 600, "MaximumRetryAttempts": 8}
    (role_id,) = resources(template, "AWS::IAM::Role")
    role = (
        stack.node.find_child("AutoScalingEvents")
        .node.find_child("ToHomeRegion")
        .node.find_child("EventsRole")
    )
    statements = role_statements(template, role)
    assert statements == [{"Action": "events:PutEvents", "Effect": "Allow", "Resource": home_bus}]
    assert target["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_a_remote_regions_failed_events_alarm_on_a_topic_of_its_region(full: Synthesis) -> None:
    template = full.template(full.stacks.forwarding[REMOTE])
    topic = Capture()
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": f"squall-failed-events-squall-events-failed-{REMOTE}",
            "Namespace": "AWS/SQS",
            "Dimensions": [{"Name": "QueueName", "Value": f"squall-events-failed-{REMOTE}"}],
            "Threshold": 1,
            "AlarmActions": [topic],
        },
    )
    raw = template.to_json()
    (topic_props,) = [r["Properties"] for r in resources(raw, "AWS::SNS::Topic").values()]
    assert topic.as_object() == {"Ref": next(iter(resources(raw, "AWS::SNS::Topic")))}
    assert topic_props["TopicName"] == f"squall-alarms-{REMOTE}"
    template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "gpu-oncall@example.com"}
    )
    # EventBridge, and only EventBridge, may put this rule's failures in the queue
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Action": "sqs:SendMessage", "Principal": {"Service": "events.amazonaws.com"}}
                        )
                    ]
                )
            }
        },
    )
