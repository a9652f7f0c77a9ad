"""Each function's table actions in the stack are the ones its code calls: recorded on the local runtime."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from squall.core.jobs import JobStatus, is_terminal
from squall.core.settings import PolicySettings
from squall.local.runtime import LocalRuntime
from stacks import constants

P3 = {"cpu": "31850m", "memory": "228Gi", "nvidia.com/gpu": 4, "pods": 58}
TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
GROUPS = [
    {"name": "p3-usw2", "region": "us-west-2", "asgName": "squall-p3-usw2", "instanceType": "p3.8xlarge",
     "allocatable": P3, "taints": TAINTS, "priority": 10, "maxSize": 4},
    {"name": "p3-use1", "region": "us-east-1", "asgName": "squall-p3-use1", "instanceType": "p3.8xlarge",
     "allocatable": P3, "taints": TAINTS, "priority": 20, "maxSize": 4},
]  # fmt: skip
JOB = {"name": "gan", "id": "gan-1", "team": "research", "image": "registry.example.com/squall/tf-trainer:1.0",
       "resources": {"cpu": "8", "memory": "32Gi", "gpu": 4}, "retries": 2}  # fmt: skip
# A transaction's parts are authorised one by one, as their own actions.
_TRANSACT_PARTS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}


def test_every_table_call_of_every_function_is_one_its_role_allows() -> None:
    policy = PolicySettings.model_validate({"provisionTimeout": "PT10M", "idleThreshold": "PT5M", "bootGrace": "PT2M"})
    with LocalRuntime.start(node_groups=GROUPS, policy=policy, backend="moto") as local:
        assert local.fleet is not None
        # given every DynamoDB call recorded with the function that made it
        calls: dict[str, set[str]] = defaultdict(set)
        index_queries: set[str] = set()
        running: list[str] = []

        def record(model: Any, params: dict[str, Any], **_: Any) -> None:
            if not running:
                return  # the runtime's own reads, not a function's
            handler = running[-1]
            if model.name == "TransactWriteItems":
                calls[handler].update(_TRANSACT_PARTS[next(iter(item))] for item in params["TransactItems"])
            else:
                calls[handler].add(model.name)
            if model.name in ("Query", "Scan") and params.get("IndexName"):
                index_queries.add(handler)

        local.backend.store._client.meta.events.register("provide-client-params.dynamodb", record)
        invoke = local.invoke

        def invoking(handler: str, event: Any) -> Any:
            running.append(handler)
            try:
                return invoke(handler, event)
            finally:
                running.pop()

        local.invoke = invoking  # type: ignore[method-assign]
        # when a job is submitted, runs, loses its spot node to a reclaim (a drain),
        # runs again elsewhere, finishes, and the nodes are scaled away
        local.cluster.set_behaviour("gan-1", run_for=timedelta(minutes=20))
        local.send(JOB)
        local.run(
            until=lambda rt: (j := rt.store.get("gan-1")) is not None and j.status is JobStatus.RUNNING,
            step=timedelta(seconds=10),
            limit=timedelta(minutes=15),
        )
        node = local.cluster.list_pods(job_id="gan-1")[0]["spec"]["nodeName"]
        instance = local.fleet.instance_of(node)
        assert instance is not None
        local.fleet.reclaim(instance)
        local.run(
            until=lambda rt: (j := rt.store.get("gan-1")) is not None and is_terminal(j.status),
            step=timedelta(seconds=10),
            limit=timedelta(hours=1),
        )
        local.run(until=lambda rt: not rt.cluster.list_nodes(), step=timedelta(seconds=30), limit=timedelta(hours=1))
        # then every function ran, and called nothing its role does not grant
        assert set(calls) == set(constants.FUNCTIONS), "the scenario exercises every function"
        for handler, operations in calls.items():
            granted = {action.removeprefix("dynamodb:") for action in constants.TABLE_ACTIONS[handler]}
            assert operations <= granted, (handler, operations - granted)
        assert index_queries <= constants.STATUS_INDEX_READERS
        # and the grants are not wider than the calls: nothing granted goes unused
        used = {f"dynamodb:{op}" for ops in calls.values() for op in ops}
        assert used == {a for actions in constants.TABLE_ACTIONS.values() for a in actions}
