"""The deployment a `squall` command talks to (cli_deployment.py): named by the environment,
reached through the adapters, every failure a `squall: ...` line and an exit code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from squall.adapters.aws.clients import aws_client
from squall.cli import deployment, main
from squall.cli.errors import EXIT_FAILED, EXIT_USAGE, CommandError
from squall.core.errors import PermanentError

pytestmark = pytest.mark.timeout(60)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "single-gpu.yaml"


@pytest.fixture
def queue(aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """moto's SQS with a jobs queue of 1 KiB messages, named by SQUALL_JOBS_QUEUE_URL."""
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-west-2")
        url = sqs.create_queue(QueueName="jobs", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
        monkeypatch.setenv(deployment.QUEUE_ENV, url)
        yield sqs, url


def test_a_body_goes_on_the_queue_as_json_under_its_message_id(queue: tuple[Any, str]) -> None:
    sqs, url = queue
    message_id = deployment.send_to_jobs_queue({"action": "cancel", "id": "j-1"})
    (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert message["MessageId"] == message_id
    assert json.loads(message["Body"]) == {"action": "cancel", "id": "j-1"}


def test_a_body_over_the_queues_size_is_refused_in_sqs_words(queue: tuple[Any, str]) -> None:
    sqs, url = queue
    with pytest.raises(PermanentError, match=r"^send to the jobs queue: "):
        deployment.send_to_jobs_queue({"padding": "x" * 2048})
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_a_body_json_cannot_hold_is_refused_before_anything_is_sent(queue: tuple[Any, str]) -> None:
    with pytest.raises(CommandError, match=r"^the job spec cannot be sent as JSON") as refused:
        deployment.send_to_jobs_queue({"at": object()}, what="the job spec")
    assert refused.value.code == EXIT_USAGE


@pytest.mark.parametrize(
    ("variable", "reach"),
    [
        (deployment.TABLE_ENV, deployment.job_store),
        (deployment.TABLE_ENV, deployment.scale_state),
        (deployment.TABLE_ENV, deployment.service_store),
        (deployment.QUEUE_ENV, lambda: deployment.send_to_jobs_queue({})),
    ],
)
def test_an_unset_variable_is_named(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch, variable: str, reach: Any
) -> None:
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(CommandError, match=f"^{variable} is not set: point it at the deployment's"):
        reach()


def test_no_region_is_squalls_error_not_botocores(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(PermanentError, match=r"^make a sqs client: NoRegionError: "):
        aws_client("sqs")


def test_the_command_reports_a_queue_it_cannot_reach_and_exits_1(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with mock_aws():
        monkeypatch.setenv(deployment.QUEUE_ENV, "https://sqs.us-west-2.amazonaws.com/123456789012/gone")
        code = main(["submit", str(EXAMPLE)])
    assert code == EXIT_FAILED
    assert capsys.readouterr().err.startswith("squall: send to the jobs queue: ")


def test_the_command_names_an_unset_queue_and_exits_2(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(deployment.QUEUE_ENV, raising=False)
    assert main(["submit", str(EXAMPLE)]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(
        f"squall: {deployment.QUEUE_ENV} is not set: point it at the deployment's jobs queue; "
    )


@pytest.mark.parametrize("name", ["my cluster", "a" * 101, "../etc", "squall;rm"])
def test_a_cluster_name_eks_would_not_take_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(deployment.CLUSTER_ENV, name)
    with pytest.raises(CommandError, match=f"^{deployment.CLUSTER_ENV}: expected an EKS cluster name"):
        deployment.cluster_name()


def test_the_cluster_name_defaults_to_squalls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(deployment.CLUSTER_ENV, "  ")
    assert deployment.cluster_name() == "squall"
