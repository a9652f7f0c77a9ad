"""botocore's errors as Squall's: the one translator every AWS adapter uses.

Retryable or permanent is decided here, once, for every AWS service Squall calls:

- ``ClientError`` (AWS answered): throttling and transient codes, HTTP 429 and any
  5xx are ``RetryableError``; everything else (validation, access denied, not found,
  limits) is ``PermanentError`` (``NotFoundError`` where the adapter's rules say so).
- ``BotoCoreError`` (AWS did not answer, or botocore refused before sending):
  connection failures, timeouts, cut or corrupted responses, an exhausted client
  retry quota and credentials that could not be *fetched* are retryable; the rest
  (no credentials, parameters botocore rejects, an unknown region or service,
  pagination and configuration trouble) is permanent.

An adapter adds what only it knows as ``rules``: functions that look at the
``ClientError`` and return a more precise Squall error (``ConflictError`` for a
DynamoDB condition that failed, ``LifecycleActionGone`` for Auto Scaling's "No
active Lifecycle Action found") or None to leave the decision to the general one.
Rules are asked only about answers that are not retryable: a throttled call stays
retryable whatever its message says. Every error leaves chained (``from exc``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    CapacityNotAvailableError,
    ChecksumError,
    ClientError,
    ConnectionError,
    CredentialRetrievalError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    MetadataRetrievalError,
)

from squall.core.errors import NotFoundError, PermanentError, RetryableError, SquallError

# Error codes AWS services use for "not now": throttling, contention, their own trouble.
RETRYABLE_CODES = frozenset(
    {
        # throttling
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "SlowDown",
        "BandwidthLimitExceeded",
        "LimitExceededException",  # DynamoDB: too many control-plane operations at once
        "EC2ThrottledException",
        # contention
        "ResourceContention",
        "ScalingActivityInProgress",
        "TransactionInProgressException",
        "PriorRequestNotComplete",
        # the service's own trouble
        "InternalFailure",
        "InternalError",
        "InternalServerError",
        "ServiceFailure",
        "ServerException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "IDPCommunicationError",
    }
)

# botocore failures that say nothing about the request itself: the next attempt may pass.
RETRYABLE_BOTOCORE: tuple[type[BotoCoreError], ...] = (
    ConnectionError,  # EndpointConnectionError, ConnectTimeoutError, SSLError, ProxyConnectionError
    HTTPClientError,  # ReadTimeoutError, ConnectionClosedError, ResponseStreamingError
    IncompleteReadError,
    ChecksumError,
    FlexibleChecksumError,
    CapacityNotAvailableError,  # botocore's own retry quota is spent
    CredentialRetrievalError,  # a credential provider did not answer
    MetadataRetrievalError,
)

Rule = Callable[[ClientError, str], SquallError | None]
"""An adapter's refinement: (the error, the standard message) -> a Squall error, or None."""


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", ""))


def http_status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def cancellation_codes(exc: ClientError) -> list[str]:
    """DynamoDB's reasons, item by item, for a cancelled transaction (empty otherwise)."""
    return [str(r.get("Code", "")) for r in exc.response.get("CancellationReasons") or []]


def is_retryable(exc: BaseException) -> bool:
    """True when the same call may succeed later."""
    if isinstance(exc, ClientError):
        status = http_status(exc)
        return error_code(exc) in RETRYABLE_CODES or status == 429 or status >= 500
    return isinstance(exc, RETRYABLE_BOTOCORE)


def translate(doing: str, exc: ClientError | BotoCoreError, *, rules: Sequence[Rule] = ()) -> SquallError:
    """Squall's error for a botocore one; ``doing`` says what was being done."""
    if isinstance(exc, BotoCoreError):
        text = f"{doing}: {type(exc).__name__}: {exc}"
        return RetryableError(text) if is_retryable(exc) else PermanentError(text)
    code = error_code(exc)
    text = f"{doing}: {code}: {error_message(exc)}".rstrip(": ")
    if is_retryable(exc):
        return RetryableError(text)
    for rule in rules:
        refined = rule(exc, text)
        if refined is not None:
            return refined
    return PermanentError(text)


def not_found(*codes: str) -> Rule:
    """A rule for an adapter whose service says "no such thing" with these codes: NotFoundError.

    Not part of the general rule: a missing table is not a missing job, and callers
    treat NotFoundError as "the object is gone".
    """
    wanted = frozenset(codes)
    return lambda exc, text: NotFoundError(text) if error_code(exc) in wanted else None


@contextmanager
def translated(doing: str, *, rules: Sequence[Rule] = ()) -> Iterator[None]:
    """Turn any botocore exception raised inside into a Squall error, chained."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise translate(doing, exc, rules=rules) from exc


def call(doing: str, fn: Callable[..., Any], /, *args: Any, rules: Sequence[Rule] = (), **kwargs: Any) -> Any:
    """One AWS call, ``fn(*args, **kwargs)``, with its errors translated."""
    with translated(doing, rules=rules):
        return fn(*args, **kwargs)


def pages(
    doing: str,
    client: Any,
    operation: str,
    /,
    *,
    page_size: int | None = None,
    rules: Sequence[Rule] = (),
    **params: Any,
) -> Iterator[dict[str, Any]]:
    """The pages of a paginated operation (boto3's paginator), errors translated.

    Pages are fetched as they are read: a caller that stops early (a bound on items)
    sends no further request.
    """
    with translated(doing, rules=rules):
        paginator = client.get_paginator(operation)
        config = {"PaginationConfig": {"PageSize": page_size}} if page_size is not None else {}
        yield from paginator.paginate(**params, **config)
