"""Squall's own error hierarchy.

Adapters translate botocore and kubernetes exceptions into these (always chained
with ``raise ... from exc``), so the services and handlers never see a third-party
exception and can decide on one question only: try this message again, or not.
"""

from __future__ import annotations

# An error's text as a record, an event or a check's outcome keeps it: enough to act on,
# and a hostile or runaway message (a whole API response, say) cannot grow an item.
MAX_ERROR_TEXT = 1000


class SquallError(Exception):
    """Base of every error Squall raises on purpose."""


class RetryableError(SquallError):
    """A transient failure (throttling, 5xx, timeouts): the same input may succeed later."""


class PermanentError(SquallError):
    """Retrying the same input will fail the same way."""


class NotFoundError(PermanentError):
    """The object asked for does not exist."""


class ItemTooLargeError(PermanentError):
    """A record larger than the store takes (DynamoDB: 400 KB per item)."""


class ConflictError(SquallError):
    """A conditional write lost: someone else changed the item first.

    Callers re-read and decide again; that is why this is neither retryable
    as-is nor permanent.
    """


class InvalidTransitionError(PermanentError):
    """A job state change that the state machine does not allow."""


class DuplicateJobError(ConflictError):
    """A job with this id exists already (a duplicate delivery or a reused client id)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} exists already")


class DuplicateServiceError(ConflictError):
    """A model service with this name exists already."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"model service {name} exists already")


class LifecycleActionGone(PermanentError):
    """The lifecycle action is no longer pending: already completed, or timed out.

    Auto Scaling answers ``ValidationError: No active Lifecycle Action found ...``
    for both; callers treat it as "already completed" (at-least-once delivery
    makes a second completion normal).
    """
