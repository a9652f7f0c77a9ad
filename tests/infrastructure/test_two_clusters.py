"""Many clusters: one EKS cluster per region, each with its own access, job identities and add-ons.

The synthesis here has three clusters: ``gpu-west`` (home region, with its
certificate), ``gpu-east`` (us-east-1, whose nodes Squall creates) and
``gpu-west-b`` (home region too, no certificate configured). The first keeps the
home stacks' resources, as a one-cluster deployment has them; the other two get a
stack each, in their own region.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Annotations, Match

from squall.core.settings import Settings
from stacks import constants
from stacks.config import ConfigError, SquallConfig, load_cdk_json_context

from .helpers import as_list, resources
from .scenario import FAKE_CA, HOME, NODE_SECURITY_GROUP, NODE_SUBNETS, REMOTE, Synthesis

pytestmark = pytest.mark.slow

WEST, EAST, WEST_B = "gpu-west", "gpu-east", "gpu-west-b"
EAST_ENDPOINT = "https://EAST0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com"
EAST_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nEAST\n-----END CERTIFICATE-----\n").decode()
NAMESPACES = ("team-research", "team-vision")
# The functions whose roles talk to a cluster: each gets an access entry on every cluster.
HANDLERS = tuple(constants.KUBERNETES_GROUPS)


def two_cluster_context() -> dict[str, Any]:
    """cdk.json with a cluster per region, and a second one at home."""
    context = copy.deepcopy(load_cdk_json_context())
    home = context["clusters"][0]
    context["clusters"] = [
        {**home, "name": WEST, "certificateAuthority": FAKE_CA},
        {
            "name": EAST,
            "region": REMOTE,
            "endpoint": EAST_ENDPOINT,
            "certificateAuthority": EAST_CA,
            "serviceCidr": "172.20.0.0/16",
            "kubernetesVersion": "1.32",
        },
        {**home, "name": WEST_B, "endpoint": "https://WESTB.gr7.us-west-2.eks.amazonaws.com"},
    ]
    west, east = context["nodeGroups"]
    west["cluster"], east["cluster"] = WEST, EAST
    context["nodeGroups"].append(
        {**west, "name": "p3-usw2-b", "asgName": "squall-p3-usw2-b", "cluster": WEST_B}
    )
    # us-east-1's groups are created: their nodes join gpu-east.
    context["capacity"][REMOTE] = {
        "createGroups": True,
        "subnetIds": list(NODE_SUBNETS),
        "securityGroupIds": [NODE_SECURITY_GROUP],
    }
    context["teams"] = {"research": "team-research", "vision": "team-vision"}
    context["podIdentityAgent"] = "install"
    context["logAgent"] = "install"
    return context


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesis]:
    from app import create_app

    outdir = tmp_path_factory.mktemp("cdk-two-clusters")
    app, stacks = create_app(
        context={**two_cluster_context(), "aws:cdk:bundling-stacks": []}, outdir=str(outdir)
    )
    app.synth()
    yield Synthesis(app=app, stacks=stacks, outdir=outdir)


def _template(two: Synthesis, stack: str) -> dict[str, Any]:
    return json.loads((two.outdir / f"squall-{stack}.template.json").read_text())


def _resolved(value: Any) -> str:
    """A Fn::Join of strings and Refs, as one readable string."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(_resolved(part) for part in value["Fn::Join"][1])
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    return json.dumps(value)


def _entries(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["Properties"] for r in resources(template, "AWS::EKS::AccessEntry").values()]


# -- settings ---------------------------------------------------------------------------


def test_the_one_cluster_form_reads_as_a_list_of_one() -> None:
    context = copy.deepcopy(load_cdk_json_context())
    listed = SquallConfig.from_context(context)
    (cluster,) = context.pop("clusters")
    context["cluster"] = cluster
    single = SquallConfig.from_context(context)
    # the same deployment, whichever form it is written in
    assert single == listed
    assert [c.name for c in single.clusters] == ["gpu-training"]
    assert single.primary_cluster == single.clusters[0] and single.other_clusters == ()
    # the stretched cluster owns the groups of both regions
    assert {g.region: g.cluster_name for g in single.node_groups} == {
        HOME: "gpu-training",
        REMOTE: "gpu-training",
    }
    # a region left out of `cluster` is the home region, as before
    del context["cluster"]["region"]
    assert SquallConfig.from_context(context).clusters[0].region == HOME


