"""The workloads stack (issue 14): the artifacts bucket, the job pods' Pod Identity roles,
the log agent option and the researchers' policies; and the IMDS hop limit of created nodes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from stacks import constants
from stacks.config import ConfigError, SquallConfig, load_cdk_json_context

from .helpers import as_list, resources
from .scenario import ACCOUNT, DATA_BUCKET, HOME, AppRun, Synthesis

pytestmark = pytest.mark.slow

BUCKET = "ArtifactsBucket"  # the construct id inside ArtifactsBucket
LOG_GROUP = "/aws/containerinsights/gpu-training/application"


@pytest.fixture(scope="module")
def workloads(full: Synthesis) -> Template:
    return full.template(full.stacks.workloads)


@pytest.fixture(scope="module")
def template(workloads: Template) -> dict[str, Any]:
    return dict(workloads.to_json())


def _bucket_id(template: dict[str, Any]) -> str:
    (bucket_id,) = [k for k in resources(template, "AWS::S3::Bucket") if k.startswith("ArtifactsBucket")]
    return bucket_id


def _resolved(value: Any) -> str:
    """A resource ARN as text: tokens shown as <LogicalId> or <AWS::Pseudo>."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        return "".join(_resolved(part) for part in value["Fn::Join"][1])
    if "Fn::GetAtt" in value:
        return f"<{value['Fn::GetAtt'][0]}>"
    if "Ref" in value:
        return f"<{value['Ref']}>"
    raise AssertionError(f"unexpected token {value}")


def _statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {**s, "Action": as_list(s["Action"]), "Resource": [_resolved(r) for r in as_list(s["Resource"])]}
        for s in document["Statement"]
    ]


def _role(template: dict[str, Any], namespace: str) -> dict[str, Any]:
    found = [
        r["Properties"]
        for key, r in resources(template, "AWS::IAM::Role").items()
        if key.startswith("JobIdentities")
        and r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"][
            "aws:RequestTag/kubernetes-namespace"
        ]
        == namespace
    ]
    (role,) = found
    return role


