"""The in-memory ModelServiceStore: the DynamoDB adapter's conditions and item size limit, in memory.

Like InMemoryJobStore (local/memory.py), for the runtimes and replays that keep no
moto server: a name is created once, a save lands only on the version it was read
at, and an item DynamoDB would refuse (over 400 KB, measured as the adapter writes
it) is refused here too, with the adapter's error.
"""

from __future__ import annotations

import bisect
from datetime import datetime

from squall.adapters.aws.job_store import item_size
from squall.adapters.aws.model_service_store import service_event_values, service_values
from squall.core.errors import ConflictError, DuplicateServiceError
from squall.core.serving import ModelService, ServiceEvent, ServiceStatus
from squall.local.memory import check_item_size  # the memory job store's refusal, in DynamoDB's words


class InMemoryModelServiceStore:
    def __init__(self) -> None:
        self._services: dict[str, ModelService] = {}
        self._events: dict[str, list[ServiceEvent]] = {}
        # status -> sorted [(created_at, name)], like the status index
        self._index: dict[ServiceStatus, list[tuple[datetime, str]]] = {s: [] for s in ServiceStatus}

    def create(self, service: ModelService, event: ServiceEvent) -> None:
        self._check(f"create model service {service.name}", service, event)
        if service.name in self._services:
            raise DuplicateServiceError(service.name)
        self._services[service.name] = service
        self._events[service.name] = [event]
        bisect.insort(self._index[service.status], (service.created_at, service.name))

    def save(self, service: ModelService, event: ServiceEvent) -> None:
        self._check(f"save model service {service.name}", service, event)
        stored = self._services.get(service.name)
        if stored is None or stored.version != service.version - 1:
            raise ConflictError(f"model service {service.name} changed since version {service.version - 1}")
        self._index[stored.status].remove((stored.created_at, stored.name))
        bisect.insort(self._index[service.status], (service.created_at, service.name))
        self._services[service.name] = service
        self._events[service.name].append(event)

    def get(self, name: str) -> ModelService | None:
        return self._services.get(name)

    def events(self, name: str) -> list[ServiceEvent]:
        return list(self._events.get(name, []))

    def list_by_status(self, status: ServiceStatus, *, limit: int = 1000) -> list[ModelService]:
        return [self._services[name] for _, name in self._index[status][: max(limit, 0)]]

    @staticmethod
    def _check(what: str, service: ModelService, event: ServiceEvent) -> None:
        check_item_size(what, item_size(service_values(service)))
        check_item_size(what, item_size(service_event_values(event)))