def test_cluster_mistakes_are_named_by_their_field() -> None:
    context = two_cluster_context()
    context["cluster"] = context["clusters"][0]  # both forms
    del context["nodeGroups"][0]["cluster"]  # more than one cluster: required
    context["nodeGroups"][1]["cluster"] = "gpu-north"  # not configured
    context["clusters"][2]["name"] = EAST  # twice
    context["clusters"][1]["zone"] = "a"  # not a field
    context["clusters"][1]["region"] = "eu-west-1"  # not one of regions
    with pytest.raises(ConfigError) as caught:
        SquallConfig.from_context(context)
    problems = "\n".join(caught.value.problems)
    for expected in (
        "cluster: give either clusters (a list) or cluster (one cluster), not both",
        "nodeGroups[0].cluster: required when more than one cluster is configured (one of gpu-west, gpu-east)",
        'nodeGroups[1].cluster: "gpu-north" is not a configured cluster (one of gpu-west, gpu-east)',
        "clusters[2].name: gpu-east is configured twice",
        "clusters[1].zone: unknown field",
        "clusters[1].region: eu-west-1 is not one of regions",
    ):
        assert expected in problems


def test_a_cluster_that_created_nodes_join_needs_its_certificate() -> None:
    context = two_cluster_context()
    context["clusters"][1]["certificateAuthority"] = ""
    with pytest.raises(
        ConfigError, match=re.escape("clusters[1].certificateAuthority: required for the nodes")
    ):
        SquallConfig.from_context(context)
    # the home cluster's groups are existing ones: it may leave its certificate to EKS
    context = two_cluster_context()
    context["clusters"][0]["certificateAuthority"] = ""
    assert SquallConfig.from_context(context).clusters[0].certificate_authority == ""


# -- stacks -----------------------------------------------------------------------------


def test_every_other_cluster_gets_a_stack_in_its_own_region(two: Synthesis) -> None:
    stacks = two.stacks
    assert {name: (s.stack_name, s.region) for name, s in stacks.clusters.items()} == {
        EAST: ("squall-cluster-gpu-east", REMOTE),
        WEST_B: ("squall-cluster-gpu-west-b", HOME),
    }
    for stack in stacks.clusters.values():
        # the roles it names and the policies it attaches exist first
        assert {d.stack_name for d in stack.dependencies} == {"squall-control-plane", "squall-workloads"}
    # created nodes join gpu-east with its stack's access entry
    assert "squall-cluster-gpu-east" in {d.stack_name for d in stacks.capacity[REMOTE].dependencies}


def test_every_function_role_has_an_access_entry_on_every_cluster(two: Synthesis) -> None:
    home = _template(two, "control-plane")
    role_names = {
        logical_id: _resolved(r["Properties"]["RoleName"])
        for logical_id, r in resources(home, "AWS::IAM::Role").items()
        if "RoleName" in r["Properties"]
    }
    expected = {(f"squall-{h}-{HOME}", tuple(constants.KUBERNETES_GROUPS[h])) for h in HANDLERS}
    # the home cluster: the control plane's entries, as with one cluster
    west = [e for e in _entries(home) if e["Type"] == "STANDARD"]
    assert {e["ClusterName"] for e in west} == {WEST}
    found = {(role_names[e["PrincipalArn"]["Fn::GetAtt"][0]], tuple(e["KubernetesGroups"])) for e in west}
    assert found == expected
    # every other cluster: its own stack's, naming the same roles by their fixed names
    for cluster, stack in ((EAST, "cluster-gpu-east"), (WEST_B, "cluster-gpu-west-b")):
        entries = [e for e in _entries(_template(two, stack)) if e["Type"] == "STANDARD"]
        assert {e["ClusterName"] for e in entries} == {cluster}
        found = {
            (_resolved(e["PrincipalArn"]).rsplit("/", 1)[1], tuple(e["KubernetesGroups"])) for e in entries
        }
        assert found == expected
        assert all(e.get("AccessPolicies") is None for e in entries)  # RBAC is the whole grant


def test_only_clusters_that_created_nodes_join_admit_the_node_role(two: Synthesis) -> None:
    nodes = {
        stack: [e for e in _entries(_template(two, stack)) if e["Type"] == "EC2_LINUX"]
        for stack in ("control-plane", "cluster-gpu-east", "cluster-gpu-west-b")
    }
    # the node role exists (IAM is global) but gpu-west's groups are existing ones
    assert "RoleName" in json.dumps(_template(two, "control-plane"))
    assert nodes["control-plane"] == [] and nodes["cluster-gpu-west-b"] == []
    (east,) = nodes["cluster-gpu-east"]
    assert east["ClusterName"] == EAST
    assert _resolved(east["PrincipalArn"]).endswith(f":role/squall-gpu-node-{HOME}")


