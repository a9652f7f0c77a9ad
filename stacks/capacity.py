"""GPU Auto Scaling groups that Squall creates in one region.

Each group launches the EKS-optimised AL2023 NVIDIA AMI of its cluster's
Kubernetes version (read from its public SSM parameter at deploy time), joins
its cluster (its endpoint, certificate and service CIDR) through nodeadm with the
group's labels and taints, starts at zero instances and carries Squall's
lifecycle hooks from the start. Desired capacity is deliberately absent from
the template: Squall owns it, and a redeploy must not reset it.

The tags under k8s.io/cluster-autoscaler/node-template/ declare what a node of
the group will look like (labels, taints, GPUs) while the group is empty, the
convention capacity planners use to scale from zero.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ssm as ssm
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from squall.conventions import NODE_GROUP_LABEL
from stacks import constants
from stacks.config import CapacityConfig, ClusterConfig, NodeGroupConfig
from stacks.lifecycle import HookSettings

_BOUNDARY = "==SQUALL=="


def node_user_data(cluster: ClusterConfig, group: NodeGroupConfig) -> str:
    """MIME user data with a nodeadm NodeConfig (AL2023 EKS AMIs join this way)."""
    flags = []
    # Its group's name too: reconcile prices a job by its nodes' group, and a spot and an
    # on-demand group of one instance type in one region differ only by it.
    labels = ",".join(f"{k}={v}" for k, v in sorted({**group.labels, NODE_GROUP_LABEL: group.name}.items()))
    flags.append(f"--node-labels={labels}")
    if group.taints:
        taints = ",".join(f"{t.key}={t.value}:{t.effect}" for t in group.taints)
        flags.append(f"--register-with-taints={taints}")
    kubelet = "".join(f"\n      - {flag}" for flag in flags)
    node_config = f"""---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: {cluster.name}
    apiServerEndpoint: {cluster.endpoint}
    certificateAuthority: {cluster.certificate_authority}
    cidr: {cluster.service_cidr}
  kubelet:
    flags:{kubelet or " []"}
