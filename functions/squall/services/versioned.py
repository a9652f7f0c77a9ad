"""A change to a versioned record, decided again on the freshest record after a lost race.

Jobs and model services are stored the same way: a `save` of version n + 1 lands only
while the stored record is version n, else ConflictError. Whoever changes one decides
on what it read, and decides again on what it reads after losing. Both are written
before their Kubernetes objects (intake: record first, then objects).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Protocol, TypeVar

from squall.core.errors import ConflictError

CONFLICT_RETRIES = 5
# Intake writes the record before the objects: give it time before calling them missing.
CREATE_GRACE = timedelta(seconds=60)

R = TypeVar("R")
E = TypeVar("E")
E_contra = TypeVar("E_contra", contravariant=True)


class VersionedStore(Protocol[R, E_contra]):
    def save(self, record: R, event: E_contra, /) -> None: ...

    def get(self, key: str, /) -> R | None: ...


def update_record(
    store: VersionedStore[R, E],
    record: R,
    *,
    key: str,
    what: str,
    change: Callable[[R], tuple[R, E] | None],
) -> R | None:
    """Apply `change` to the latest version of a record, re-reading after a lost race.

    `change` returns the new record and its event, or None when nothing is to be done
    (it sees the freshest record each time). Returns the stored record, or None.
    `what` names the record in the error after CONFLICT_RETRIES lost races.
    """
    current: R | None = record
    for _ in range(CONFLICT_RETRIES):
        if current is None:
            return None
        result = change(current)
        if result is None:
            return None
        updated, event = result
        try:
            store.save(updated, event)
            return updated
        except ConflictError:
            current = store.get(key)
    raise ConflictError(f"{what}: gave up after {CONFLICT_RETRIES} conflicting writes")
