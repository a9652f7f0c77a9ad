"""The artifacts bucket: code archives in, each team's checkpoints and outputs out.

Layout (the CLI, the worker entrypoint and the IAM below agree on it):

    code/<team>/<sha256 of the archive>.tar.gz    what `squall submit --code` uploads
    teams/<team>/...                              checkpoints, event files, outputs

Encrypted with S3-managed keys (SSE-S3), so neither the job roles nor the
researchers need KMS permissions; TLS only; public access blocked; objects
owned by the bucket owner (no ACLs). Versioned, because trainers overwrite
their checkpoints in place and a bad run (or a mistaken delete) would otherwise
lose the last good one; noncurrent versions expire after a few days, which
bounds what versioning costs. Code archives are content-addressed and expire a
fixed time after upload (longer than the longest job may run). Server access
logs go to a second bucket, kept for a year.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from stacks import constants
from stacks.config import ArtifactsConfig

_ACCESS_LOGS_BY_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"


def bucket_arn(name: str) -> str:
    """The ARN of a bucket named in cdk.json (S3 ARNs carry neither region nor account)."""
    return f"arn:{cdk.Aws.PARTITION}:s3:::{name}"


@dataclass(frozen=True)
class TeamBuckets:
    """The buckets that hold the teams' prefixes, by ARN: the artifacts bucket (code archives
    and outputs) and the buckets of ``artifacts.buckets`` (outputs only)."""

    artifacts: str
    others: tuple[str, ...] = ()

    @property
    def all(self) -> list[str]:
        return [self.artifacts, *self.others]


def code_objects(bucket: str, team: str) -> str:
    """ARN pattern of a team's code archives in the bucket whose ARN is `bucket`."""
    return f"{bucket}/{constants.CODE_PREFIX}/{team}/*"


def team_objects(bucket: str, team: str) -> str:
    """ARN pattern of a team's checkpoints and outputs in the bucket whose ARN is `bucket`."""
    return f"{bucket}/{constants.TEAMS_PREFIX}/{team}/*"


def list_prefixes(team: str, *, code: bool) -> list[str]:
    """`s3:prefix` values a team may list: its own prefixes, nothing above them."""
    prefixes = [f"{constants.TEAMS_PREFIX}/{team}/", f"{constants.TEAMS_PREFIX}/{team}/*"]
    if code:
        prefixes += [f"{constants.CODE_PREFIX}/{team}/", f"{constants.CODE_PREFIX}/{team}/*"]
    return prefixes


class ArtifactsBucket(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: ArtifactsConfig) -> None:
        super().__init__(scope, construct_id)
        # S3 delivers the access logs under a bucket policy (scoped to this bucket's
        # ARN and account), not the log-delivery ACL: ACLs stay disabled on both buckets.
        self.node.set_context(_ACCESS_LOGS_BY_POLICY, True)
        self.access_logs = _private_bucket(
            self,
            "AccessLogs",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs",
                    expiration=cdk.Duration.days(constants.ACCESS_LOG_EXPIRATION_DAYS),
                )
            ],
        )
        NagSuppressions.add_resource_suppressions(
            self.access_logs,
            [
                NagPackSuppression(
                    id="AwsSolutions-S1",
                    reason=(
                        "This bucket receives the artifacts bucket's server access logs; logging "
                        "it into itself would log its own log deliveries, without end."
                    ),
                )
            ],
        )
        noncurrent = cdk.Duration.days(settings.noncurrent_version_days)
        rules = [
            s3.LifecycleRule(
                id="expire-code",
                prefix=f"{constants.CODE_PREFIX}/",
                expiration=cdk.Duration.days(settings.code_expiration_days),
            ),
            s3.LifecycleRule(
                id="incomplete-uploads",
                abort_incomplete_multipart_upload_after=cdk.Duration.days(constants.INCOMPLETE_UPLOAD_DAYS),
            ),
        ]
        if settings.versioned:
            rules.append(
                s3.LifecycleRule(
                    id="noncurrent-versions",
                    noncurrent_version_expiration=noncurrent,
                    expired_object_delete_marker=True,
                )
            )
        self.bucket = _private_bucket(
            self,
            "Bucket",
            versioned=settings.versioned,
            lifecycle_rules=rules,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="artifacts/",
        )


def _private_bucket(scope: Construct, construct_id: str, **options: Any) -> s3.Bucket:
    """A bucket encrypted by S3, reached only over TLS, never public, with ACLs disabled, and kept when
    the stack goes (checkpoints and outputs outlive a stack that is torn down by mistake)."""
    return s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        removal_policy=cdk.RemovalPolicy.RETAIN,
        **options,
    )