"""
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{_BOUNDARY}"\n\n'
        f"--{_BOUNDARY}\n"
        "Content-Type: application/node.eks.aws\n\n"
        f"{node_config}\n"
        f"--{_BOUNDARY}--\n"
    )


def node_template_tags(group: NodeGroupConfig) -> dict[str, str]:
    tags = {f"{constants.NODE_TEMPLATE_TAG}/label/{k}": v for k, v in group.labels.items()}
    tags.update(
        {f"{constants.NODE_TEMPLATE_TAG}/taint/{t.key}": f"{t.value}:{t.effect}" for t in group.taints}
    )
    tags[f"{constants.NODE_TEMPLATE_TAG}/resources/{constants.GPU_RESOURCE}"] = str(group.gpus)
    return tags


class GpuGroups(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        clusters: Mapping[str, ClusterConfig],
        capacity: CapacityConfig,
        groups: tuple[NodeGroupConfig, ...],
        hooks: HookSettings,
        instance_profile_name: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.groups: dict[str, autoscaling.CfnAutoScalingGroup] = {}
        for group in groups:
            cluster = clusters[group.cluster_name]
            # One parameter per Kubernetes version (the groups of one cluster share it):
            # resolved by CloudFormation at each deploy, so new nodes get the latest
            # patched AMI without a code change.
            image_id = ssm.StringParameter.value_for_typed_string_parameter_v2(
                self,
                constants.gpu_ami_parameter(cluster.kubernetes_version),
                ssm.ParameterValueType.AWS_EC2_IMAGE_ID,
            )
            template = ec2.CfnLaunchTemplate(
                self,
                f"{group.name}-LaunchTemplate",
                launch_template_name=f"{prefix}-{group.name}",
                launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                    image_id=image_id,
                    instance_type=None if group.spot else group.instance_type,
                    iam_instance_profile=ec2.CfnLaunchTemplate.IamInstanceProfileProperty(
                        name=instance_profile_name
                    ),
                    security_group_ids=list(capacity.security_group_ids),
                    # IMDSv2 only, hop limit 1: a pod's packets to IMDS cross one more
                    # hop than the node's, so pods (off the host network) cannot borrow
                    # the node's role; they get their team's through Pod Identity.
                    metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                        http_tokens="required",
                        http_endpoint="enabled",
                        http_put_response_hop_limit=constants.IMDS_HOP_LIMIT,
                    ),
                    block_device_mappings=[
                        ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                            device_name=constants.ROOT_DEVICE_NAME,
                            ebs=ec2.CfnLaunchTemplate.EbsProperty(
                                volume_size=capacity.root_volume_gib,
                                volume_type="gp3",
                                encrypted=True,
                                delete_on_termination=True,
                            ),
                        )
                    ],
                    monitoring=ec2.CfnLaunchTemplate.MonitoringProperty(enabled=True),
                    user_data=base64.b64encode(node_user_data(cluster, group).encode()).decode(),
                    tag_specifications=[
                        ec2.CfnLaunchTemplate.TagSpecificationProperty(
                            resource_type=kind,
                            tags=[
                                cdk.CfnTag(key="Name", value=f"{prefix}-{group.name}"),
                                cdk.CfnTag(key=constants.NODE_GROUP_TAG, value=group.name),
                            ],
                        )
                        for kind in ("instance", "volume")
                    ],
                ),
            )
            template_spec = autoscaling.CfnAutoScalingGroup.LaunchTemplateSpecificationProperty(
                launch_template_id=template.ref,
                version=template.attr_latest_version_number,
            )
            tags = {
                **node_template_tags(group),
                constants.NODE_GROUP_TAG: group.name,
                constants.MANAGED_BY_TAG: prefix,
            }
            asg = autoscaling.CfnAutoScalingGroup(
                self,
                group.name,
                auto_scaling_group_name=group.asg_name,
                min_size=str(group.min_size),
                max_size=str(group.max_size),
                vpc_zone_identifier=list(capacity.subnet_ids),
                launch_template=None if group.spot else template_spec,
                mixed_instances_policy=_spot_policy(group, template_spec) if group.spot else None,
                cooldown=str(constants.GROUP_COOLDOWN_SECONDS),
                health_check_type="EC2",
                health_check_grace_period=constants.HEALTH_CHECK_GRACE_SECONDS,
                lifecycle_hook_specification_list=hooks.specifications(),
                tags=[
                    autoscaling.CfnAutoScalingGroup.TagPropertyProperty(
                        key=key, value=value, propagate_at_launch=False
                    )
                    for key, value in sorted(tags.items())
                ]
                + [
                    # Some cluster add-ons find their nodes by this tag.
                    autoscaling.CfnAutoScalingGroup.TagPropertyProperty(
                        key=f"kubernetes.io/cluster/{cluster.name}",
                        value="owned",
                        propagate_at_launch=True,
                    )
                ],
            )
            self.groups[group.name] = asg
            _suppress_group_findings(asg, spot=group.spot)


def _spot_policy(
    group: NodeGroupConfig,
    template: autoscaling.CfnAutoScalingGroup.LaunchTemplateSpecificationProperty,
) -> autoscaling.CfnAutoScalingGroup.MixedInstancesPolicyProperty:
    return autoscaling.CfnAutoScalingGroup.MixedInstancesPolicyProperty(
        launch_template=autoscaling.CfnAutoScalingGroup.LaunchTemplateProperty(
            launch_template_specification=template,
            overrides=[
                autoscaling.CfnAutoScalingGroup.LaunchTemplateOverridesProperty(
                    instance_type=group.instance_type
                )
            ],
        ),
        instances_distribution=autoscaling.CfnAutoScalingGroup.InstancesDistributionProperty(
            on_demand_base_capacity=0,
            on_demand_percentage_above_base_capacity=0,
            spot_allocation_strategy="price-capacity-optimized",
        ),
    )


def _suppress_group_findings(asg: autoscaling.CfnAutoScalingGroup, *, spot: bool) -> None:
    suppressions = [
        NagPackSuppression(
            id="AwsSolutions-AS3",
            reason=(
                "Scaling events already reach Squall and its operators through EventBridge "
                "(lifecycle actions, launch-unsuccessful events) and the dashboard's per-group "
                "desired/in-service graphs; SNS notifications would duplicate them."
            ),
        )
    ]
    if spot:
        suppressions.append(
            NagPackSuppression(
                id="CdkNagValidationFailure",
                reason=(
                    "AwsSolutions-EC26 cannot read a launch template inside a mixed instances "
                    "policy (spot groups); the template's only volume is encrypted, which the "
                    "infrastructure tests assert."
                ),
                applies_to=["AwsSolutions-EC26"],
            )
        )
    NagSuppressions.add_resource_suppressions(asg, suppressions)