def _job_statements(template: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    (policy,) = _role(template, namespace)["Policies"]
    return _statements(policy["PolicyDocument"])


def _researcher_statements(template: dict[str, Any], team: str) -> list[dict[str, Any]]:
    (policy,) = [
        p["Properties"]
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        if p["Properties"]["ManagedPolicyName"] == f"squall-researcher-{team}-{HOME}"
    ]
    return _statements(policy["PolicyDocument"])


# -- the artifacts bucket ----------------------------------------------------------------


def test_artifacts_bucket_is_encrypted_private_versioned_and_logged(
    workloads: Template, template: dict[str, Any]
) -> None:
    bucket = template["Resources"][_bucket_id(template)]
    properties = bucket["Properties"]
    assert properties["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    }
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert properties["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    # Checkpoints outlive the stack.
    assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    # Server access logs go to a second bucket, itself encrypted and private.
    logs_id = properties["LoggingConfiguration"]["DestinationBucketName"]["Ref"]
    assert logs_id != _bucket_id(template)
    access_logs = template["Resources"][logs_id]["Properties"]
    assert access_logs["BucketEncryption"] == properties["BucketEncryption"]
    assert access_logs["PublicAccessBlockConfiguration"] == properties["PublicAccessBlockConfiguration"]


def test_artifacts_bucket_refuses_plain_http(template: dict[str, Any]) -> None:
    bucket_id = _bucket_id(template)
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in resources(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    denies = [s for s in _statements(policy) if s["Effect"] == "Deny"]
    assert denies == [
        {
            "Action": ["s3:*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Resource": [f"<{bucket_id}>", f"<{bucket_id}>/*"],
        }
    ]
    # Nothing in the bucket policy allows anyone in.
    assert [s for s in _statements(policy) if s["Effect"] == "Allow"] == []


def test_old_code_archives_and_noncurrent_versions_expire(template: dict[str, Any]) -> None:
    rules = {
        r["Id"]: r
        for r in template["Resources"][_bucket_id(template)]["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    assert rules["expire-code"] == {
        "Id": "expire-code",
        "Prefix": "code/",
        "ExpirationInDays": 90,
        "Status": "Enabled",
    }
    assert rules["noncurrent-versions"] == {
        "Id": "noncurrent-versions",
        "NoncurrentVersionExpiration": {"NoncurrentDays": 7},
        "ExpiredObjectDeleteMarker": True,
        "Status": "Enabled",
    }
    assert rules["incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    # Team outputs never expire on their own: no rule without a prefix expires current objects.
    assert [r["Id"] for r in rules.values() if "ExpirationInDays" in r] == ["expire-code"]


def test_the_bucket_name_is_an_output(template: dict[str, Any]) -> None:
    output = template["Outputs"]["ArtifactsBucket"]
    assert output["Value"] == {"Ref": _bucket_id(template)}
    assert "SQUALL_ARTIFACTS_BUCKET" in output["Description"]


def test_an_unversioned_bucket_has_no_noncurrent_rule() -> None:
    template = _workloads({"artifacts": {"versioned": False, "codeExpirationDays": 45}})
    (bucket,) = [
        b for k, b in resources(template, "AWS::S3::Bucket").items() if k.startswith("ArtifactsBucket")
    ]
    assert "VersioningConfiguration" not in bucket["Properties"]
    rules = {r["Id"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert set(rules) == {"expire-code", "incomplete-uploads"}
    assert rules["expire-code"]["ExpirationInDays"] == 45


# -- job pods' identity --------------------------------------------------------------------


def test_each_team_namespace_gets_one_role_trusted_by_pod_identity_for_squall_job(
    template: dict[str, Any],
) -> None:
    for namespace in ("team-research", "team-vision"):
        (trust,) = _role(template, namespace)["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
        conditions = trust["Condition"]["StringEquals"]
        assert conditions["aws:RequestTag/kubernetes-namespace"] == namespace
        assert conditions["aws:RequestTag/kubernetes-service-account"] == "squall-job"
        assert conditions["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}
        assert _resolved(conditions["aws:RequestTag/eks-cluster-arn"]).endswith(
            ":eks:us-west-2:<AWS::AccountId>:cluster/gpu-training"
        )
    job_roles = [k for k in resources(template, "AWS::IAM::Role") if k.startswith("JobIdentities")]
    assert len(job_roles) == 2


def test_a_job_role_reaches_only_its_teams_prefixes(template: dict[str, Any]) -> None:
    bucket = f"<{_bucket_id(template)}>"
    data = f"arn:<AWS::Partition>:s3:::{DATA_BUCKET}"
    statements = {s["Sid"]: s for s in _job_statements(template, "team-research")}
    assert statements["ReadTeamCode"]["Action"] == ["s3:GetObject"]
    assert statements["ReadTeamCode"]["Resource"] == [f"{bucket}/code/research/*"]
    outputs = statements["ReadWriteTeamOutputs"]
    assert set(outputs["Action"]) == {
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    }
    assert outputs["Resource"] == [f"{bucket}/teams/research/*", f"{data}/teams/research/*"]
    listing = statements["ListTeamOutputs"]
    assert listing["Action"] == ["s3:ListBucket"] and listing["Resource"] == [bucket, data]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["teams/research/", "teams/research/*"]}}
    assert set(statements) == {"ReadTeamCode", "ReadWriteTeamOutputs", "ListTeamOutputs"}
    # and nothing of the other team, nothing bucket-wide, no other service
    text = json.dumps(list(statements.values()))
    assert "vision" not in text
    resources_ = [r for s in statements.values() for r in s["Resource"]]
    assert f"{bucket}/*" not in resources_ and "*" not in resources_
    assert all(a.startswith("s3:") for s in statements.values() for a in s["Action"])
    # The other team's role, the other way round.
    assert "research" not in json.dumps(_job_statements(template, "team-vision"))
    # Only through the role's inline policy: no managed policy, no other attached policy.
    assert "ManagedPolicyArns" not in _role(template, "team-research")
    attached = [p for p in resources(template, "AWS::IAM::Policy").values()]
    assert all("JobIdentities" not in json.dumps(p["Properties"]["Roles"]) for p in attached)


def test_squall_job_in_each_namespace_is_associated_with_its_role(template: dict[str, Any]) -> None:
    associations = resources(template, "AWS::EKS::PodIdentityAssociation")
    by_namespace = {a["Properties"]["Namespace"]: a["Properties"] for a in associations.values()}
    assert sorted(by_namespace) == ["team-research", "team-vision"]
    roles = {
        key: r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"][
            "aws:RequestTag/kubernetes-namespace"
        ]
        for key, r in resources(template, "AWS::IAM::Role").items()
        if key.startswith("JobIdentities")
    }
    for namespace, association in by_namespace.items():
        assert association["ClusterName"] == "gpu-training"
        assert association["ServiceAccount"] == constants.JOB_SERVICE_ACCOUNT == "squall-job"
        role_id = association["RoleArn"]["Fn::GetAtt"][0]
        assert roles[role_id] == namespace
    # The role ARNs are outputs, named after the namespaces.
    assert {k for k in template["Outputs"] if k.startswith("JobRoleArn")} == {
        "JobRoleArnTeamResearch",
        "JobRoleArnTeamVision",
    }


def test_teams_sharing_a_namespace_share_its_one_identity() -> None:
    template = _workloads({"teams": {"research": "team-ml", "nlp": "team-ml", "vision": "team-vision"}})
    associations = resources(template, "AWS::EKS::PodIdentityAssociation")
    assert sorted(a["Properties"]["Namespace"] for a in associations.values()) == ["team-ml", "team-vision"]
    statements = {s["Sid"]: s for s in _job_statements(template, "team-ml")}
    code = statements["ReadTeamCode"]["Resource"]
    assert [r.split("/", 1)[1] for r in code] == ["code/research/*", "code/nlp/*"]
    assert "vision" not in json.dumps(list(statements.values()))
    # Researchers stay per team.
    names = sorted(
        p["Properties"]["ManagedPolicyName"] for p in resources(template, "AWS::IAM::ManagedPolicy").values()
    )
    assert names == [f"squall-researcher-{t}-{HOME}" for t in ("nlp", "research", "vision")]


def test_outputs_of_look_alike_team_names_do_not_collide() -> None:
    from stacks.deployment import output_keys

    assert output_keys({"a-b": 1, "a_b": 2, "ab": 3, "A.b": 4}) == {
        "A.b": "AB",
        "a-b": "AB2",
        "a_b": "AB3",
        "ab": "Ab",
    }
    template = _workloads({"teams": {"ml-a": "team-a", "ml_a": "team-b"}})
    policies = {k for k in template["Outputs"] if k.startswith("ResearcherPolicyArn")}
    assert policies == {"ResearcherPolicyArnMlA", "ResearcherPolicyArnMlA2"}


def test_the_pod_identity_agent_is_installed_only_when_asked(
    template: dict[str, Any], default_app: AppRun
) -> None:
    addons = {a["Properties"]["AddonName"]: (k, a) for k, a in resources(template, "AWS::EKS::Addon").items()}
    agent_id, agent = addons["eks-pod-identity-agent"]
    assert agent["Properties"]["ClusterName"] == "gpu-training"
    # Associations are created once the agent is there.
    for association in resources(template, "AWS::EKS::PodIdentityAssociation").values():
        assert agent_id in as_list(association.get("DependsOn", []))
    default = json.loads((default_app.outdir / "squall-workloads.template.json").read_text())
    assert resources(default, "AWS::EKS::Addon") == {}
    # The default still creates the roles and associations (for a cluster that runs the agent).
    assert len(resources(default, "AWS::EKS::PodIdentityAssociation")) == 1


# -- the log agent ----------------------------------------------------------------------


def test_log_agent_install_adds_the_observability_addon_with_its_pod_identity(
    template: dict[str, Any],
) -> None:
    addons = {a["Properties"]["AddonName"]: (k, a) for k, a in resources(template, "AWS::EKS::Addon").items()}
    agent_id, _ = addons["eks-pod-identity-agent"]
    _, addon = addons["amazon-cloudwatch-observability"]
    assert addon["Properties"]["ClusterName"] == "gpu-training"
    assert agent_id in as_list(addon["DependsOn"])
    (association,) = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "cloudwatch-agent"
    role = template["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-namespace"] == "amazon-cloudwatch"
    assert (
        trust["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-service-account"] == "cloudwatch-agent"
    )
    assert [_resolved(arn) for arn in role["ManagedPolicyArns"]] == [
        "arn:<AWS::Partition>:iam::aws:policy/CloudWatchAgentServerPolicy"
    ]


def test_log_agent_existing_leaves_the_cluster_alone(default_app: AppRun) -> None:
    default = json.loads((default_app.outdir / "squall-workloads.template.json").read_text())
    assert resources(default, "AWS::EKS::Addon") == {}
    assert not [
        r for r in resources(default, "AWS::IAM::Role").values() if "cloudwatch" in json.dumps(r).lower()
    ]
    # and the researchers' policies are there all the same: the existing agent ships the logs
    assert len(resources(default, "AWS::IAM::ManagedPolicy")) == 1


# -- researchers ------------------------------------------------------------------------


def test_a_researcher_reads_only_its_teams_log_streams(template: dict[str, Any]) -> None:
    group = f"arn:<AWS::Partition>:logs:us-west-2:<AWS::AccountId>:log-group:{LOG_GROUP}"
    statements = {s["Sid"]: s for s in _researcher_statements(template, "research")}
    assert statements["ReadTeamLogStreams"]["Action"] == ["logs:GetLogEvents"]
    assert statements["ReadTeamLogStreams"]["Resource"] == [f"{group}:log-stream:*_team-research_*"]
    assert statements["ListLogStreams"]["Action"] == ["logs:DescribeLogStreams"]
    assert statements["ListLogStreams"]["Resource"] == [group, f"{group}:*"]
    # FilterLogEvents is group-level in IAM: not granted unless researcherLogAccess is "group".
    actions = {a for s in statements.values() for a in s["Action"]}
    assert "logs:FilterLogEvents" not in actions
    assert {a for a in actions if a.startswith("logs:")} == {"logs:GetLogEvents", "logs:DescribeLogStreams"}


def test_a_researcher_reads_its_teams_outputs_and_uploads_only_its_teams_code(
    template: dict[str, Any],
) -> None:
    bucket = f"<{_bucket_id(template)}>"
    data = f"arn:<AWS::Partition>:s3:::{DATA_BUCKET}"
    statements = {s["Sid"]: s for s in _researcher_statements(template, "research")}
    assert statements["ReadTeamOutputs"]["Action"] == ["s3:GetObject"]
    assert statements["ReadTeamOutputs"]["Resource"] == [
        f"{bucket}/teams/research/*",
        f"{data}/teams/research/*",
    ]
    assert statements["UploadTeamCode"]["Resource"] == [f"{bucket}/code/research/*"]
    assert "s3:PutObject" in statements["UploadTeamCode"]["Action"]
    writes = [s for s in statements.values() if "s3:PutObject" in s["Action"]]
    assert writes == [statements["UploadTeamCode"]]
    assert statements["ListTeamArtifacts"]["Condition"] == {
        "StringLike": {
            "s3:prefix": ["teams/research/", "teams/research/*", "code/research/", "code/research/*"]
        }
    }
    assert statements["ListTeamOutputs"]["Resource"] == [data]
    assert "vision" not in json.dumps(list(statements.values()))
    assert "research" not in json.dumps(_researcher_statements(template, "vision"))
    outputs = {k for k in template["Outputs"] if k.startswith("ResearcherPolicyArn")}
    assert outputs == {"ResearcherPolicyArnResearch", "ResearcherPolicyArnVision"}


def test_researcher_log_access_group_adds_filter_on_the_group(large: Synthesis) -> None:
    template = dict(large.template(large.stacks.workloads).to_json())
    policies = resources(template, "AWS::IAM::ManagedPolicy")
    assert len(policies) == 12
    for policy in policies.values():
        statements = {s["Sid"]: s for s in _statements(policy["Properties"]["PolicyDocument"])}
        assert statements["FilterApplicationLogs"]["Action"] == ["logs:FilterLogEvents"]
        assert all(
            r.split(":log-group:")[1].startswith(LOG_GROUP)
            for r in statements["FilterApplicationLogs"]["Resource"]
        )
        # the streams it may GetLogEvents from stay its own
        (streams,) = statements["ReadTeamLogStreams"]["Resource"]
        team = policy["Properties"]["ManagedPolicyName"].split("-")[2]
        assert streams.endswith(f":log-stream:*_team-{team.removeprefix('team')}_*")


# -- created nodes ------------------------------------------------------------------------


def test_every_created_launch_template_requires_imdsv2_with_one_hop(
    full: Synthesis, large: Synthesis
) -> None:
    seen = 0
    for synthesis in (full, large):
        for stack in synthesis.stacks.capacity.values():
            for launch_template in resources(
                synthesis.template(stack).to_json(), "AWS::EC2::LaunchTemplate"
            ).values():
                options = launch_template["Properties"]["LaunchTemplateData"]["MetadataOptions"]
                assert options["HttpTokens"] == "required"
                assert options["HttpPutResponseHopLimit"] == 1
                seen += 1
    assert seen >= 5


# -- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"teams": {"*": "team-a"}}, "teams.*: a team name is an S3 prefix"),
        ({"teams": {"a/b": "team-a"}}, "teams.a/b: a team name is an S3 prefix"),
        ({"teams": {"${aws:username}": "team-a"}}, "teams.${aws:username}: a team name"),
        (
            {"artifacts": {"codeExpirationDays": 30}},
            "artifacts.codeExpirationDays: must be more than policy.maxRuntimeLimit (30 days)",
        ),
        ({"artifacts": {"noncurrentVersionDays": 0}}, "artifacts.noncurrentVersionDays: at least 1"),
        (
            {"artifacts": {"buckets": ["s3://data"]}},
            'artifacts.buckets[0]: "s3://data" is not an S3 bucket name',
        ),
        ({"artifacts": {"buckets": ["arn:aws:s3:::data"]}}, "artifacts.buckets[0]:"),
        ({"artifacts": {"buckets": ["data-1", "data-1"]}}, "artifacts.buckets: a bucket is named twice"),
        ({"artifacts": {"bucket": "x"}}, "artifacts.bucket: unknown field"),
        ({"logAgent": "yes"}, 'logAgent: one of install, existing, got "yes"'),
        ({"podIdentityAgent": True}, "podIdentityAgent: expected a string, got true"),
        ({"researcherLogAccess": "all"}, "researcherLogAccess: one of streams, group"),
        (
            {"teams": {f"t{i}": f"ns-{i}" for i in range(constants.MAX_TEAMS + 1)}},
            "teams: 91 teams; at most 90",
        ),
    ],
)
def test_workload_settings_mistakes_are_named(change: dict[str, Any], problem: str) -> None:
    context = copy.deepcopy(load_cdk_json_context())
    for key, value in change.items():
        if key == "artifacts":
            context["artifacts"] = {**context["artifacts"], **value}
        else:
            context[key] = value
    with pytest.raises(ConfigError) as caught:
        SquallConfig.from_context(context)
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_code_may_not_expire_before_the_longest_job_ends() -> None:
    context = copy.deepcopy(load_cdk_json_context())
    context["policy"]["maxRuntimeLimit"] = "P100D"
    with pytest.raises(ConfigError, match=r"maxRuntimeLimit \(100 days\)"):
        SquallConfig.from_context(context)
    context["artifacts"]["codeExpirationDays"] = 101
    assert SquallConfig.from_context(context).artifacts.code_expiration_days == 101


def test_the_defaults_install_nothing_on_the_cluster() -> None:
    config = SquallConfig.from_context(load_cdk_json_context())
    assert (config.pod_identity_agent, config.log_agent, config.researcher_log_access) == (
        "existing",
        "existing",
        "streams",
    )
    assert config.artifacts.buckets == () and config.artifacts.versioned


def _workloads(overrides: dict[str, Any]) -> dict[str, Any]:
    """Only the workloads stack, for the settings in `overrides` over cdk.json's."""
    import aws_cdk as cdk

    from stacks.deployment import WorkloadsStack

    context = copy.deepcopy(load_cdk_json_context())
    for key, value in overrides.items():
        context[key] = {**context[key], **value} if key == "artifacts" else value
    config = SquallConfig.from_context(context)
    app = cdk.App(context={"aws:cdk:bundling-stacks": []})
    stack = WorkloadsStack(app, "w", config=config, env=cdk.Environment(account=ACCOUNT, region=HOME))
    return dict(Template.from_stack(stack).to_json())


def test_access_logs_land_under_the_artifacts_prefix(workloads: Template) -> None:
    workloads.has_resource_properties(
        "AWS::S3::Bucket",
        Match.object_like(
            {
                "VersioningConfiguration": {"Status": "Enabled"},
                "LoggingConfiguration": Match.object_like({"LogFilePrefix": "artifacts/"}),
            }
        ),
    )
