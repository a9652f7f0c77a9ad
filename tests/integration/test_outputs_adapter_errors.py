"""No botocore exception leaks out of the job-outputs adapters (CloudWatch Logs, S3 reads).

The same answers and failures as test_adapter_errors.py drives the other adapters with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber

from squall.adapters.aws.logs import CloudWatchLogReader, LogAccessDenied
from squall.adapters.aws.s3_objects import S3ObjectReader
from squall.core.errors import NotFoundError
from tests.integration.test_adapter_errors import ANSWERS, BOTOCORE, _assert_squall, _client

pytestmark = pytest.mark.timeout(60)

GROUP = "/aws/containerinsights/squall/application"

METHODS: dict[str, tuple[str, str, Callable[[Any, Path], Any]]] = {
    "logs.streams": (
        "logs",
        "describe_log_streams",
        lambda c, _: list(CloudWatchLogReader(c, GROUP).streams()),
    ),
    "logs.read": (
        "logs",
        "get_log_events",
        lambda c, _: CloudWatchLogReader(c, GROUP).read("s", start=None, token=None),
    ),
    "s3.list": ("s3", "list_objects_v2", lambda c, _: list(S3ObjectReader(c).list("b", "p/", limit=10))),
    "s3.download": (
        "s3",
        "get_object",
        lambda c, tmp: S3ObjectReader(c).download("b", "k", tmp / "f", end=10),
    ),
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_aws_answers_leave_as_squall_errors(method: str, answer: str, tmp_path: Path) -> None:
    service, operation, call = METHODS[method]
    code, status, message, expected = ANSWERS[answer]
    client = _client(service)
    stub = Stubber(client)
    stub.add_client_error(operation, code, message, http_status_code=status)
    with stub, pytest.raises(Exception) as raised:
        call(client, tmp_path)
    _assert_squall(raised.value, expected)
    if service == "logs" and code == "ResourceNotFoundException":
        assert isinstance(raised.value, NotFoundError) and GROUP in str(raised.value)
    if service == "logs" and code == "AccessDeniedException":
        assert isinstance(raised.value, LogAccessDenied)


@pytest.mark.parametrize("failure", sorted(BOTOCORE))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_botocore_failures_leave_as_squall_errors(method: str, failure: str, tmp_path: Path) -> None:
    service, _, call = METHODS[method]
    make, expected = BOTOCORE[failure]
    client = _client(service)

    def fail(**_: Any) -> None:
        raise make()

    client.meta.events.register("before-call", fail)
    with pytest.raises(Exception) as raised:
        call(client, tmp_path)
    _assert_squall(raised.value, expected)
