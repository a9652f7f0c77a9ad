"""The in-memory ModelServiceStore: the DynamoDB adapter's conditions and item size limit, in memory.

Like InMemoryJobStore (local/memory.py), and over the same VersionedRecords, for the
runtimes and replays that keep no moto server: a name is created once, a save lands
only on the version it was read at, and an item DynamoDB would refuse (over 400 KB,
measured as the adapter writes it) is refused here too, with the adapter's error.
"""

from __future__ import annotations

from squall.adapters.aws.job_store import item_size
from squall.adapters.aws.model_service_store import service_event_values, service_values
from squall.core.errors import DuplicateServiceError
from squall.core.serving import ModelService, ServiceEvent, ServiceStatus
from squall.local.memory import RecordStore, VersionedRecords, check_item_size


class InMemoryModelServiceStore(RecordStore[ModelService, ServiceEvent, ServiceStatus]):
    def __init__(self) -> None:
        super().__init__(
            VersionedRecords[ModelService, ServiceEvent, ServiceStatus](
                ServiceStatus, kind="model service", key=lambda s: s.name, since=lambda s: s.created_at
            )
        )

    def create(self, service: ModelService, event: ServiceEvent) -> None:
        self._check(f"create model service {service.name}", service, event)
        if not self._records.create(service, event):
            raise DuplicateServiceError(service.name)

    def save(self, service: ModelService, event: ServiceEvent) -> None:
        self._check(f"save model service {service.name}", service, event)
        self._records.put(service, event)

    @staticmethod
    def _check(what: str, service: ModelService, event: ServiceEvent) -> None:
        check_item_size(what, item_size(service_values(service)))
        check_item_size(what, item_size(service_event_values(event)))
