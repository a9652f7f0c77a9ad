"""DynamoDB adapter for model services and their events, in the job table.

Keys (beside the jobs' items, see job_store.py; the table and its status index are theirs):
- service: pk=SERVICE#<name>  sk=META             gsi1pk=SERVICE_STATUS#<status>  gsi1sk=<createdAt>#<name>
- event:   pk=SERVICE#<name>  sk=EVENT#<version>  (version zero-padded, so events sort in order)

Every write is one transaction of the record and its event: creating puts both if
the name is new (a second serve of the same name cannot create it twice), saving
replaces the record only if its stored version is the one before. A stale write
fails as a whole, so an event is never lost or written twice. An item over
DynamoDB's 400 KB is refused by DynamoDB and leaves as ItemTooLargeError.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from squall.adapters.aws.job_store import (
    call_dynamodb,
    from_item,
    iso,
    on_conflict,
    query_pages,
    query_status_index,
    read_item,
    to_item,
    transition_fields,
    transition_values,
)
from squall.core.errors import ConflictError, DuplicateServiceError, SquallError
from squall.core.serving import ModelService, ServiceEvent, ServiceStatus

PK_PREFIX = "SERVICE#"
STATUS_PREFIX = "SERVICE_STATUS#"
KIND = "model-service"
EVENT_KIND = "model-service-event"


def service_key(name: str) -> dict[str, Any]:
    return to_item({"pk": f"{PK_PREFIX}{name}", "sk": "META"})


def service_values(service: ModelService) -> dict[str, Any]:
    """The record item's attributes as plain values (None: not written)."""
    return {
        "pk": f"{PK_PREFIX}{service.name}",
        "sk": "META",
        "kind": KIND,
        "gsi1pk": f"{STATUS_PREFIX}{service.status.value}",
        "gsi1sk": f"{iso(service.created_at)}#{service.name}",
        "name": service.name,
        "team": service.team,
        "namespace": service.namespace,
        "jobId": service.job_id,
        "modelUri": service.model_uri,
        "modelVersion": service.model_version,
        "replicas": service.replicas,
        "gpus": service.gpus,
        "cpu": service.cpu,
        "memory": service.memory,
        "status": service.status.value,
        "reason": service.reason,
        "createdAt": iso(service.created_at),
        "updatedAt": iso(service.updated_at),
        "version": service.version,
        "messageId": service.message_id,
        "submittedBy": service.submitted_by,
        "readyReplicas": service.ready_replicas,
        "restUrl": service.rest_url,
        "grpcTarget": service.grpc_target,
        "errors": json.dumps(list(service.errors)) if service.errors else None,
        "cluster": service.cluster,
    }


def service_from_item(item: dict[str, Any]) -> ModelService:
    v = from_item(item)
    return ModelService(
        name=v["name"],
        team=v["team"],
        namespace=v["namespace"],
        job_id=v["jobId"],
        model_uri=v["modelUri"],
        model_version=int(v["modelVersion"]),
        replicas=int(v["replicas"]),
        gpus=int(v["gpus"]),
        cpu=v["cpu"],
        memory=v["memory"],
        status=ServiceStatus(v["status"]),
        reason=v["reason"],
        created_at=datetime.fromisoformat(v["createdAt"]),
        updated_at=datetime.fromisoformat(v["updatedAt"]),
        version=int(v["version"]),
        message_id=v.get("messageId"),
        submitted_by=v.get("submittedBy"),
        ready_replicas=int(v.get("readyReplicas", 0)),
        rest_url=v.get("restUrl"),
        grpc_target=v.get("grpcTarget"),
        errors=tuple(json.loads(v["errors"])) if v.get("errors") else (),
        cluster=v.get("cluster"),  # absent on a record from before clusters
    )


def service_event_values(event: ServiceEvent) -> dict[str, Any]:
    """An event item's attributes as plain values (None: not written)."""
    return transition_values(event, pk=f"{PK_PREFIX}{event.name}", kind=EVENT_KIND)


def service_event_from_item(item: dict[str, Any]) -> ServiceEvent:
    v = from_item(item)
    return ServiceEvent(name=v["pk"].removeprefix(PK_PREFIX), **transition_fields(v, ServiceStatus))


class DynamoModelServiceStore:
    """ModelServiceStore on the job table (see the module docstring for the keys)."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def create(self, service: ModelService, event: ServiceEvent) -> None:
        """The first record and its first event, if no record of this name exists (in any state)."""
        self._write(
            f"create model service {service.name}",
            service,
            event,
            condition={"ConditionExpression": "attribute_not_exists(pk)"},
            conflict=lambda: DuplicateServiceError(service.name),
        )

    def save(self, service: ModelService, event: ServiceEvent) -> None:
        """The record (version n) and its event, if the stored record is still version n - 1."""
        self._write(
            f"save model service {service.name}",
            service,
            event,
            condition={
                "ConditionExpression": "#version = :expected",
                "ExpressionAttributeNames": {"#version": "version"},
                "ExpressionAttributeValues": {":expected": {"N": str(service.version - 1)}},
            },
            conflict=lambda: ConflictError(
                f"model service {service.name} changed since version {service.version - 1}"
            ),
        )

    def _write(
        self,
        what: str,
        service: ModelService,
        event: ServiceEvent,
        *,
        condition: dict[str, Any],
        conflict: Callable[[], SquallError],
    ) -> None:
        put_record = {"TableName": self._table, "Item": to_item(service_values(service))} | condition
        put_event = {
            "TableName": self._table,
            "Item": to_item(service_event_values(event)),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        call_dynamodb(
            what,
            lambda: self._client.transact_write_items(
                TransactItems=[{"Put": put_record}, {"Put": put_event}]
            ),
            rules=(on_conflict(conflict),),
        )

    def get(self, name: str) -> ModelService | None:
        item = read_item(f"get model service {name}", self._client, table=self._table, key=service_key(name))
        return service_from_item(item) if item else None

    def events(self, name: str) -> list[ServiceEvent]:
        """Every event of the name, oldest first: one query (paged) on its events' keys."""
        items = query_pages(
            f"read events of model service {name}",
            self._client,
            "query",
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :events)",
            ExpressionAttributeValues=to_item({":pk": f"{PK_PREFIX}{name}", ":events": "EVENT#"}),
            ConsistentRead=True,
        )
        return [service_event_from_item(i) for i in items]

    def list_by_status(self, status: ServiceStatus, *, limit: int = 1000) -> list[ModelService]:
        """Services in one state, oldest first (the status index), at most ``limit``."""
        items = query_status_index(
            f"list {status.value} model services",
            self._client,
            self._table,
            f"{STATUS_PREFIX}{status.value}",
            limit=limit,
        )
        return [service_from_item(i) for i in items]
