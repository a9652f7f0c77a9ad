"""IAM unique ids of the submitters and the cluster's certificate, looked up at cold start (moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from squall import runtime
from squall.adapters.aws.identity import IamPrincipals, describe_cluster, resolve_submitters
from squall.core.errors import NotFoundError, PermanentError, RetryableError
from squall.core.settings import ClusterSettings
from squall.runtime import NamespacedCluster
from tests.certificates import cluster_ca

TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
)


@pytest.fixture
def iam(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("iam", region_name="us-east-1")


def test_role_and_user_arns_resolve_to_the_unique_ids_sqs_reports(iam: Any) -> None:
    # given a role (with a path) and a user
    role = iam.create_role(RoleName="trainer", Path="/research/", AssumeRolePolicyDocument=TRUST)["Role"]
    user = iam.create_user(UserName="alice")["User"]
    principals = IamPrincipals(iam)
    # when each is looked up by its ARN
    # then the ids are the ones SQS puts in SenderId; an id is taken as it is
    assert principals.unique_id(role["Arn"]) == role["RoleId"] and role["RoleId"].startswith("AROA")
    assert principals.unique_id(user["Arn"]) == user["UserId"]
    assert principals.unique_id("AROAEXAMPLEROLEID0001") == "AROAEXAMPLEROLEID0001"


def test_a_role_of_the_same_name_elsewhere_is_not_the_one_named(iam: Any) -> None:
    role = iam.create_role(RoleName="trainer", Path="/research/", AssumeRolePolicyDocument=TRUST)["Role"]
    with pytest.raises(NotFoundError, match="IAM knows trainer as"):
        IamPrincipals(iam).unique_id(role["Arn"].replace("/research/", "/vision/"))
    with pytest.raises(NotFoundError, match="NoSuchEntity"):
        IamPrincipals(iam).unique_id("arn:aws:iam::123456789012:role/deleted")
    with pytest.raises(PermanentError, match="not an IAM role or user ARN"):
        IamPrincipals(iam).unique_id("arn:aws:sts::123456789012:assumed-role/trainer/alice")


def test_submitters_resolve_once_each_and_an_unknown_one_keeps_its_team_closed(iam: Any) -> None:
    # given two teams sharing a role, one naming a role that does not exist
    shared = iam.create_role(RoleName="ci", AssumeRolePolicyDocument=TRUST)["Role"]
    calls: list[str] = []
    iam.meta.events.register("provide-client-params.iam.GetRole", lambda params, **_: calls.append(params["RoleName"]))
    missing = "arn:aws:iam::123456789012:role/gone"
    # when they are resolved
    resolved = resolve_submitters(
        {"research": [shared["Arn"], "AIDAEXAMPLEUSERID0001"], "vision": [shared["Arn"], missing], "nlp": [missing]},
        IamPrincipals(iam),
    )
    # then each ARN was looked up once, and the unknown one is left out and reported
    assert calls == ["ci", "gone"]
    assert resolved.by_team == {
        "research": frozenset({shared["RoleId"], "AIDAEXAMPLEUSERID0001"}),
        "vision": frozenset({shared["RoleId"]}),
        "nlp": frozenset(),
    }
    assert list(resolved.unresolved) == [missing]


def test_a_throttled_lookup_is_retryable_and_leaks_no_botocore_error() -> None:
    iam = boto3.client("iam", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(iam) as stub:
        stub.add_client_error("get_role", service_error_code="Throttling", http_status_code=400)
        with pytest.raises(RetryableError) as caught:
            resolve_submitters({"research": ["arn:aws:iam::123456789012:role/ci"]}, IamPrincipals(iam))
    assert isinstance(caught.value, RetryableError) and "Throttling" in str(caught.value)


def test_the_cluster_certificate_and_endpoint_come_from_describe_cluster(aws_credentials: None) -> None:
    with mock_aws():
        eks = boto3.client("eks", region_name="us-west-2")
        eks.create_cluster(
            name="gpu-training",
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-0a000000000000001"]},
        )
        found = describe_cluster(eks, "gpu-training")
        assert found.endpoint.startswith("https://") and len(found.certificate_authority) > 1000
        with pytest.raises(NotFoundError):
            describe_cluster(eks, "no-such-cluster")


def test_settings_without_a_certificate_are_completed_from_describe_cluster() -> None:
    from squall.adapters.aws.identity import ClusterEndpoint

    settings = ClusterSettings(name="gpu-training", endpoint="https://configured", region="us-west-2")
    completed = runtime._described(settings, lambda: ClusterEndpoint(endpoint="https://found", certificate_authority="Q0E="))
    assert (completed.endpoint, completed.certificate_authority) == ("https://configured", "Q0E=")
    with pytest.raises(ValueError, match="cluster's name"):
        runtime._described(ClusterSettings(), lambda: ClusterEndpoint(endpoint="", certificate_authority=""))


def test_a_cold_start_resolves_submitters_and_reads_the_certificate_it_was_not_given(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    with mock_aws():
        iam = boto3.client("iam", region_name="us-east-1")
        role = iam.create_role(RoleName="trainer", AssumeRolePolicyDocument=TRUST)["Role"]
        eks = boto3.client("eks", region_name="us-west-2")
        eks.create_cluster(
            name="gpu-training",
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-0a000000000000001"]},
        )
        described: list[str] = []
        # given a function whose settings file names submitters and no certificate
        settings_file = tmp_path / "scale.json"
        settings_file.write_text(
            json.dumps(
                {
                    "teams": {"research": "team-research"},
                    "submitters": {"research": [role["Arn"]]},
                    "namespaces": ["team-research"],
                    "cluster": {"name": "gpu-training", "endpoint": "https://example.invalid", "region": "us-west-2"},
                }
            )
        )
        monkeypatch.setenv("SQUALL_SETTINGS_FILE", str(settings_file))
        monkeypatch.setenv("SQUALL_TABLE_NAME", "jobs")
        import squall.adapters.aws.identity as identity

        original = identity.describe_cluster

        def recording(client: Any, name: str) -> Any:
            described.append(name)
            found = original(client, name)
            return identity.ClusterEndpoint(endpoint=found.endpoint, certificate_authority=cluster_ca())

        monkeypatch.setattr(identity, "describe_cluster", recording)
        runtime._from_environment.cache_clear()
        try:
            # when the services are built, as at a cold start
            services = runtime._from_environment(None)
        finally:
            runtime._from_environment.cache_clear()
        # then the role's unique id is what the intake checks senders against
        assert services.submitters == {"research": frozenset({role["RoleId"]})}
        assert services.intake.config.submitters == services.submitters
        # and the certificate came from DescribeCluster, once
        assert described == ["gpu-training"]
        # and its Kubernetes lists stay in the team namespaces
        assert list(services.clusters) == ["gpu-training"]
        assert isinstance(services.clusters["gpu-training"], NamespacedCluster)


def test_a_cluster_whose_describe_fails_at_cold_start_is_unreachable_not_fatal(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from squall.core.errors import RetryableError

    with mock_aws():
        # given two clusters without certificates, one of which EKS does not know (yet)
        boto3.client("eks", region_name="us-west-2").create_cluster(
            name="gpu-west",
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-0a000000000000001"]},
        )
        settings_file = tmp_path / "scale.json"
        settings_file.write_text(
            json.dumps(
                {
                    "teams": {"research": "team-research"},
                    "clusters": [
                        {"name": "gpu-west", "endpoint": "https://example.invalid", "region": "us-west-2"},
                        {"name": "gpu-east", "endpoint": "https://example.invalid", "region": "us-east-1"},
                    ],
                }
            )
        )
        monkeypatch.setenv("SQUALL_SETTINGS_FILE", str(settings_file))
        monkeypatch.setenv("SQUALL_TABLE_NAME", "jobs")
        import squall.adapters.aws.identity as identity

        original = identity.describe_cluster

        def with_certificate(client: Any, name: str) -> Any:
            found = original(client, name)
            return identity.ClusterEndpoint(endpoint=found.endpoint, certificate_authority=cluster_ca())

        monkeypatch.setattr(identity, "describe_cluster", with_certificate)
        runtime._from_environment.cache_clear()
        try:
            # when the services are built, as at a cold start
            services = runtime._from_environment(None)
        finally:
            runtime._from_environment.cache_clear()
        # then both clusters are there; the one EKS did not describe is unreachable, not fatal
        assert list(services.clusters) == ["gpu-west", "gpu-east"]
        assert not isinstance(services.clusters["gpu-west"], runtime.BuiltLater)
        assert isinstance(services.clusters["gpu-east"], runtime.BuiltLater)
        with pytest.raises(RetryableError, match="cluster gpu-east cannot be reached"):
            services.clusters["gpu-east"].list_nodes()
