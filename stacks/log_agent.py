"""The cluster's log agent: the Amazon CloudWatch Observability EKS add-on, when asked.

With ``logAgent: install`` the app installs the add-on (the CloudWatch agent and
Fluent Bit, which ship every container's output to
``/aws/containerinsights/<cluster>/application``) and gives its
``cloudwatch-agent`` service account a role through EKS Pod Identity, with the
AWS managed policy the add-on's documentation names. With ``existing`` (the
default) the app leaves the cluster's add-ons alone: docs/deploy.md says what
an existing agent must do for ``squall logs`` to find the output.
"""

from __future__ import annotations

from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from stacks import constants
from stacks.config import ClusterConfig
from stacks.pod_identity import pod_identity_principal


class LogAgent(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterConfig,
        pod_identity_agent: eks.CfnAddon | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=pod_identity_principal(
                self,
                cluster=cluster,
                namespace=constants.LOG_AGENT_NAMESPACE,
                service_account=constants.LOG_AGENT_SERVICE_ACCOUNT,
            ),
            description="CloudWatch agent and Fluent Bit of the amazon-cloudwatch-observability add-on",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(constants.LOG_AGENT_MANAGED_POLICY)
            ],
        )
        self.addon = eks.CfnAddon(
            self,
            "Addon",
            cluster_name=cluster.name,
            addon_name=constants.LOG_AGENT_ADDON,
            pod_identity_associations=[
                eks.CfnAddon.PodIdentityAssociationProperty(
                    role_arn=self.role.role_arn, service_account=constants.LOG_AGENT_SERVICE_ACCOUNT
                )
            ],
        )
        # The add-on's pods get their credentials from the Pod Identity Agent.
        if pod_identity_agent is not None:
            self.addon.add_dependency(pod_identity_agent)
        NagSuppressions.add_resource_suppressions(
            self.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason=(
                        "The add-on's documentation names CloudWatchAgentServerPolicy for its agent; "
                        "AWS keeps it in step with what the agent and Fluent Bit call, which a copied "
                        "inline policy would not follow."
                    ),
                    applies_to=[
                        f"Policy::arn:<AWS::Partition>:iam::aws:policy/{constants.LOG_AGENT_MANAGED_POLICY}"
                    ],
                )
            ],
        )
