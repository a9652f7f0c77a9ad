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

Every cluster gets its own roles and associations: a role trusts Pod Identity of
one cluster only. The home-region cluster's roles carry their policy inline, as
a one-cluster deployment's always did. Clusters with a stack of their own (the
artifacts bucket is in the home region, and a stack in another region cannot
refer to it) attach, per namespace, the same statements as a customer managed
policy with a fixed name, ``<prefix>-job-<namespace>-<homeRegion>``, which the
workloads stack creates (``JobPolicies``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def job_policy_name(prefix: str, namespace: str, home_region: str) -> str:
    """IAM names are global: prefix and home region tell two deployments' policies apart."""
    return f"{prefix}-job-{namespace}-{home_region}"


class JobPolicies(Construct):
    """Per team namespace, the job role's statements as a managed policy with a fixed name,
    for the roles of the clusters whose stacks cannot refer to the artifacts bucket."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        home_region: str,
        namespace_teams: dict[str, tuple[str, ...]],
        buckets: TeamBuckets,
    ) -> None:
        super().__init__(scope, construct_id)
        self.policies: dict[str, iam.ManagedPolicy] = {}
        for namespace, teams in sorted(namespace_teams.items()):
            policy = iam.ManagedPolicy(
                self,
                f"{namespace}-Policy",
                managed_policy_name=job_policy_name(prefix, namespace, home_region),
                description=f"Squall jobs of {', '.join(teams)} (namespace {namespace}), every cluster"[
                    :1000
                ],
                document=job_policy(teams=teams, buckets=buckets),
            )
            _suppress_prefix_wildcards(policy)
            self.policies[namespace] = policy


class JobIdentities(Construct):
    """A role and a Pod Identity association for ``squall-job`` in every team namespace of one cluster.

    ``buckets``: the role's policy inline; or ``shared_policies`` (namespace -> the name
    of its ``JobPolicies`` policy): the role attaches that managed policy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ClusterConfig,
        namespace_teams: dict[str, tuple[str, ...]],
        install_agent: bool,
        buckets: TeamBuckets | None = None,
        shared_policies: Mapping[str, str] | None = None,
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
            principal = pod_identity_principal(
                self, cluster=cluster, namespace=namespace, service_account=constants.JOB_SERVICE_ACCOUNT
            )
            description = f"Squall jobs of {', '.join(teams)} (namespace {namespace})"
            if shared_policies is not None:
                role = iam.Role(
                    self,
                    f"{namespace}-Role",
                    assumed_by=principal,
                    description=f"{description} on cluster {cluster.name}"[:1000],
                    managed_policies=[
                        iam.ManagedPolicy.from_managed_policy_name(
                            self, f"{namespace}-Policy", shared_policies[namespace]
                        )
                    ],
                )
            else:
                assert buckets is not None, "a role needs its buckets or a shared policy"
                role = iam.Role(
                    self,
                    f"{namespace}-Role",
                    assumed_by=principal,
                    description=description[:1000],
                    inline_policies={"team-buckets": job_policy(teams=teams, buckets=buckets)},
                )
                _suppress_prefix_wildcards(role)
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


def _suppress_prefix_wildcards(holder: iam.Role | iam.ManagedPolicy) -> None:
    NagSuppressions.add_resource_suppressions(
        holder,
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
