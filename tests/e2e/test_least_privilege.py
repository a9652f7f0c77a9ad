"""Each function's table actions in the stack are the ones its code calls: recorded on the local runtime."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from squall.core.settings import PolicySettings
from squall.local.runtime import LocalRuntime
from stacks import constants
from tests.e2e.helpers_runtime import GROUPS, is_done, run_until_running

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
        _, instance = run_until_running(local, run_for=timedelta(minutes=20))
        local.fleet.reclaim(instance)
        local.run(until=is_done, step=timedelta(seconds=10), limit=timedelta(hours=1))
        local.run(until=lambda rt: not rt.cluster.list_nodes(), step=timedelta(seconds=30), limit=timedelta(hours=1))
        # then every function ran, and called nothing its role does not grant
        assert set(calls) == set(constants.FUNCTIONS), "the scenario exercises every function"
        for handler, operations in calls.items():
            granted = {action.removeprefix("dynamodb:") for action in constants.TABLE_ACTIONS[handler]}
            assert operations <= granted, (handler, operations - granted)
        assert index_queries <= constants.INDEX_READERS
        # and the grants are not wider than the calls: nothing granted goes unused
        used = {f"dynamodb:{op}" for ops in calls.values() for op in ops}
        assert used == {a for actions in constants.TABLE_ACTIONS.values() for a in actions}
