"""What a team's researchers need for `squall logs`, `squall tensorboard` and `submit --code`.

One customer managed policy per team, ``<prefix>-researcher-<team>-<homeRegion>``,
to attach to the team's users or roles:

- logs:GetLogEvents on the team's streams of every cluster's application log group
  (``/aws/containerinsights/<cluster>/application``, in the cluster's region): the log
  agent names each stream ``<host>-application.var.log.containers.<pod>_<namespace>_<container>-<id>.log``
  and Kubernetes names hold no ``_``, so ``*_<namespace>_*`` matches the team
  namespace's streams and no other's;
- logs:DescribeLogStreams on those groups (IAM cannot scope it below a group: it lists
  every stream's name, not its content); with ``researcherLogAccess: group`` also
  logs:FilterLogEvents, which is group-level too and so reads every team's output;
- read of the team's ``teams/<team>/`` prefixes (event files, checkpoints, outputs)
  in the artifacts bucket and the buckets of ``artifacts.buckets``, listing there only;
- read and write of ``code/<team>/`` in the artifacts bucket (the upload, and the
  HeadObject that skips an archive already there);
- read of the model service records in the job table (``squall services``,
  ``describe`` and ``predict``): GetItem and Query only where the partition key
  starts with ``SERVICE#`` (a service's record and events), Query of the status
  index only where it starts with ``SERVICE_STATUS#`` (``dynamodb:LeadingKeys``).
  Job records stay out of reach, as before. A model service's name is unique
  installation-wide and its record holds no data, only where it runs, so
  researchers can read every team's service records.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from squall.core.logstreams import log_group
from stacks import constants
from stacks.artifacts import TeamBuckets, code_objects, list_prefixes, team_objects
from stacks.config import ClusterConfig


def log_group_arn(scope: Construct, cluster: ClusterConfig) -> str:
    """A cluster's application log group, in the cluster's region (where its log agent writes)."""
    return cdk.Stack.of(scope).format_arn(
        service="logs",
        region=cluster.region,
        resource="log-group",
        resource_name=log_group(cluster.name),
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )


def team_streams_arn(group_arn: str, namespace: str) -> str:
    """Every stream of one namespace's containers (Kubernetes names hold no "_")."""
    return f"{group_arn}:log-stream:*_{namespace}_*"


def job_table_arn(scope: Construct, prefix: str) -> str:
    """The control plane's job table, by its name: this stack refers to nothing of that stack."""
    return cdk.Stack.of(scope).format_arn(
        service="dynamodb", resource="table", resource_name=constants.table_name(prefix)
    )


def model_service_reads(table_arn: str) -> list[iam.PolicyStatement]:
    """Reading model service records and events only: never a job's record (dynamodb:LeadingKeys)."""
    return [
        iam.PolicyStatement(
            sid="ReadModelServices",
            actions=["dynamodb:GetItem", "dynamodb:Query"],
            resources=[table_arn],
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{constants.SERVICE_KEY_PREFIX}*"]}
            },
        ),
        iam.PolicyStatement(
            sid="ListModelServices",
            actions=["dynamodb:Query"],
            resources=[f"{table_arn}/index/{constants.STATUS_INDEX}"],
            conditions={
                "ForAllValues:StringLike": {
                    "dynamodb:LeadingKeys": [f"{constants.SERVICE_STATUS_KEY_PREFIX}*"]
                }
            },
        ),
    ]


class ResearcherPolicies(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        home_region: str,
        clusters: Sequence[ClusterConfig],
        teams: dict[str, str],
        buckets: TeamBuckets,
        filter_whole_group: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        group_arns = [log_group_arn(self, cluster) for cluster in clusters]
        table_arn = job_table_arn(self, prefix)
        # DescribeLogStreams is authorised on the group; older IAM examples write it
        # with ":*", which names the same group and no more actions.
        group_resources = [arn for group_arn in group_arns for arn in (group_arn, f"{group_arn}:*")]
        self.policies: dict[str, iam.ManagedPolicy] = {}
        for team, namespace in sorted(teams.items()):
            statements = [
                iam.PolicyStatement(
                    sid="ReadTeamLogStreams",
                    actions=["logs:GetLogEvents"],
                    resources=[team_streams_arn(group_arn, namespace) for group_arn in group_arns],
                ),
                iam.PolicyStatement(
                    sid="ListLogStreams",
                    actions=["logs:DescribeLogStreams"],
                    resources=group_resources,
                ),
                iam.PolicyStatement(
                    sid="ReadTeamOutputs",
                    actions=["s3:GetObject"],
                    resources=[team_objects(bucket, team) for bucket in buckets.all],
                ),
                iam.PolicyStatement(
                    sid="UploadTeamCode",
                    actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                    resources=[code_objects(buckets.artifacts, team)],
                ),
                iam.PolicyStatement(
                    sid="ListTeamArtifacts",
                    actions=["s3:ListBucket"],
                    resources=[buckets.artifacts],
                    conditions={"StringLike": {"s3:prefix": list_prefixes(team, code=True)}},
                ),
            ]
            statements += model_service_reads(table_arn)
            if buckets.others:
                statements.append(
                    iam.PolicyStatement(
                        sid="ListTeamOutputs",
                        actions=["s3:ListBucket"],
                        resources=list(buckets.others),
                        conditions={"StringLike": {"s3:prefix": list_prefixes(team, code=False)}},
                    )
                )
            if filter_whole_group:
                statements.append(
                    iam.PolicyStatement(
                        sid="FilterApplicationLogs",
                        actions=["logs:FilterLogEvents"],
                        resources=group_resources,
                    )
                )
            policy = iam.ManagedPolicy(
                self,
                f"{team}-Policy",
                managed_policy_name=constants.researcher_policy_name(prefix, team, home_region),
                description=(
                    f"Squall researchers of team {team}: its logs, outputs and code uploads; model services"
                ),
                statements=statements,
            )
            NagSuppressions.add_resource_suppressions(
                policy,
                [
                    NagPackSuppression(
                        id="AwsSolutions-IAM5",
                        reason=(
                            "Wildcards only inside the team's own scope: its S3 prefixes (keys chosen "
                            "at run time), its namespace's log streams (*_<namespace>_*, named by node "
                            "and container id), and each cluster's application log group's streams "
                            "for DescribeLogStreams, which IAM authorises on the group."
                        ),
                        applies_to=[
                            RegexAppliesTo(regex=r"/^Resource::.*\/(code|teams)\/[A-Za-z0-9._-]+\/\*$/"),
                            RegexAppliesTo(regex=r"/^Resource::.*:log-stream:\*_[a-z0-9-]+_\*$/"),
                            RegexAppliesTo(regex=r"/^Resource::.*\/application:\*$/"),
                        ],
                    )
                ],
            )
            self.policies[team] = policy