def _job_roles(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Namespace -> its job role's properties."""
    found = {}
    for logical_id, role in resources(template, "AWS::IAM::Role").items():
        if logical_id.startswith("JobIdentities"):
            (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
            found[trust["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-namespace"]] = role[
                "Properties"
            ]
    return found


@pytest.mark.parametrize(
    ("stack", "cluster", "region"),
    [("workloads", WEST, HOME), ("cluster-gpu-east", EAST, REMOTE), ("cluster-gpu-west-b", WEST_B, HOME)],
)
def test_each_cluster_has_a_pod_identity_role_and_association_per_team_namespace(
    two: Synthesis, stack: str, cluster: str, region: str
) -> None:
    template = _template(two, stack)
    roles = _job_roles(template)
    assert sorted(roles) == list(NAMESPACES)
    for namespace, role in roles.items():
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        # trusted by Pod Identity of this cluster only, in its region
        assert _resolved(trust["Condition"]["StringEquals"]["aws:RequestTag/eks-cluster-arn"]).endswith(
            f":eks:{region}:<AWS::AccountId>:cluster/{cluster}"
        )
        if stack == "workloads":
            assert "team-buckets" in {p["PolicyName"] for p in role["Policies"]}
        else:
            # the home region's fixed-name policy: the bucket is not this stack's to refer to
            (policy,) = role["ManagedPolicyArns"]
            assert _resolved(policy).endswith(f":policy/squall-job-{namespace}-{HOME}")
    associations = [r["Properties"] for r in resources(template, "AWS::EKS::PodIdentityAssociation").values()]
    assert sorted((a["ClusterName"], a["Namespace"], a["ServiceAccount"]) for a in associations) == [
        (cluster, namespace, "squall-job") for namespace in NAMESPACES
    ]
    # and both add-ons, on this cluster
    addons = {
        a["Properties"]["AddonName"]: a["Properties"] for a in resources(template, "AWS::EKS::Addon").values()
    }
    assert sorted(addons) == [constants.LOG_AGENT_ADDON, constants.POD_IDENTITY_AGENT_ADDON]
    assert {a["ClusterName"] for a in addons.values()} == {cluster}
    outputs = template["Outputs"]
    assert {"JobRoleArnTeamResearch", "JobRoleArnTeamVision"} <= set(outputs)


def test_the_shared_job_policies_reach_only_the_teams_prefixes(two: Synthesis) -> None:
    template = _template(two, "workloads")
    policies = {
        p["Properties"]["ManagedPolicyName"]: p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        if p["Properties"].get("ManagedPolicyName", "").startswith("squall-job-")
    }
    assert sorted(policies) == [f"squall-job-{ns}-{HOME}" for ns in NAMESPACES]
    statements = {s["Sid"]: s for s in policies[f"squall-job-team-vision-{HOME}"]}
    (code,) = as_list(statements["ReadTeamCode"]["Resource"])
    assert _resolved(code).endswith("/code/vision/*")
    assert all(
        _resolved(r).endswith("/teams/vision/*")
        for r in as_list(statements["ReadWriteTeamOutputs"]["Resource"])
    )


def test_researchers_read_their_streams_of_every_clusters_log_group(two: Synthesis) -> None:
    template = _template(two, "workloads")
    policy = next(
        p["Properties"]
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        if p["Properties"].get("ManagedPolicyName") == f"squall-researcher-vision-{HOME}"
    )
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    groups = {
        f"arn:<AWS::Partition>:logs:{region}:<AWS::AccountId>:log-group:/aws/containerinsights/{name}/application"
        for name, region in ((WEST, HOME), (EAST, REMOTE), (WEST_B, HOME))
    }
    streams = {_resolved(r) for r in as_list(statements["ReadTeamLogStreams"]["Resource"])}
    assert streams == {f"{group}:log-stream:*_team-vision_*" for group in groups}
    listed = {_resolved(r) for r in as_list(statements["ListLogStreams"]["Resource"])}
    assert listed == groups | {f"{group}:*" for group in groups}


def test_functions_describe_only_the_cluster_without_a_certificate(two: Synthesis) -> None:
    template = _template(two, "control-plane")
    described = {
        _resolved(resource)
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "eks:DescribeCluster" in as_list(statement["Action"])
        for resource in as_list(statement["Resource"])
    }
    assert described == {f"arn:<AWS::Partition>:eks:{HOME}:<AWS::AccountId>:cluster/{WEST_B}"}


def test_the_settings_files_list_every_cluster_and_each_groups_cluster(
    two: Synthesis, monkeypatch: pytest.MonkeyPatch
) -> None:
    staged = next(two.outdir.glob(".squall-asset-squall-control-plane"))
    scale = json.loads((staged / constants.SETTINGS_DIR / "scale.json").read_text())
    assert [(c["name"], c["region"], c["endpoint"]) for c in scale["clusters"]] == [
        (WEST, HOME, "https://EXAMPLE0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com"),
        (EAST, REMOTE, EAST_ENDPOINT),
        (WEST_B, HOME, "https://WESTB.gr7.us-west-2.eks.amazonaws.com"),
    ]
    assert [c["certificate_authority"] for c in scale["clusters"]] == [FAKE_CA, EAST_CA, ""]
    assert {g["name"]: g["cluster"] for g in scale["node_groups"]} == {
        "p3-usw2": WEST,
        "p3-use1": EAST,
        "p3-usw2-b": WEST_B,
    }
    # and the functions' settings model reads them as written
    settings = Settings.model_validate({**scale, "table_name": "jobs"})
    assert [c.name for c in settings.clusters] == [WEST, EAST, WEST_B]
    # the CLI's SQUALL_CLUSTERS, from the control plane's outputs
    clusters = _template(two, "control-plane")["Outputs"]["Clusters"]["Value"]
    assert json.loads(clusters) == [
        {"name": WEST, "region": HOME},
        {"name": EAST, "region": REMOTE},
        {"name": WEST_B, "region": HOME},
    ]


def test_created_nodes_join_their_own_cluster(two: Synthesis) -> None:
    template = _template(two, f"capacity-{REMOTE}")
    (launch,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    data = launch["Properties"]["LaunchTemplateData"]
    user_data = base64.b64decode(data["UserData"]).decode()
    document = user_data.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--", 1)[0]
    assert yaml.safe_load(document)["spec"]["cluster"] == {
        "name": EAST,
        "apiServerEndpoint": EAST_ENDPOINT,
        "certificateAuthority": EAST_CA,
        "cidr": "172.20.0.0/16",
    }
    # the GPU AMI of gpu-east's Kubernetes version
    parameters = {p["Default"] for p in template["Parameters"].values() if "Default" in p}
    assert constants.gpu_ami_parameter("1.32") in parameters
    assert constants.gpu_ami_parameter("1.31") not in parameters
    (group,) = resources(template, "AWS::AutoScaling::AutoScalingGroup").values()
    tags = {t["Key"]: t["Value"] for t in group["Properties"]["Tags"]}
    assert tags[f"kubernetes.io/cluster/{EAST}"] == "owned"


def test_rbac_says_to_apply_the_same_to_every_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stacks.rbac import __main__ as rbac_main

    monkeypatch.setattr(rbac_main, "load_cdk_json_context", two_cluster_context)
    assert rbac_main.main([]) == 0
    printed = capsys.readouterr().out
    first = printed.splitlines()[0]
    assert first == (
        f"# Every cluster gets the same: apply this to each of {WEST} ({HOME}), {EAST} ({REMOTE}), {WEST_B} ({HOME})."
    )
    documents = [d for d in yaml.safe_load_all(printed) if d]
    assert {(d["kind"], d["metadata"].get("namespace")) for d in documents} >= {
        ("ServiceAccount", ns) for ns in NAMESPACES
    }
    # one cluster: no note, the manifests alone
    monkeypatch.setattr(rbac_main, "load_cdk_json_context", load_cdk_json_context)
    assert rbac_main.main([]) == 0
    assert capsys.readouterr().out.startswith("---")


# -- compliance -------------------------------------------------------------------------


def test_cdk_nag_finds_nothing_unsuppressed(two: Synthesis) -> None:
    for stack in two.stacks.all():
        annotations = Annotations.from_stack(stack)
        errors = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
        warnings = annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
        failures = annotations.find_error("*", Match.string_like_regexp("CdkNagValidationFailure.*"))
        assert [e.entry.data for e in errors + warnings + failures] == [], stack.stack_name


def test_cfn_lint_reports_no_errors(two: Synthesis) -> None:
    from cfnlint.api import ManualArgs, lint

    regions = {s.stack_name: s.region for s in two.stacks.all()}
    problems: dict[str, list[str]] = {}
    paths = sorted(Path(two.outdir).glob("*.template.json"))
    assert len(paths) == len(regions) == 8
    for path in paths:
        region = regions[path.name.removesuffix(".template.json")]
        for match in lint(path.read_text(), config=ManualArgs(regions=[region])):
            if match.rule.id.startswith("E"):
                problems.setdefault(path.name, []).append(f"{match.rule.id} {match.message}")
    assert problems == {}
