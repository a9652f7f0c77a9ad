"""The job pods' own AWS identity: one IAM role per team namespace, through EKS Pod Identity.

Squall's job pods run under the service account ``squall-job`` of their team
namespace (stacks/rbac renders it). An ``AWS::EKS::PodIdentityAssociation``
maps that service account to the namespace's role, which the Pod Identity
Agent on each node hands to the pod's AWS SDK; the node's own role stays out
of reach (created node groups set the IMDS hop limit to 1).

The role may read its teams' code archives and read and write their
``teams/<team>/`` prefixes, in the artifacts bucket and in the buckets named in
``artifacts.buckets``; nothing else. Its trust policy admits only EKS Pod
Identity acting for this account's cluster, for ``squall-job`` in this
namespace (the session tags Pod Identity sets), so another association in the
account cannot borrow it.

Teams that share a namespace share its service account, so they share one role
(Kubernetes cannot tell their pods apart either); it covers each of their
prefixes.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from stacks import constants
from stacks.artifacts import TeamBuckets, code_objects, list_prefixes, team_objects
from stacks.config import ClusterConfig

# What a trainer does with its checkpoints and outputs: write, read back, prune old
# checkpoints, and upload large files in parts.
TEAM_OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)


def cluster_arn(scope: Construct, cluster: ClusterConfig) -> str:
    return cdk.Stack.of(scope).format_arn(
        service="eks", region=cluster.region, resource="cluster", resource_name=cluster.name
    )


def pod_identity_principal(
    scope: Construct, *, cluster: ClusterConfig, namespace: str, service_account: str
) -> iam.IPrincipal:
    """EKS Pod Identity, for one service account of one namespace of this account's cluster."""
    conditions = {
        "StringEquals": {
            "aws:SourceAccount": cdk.Stack.of(scope).account,
            "aws:RequestTag/eks-cluster-arn": cluster_arn(scope, cluster),
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account,
        }
    }
    # AssumeRole and TagSession: Pod Identity tags each session with the pod's cluster,
    # namespace and service account, which the conditions above check.
    return iam.PrincipalWithConditions(
        iam.ServicePrincipal(constants.POD_IDENTITY_PRINCIPAL), conditions
    ).with_session_tags()


class JobIdentities(Construct):
    """A role and a Pod Identity association for ``squall-job`` in every team namespace."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterConfig,
        namespace_teams: dict[str, tuple[str, ...]],
        buckets: TeamBuckets,
        install_agent: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.agent: eks.CfnAddon | None = None
        if install_agent:
            self.agent = eks.CfnAddon(
                self,
                "PodIdentityAgent",
                cluster_name=cluster.name,
                addon_name=constants.POD_IDENTITY_AGENT_ADDON,
            )
        self.roles: dict[str, iam.Role] = {}
        self.associations: dict[str, eks.CfnPodIdentityAssociation] = {}
        for namespace, teams in sorted(namespace_teams.items()):
            role = iam.Role(
                self,
                f"{namespace}-Role",
                assumed_by=pod_identity_principal(
                    self, cluster=cluster, namespace=namespace, service_account=constants.JOB_SERVICE_ACCOUNT
                ),
                description=f"Squall jobs of {', '.join(teams)} (namespace {namespace})"[:1000],
                inline_policies={"team-buckets": job_policy(teams=teams, buckets=buckets)},
            )
            association = eks.CfnPodIdentityAssociation(
                self,
                f"{namespace}-Association",
                cluster_name=cluster.name,
                namespace=namespace,
                service_account=constants.JOB_SERVICE_ACCOUNT,
                role_arn=role.role_arn,
            )
            if self.agent is not None:
                association.add_dependency(self.agent)
            _suppress_prefix_wildcards(role)
            self.roles[namespace] = role
            self.associations[namespace] = association


def job_policy(*, teams: Sequence[str], buckets: TeamBuckets) -> iam.PolicyDocument:
    """Read the teams' code; read and write their teams/<team>/ prefixes; list only there."""
    statements = [
        iam.PolicyStatement(
            sid="ReadTeamCode",
            actions=["s3:GetObject"],
            resources=[code_objects(buckets.artifacts, team) for team in teams],
        ),
        iam.PolicyStatement(
            sid="ReadWriteTeamOutputs",
            actions=list(TEAM_OBJECT_ACTIONS),
            resources=[team_objects(bucket, team) for bucket in buckets.all for team in teams],
        ),
        iam.PolicyStatement(
            sid="ListTeamOutputs",
            actions=["s3:ListBucket"],
            resources=buckets.all,
            conditions={
                "StringLike": {"s3:prefix": [p for team in teams for p in list_prefixes(team, code=False)]}
            },
        ),
    ]
    return iam.PolicyDocument(statements=statements)


def _suppress_prefix_wildcards(role: iam.Role) -> None:
    NagSuppressions.add_resource_suppressions(
        role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "Object ARNs end in /* under the team's own prefixes only (code/<team>/ and "
                    "teams/<team>/): a job writes checkpoints and outputs whose keys it chooses "
                    "at run time, so the prefix is the narrowest scope S3 allows."
                ),
                applies_to=[RegexAppliesTo(regex=r"/^Resource::.*\/(code|teams)\/[A-Za-z0-9._-]+\/\*$/")],
            )
        ],
    )
