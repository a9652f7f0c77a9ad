"""Access to the EKS clusters: the functions' roles, and the GPU nodes' identity.

The functions reach each cluster's Kubernetes API as their IAM roles, with a
token they sign themselves (a presigned STS GetCallerIdentity request): there is
no kubeconfig and no secret. On every cluster, an EKS access entry maps each role
to the Kubernetes group whose RBAC (stacks/rbac/squall-rbac.yaml, applied to each
cluster) says what it may do; no EKS access policy is associated, so the RBAC is
all the access there is. An access entry is a resource of its cluster's region:
a cluster in another region than the control plane gets its entries from a stack
in that region, which names the roles by their fixed names.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from stacks import constants

# What the kubelet, the VPC CNI and image pulls need on an EKS node; AWS keeps
# these managed policies in step with the node components.
NODE_MANAGED_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
)


class FunctionAccessEntries(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        roles: Mapping[str, iam.IRole],
    ) -> None:
        super().__init__(scope, construct_id)
        for handler, role in roles.items():
            eks.CfnAccessEntry(
                self,
                handler.capitalize(),
                cluster_name=cluster_name,
                principal_arn=role.role_arn,
                type="STANDARD",
                kubernetes_groups=list(constants.KUBERNETES_GROUPS[handler]),
            )


def node_access_entry(scope: Construct, construct_id: str, *, cluster_name: str, principal_arn: str) -> None:
    """Lets the GPU nodes Squall creates join one cluster."""
    # EC2_LINUX entries put the node in system:nodes, as aws-auth did.
    eks.CfnAccessEntry(
        scope, construct_id, cluster_name=cluster_name, principal_arn=principal_arn, type="EC2_LINUX"
    )


class NodeIdentity(Construct):
    """The role and instance profile of the GPU nodes in the groups Squall creates.

    IAM is global, so the capacity stacks of every region use this one instance
    profile by name, whichever cluster their groups join. ``cluster_name``: the
    home-region cluster whose access entry for the role lives here; every other
    cluster that created nodes join gets its entry from its own stack.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        role_name: str,
        cluster_name: str | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            role_name=role_name,
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="Squall GPU nodes",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in NODE_MANAGED_POLICIES
            ],
        )
        self.instance_profile = iam.InstanceProfile(
            self, "InstanceProfile", role=self.role, instance_profile_name=role_name
        )
        if cluster_name is not None:
            node_access_entry(
                self, "AccessEntry", cluster_name=cluster_name, principal_arn=self.role.role_arn
            )
        NagSuppressions.add_resource_suppressions(
            self.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    reason=(
                        "EKS nodes need exactly these AWS managed policies (kubelet, VPC CNI, "
                        "image pulls); AWS updates them with the node components, which a "
                        "copied inline policy would not follow."
                    ),
                    applies_to=[
                        f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}"
                        for name in NODE_MANAGED_POLICIES
                    ],
                )
            ],
        )
